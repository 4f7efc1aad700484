"""How an A/B arm's items are executed, and how their spend is anchored in a ledger.

The farm runs every arm's items like any other items: each (arm, task) becomes a
``PromptSpec`` whose ``system`` is the arm's profile addendum, and an executor names the
adapter the farm calls. Importing this module registers two offline adapters:

- ``ab-echo``: variant mode's deterministic echo: the variant prompt (the system text)
  joined to the task input with one space. No tokens billed, no cost.
- ``ab-synthetic``: suite mode's deterministic, offline model of a response-style
  profile. It is an oracle with a profile-dependent miss rate: it answers with the
  task's expected text unless a SHA-256 draw over (addendum, input, trial) falls under
  the profile's miss rate, then appends a profile-dependent number of elaboration words.
  Tokens are whitespace-separated words (input: addendum + input; output: the reply);
  cost uses the fixed synthetic price below. Nothing here touches a network.

The package declares them as ``evalfarm.adapters`` entry points (pyproject.toml), so the
engine's registry (and every worker) finds them the way it finds any plug-in: the core
never names the A/B harness.

An ``ArmExecutor`` is the plug-in point: synthetic, provider (provider.py) and spawn (spawn.py:
coding agents in git worktrees) implement it; ``load_suite`` reads the suite format the executor
runs, ``anchor`` writes one ledger row per run and returns the references.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..engine.adapters import Completion
from ..errors import UsageError
from ..spec.models import PromptSpec
from ..runs import ledger as ledger_mod
from ..runs.state import StateDir
from .profiles import by_addendum
from .tasks import load_suite


# USD per million tokens, fixed and recorded in every synthetic artifact.
SYNTHETIC_PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}

# profile -> (elaboration words at the mean, miss rate); unknown addenda behave like baseline
SYNTHETIC_STYLE = {
    "baseline": (40, 0.10),
    "balanced": (22, 0.08),
    "terse": (3, 0.14),
    "verbose": (95, 0.06),
    "control": (14, 0.12),
}
_VOCAB = ("because", "the", "result", "follows", "from", "this", "step", "so", "we", "check", "each",
          "case", "and", "note", "that", "it", "holds", "here", "which", "means", "value", "is", "clear")


def words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _draws(*parts: Any) -> list[float]:
    """Deterministic uniform draws in [0, 1) from SHA-256 of the parts."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return [int.from_bytes(digest[i:i + 8], "big") / 2 ** 64 for i in range(0, 32, 8)]


def synthetic_cost(input_tokens: int, output_tokens: int) -> float:
    return round((input_tokens * SYNTHETIC_PRICE["input_per_mtok"]
                  + output_tokens * SYNTHETIC_PRICE["output_per_mtok"]) / 1e6, 12)


class EchoAdapter:
    """``ab-echo``: the variant's prompt joined with the input."""

    def __init__(self, adapter_id: str) -> None:
        self.id = adapter_id if isinstance(adapter_id, str) else adapter_id.id

    def config(self) -> dict[str, Any]:
        return {"kind": "ab-echo", "version": 1}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        text = " ".join(part for part in (prompt.system, prompt.text) if part)
        return Completion(text=text, input_tokens=words(prompt.system) + words(prompt.text),
                          output_tokens=words(text), cost_usd=0.0)


class SyntheticAdapter:
    """``ab-synthetic``: a deterministic, offline model of a response-style profile."""

    def __init__(self, adapter_id: str) -> None:
        self.id = adapter_id if isinstance(adapter_id, str) else adapter_id.id

    def config(self) -> dict[str, Any]:
        return {"kind": "ab-synthetic", "version": 1, "price": SYNTHETIC_PRICE, "style": SYNTHETIC_STYLE}

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        known = by_addendum(prompt.system)
        elaboration, miss_rate = SYNTHETIC_STYLE.get(known.name if known else "baseline", SYNTHETIC_STYLE["baseline"])
        truth = prompt.expected_output_contains[0] if prompt.expected_output_contains else f"answer to {prompt.text}"
        miss, spread, pick, _ = _draws("ab-synthetic/1", prompt.system, prompt.text, truth, trial)
        answer = "I am not sure." if miss < miss_rate else truth
        n = round(elaboration * (0.6 + 0.8 * spread))
        rng = _draws("vocab", pick)[0]
        extra = [_VOCAB[int((rng * 7919 + i * 104729) % len(_VOCAB))] for i in range(n)]
        text = answer if not extra else f"{answer}\n\n{' '.join(extra).capitalize()}."
        in_tok = words(prompt.system) + words(prompt.text)
        out_tok = words(text)
        return Completion(text=text, input_tokens=in_tok, output_tokens=out_tok,
                          cost_usd=synthetic_cost(in_tok, out_tok))


