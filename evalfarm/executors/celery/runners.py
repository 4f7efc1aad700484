"""A worker process's item runners: one set of long-lived coroutines on its event loop that takes the
items of every batch in the order they arrive.

A worker runs up to ``-c`` batches at once (8 task threads) and at most ``EVALFARM_MAX_IN_FLIGHT``
calls at once. Giving each batch its own tasks meant ~500 tasks for 64 slots: one task created,
scheduled and woken per item, most of them queued on the process's limiter behind the other
batches' (at 0 ms latency the worker's CPU is the run's pace: `-c 2` took ~8% less of it than `-c 8`).
Here ``size`` runners (the worker's cap on calls in flight) pull (call, future) pairs from one queue,
as the in-process backend's workers pull items: a batch adds its calls and awaits their futures.
First in, first served: a batch that arrives later waits behind the earlier ones, as it did on the
limiter's FIFO semaphore. One set per lane, a provider endpoint (and key): the cap on calls in flight
holds per endpoint (each endpoint's limiter), so a run calling two endpoints, or a model and its judge,
keeps 64 calls in flight on each, as before.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")
Call = Callable[[], Awaitable[Any]]


class Runners:
    """``size`` runners on one event loop, fed through one queue."""

    def __init__(self, size: int) -> None:
        self.busy = 0  # runners in a call
        self.used = time.monotonic()  # when a batch last asked for this set
        self.queue: asyncio.Queue[tuple[Call, asyncio.Future]] = asyncio.Queue()
        self.tasks = [asyncio.ensure_future(self._runner()) for _ in range(size)]  # held: tasks are weakly referenced

    async def _runner(self) -> None:
        queue = self.queue
        while True:
            call, future = await queue.get()
            if future.done():  # its batch was cancelled while the call waited
                continue
            self.busy += 1
            try:
                result = await call()
            except asyncio.CancelledError:
                future.cancel()
                if asyncio.current_task().cancelling():  # type: ignore[union-attr]  # this runner is cancelled
                    raise
                continue
            except BaseException as exc:  # the batch's await raises it, as gather would
                if not future.done():
                    future.set_exception(exc)
                continue
            finally:
                self.busy -= 1
            if not future.done():
                future.set_result(result)

    def idle(self, now: float) -> bool:
        """Nothing running or waiting, and no batch has asked for it lately (one that holds it from
        ``runners`` may not have added its calls yet)."""
        return self.busy == 0 and self.queue.empty() and now - self.used > IDLE_S

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def run(self, calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
        """Await every call on the runners; results in input order. A batch cancelled while it waits
        drops its calls not yet started (those running finish: each is bounded by its item's deadline)."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in calls]
        for call, future in zip(calls, futures):
            self.queue.put_nowait((call, future))
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for future in futures:
                future.cancel()
            raise


_RUNNERS: dict[tuple[int, int, str], Runners] = {}
KEEP_IDLE = 32  # sets of runners kept per loop: past that, idle ones (an endpoint no longer called) go
IDLE_S = 60.0  # ... when no batch asked for them for this long


def runners(size: int, lane: str = "") -> Runners:
    """The running loop's runners of ``size`` for ``lane`` (made at first use; a worker has one loop and
    one cap, a lane per endpoint it calls)."""
    loop = id(asyncio.get_running_loop())
    key = (loop, size, lane)
    found = _RUNNERS.get(key)
    if found is None:
        mine = [k for k in _RUNNERS if k[0] == loop]
        if len(mine) >= KEEP_IDLE:  # a long-lived worker on a shared farm sees many endpoints
            now = time.monotonic()
            for k in mine:
                if _RUNNERS[k].idle(now):
                    _RUNNERS.pop(k).close()
        found = _RUNNERS[key] = Runners(size)
    found.used = time.monotonic()
    return found


async def run_in_lanes(size: int, calls: list[Callable[[], Awaitable[T]]], lanes: list[str]) -> list[T]:
    """Every call on its lane's runners; results in input order."""
    groups: dict[str, list[int]] = {}
    for i, lane in enumerate(lanes):
        groups.setdefault(lane, []).append(i)
    if len(groups) == 1:
        return await runners(size, lanes[0]).run(calls)
    parts = await asyncio.gather(*(runners(size, lane).run([calls[i] for i in at]) for lane, at in groups.items()))
    results: list[Any] = [None] * len(calls)
    for at, part in zip(groups.values(), parts):
        for i, result in zip(at, part):
            results[i] = result
    return results
