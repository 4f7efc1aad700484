"""What a backend is given and what it promises.

A ``Plan`` is a run planned once: its id, the spec (frozen), the prompt source, the
trials, the meta every process reads, and the items in plan order, streamed from the
source (so a 100,000-prompt dataset is never a list). A ``Backend`` executes a plan
with an ``Engine`` and aggregates it into its ``RunStore``: the in-process backend
runs the engine in this process; the Celery backend stores the plan for the farm's
workers. Either way the report ends up in the store, built by ``finalize``.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Protocol

from ..core.plan import Item, SpecHasher, iter_items
from ..engine.items import Engine
from ..spec.models import EvalSpec
from ..spec.source import PromptSource
from .store import Progress, RunStore

ProgressFn = Callable[[Progress], None]


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
        return iter_items(self.spec, self.source, adapters, judge, self.trials, on_prompt=self._hasher.update)

    @property
    def spec_hash(self) -> str:
        if self._hasher is None:
            raise RuntimeError("spec_hash is known once the items have been planned")
        return self._hasher.hexdigest()


def plan_run(spec: EvalSpec, source: PromptSource, engine: Engine, trials: int | None = None,
             options: dict[str, Any] | None = None, run_id: str | None = None) -> Plan:
    configs = ({a: ad.config() for a, ad in engine.adapters.items()},
               engine.judge_.config() if engine.judge_ is not None else None)
    return Plan(run_id or new_run_id(), spec, source, trials or spec.trials, configs, options or {})


class Backend(Protocol):
    mode: str
    store: RunStore

    def start(self, plan: Plan, engine: Engine, on_progress: ProgressFn | None = None) -> None:
        """Take the plan: the in-process backend runs and aggregates it before returning; the farm
        stores it and dispatches it to the workers."""

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None) -> None:
        """Return once the run's report is in the store."""
