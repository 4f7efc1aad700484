"""The farm backend: store a plan in Redis, dispatch batches, watch counters, resume, cancel.

It never waits on Celery results (a big chord's result pub/sub costs O(N^2) client CPU,
see DESIGN.md): it polls the store's counters and reads the report the aggregate task
stored. The whole plan is written to the store before any batch is sent, so a coordinator
that dies can be replaced: ``resume`` dispatches only what is neither done, nor waiting
for the judge, nor still in the broker.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable

from ...core.plan import store_rows
from ...engine.items import Engine
from ...errors import FarmError
from ...redact import redact
from ..base import Plan, ProgressFn
from ..store import Progress, batched, progress_of
from .app import AGGREGATE, JUDGE_BATCH, RUN_BATCH, create_app
from .broker_scan import keys_in_broker
from .settings import FarmSettings, pick_batch_size
from .store import probe, store_for


class RunCancelled(FarmError):
    exit_code = 1


class CeleryBackend:
    mode = "redis"

    def __init__(self, settings: FarmSettings, connect_timeout_s: float | None = None) -> None:
        self.settings = settings
        url = settings.run_store_url
        print(f"evalfarm: connecting to {redact(url)} ...", file=sys.stderr, flush=True)
        try:
            probe(url, connect_timeout_s if connect_timeout_s is not None else settings.connect_timeout_s)
        except Exception as exc:
            raise FarmError(f"cannot reach the run store at {redact(url)}: "
                            f"{redact(str(exc)).rstrip('.')}; is Redis running? (--broker / EVALFARM_BROKER_URL)") from None
        self.app = create_app(settings)
        self.store = store_for(url)
        self._meta: dict[str, dict[str, Any]] = {}

    # -- submit ---------------------------------------------------------------------------
    def start(self, plan: Plan, engine: Engine | None = None, on_progress: ProgressFn | None = None) -> None:
        """Store the whole plan, then dispatch it: a coordinator that dies mid-dispatch leaves a run
        that ``resume`` can finish exactly."""
        batch_size = pick_batch_size(plan.total, self.settings.batch_size)
        run_id = plan.run_id
        self.store.create_run(run_id, plan.meta(self.mode, batch_size=batch_size))
        for chunk in batched(plan.items(), max(batch_size, 1000 // batch_size * batch_size)):
            self.store.add_items(run_id, *store_rows(chunk))
        self.store.update_meta(run_id, planned=True, state="dispatching", spec_hash=plan.spec_hash)
        self._dispatch(run_id, batched(self.store.iter_item_keys(run_id), batch_size))

    def _dispatch(self, run_id: str, batches: Iterable[list[str]], then_state: str = "running") -> None:
        # fault injection for the crash tests: slow dispatch down so a coordinator can die mid-way
        delay = float(os.environ.get("EVALFARM_FAILPOINT_DISPATCH_DELAY_S", "0") or 0)
        with self.app.producer_or_acquire() as producer:
            for keys in batches:
                self.app.send_task(RUN_BATCH, args=[run_id, keys], producer=producer, queue="provider")
                if delay:
                    time.sleep(delay)
        self.store.update_meta(run_id, state=then_state)

    # -- watch ----------------------------------------------------------------------------
    def meta(self, run_id: str) -> dict[str, Any]:
        meta = self.store.get_meta(run_id)
        if meta is None:
            raise FarmError(f"run {run_id!r} not found in the run store; 'evalfarm status' lists the runs it has")
        return meta

    def progress(self, run_id: str) -> Progress:
        """The meta's static part (total, adapters, start) is read once per run, not on every poll."""
        meta = self._meta.get(run_id)
        if meta is None:
            meta = self._meta[run_id] = self.meta(run_id)
        return progress_of(self.store, run_id, meta)

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None,
             poll_s: float = 0.1, stall_s: float = 10.0) -> None:
        """Poll counters until the report exists. If every item is done but no report appears for
        ``stall_s`` (the aggregate message was lost, e.g. in a broker restart), the aggregate is sent
        again: it is idempotent."""
        started = time.monotonic()
        complete_since: float | None = None
        warned = False
        while True:
            if self.store.report_size(run_id):
                if on_progress is not None:
                    on_progress(self.progress(run_id))
                return
            p = self.progress(run_id)
            if on_progress is not None:
                on_progress(p)
            if p.state == "cancelled":
                raise RunCancelled(f"run {run_id} was cancelled at {p.done}/{p.total} items; "
                                   f"'evalfarm resume {run_id}' continues it")
            if not warned and p.executed == 0 and time.monotonic() - started > self.settings.idle_warning_s:
                warned = True
                print(f"evalfarm: warning: no item of run {run_id} has finished after "
                      f"{self.settings.idle_warning_s:.0f} s: is a worker consuming the provider queue? "
                      "(evalfarm worker --broker ...)", file=sys.stderr, flush=True)
            if p.done >= p.total:
                complete_since = complete_since or time.monotonic()
                if time.monotonic() - complete_since > stall_s:
                    self.kick_aggregate(run_id)
                    complete_since = time.monotonic()
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise FarmError(f"run {run_id} not finished after {timeout_s:.0f} s; "
                                f"'evalfarm status {run_id}' shows where it stands")
            time.sleep(poll_s)

    # -- recovery and control -------------------------------------------------------------
    def kick_aggregate(self, run_id: str) -> None:
        self.store.release(run_id, "aggregate")
        if self.store.claim(run_id, "aggregate"):
            self.app.send_task(AGGREGATE, args=[run_id], queue="aggregate")

    def in_broker(self, run_id: str) -> set[str]:
        return keys_in_broker(self.store.r, run_id)[0]

    def resume(self, run_id: str) -> dict[str, int]:
        """Dispatch only what is missing; returns what was done."""
        meta = self.meta(run_id)
        if self.store.report_size(run_id):
            return {"dispatched": 0, "judge": 0}
        if not meta.get("planned"):
            # the plan streams from the user's dataset file, which only the first coordinator read;
            # no batch is sent before the plan is complete, so nothing ran and nothing was spent
            raise FarmError(f"run {run_id} stopped while planning, before any item was dispatched "
                            "(nothing ran, nothing was spent); run the spec again")
        self.store.update_meta(run_id, state="running", resumed=int(meta.get("resumed", 0)) + 1)
        keys = list(self.store.iter_item_keys(run_id))
        done = self.store.done_keys(run_id, keys)
        pending = set(self.store.pending_keys(run_id))
        queued = self.in_broker(run_id)
        missing = [k for k in keys if k not in done and k not in pending and k not in queued]
        judge_missing = sorted(k for k in pending if k not in done and k not in queued)
        self._dispatch(run_id, batched(missing, meta["batch_size"]))
        for chunk in batched(judge_missing, meta["batch_size"]):
            self.app.send_task(JUDGE_BATCH, args=[run_id, chunk], queue="judge")
        if not missing and not judge_missing and len(done) >= meta["total"]:
            self.kick_aggregate(run_id)
        return {"dispatched": len(missing), "judge": len(judge_missing), "already_done": len(done),
                "in_broker": len(queued)}

    def cancel(self, run_id: str) -> None:
        self.meta(run_id)
        self.store.update_meta(run_id, state="cancelled")

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        out = []
        for run_id in self.store.runs()[:limit]:
            meta = self.store.get_meta(run_id) or {}
            c = self.store.counters(run_id)
            out.append({"run_id": run_id, "spec": (meta.get("spec") or {}).get("name"), "state": meta.get("state"),
                        "done": c.get("done", 0), "total": meta.get("total"), "started_at": meta.get("started_at")})
        return out
