"""What an executor is given and what it promises.

An executor runs a ``Plan`` (``core/plan.py``) with an ``Engine`` and aggregates it into its
``RunStore``: the in-process executor runs the engine in this process; the Celery executor
stores the plan for the farm's workers. Either way the report ends up in the store, built by
``finalize``. Only ``runs/`` calls executors.
"""
from __future__ import annotations

from typing import Callable, Protocol

from ..core.plan import Plan
from ..engine.items import Engine
from .store import Progress, RunStore

ProgressFn = Callable[[Progress], None]


class Backend(Protocol):
    mode: str
    store: RunStore

    def start(self, plan: Plan, engine: Engine, on_progress: ProgressFn | None = None) -> None:
        """Take the plan: the in-process backend runs and aggregates it before returning; the farm
        stores it and dispatches it to the workers."""

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None) -> None:
        """Return once the run's report is in the store."""
