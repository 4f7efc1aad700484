"""A run planned once (``Plan``): spec -> work items with stable content keys.

An item's key hashes everything that determines its result (prompt, adapter
config, trial index, judge config): same key = same work, so a redelivered task
overwrites its result instead of adding one.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator

from ..canonical import canonical_json, sha256_hex
from ..spec.models import EvalSpec, PromptSpec, strip_batch
from ..spec.source import PromptSource


@dataclass(frozen=True)
class Item:
    key: str
    prompt: PromptSpec
    adapter: str
    trial: int
    prompt_json: str | None = field(default=None, compare=False, repr=False)
    first: bool = field(default=False, compare=False, repr=False)  # the first item of its prompt in the plan

    def to_json(self) -> str:
        # the canonical JSON of {"adapter", "key", "prompt", "trial"}, with the prompt's JSON made once
        pj = self.prompt_json or prompt_json(self.prompt)
        return (f'{{"adapter":{canonical_json(self.adapter)},"key":{canonical_json(self.key)},'
                f'"prompt":{pj},"trial":{self.trial}}}')

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Item":
        return cls(key=data["key"], prompt=PromptSpec.model_validate(data["prompt"]),
                   adapter=data["adapter"], trial=data["trial"])


def prompt_json(prompt: PromptSpec) -> str:
    return canonical_json(prompt.model_dump(mode="json"))


def iter_items(spec: EvalSpec, prompts: Iterable[PromptSpec], adapter_configs: dict[str, dict[str, Any]],
               judge_config: dict[str, Any] | None, trials: int | None = None,
               on_prompt: Callable[[str], None] | None = None, first_trial: int = 0) -> Iterator[Item]:
    """Items in a stable order: prompt, then adapter, then trial (one pass over the prompts).
    ``on_prompt`` sees each prompt's canonical JSON once (the spec hash streams from it).
    ``first_trial``: the trials are ``first_trial .. first_trial + trials - 1`` (a sequential A/B
    runs one trial per round, round r being trial r: the same items a fixed design would run)."""
    n_trials = trials or spec.trials
    adapters = [(a, canonical_json(adapter_configs[a])) for a in spec.adapter_ids]
    judge = canonical_json(judge_config)
    for prompt in prompts:
        pj = prompt_json(prompt)
        if on_prompt is not None:
            on_prompt(pj)
        first = True
        for adapter, adapter_json in adapters:
            for trial in range(first_trial, first_trial + n_trials):
                key = sha256_hex(f'{{"adapter":{adapter_json},"judge":{judge},"prompt":{pj},"trial":{trial}}}')
                yield Item(key, prompt, adapter, trial, pj, first=first)
                first = False


class SpecHasher:
    """Hash of the spec without its prompt sources, then every prompt's canonical JSON, streamed."""

    def __init__(self, spec: EvalSpec) -> None:
        dumped = strip_batch(spec.model_dump(mode="json", exclude={"prompts", "dataset", "budget_usd"}))
        self._h = hashlib.sha256(canonical_json(dumped).encode())

    def update(self, prompt_json: str) -> None:
        self._h.update(b"\n" + prompt_json.encode())

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def store_rows(chunk: list[Item]) -> tuple[list[tuple[str, str]], list[str]]:
    """What a run store keeps of a chunk of the plan: (key, item JSON) per item, and each prompt's JSON
    once (the report's ``prompts`` section: what was asked, for readers and re-scoring)."""
    return [(i.key, i.to_json()) for i in chunk], [i.prompt_json or prompt_json(i.prompt) for i in chunk if i.first]


def new_run_id() -> str:
    """Sorts by time (microseconds), unique by a random suffix."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def spec_meta(spec: EvalSpec) -> dict[str, Any]:
    """The spec as the run's meta carries it: without its prompts (the plan holds them)."""
    return spec.model_dump(mode="json", by_alias=True, exclude={"prompts"})


@dataclass
class Plan:
    run_id: str
    spec: EvalSpec
    source: PromptSource
    trials: int
    engine_configs: tuple[dict[str, dict[str, Any]], dict[str, Any] | None]  # adapter configs, judge config
    options: dict[str, Any] = field(default_factory=dict)
    _hasher: SpecHasher | None = None

    @property
    def total(self) -> int:
        return self.source.count * len(self.spec.adapter_ids) * self.trials

    def meta(self, mode: str, **extra: Any) -> dict[str, Any]:
        return {"run_id": self.run_id, "spec": spec_meta(self.spec), "spec_hash": None, "trials": self.trials,
                "total": self.total, "mode": mode, "started_at": utc_now(), "state": "planning", "planned": False,
                "adapters": self.spec.adapter_ids, "options": self.options, **extra}

    def items(self) -> Iterator[Item]:
        """Items in plan order (prompt, adapter, trial), streamed; ``spec_hash`` is ready at the end."""
        self._hasher = SpecHasher(self.spec)
        adapters, judge = self.engine_configs
        return iter_items(self.spec, self.source, adapters, judge, self.trials, on_prompt=self._hasher.update,
                          first_trial=int(self.options.get("first_trial") or 0))

    @property
    def spec_hash(self) -> str:
        if self._hasher is None:
            raise RuntimeError("spec_hash is known once the items have been planned")
        return self._hasher.hexdigest()


def plan_run(spec: EvalSpec, source: PromptSource,
             configs: tuple[dict[str, dict[str, Any]], dict[str, Any] | None], trials: int | None = None,
             options: dict[str, Any] | None = None, run_id: str | None = None) -> Plan:
    """``configs``: the engine's (adapter configs, judge config), what the item keys hash."""
    return Plan(run_id or new_run_id(), spec, source, trials or spec.trials, configs, options or {})
