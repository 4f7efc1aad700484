"""One orchestrator for every path: plan once, execute on a backend, aggregate once.

``evalfarm run`` (either backend), the Python API (``Runner``), the selftest and the A/B
harness all go through ``Orchestrator``: the engine is built first (so an unknown adapter
or judge stops the run before anything is stored or sent), the plan streams from the
prompt source, the backend executes it, and the report comes out of the backend's store,
built by the same ``finalize``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..core.plan import Plan, plan_run
from ..executors.base import Backend, ProgressFn
from ..executors.inprocess import InProcessBackend
from ..core.report.model import RunReport
from ..engine import Where, build_engine
from ..engine.adapters import Adapter, CallableAdapter
from ..engine.cache import ResponseCache
from ..engine.judges import CallableJudge, Judge
from ..spec.binding import bind_environment
from ..spec.load import SpecFile, source_for
from ..spec.models import EvalSpec, JudgeSpec, PromptSpec
from ..spec.source import PromptSource
from .state import StateDir


class Orchestrator:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def store(self):
        return self.backend.store

    def submit(self, spec: EvalSpec, source: PromptSource, *, trials: int | None = None,
               options: dict[str, Any] | None = None, where: Where | None = None,
               adapters: dict[str, Adapter] | None = None, judge: Judge | None = None,
               cache: ResponseCache | None = None, on_progress: ProgressFn | None = None,
               run_id: str | None = None) -> Plan:
        """Validate, plan and hand the plan to the backend (the in-process backend runs it now)."""
        engine = build_engine(spec, where, adapters=adapters, judge=judge, cache=cache, preflight=True)
        blobs = StateDir.of((options or {}).get("state_dir")).blobs  # agents' patches and logs: the run's state dir
        for adapter in engine.adapters.values():
            if hasattr(adapter, "use_blob_dir"):
                adapter.use_blob_dir(blobs)
        if spec.budget_usd is not None and "budget_usd" not in (options or {}):  # the spec's budget_usd
            options = {**(options or {}), "budget_usd": spec.budget_usd}
        plan = plan_run(spec, source, engine.configs(), trials, options, run_id)
        self.backend.start(plan, engine, on_progress)
        return plan

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None) -> None:
        self.backend.wait(run_id, on_progress, timeout_s)

    def report_bytes(self, run_id: str) -> bytes:
        return self.store.get_report(run_id) or b""

    def report(self, run_id: str) -> RunReport:
        return RunReport.from_dict(json.loads(self.report_bytes(run_id)))


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
        orchestrator = Orchestrator(InProcessBackend(self.max_in_flight))
        plan = orchestrator.submit(spec, spec_file.source, trials=trials, where=spec_file.where,
                                   adapters=adapters, judge=judge, run_id=run_id)
        return orchestrator.report(plan.run_id)
