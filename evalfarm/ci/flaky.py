"""Flake history: which cases change their verdict from run to run when nothing else changed.

A red build from a case that fails one run in three is noise (promptfoo #1932), but a brake
that ignores regressions is no brake. The registry keeps every complete run's case verdicts;
runs are *comparable* for an adapter when they come from the same spec (its name), used the same
prompt (name and version), the same model behind that adapter and the same dataset (its hash). Over the last N comparable
runs a case's measured verdicts (unmeasured ones skipped) give its *flips*: how many times
the verdict differs from the run before. ``evalfarm flaky`` lists every case with a flip; the
gate treats a regressed case as *known flaky* when it flipped at least ``KNOWN_FLAKY_FLIPS``
times in the runs before this one (it has both failed after passing and passed after failing).

Runs that re-scored stored outputs are left out: their verdicts re-read old samples, they do
not sample the model again. So are partial runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runs.registry import Registry
from ..core.verdict import FAIL, PASS

DEFAULT_LAST = 10
KNOWN_FLAKY_FLIPS = 2
_COMPLETE = ("PASS", "FAIL", "NOTHING")
_MARK = {PASS: "P", FAIL: "F"}


def group_of(entry: dict[str, Any], adapter: str) -> tuple:
    """What makes two runs comparable for one adapter (the spec's name too: runs saved through the
    API, with no dataset hash or prompt version, of two specs that share an adapter id and case ids
    are not one history)."""
    models = entry.get("models") or {}
    return (entry.get("spec_name"), entry.get("prompt_name"), entry.get("prompt_version"), entry.get("dataset_hash"),
            models.get(adapter) or adapter)


def _history_runs(registry: Registry, spec: str | None) -> list[dict[str, Any]]:
    """Complete runs that called their models, newest first (case verdicts filled in for old runs)."""
    registry.sync()
    registry.backfill_verdicts()
    return [e for e in registry.runs(spec=spec) if e.get("result") in _COMPLETE and not e.get("source_run_id")]


def flips(verdicts: list[str | None]) -> int:
    """Changes between consecutive measured verdicts (oldest first)."""
    seen = [v for v in verdicts if v in (PASS, FAIL)]
    return sum(1 for a, b in zip(seen, seen[1:]) if a != b)


def _cases(registry: Registry, run_ids: list[str], adapter: str) -> dict[str, list[str | None]]:
    """case id -> its verdict in each run (oldest first; None where the run did not have it)."""
    per_run = registry.case_verdicts(run_ids, adapter)
    cases: dict[str, list[str | None]] = {}
    for i, run_id in enumerate(run_ids):
        for case, verdict in per_run[run_id].items():
            cases.setdefault(case, [None] * len(run_ids))[i] = verdict
    return cases


def flaky_cases(state_dir: Path | str, spec: str | None = None, last: int = DEFAULT_LAST) -> list[dict[str, Any]]:
    """Cases whose verdict changed across the last ``last`` comparable runs, most flips first."""
    registry = Registry(state_dir)
    groups: dict[tuple, list[dict[str, Any]]] = {}  # (group, adapter) -> entries, newest first
    for entry in _history_runs(registry, spec):
        for adapter in entry.get("adapters") or []:
            groups.setdefault((group_of(entry, adapter), adapter), []).append(entry)
    out = []
    for (group, adapter), entries in groups.items():
        window = list(reversed(entries[:last]))  # oldest first
        run_ids = [e["run_id"] for e in window]
        for case, verdicts in _cases(registry, run_ids, adapter).items():
            n = flips(verdicts)
            if not n:
                continue
            spec_name, prompt_name, prompt_version, dataset_hash, model = group
            out.append({"adapter": adapter, "case": case, "flips": n,
                        "runs": sum(1 for v in verdicts if v is not None),
                        "history": "".join(_MARK.get(v, "?") if v is not None else "." for v in verdicts),
                        "run_ids": run_ids, "spec_name": spec_name, "model": model,
                        "prompt": f"{prompt_name}@{prompt_version}" if prompt_name else None,
                        "dataset_hash": dataset_hash})
    out.sort(key=lambda r: (-r["flips"], r["adapter"], r["case"]))
    return out


def known_flaky(state_dir: Path | str, run_id: str, last: int = DEFAULT_LAST,
                min_flips: int = KNOWN_FLAKY_FLIPS) -> dict[tuple[str, str], dict[str, int]] | None:
    """(adapter, case) -> {flips, runs} for the cases of ``run_id`` known to be flaky from the
    comparable runs before it; None when the run is not in the registry (no history to consult)."""
    if not (Path(state_dir) / "registry.db").is_file():
        return None
    registry = Registry(state_dir)
    me = registry.get(run_id)
    if me is None:
        return None
    history = [e for e in _history_runs(registry, None) if e["run_id"] < run_id]
    out: dict[tuple[str, str], dict[str, int]] = {}
    for adapter in me.get("adapters") or []:
        mine = group_of(me, adapter)
        window = [e for e in history if adapter in (e.get("adapters") or []) and group_of(e, adapter) == mine][:last]
        run_ids = [e["run_id"] for e in reversed(window)]
        for case, verdicts in _cases(registry, run_ids, adapter).items():
            n = flips(verdicts)
            if n >= min_flips:
                out[(adapter, case)] = {"flips": n, "runs": len(run_ids)}
    return out