@dataclass
class ArmRun:
    """One finished (arm, task, trial) item, as the farm returned it."""

    arm: str
    profile: str
    task: str
    trial: int
    outcome: dict[str, Any]
    passed: bool | None  # None: quality not measured for this run
    extra: dict[str, Any] = field(default_factory=dict)


class ArmExecutor(Protocol):
    """What suite mode needs from an executor. Implementations: synthetic, provider, spawn."""

    kind: str

    def load_suite(self, path: Path) -> Any:
        """The validated suite (name, scorer, tasks with ids, content_hash()) in this executor's format."""

    def built_adapters(self) -> dict[str, Any] | None:
        """Adapters this executor already built and checked (the run reuses them, never builds twice)."""

    def adapter(self) -> Any:
        """The adapter entry of the farm's spec (an id or an AdapterSpec), resolvable on every worker."""

    def describe(self) -> dict[str, Any]:
        """Hashed into the artifact: what determines the figures. No secrets, no local paths."""

    def default_ledger(self) -> Path:
        """The spend ledger this executor's rows live in."""

    def anchor(self, runs: list[ArmRun], ledger: Path, plan_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Make sure one ledger row exists per run; return (row SHA-256, row) per run, in order."""


class _RowWriter:
    kind = "abstract"
    deterministic = True

    def load_suite(self, path: Path) -> Any:
        return load_suite(path)

    def built_adapters(self) -> dict[str, Any] | None:
        return None  # the run builds its adapters from the spec

    def row_for(self, run: ArmRun, plan_id: str) -> dict[str, Any]:
        o = run.outcome
        measured = o.get("error") is None
        return {"schema": "evalfarm.ab.ledger/1", "source": self.kind, "plan": plan_id, "arm": run.arm,
                "profile": run.profile, "task": run.task, "trial": run.trial, "item": o["key"],
                "model": self.describe().get("model"),
                "input_tokens": o.get("input_tokens", 0) if measured else None,
                "output_tokens": o.get("output_tokens", 0) if measured else None,
                "cost_usd": round(float(o.get("cost_usd") or 0.0), 12) if measured and self.cost_known() else None,
                "passed": run.passed,
                "error": (o["error"] or {}).get("class") if not measured else None,
                **run.extra}

    def cost_known(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:  # pragma: no cover - overridden
        return {}

    def anchor(self, runs: list[ArmRun], ledger: Path, plan_id: str) -> list[tuple[str, dict[str, Any]]]:
        rows = [self.row_for(r, plan_id) for r in runs]
        return list(zip(ledger_mod.append_rows(ledger, rows), rows))


class SyntheticExecutor(_RowWriter):
    """Deterministic and offline; rows go to its own ledger, never the production one."""

    kind = "synthetic"

    def __init__(self, model: str | None = None) -> None:
        self.model = model or "synthetic"

    def adapter(self) -> str:
        return "ab-synthetic"

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "adapter": self.adapter(), "model": self.model,
                "price_usd_per_mtok": SYNTHETIC_PRICE, "style": {k: list(v) for k, v in SYNTHETIC_STYLE.items()}}

    def default_ledger(self) -> Path:
        return StateDir.of().synthetic_ledger

    def anchor(self, runs: list[ArmRun], ledger: Path, plan_id: str) -> list[tuple[str, dict[str, Any]]]:
        if ledger.resolve() == StateDir.of().cost_ledger.resolve():
            raise UsageError(f"--ledger {ledger}: synthetic figures never go to the production spend ledger; "
                             f"use the default {StateDir.of().synthetic_ledger} or another file")
        return super().anchor(runs, ledger, plan_id)
