"""Re-scoring stored outputs on a backend: stage 1 replayed, stage 2 (the judge) run for real.

The coordinator plans the re-scoring run like any run (items with keys, the plan in the
store), then replays stage 1 for every item from the stored outputs (``engine.stored.replay``:
the checks, on this process, no network) and leaves the items the judge must see in the
store's judge backlog, exactly where a farm worker leaves them after calling a model. The
judge stage then runs in this process (``judge_here``) or on the farm's judge queue
(``backends/celery/rescore.py``), and the same ``finalize`` builds the report. No item is
ever dispatched to the provider queue: the model under test is not called.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

from ..core.outcome import Outcome
from ..core.plan import Item, store_rows
from ..engine import build_engine
from ..engine.items import Engine
from ..engine.stored import replay
from ..providers.limits import set_process_cap
from ..spec.models import EvalSpec
from ..spec.source import PromptSource
from ..core.plan import Plan, plan_run
from .base import ProgressFn
from .finalize import finalize
from .store import RunStore, batched, progress_of

CHUNK = 256
Stored = Callable[[Item], dict[str, Any]]  # the source run's outcome of an item (same prompt, adapter, trial)


def start_rescore(store: RunStore, mode: str, spec: EvalSpec, source: PromptSource, trials: int, stored: Stored,
                  options: dict[str, Any] | None = None, batch_size: int | None = None) -> tuple[Plan, Engine, int]:
    """Plan the re-scoring run into ``store`` and replay stage 1; returns (plan, engine, items left for
    the judge). Items that need no judge (no judge configured, or their model call errored) are
    recorded at once."""
    engine = build_engine(spec)
    plan = plan_run(spec, source, engine.configs(), trials, options)
    meta = plan.meta(mode, **({"batch_size": batch_size} if batch_size else {}))
    store.create_run(plan.run_id, meta)
    waiting = 0
    for chunk in batched(plan.items(), CHUNK):
        store.add_items(plan.run_id, *store_rows(chunk))
        pending, final = [], []
        for item in chunk:
            out = replay(engine, item, stored(item))
            if engine.judged and out.error is None:
                pending.append(out.to_dict())
            else:
                final.append(engine.decide(out).to_dict())
        if pending:
            store.put_pending(plan.run_id, pending)
        if final:
            store.record(plan.run_id, final)
        waiting += len(pending)
    store.persist_plan(plan.run_id)  # complete: a long judge stage must not outlive the planning expiry
    store.update_meta(plan.run_id, planned=True, state="running", spec_hash=plan.spec_hash)
    return plan, engine, waiting


def judge_here(store: RunStore, run_id: str, engine: Engine, concurrency: int,
               on_progress: ProgressFn | None = None, progress_s: float = 0.1) -> None:
    """The judge stage in this process: ``concurrency`` judge calls in flight at most, then the report."""
    set_process_cap(concurrency)
    try:
        asyncio.run(_judge_all(store, run_id, engine, concurrency, on_progress, progress_s))
    finally:
        set_process_cap(None)
    finalize(store, run_id)


async def _judge_all(store: RunStore, run_id: str, engine: Engine, concurrency: int,
                     on_progress: ProgressFn | None, progress_s: float) -> None:
    meta = store.get_meta(run_id) or {}
    queue: asyncio.Queue = asyncio.Queue()
    for key in store.pending_keys(run_id):
        queue.put_nowait(key)

    async def work() -> None:
        while not queue.empty():
            key = queue.get_nowait()
            raw = store.get_items(run_id, [key])[0]
            partial = store.get_pending(run_id, [key])[0]
            if raw is None or partial is None:
                continue
            out = await engine.judge(Item.from_dict(json.loads(raw)), Outcome.from_dict(partial))
            store.record(run_id, [out.to_dict()])

    async def report_progress() -> None:
        while True:
            on_progress(progress_of(store, run_id, meta))  # type: ignore[misc]
            await asyncio.sleep(progress_s)

    ticker = asyncio.create_task(report_progress()) if on_progress is not None else None
    try:
        await asyncio.gather(*(work() for _ in range(max(1, concurrency))))
    finally:
        if ticker is not None:
            ticker.cancel()
            on_progress(progress_of(store, run_id, meta))  # type: ignore[misc]
        await engine.aclose()
