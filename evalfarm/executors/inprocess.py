"""The embedded default: the engine on asyncio in this process. No Celery, no emulation.

``concurrency`` workers pull items from a bounded queue that the planner fills as it
streams the prompts, so exactly ``concurrency`` calls are in flight at most and a
100,000-prompt dataset is never a list. An adapter that declares ``slots = (name, n)``
(coding agents: ``("spawn", 2)``) runs at most ``n`` of its items at once, shared with every
adapter naming the same slot: a machine runs two agents, not sixty-four. Every outcome goes into the same kind of run
store the farm uses and the report comes from the same ``finalize``. SIGINT (Ctrl-C) or
SIGTERM stops the run: the calls in flight are cancelled, nothing more is sent, and what
finished becomes a partial report that says ``interrupted``.
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

from ..core.outcome import Outcome
from ..core.plan import store_rows
from ..engine.budget import LocalSpend
from ..engine.items import Engine
from ..providers.limits import set_process_cap
from ..core.plan import Plan
from .base import ProgressFn
from .finalize import finalize
from .store import RunStore, SpoolStore, batched, progress_of

PLAN_CHUNK = 256


class InProcessBackend:
    mode = "embedded"

    def __init__(self, concurrency: int = 64, store: RunStore | None = None, progress_s: float = 0.1) -> None:
        self.concurrency, self.progress_s = concurrency, progress_s
        self.store: RunStore = store or SpoolStore()  # a big run's outputs on disk, not in memory
        self.stopped: str | None = None

    def start(self, plan: Plan, engine: Engine, on_progress: ProgressFn | None = None) -> None:
        meta = plan.meta(self.mode)
        self.store.create_run(plan.run_id, meta)
        if plan.options.get("budget_usd") is not None:  # the run's spend counter, asked before every call
            engine.budget = LocalSpend(plan.options["budget_usd"])
        set_process_cap(self.concurrency)
        try:
            if _loop_running():  # called from async code (a notebook): run on a loop of our own
                box: list[BaseException | str | None] = []

                def run_here() -> None:
                    try:
                        box.append(asyncio.run(self._run(plan, meta, engine, None)))
                    except BaseException as exc:  # re-raised in the caller's thread, never a silent partial run
                        box.append(exc)

                t = threading.Thread(target=run_here)
                t.start()
                t.join()
                if isinstance(box[0], BaseException):
                    raise box[0]
                self.stopped = box[0]
            else:
                self.stopped = asyncio.run(self._run(plan, meta, engine, on_progress))
        finally:
            set_process_cap(None)
        finalize(self.store, plan.run_id, stopped=self.stopped)

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None) -> None:
        """The run finished inside ``start``."""

    async def _run(self, plan: Plan, meta: dict, engine: Engine, on_progress: ProgressFn | None) -> str | None:
        store, run_id = self.store, plan.run_id
        queue: asyncio.Queue = asyncio.Queue(maxsize=self.concurrency * 2)

        async def produce() -> None:
            for chunk in batched(plan.items(), PLAN_CHUNK):
                store.add_items(run_id, *store_rows(chunk))
                for item in chunk:
                    await queue.put(item)
            store.update_meta(run_id, planned=True, state="running", spec_hash=plan.spec_hash)
            for _ in range(self.concurrency):
                await queue.put(None)

        slots: dict[str, asyncio.Semaphore] = {}
        held = {}
        for adapter_id, adapter in engine.adapters.items():
            slot = getattr(adapter, "slots", None)
            if slot:
                held[adapter_id] = slots.setdefault(slot[0], asyncio.Semaphore(slot[1]))

        # a batched adapter's items wait for their batch without holding one of the ``concurrency`` slots
        in_batches = {a for a, adapter in engine.adapters.items() if getattr(adapter, "batched", False)}
        waiting: set[asyncio.Task] = set()

        async def one(item) -> None:
            store.record(run_id, [(await engine.run(item)).to_dict()])

        async def work() -> None:
            while (item := await queue.get()) is not None:
                if item.adapter in in_batches:
                    task = asyncio.create_task(one(item))
                    waiting.add(task)
                    task.add_done_callback(waiting.discard)
                    continue
                slot = held.get(item.adapter)
                if slot is None:
                    out: Outcome = await engine.run(item)
                else:
                    async with slot:
                        out = await engine.run(item)
                store.record(run_id, [out.to_dict()])

        async def report_progress() -> None:
            while True:
                on_progress(progress_of(store, run_id, meta))  # type: ignore[misc]
                await asyncio.sleep(self.progress_s)

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        handled = _on_signals(loop, stop.set)

        async def drain() -> None:
            await asyncio.gather(*tasks)
            while waiting:
                await asyncio.gather(*list(waiting))

        tasks = [asyncio.create_task(produce())] + [asyncio.create_task(work()) for _ in range(self.concurrency)]
        ticker = asyncio.create_task(report_progress()) if on_progress is not None else None
        everything = asyncio.ensure_future(drain())
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([everything, stopper], return_when=asyncio.FIRST_COMPLETED)
            if everything.done():
                everything.result()  # an unexpected error in the engine surfaces here
                return None
            for task in [*tasks, *waiting]:
                task.cancel()
            everything.cancel()  # cancels every task; awaiting it waits for them all and retrieves its error
            with contextlib.suppress(asyncio.CancelledError):
                await everything
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, *waiting, return_exceptions=True)
            return "interrupted"
        finally:
            stopper.cancel()
            if ticker is not None:
                ticker.cancel()
                on_progress(progress_of(store, run_id, meta))  # type: ignore[misc]
            for sig in handled:
                loop.remove_signal_handler(sig)
            await engine.aclose()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def _on_signals(loop: asyncio.AbstractEventLoop, callback) -> list[int]:
    """SIGINT and SIGTERM call ``callback`` (only the main thread may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, callback)
            handled.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    return handled
