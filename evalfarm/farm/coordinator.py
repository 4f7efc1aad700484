"""The coordinator: plan a spec into the store, dispatch batches, watch counters.

It never waits on Celery results (a big chord's result pub/sub costs O(N^2)
client CPU, see DESIGN.md); it polls the store's counters and reads the report
the aggregate task stored. Items stream from the plan to the store, so the
coordinator holds one chunk at a time, not the whole plan.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import FarmError
from ..plan import iter_items
from ..runner import make_adapters, make_judge, new_run_id, spec_hash, utc_now
from ..spec import EvalSpec
from .app import AGGREGATE, RUN_BATCH, create_app
from .settings import FarmSettings, pick_batch_size
from .store import batched
from .tasks import store_for


@dataclass
class Progress:
    run_id: str
    total: int
    done: int
    errors: int
    cost_usd: float
    per_adapter: dict[str, tuple[int, int]]  # adapter -> (done, errors)
    elapsed_s: float
    state: str


ProgressFn = Callable[[Progress], None]


class Coordinator:
    def __init__(self, settings: FarmSettings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.store = store_for(settings)
        self._dispatch_error: BaseException | None = None
        self._dispatcher: threading.Thread | None = None
        if not settings.embedded:
            try:
                self.store.ping()  # type: ignore[attr-defined]
            except Exception as exc:
                from ..redact import redact
                raise FarmError(f"cannot reach the run store at {redact(settings.effective_store_url or '')}: "
                                f"{redact(str(exc)).rstrip('.')}; is Redis running? (--broker / EVALFARM_BROKER_URL)") from None

    @property
    def mode(self) -> str:
        return "embedded" if self.settings.embedded else "redis"

    # -- submit ---------------------------------------------------------------------------
    def submit(self, spec: EvalSpec, trials: int | None = None, run_id: str | None = None) -> str:
        """Validate adapters and judge here (bad input stops before queueing), store, dispatch."""
        prompts = spec.resolved_prompts()
        adapters = make_adapters(spec)
        judge = make_judge(spec)
        n_trials = trials or spec.trials
        total = len(prompts) * len(spec.adapter_ids) * n_trials
        run_id = run_id or new_run_id()
        batch_size = pick_batch_size(total, self.settings.batch_size)
        meta = {"run_id": run_id, "spec": spec.model_dump(mode="json"), "spec_hash": spec_hash(spec, prompts),
                "trials": n_trials, "total": total, "mode": self.mode, "started_at": utc_now(),
                "state": "running", "batch_size": batch_size, "adapters": spec.adapter_ids}
        self.store.create_run(run_id, meta)
        items = iter_items(spec, prompts, {a: ad.config() for a, ad in adapters.items()},
                           judge.config() if judge else None, n_trials)

        def batches():
            for chunk in batched(items, max(batch_size, 1000 // batch_size * batch_size)):
                self.store.add_items(run_id, [(i.key, i.to_json()) for i in chunk])
                for batch in batched((i.key for i in chunk), batch_size):
                    yield batch

        self._dispatch(run_id, batches())
        return run_id

    def _dispatch(self, run_id: str, batches) -> None:
        task = self.app.tasks[RUN_BATCH]
        if self.settings.embedded:
            # eager tasks run inline: a small pool keeps several batches in flight
            def drive() -> None:
                try:
                    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="evalfarm-embedded") as pool:
                        for fut in [pool.submit(task.apply, args=[run_id, keys]) for keys in batches]:
                            fut.result().get(disable_sync_subtasks=False)
                except BaseException as exc:  # surfaced by wait()
                    self._dispatch_error = exc

            self._dispatcher = threading.Thread(target=drive, name="evalfarm-dispatch", daemon=True)
            self._dispatcher.start()
            return
        with self.app.producer_or_acquire() as producer:
            for keys in batches:
                task.apply_async(args=[run_id, keys], producer=producer, queue="provider")

    # -- watch ----------------------------------------------------------------------------
    def progress(self, run_id: str, started: float | None = None) -> Progress:
        meta = self.store.get_meta(run_id)
        if meta is None:
            raise FarmError(f"run {run_id!r} not found in the run store")
        c = self.store.counters(run_id)
        per = {a: (c.get(f"done:{a}", 0), c.get(f"errors:{a}", 0)) for a in meta.get("adapters", [])}
        return Progress(run_id=run_id, total=meta["total"], done=c.get("done", 0), errors=c.get("errors", 0),
                        cost_usd=c.get("cost_nusd", 0) / 1e9, per_adapter=per,
                        elapsed_s=time.monotonic() - started if started else 0.0, state=meta.get("state", "?"))

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, poll_s: float = 0.1,
             timeout_s: float | None = None) -> bytes:
        """Poll counters until the report exists; returns its bytes."""
        started = time.monotonic()
        while True:
            if self._dispatch_error is not None:
                raise self._dispatch_error
            raw = self.store.get_report(run_id)
            if on_progress is not None:
                on_progress(self.progress(run_id, started))
            if raw is not None:
                return raw
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise FarmError(f"run {run_id} not finished after {timeout_s:.0f} s; "
                                f"'evalfarm status {run_id}' shows where it stands")
            time.sleep(poll_s)

    def run(self, spec: EvalSpec, trials: int | None = None, on_progress: ProgressFn | None = None,
            timeout_s: float | None = None) -> tuple[str, bytes]:
        run_id = self.submit(spec, trials)
        return run_id, self.wait(run_id, on_progress, timeout_s=timeout_s)

    def report(self, run_id: str) -> dict[str, Any] | None:
        raw = self.store.get_report(run_id)
        return json.loads(raw) if raw else None
