"""Submitting a run: the one place that picks where its items execute, and the orchestrator every
path goes through.

``evalfarm run``, ``ab``, ``rescore``, the selftest and the Python API (``Runner``) all call
``start``: the engine is built first (so an unknown adapter or judge stops the run before anything
is stored or sent), the plan streams from the prompt source, the executor chosen from the
``Target`` runs it (this process, or the farm when the target names a broker), and the report
comes out of the executor's store, built by the same ``finalize``. A re-scoring run is the same
path with ``stored`` outcomes: the engine replays stage 1 instead of calling the model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..core.plan import Item, Plan, plan_run
from ..core.report.framing import iter_outcome_lines
from ..core.report.model import RunReport
from ..core.report.schema import head_problem
from ..engine import Where, build_engine
from ..engine.adapters import Adapter, CallableAdapter
from ..engine.cache import ResponseCache
from ..engine.judges import CallableJudge, Judge
from ..errors import UsageError
from ..executors.base import Backend, ProgressFn
from ..spec.binding import bind_environment
from ..spec.load import SpecFile, source_for
from ..spec.models import EvalSpec, JudgeSpec, PromptSpec
from ..spec.source import PromptSource
from .state import StateDir

Stored = Callable[[Item], dict[str, Any]]  # a replay: the stored run's outcome of an item


@dataclass(frozen=True)
class Target:
    """Where a run's items execute: in this process (no broker), or on the farm behind ``broker``.
    ``concurrency`` is the calls in flight at most, in either (on the farm: fleet-wide run slots)."""

    broker: str | None = None
    concurrency: int | None = None
    batch_size: int | None = None  # farm: items per task (default: by run size)

    @property
    def farm(self) -> bool:
        return self.broker is not None

    def check(self) -> None:
        """Settings an executor reads late, refused now: before anything is planned or spent."""
        from ..envvars import env_int
        from ..executors.finalize import run_ttl_s

        if not self.farm and self.batch_size:
            raise UsageError("--batch-size applies to a farm run (--broker); an in-process run has no batches")
        env_int("EVALFARM_BATCH_SIZE", None, 1, 10000)  # a bad value is refused in every executor
        env_int("EVALFARM_MAX_IN_FLIGHT", 64, 1, 100000)
        run_ttl_s()  # read at the end of the run


def executor_for(target: Target) -> Backend:
    """The in-process executor, or the farm's coordinator (which connects, or says in one line why not)."""
    if not target.farm:
        from ..executors.inprocess import InProcessBackend
        from ..providers.limits import process_in_flight

        return InProcessBackend(target.concurrency or process_in_flight())
    from ..executors.celery.coordinator import CeleryBackend
    from ..executors.celery.settings import FarmSettings

    overrides: dict[str, Any] = {"batch_size": target.batch_size} if target.batch_size else {}
    return CeleryBackend(FarmSettings.from_env(broker_url=target.broker, **overrides))


class Orchestrator:
    """Plan once, execute on an executor, aggregate once (``finalize``, in the executor's store)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def store(self):
        return self.backend.store

    def submit(self, spec: EvalSpec, source: PromptSource, *, trials: int | None = None,
               options: dict[str, Any] | None = None, where: Where | None = None,
               adapters: dict[str, Adapter] | None = None, judge: Judge | None = None,
               cache: ResponseCache | None = None, on_progress: ProgressFn | None = None,
               run_id: str | None = None, stored: Stored | None = None) -> Plan:
        """Validate, plan and hand the plan to the executor (the in-process one runs it now)."""
        engine = build_engine(spec, where, adapters=adapters, judge=judge, cache=cache, preflight=stored is None)
        engine.stored = stored
        blobs = StateDir.of((options or {}).get("state_dir")).blobs  # agents' patches and logs: the run's state dir
        for adapter in engine.adapters.values():
            if hasattr(adapter, "use_blob_dir"):
                adapter.use_blob_dir(blobs)
        if spec.budget_usd is not None and "budget_usd" not in (options or {}):  # the spec's budget_usd
            options = {**(options or {}), "budget_usd": spec.budget_usd}
        plan = plan_run(spec, source, engine.configs(), trials, options, run_id)
        if stored is None and _batched(spec):
            from ..providers.batches import batch_engine
            from .batches import BatchJournal

            if getattr(self.backend, "mode", "") == "embedded":  # the farm's workers submit and poll them
                batch_engine(engine, spec, plan.run_id, BatchJournal(self.store, plan.run_id))
        self.backend.start(plan, engine, on_progress)
        return plan

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None) -> None:
        self.backend.wait(run_id, on_progress, timeout_s)

    def report_bytes(self, run_id: str) -> bytes:
        return self.store.get_report(run_id) or b""

    def report(self, run_id: str) -> RunReport:
        return RunReport.from_dict(json.loads(self.report_bytes(run_id)))


def _batched(spec: EvalSpec) -> bool:
    return any(getattr(a, "batch", None) for a in spec.adapters) or bool(spec.judge and spec.judge.batch)


@dataclass
class RunHandle:
    """A submitted run: wait for it, then read its summary, report bytes or outcomes (streamed)."""

    executor: Backend
    run_id: str
    plan: Plan | None = None  # None: a run submitted by another process (``wait``, ``resume``)

    @property
    def store(self):
        return self.executor.store

    @property
    def interrupted(self) -> bool:
        """Ctrl-C stopped an in-process run (its partial report says so)."""
        return getattr(self.executor, "stopped", None) == "interrupted"

    def wait(self, on_progress: ProgressFn | None = None, timeout_s: float | None = None) -> None:
        self.executor.wait(self.run_id, on_progress, timeout_s)

    def summary(self) -> dict[str, Any]:
        return stored_summary(self.store, self.run_id)

    def report_chunks(self) -> Iterator[bytes]:
        return self.store.iter_report(self.run_id)

    def outcomes(self) -> Iterator[dict[str, Any]]:
        """The report's outcomes in plan order, a line at a time: the report is never parsed whole."""
        return iter_outcome_lines(self.report_chunks())


