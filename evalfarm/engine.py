"""Run items: call the adapter, check, judge, time it. Pure of Celery and Redis.

Items run concurrently on an asyncio loop with a cap on calls in flight. A
worker process keeps one ``LoopThread`` so pooled HTTP clients and the in-flight
cap are shared by every task the process runs.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from .adapters import Adapter
from .checks import golden_check
from .judge import Judge, clamp01
from .plan import Item
from .redact import redact

T = TypeVar("T")


@dataclass
class Outcome:
    """The result of one item; ``error`` set means nothing was measured."""

    key: str
    prompt_id: str
    adapter: str
    trial: int
    output: str | None = None
    golden_passed: bool | None = None
    golden_reason: str | None = None
    passed: bool | None = None  # the item's quality verdict; None when nothing was measured
    judge_score: float | None = None
    latency_ms: float | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _error(exc: BaseException, stage: str) -> dict[str, Any]:
    return {"class": type(exc).__name__, "stage": stage, "message": redact(str(exc))[:500],
            "status": getattr(exc, "status", None)}


async def run_item(item: Item, adapter: Adapter, judge: Judge | None) -> Outcome:
    out = Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
    started = time.perf_counter()
    try:
        completion = await adapter.complete(item.prompt, item.trial)
    except Exception as exc:  # a provider failure is a runtime error, never a quality failure
        out.error = _error(exc, "adapter")
        return out
    out.latency_ms = round((time.perf_counter() - started) * 1000.0, 3)
    out.output = completion.text
    out.finish_reason = completion.finish_reason
    out.input_tokens, out.output_tokens = completion.input_tokens, completion.output_tokens
    out.cost_usd = completion.cost_usd
    out.golden_passed, out.golden_reason = golden_check(item.prompt, completion.text)
    out.passed = out.golden_passed
    if judge is not None:
        try:
            out.judge_score = clamp01(await judge.score(item.prompt, completion.text))
        except Exception as exc:
            out.error = _error(exc, "judge")
    return out


async def run_items(items: Iterable[Item], adapters: dict[str, Adapter], judge: Judge | None,
                    max_in_flight: int = 64) -> list[Outcome]:
    """Run items concurrently, at most ``max_in_flight`` at once, results in input order."""
    sem = asyncio.Semaphore(max_in_flight)

    async def one(item: Item) -> Outcome:
        async with sem:
            return await run_item(item, adapters[item.adapter], judge)

    return list(await asyncio.gather(*(one(i) for i in items)))


class LoopThread:
    """A long-lived event loop in a daemon thread; ``run`` blocks the caller until done."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._pid = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        import os
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # a forked child needs its own loop
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="evalfarm-loop", daemon=True)
                thread.start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        loop = self._ensure()

        async def call() -> T:
            return await factory()

        return asyncio.run_coroutine_threadsafe(call(), loop).result()


PROCESS_LOOP = LoopThread()
