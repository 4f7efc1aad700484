"""The coordinator: plan a spec into the store, dispatch batches, watch counters, resume.

It never waits on Celery results (a big chord's result pub/sub costs O(N^2)
client CPU, see DESIGN.md): it polls the store's counters and reads the report
the aggregate task stored. The plan is written to the store in chunks before
any batch is sent, so a coordinator that dies can be replaced: ``resume``
re-plans if needed and dispatches only what is neither done, nor waiting for
the judge, nor still in the broker.
"""
from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..errors import FarmError
from ..plan import iter_items
from ..runner import SpecHasher, make_adapters, make_judge, new_run_id, utc_now
from ..spec import EvalSpec, PromptSpec
from .app import AGGREGATE, JUDGE_BATCH, RUN_BATCH, create_app
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
    elapsed_s: float  # since the run started (not since this process attached)
    state: str
    pending_judge: int = 0
    executed: int = 0
    cost_per_adapter: dict[str, float] | None = None  # model + judge spend so far


ProgressFn = Callable[[Progress], None]


class RunCancelled(FarmError):
    exit_code = 1


class Coordinator:
    def __init__(self, settings: FarmSettings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.store = store_for(settings)
        self._dispatch_error: BaseException | None = None
        self._dispatcher: threading.Thread | None = None
        self._static_meta: dict[str, dict[str, Any]] = {}
        if not settings.embedded:
            try:
                self.store.ping()  # type: ignore[attr-defined]
            except Exception as exc:
                from ..redact import redact
                raise FarmError(f"cannot reach the run store at {redact(settings.effective_store_url or '')}: "
                                f"{redact(str(exc)).rstrip('.')}; is Redis running? "
                                "(--broker / EVALFARM_BROKER_URL)") from None

    @property
    def mode(self) -> str:
        return "embedded" if self.settings.embedded else "redis"

    # -- submit ---------------------------------------------------------------------------
    def submit(self, spec: EvalSpec, trials: int | None = None, run_id: str | None = None,
               options: dict[str, Any] | None = None) -> str:
        """Validate adapters and judge here (bad input stops before queueing), plan, dispatch."""
        make_adapters(spec)
        make_judge(spec)
        n_trials = trials or spec.trials
        total = spec.prompt_count() * len(spec.adapter_ids) * n_trials
        run_id = run_id or new_run_id()
        meta = {"run_id": run_id, "spec": spec.model_dump(mode="json", by_alias=True),
                "spec_hash": None, "trials": n_trials, "total": total, "mode": self.mode,
                "started_at": utc_now(), "state": "planning", "planned": False,
                "batch_size": pick_batch_size(total, self.settings.batch_size), "adapters": spec.adapter_ids,
                "options": options or {}}
        self.store.create_run(run_id, meta)
        if self.settings.embedded:
            # in-process: batches start while the plan is still being written (nothing to resume)
            self._dispatch(run_id, self._plan(run_id, spec, spec.iter_prompts(), n_trials, meta["batch_size"]))
        else:
            # the farm: the whole plan is stored before the first batch leaves, so a coordinator that
            # dies mid-dispatch leaves a run that `resume` can finish exactly
            for _ in self._plan(run_id, spec, spec.iter_prompts(), n_trials, meta["batch_size"]):
                pass
            self._dispatch(run_id, batched(self.store.iter_item_keys(run_id), meta["batch_size"]))
        return run_id

    def _plan(self, run_id: str, spec: EvalSpec, prompts: Iterable[PromptSpec], trials: int,
              batch_size: int) -> Iterator[list[str]]:
        """Write the items to the store in chunks, yielding batches of keys as they are stored;
        the spec hash streams from the same pass and is in the meta before the last batch."""
        adapters = make_adapters(spec)
        judge = make_judge(spec)
        hasher = SpecHasher(spec)
        items = iter_items(spec, prompts, {a: ad.config() for a, ad in adapters.items()},
                           judge.config() if judge else None, trials, on_prompt=hasher.update)
        pending: list[list[str]] = []
        for chunk in batched(items, max(batch_size, 1000 // batch_size * batch_size)):
            self.store.add_items(run_id, [(i.key, i.to_json()) for i in chunk])
            yield from pending
            pending = list(batched([i.key for i in chunk], batch_size))
        self.store.update_meta(run_id, planned=True, state="dispatching", spec_hash=hasher.hexdigest())
        yield from pending

    def _dispatch(self, run_id: str, batches: Iterable[list[str]], then_state: str = "running") -> None:
        task = self.app.tasks[RUN_BATCH]
        if self.settings.embedded:
            # eager tasks run inline: a small pool keeps several batches in flight
            def drive() -> None:
                try:
                    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="evalfarm-embedded") as pool:
                        futures = [pool.submit(task.apply, args=[run_id, keys]) for keys in batches]
                        self.store.update_meta(run_id, state=then_state)
                        for fut in futures:
                            fut.result().get(disable_sync_subtasks=False)
                except BaseException as exc:  # surfaced by wait()
                    self._dispatch_error = exc

            self._dispatcher = threading.Thread(target=drive, name="evalfarm-dispatch", daemon=True)
            self._dispatcher.start()
            return
        # fault injection for the crash tests: slow dispatch down so a coordinator can die mid-way
        delay = float(os.environ.get("EVALFARM_FAILPOINT_DISPATCH_DELAY_S", "0") or 0)
        with self.app.producer_or_acquire() as producer:
            for keys in batches:
                task.apply_async(args=[run_id, keys], producer=producer, queue="provider")
                if delay:
                    time.sleep(delay)
        self.store.update_meta(run_id, state=then_state)

    # -- watch ----------------------------------------------------------------------------
    def meta(self, run_id: str) -> dict[str, Any]:
        meta = self.store.get_meta(run_id)
        if meta is None:
            raise FarmError(f"run {run_id!r} not found in the run store; 'evalfarm status' lists the runs it has")
        return meta

    def progress(self, run_id: str, started: float | None = None) -> Progress:
        """Counters, state and judge backlog; the meta's static part (total, adapters, start) is
        read once per run, not on every poll."""
        meta = self._static_meta.get(run_id)
        if meta is None:
            meta = self._static_meta[run_id] = self.meta(run_id)
        c = self.store.counters(run_id)
        adapters = meta.get("adapters", [])
        per = {a: (c.get(f"done:{a}", 0), c.get(f"errors:{a}", 0)) for a in adapters}
        from datetime import datetime, timezone

        try:
            since = (datetime.now(timezone.utc) - datetime.fromisoformat(meta["started_at"])).total_seconds()
        except (KeyError, ValueError):
            since = time.monotonic() - started if started else 0.0
        return Progress(run_id=run_id, total=meta["total"], done=c.get("done", 0), errors=c.get("errors", 0),
                        cost_usd=c.get("cost_nusd", 0) / 1e9, per_adapter=per, elapsed_s=max(since, 0.0),
                        state=self.store.get_state(run_id) or "?", pending_judge=self.store.pending_count(run_id),
                        executed=c.get("executed", 0),
                        cost_per_adapter={a: c.get(f"cost_nusd:{a}", 0) / 1e9 for a in adapters})

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, poll_s: float = 0.1,
             timeout_s: float | None = None, stall_s: float = 10.0, fetch: bool = True) -> bytes:
        """Poll counters until the report exists; returns its bytes (b"" with ``fetch=False``:
        then read it in chunks with ``store.iter_report``).

        If every item is done but no report appears for ``stall_s`` (the aggregate message
        was lost, e.g. in a broker restart), the aggregate is sent again: it is idempotent.
        """
        started = time.monotonic()
        complete_since: float | None = None
        warned = False
        while True:
            if self._dispatch_error is not None:
                raise self._dispatch_error
            if self.store.report_size(run_id):
                if on_progress is not None:
                    on_progress(self.progress(run_id, started))
                return (self.store.get_report(run_id) or b"") if fetch else b""
            p = self.progress(run_id, started)
            if on_progress is not None:
                on_progress(p)
            if p.state == "cancelled":
                raise RunCancelled(f"run {run_id} was cancelled at {p.done}/{p.total} items; "
                                   f"'evalfarm resume {run_id}' continues it")
            if not warned and not self.settings.embedded and p.executed == 0 and \
                    time.monotonic() - started > self.settings.idle_warning_s:
                warned = True
                import sys
                print(f"evalfarm: warning: no item of run {run_id} has finished after "
                      f"{self.settings.idle_warning_s:.0f} s: is a worker consuming the provider queue? "
                      "(evalfarm worker --broker ...)", file=sys.stderr, flush=True)
            if p.done >= p.total:
                complete_since = complete_since or time.monotonic()
                if time.monotonic() - complete_since > stall_s and not self.settings.embedded:
                    self.kick_aggregate(run_id)
                    complete_since = time.monotonic()
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise FarmError(f"run {run_id} not finished after {timeout_s:.0f} s; "
                                f"'evalfarm status {run_id}' shows where it stands")
            time.sleep(poll_s)

    def run(self, spec: EvalSpec, trials: int | None = None, on_progress: ProgressFn | None = None,
            timeout_s: float | None = None, options: dict[str, Any] | None = None) -> tuple[str, bytes]:
        run_id = self.submit(spec, trials, options=options)
        return run_id, self.wait(run_id, on_progress, timeout_s=timeout_s)

    def report(self, run_id: str) -> dict[str, Any] | None:
        raw = self.store.get_report(run_id)
        return json.loads(raw) if raw else None

    # -- recovery and control -------------------------------------------------------------
    def kick_aggregate(self, run_id: str) -> None:
        self.store.release(run_id, "aggregate")
        if self.store.claim(run_id, "aggregate"):
            self.app.tasks[AGGREGATE].apply_async(args=[run_id], queue="aggregate")

    def in_broker(self, run_id: str) -> set[str]:
        from .broker_scan import keys_in_broker
        r = getattr(self.store, "r", None)
        return keys_in_broker(r, run_id)[0] if r is not None else set()

    def resume(self, run_id: str) -> dict[str, int]:
        """Dispatch only what is missing; returns what was done."""
        if self.settings.embedded:
            raise FarmError("resume needs the farm's Redis (--broker / EVALFARM_BROKER_URL): "
                            "an embedded run lives and dies with its process")
        meta = self.meta(run_id)
        if self.store.get_report(run_id) is not None:
            return {"dispatched": 0, "judge": 0, "replanned": 0}
        replanned = 0
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
        if judge_missing:
            for chunk in batched(judge_missing, meta["batch_size"]):
                self.app.tasks[JUDGE_BATCH].apply_async(args=[run_id, chunk], queue="judge")
        if not missing and not judge_missing and len(done) >= meta["total"]:
            self.kick_aggregate(run_id)
        return {"dispatched": len(missing), "judge": len(judge_missing), "replanned": replanned,
                "already_done": len(done), "in_broker": len(queued)}

    def cancel(self, run_id: str) -> None:
        self.meta(run_id)
        self.store.update_meta(run_id, state="cancelled")

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        out = []
        for run_id in self.store.runs()[:limit]:
            meta = self.store.get_meta(run_id) or {}
            c = self.store.counters(run_id)
            out.append({"run_id": run_id, "spec": meta.get("spec", {}).get("name"), "state": meta.get("state"),
                        "done": c.get("done", 0), "total": meta.get("total"), "started_at": meta.get("started_at")})
        return out