def start(spec: EvalSpec, source: PromptSource, target: Target = Target(), *, trials: int | None = None,
          options: dict[str, Any] | None = None, where: Where | None = None,
          adapters: dict[str, Adapter] | None = None, judge: Judge | None = None,
          on_progress: ProgressFn | None = None, run_id: str | None = None,
          stored: Stored | None = None) -> RunHandle:
    """Submit a run to the executor ``target`` names. ``options``: ``state_dir`` (where agents' blobs
    and the in-process response cache go), ``cache``, ``budget_usd``. An in-process run has finished
    when this returns; a farm run has been dispatched (``RunHandle.wait`` attaches)."""
    target.check()
    opts = dict(options or {})
    executor = executor_for(target)
    cache = None
    if target.farm:
        if target.concurrency:
            opts["max_in_flight"] = target.concurrency  # fleet-wide run slots
    elif opts.get("cache"):
        from ..engine.cache import SqliteCache

        cache = SqliteCache(StateDir.of(opts.get("state_dir")).cache_db)
    plan = Orchestrator(executor).submit(spec, source, trials=trials, options=opts, where=where, adapters=adapters,
                                         judge=judge, cache=cache, on_progress=on_progress, run_id=run_id,
                                         stored=stored)
    return RunHandle(executor, plan.run_id, plan)


def stored_summary(store, run_id: str) -> dict[str, Any]:
    """The summary the aggregate stored, checked like a report file: the store is shared, so a
    forged or corrupt summary (another run's id, ``../../x``, a wrong type) stops here (exit 2)
    before any file name is built from it."""
    raw = store.get_blob(run_id, "summary")
    try:
        summary = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        summary = None
    problem = "missing or not JSON" if summary is None else head_problem(summary)
    if problem is None and summary["run_id"] != run_id:
        problem = f"it names run {str(summary['run_id'])[:80]!r}"
    if problem:
        raise UsageError(f"run {run_id}: the run store's summary is not usable ({problem}); nothing was saved")
    return summary


Executor = Callable[[str, PromptSpec], str]
JudgeFn = Callable[[JudgeSpec, PromptSpec, str], float]


class Runner:
    """The Python API: run a spec in this process and get its report (no Celery, no Redis).

    ``executor(adapter_id, prompt) -> str`` and ``judge(judge_spec, prompt, output) -> float`` are
    plain synchronous callables that stand in for every adapter and the judge; without them the
    spec's own adapters and judge are called (endpoints bound from the environment).
    """

    def __init__(self, executor: Executor | None = None, judge: JudgeFn | None = None,
                 max_in_flight: int = 64) -> None:
        self.executor, self.judge_fn, self.max_in_flight = executor, judge, max_in_flight

    def run(self, spec: EvalSpec | SpecFile, base_dir: Path | str | None = None, *, trials: int | None = None,
            run_id: str | None = None, adapters: dict[str, Adapter] | None = None,
            judge: Judge | None = None) -> RunReport:
        if isinstance(spec, SpecFile):
            spec_file = spec
        else:
            spec_file = SpecFile(spec, source_for(spec, Path(base_dir) if base_dir else Path.cwd()))
        if spec_file.spec.workspace is not None:
            from ..agents.workspace import pin_spec_file

            spec_file = pin_spec_file(spec_file)
        spec = spec_file.spec
        if self.executor is not None:
            adapters = {a: CallableAdapter(a, self.executor) for a in spec.adapter_ids}
        elif adapters is None:
            spec = bind_environment(spec)
        if self.judge_fn is not None and spec.judge is not None:
            judge = CallableJudge(spec.judge, self.judge_fn)
        run = start(spec, spec_file.source, Target(concurrency=self.max_in_flight), trials=trials,
                    where=spec_file.where, adapters=adapters, judge=judge, run_id=run_id)
        return RunReport.from_dict(json.loads(run.store.get_report(run.run_id) or b"{}"))
