"""Run items: call the adapter, check, judge, time it. Pure of Celery and Redis.

Items run concurrently on an asyncio loop with a cap on calls in flight. A
worker process keeps one ``LoopThread`` so pooled HTTP clients and the in-flight
cap are shared by every task the process runs.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from .adapters import Adapter, Completion
from .cache import ResponseCache, request_key
from .checks import golden_check, run_checks
from .judge import Judge, clamp01
from .taxonomy import classify
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
    golden_passed: bool | None = None  # expected_* assertions and every check (all deterministic)
    golden_reason: str | None = None
    checks: list[dict[str, Any]] | None = None
    judge_score: float | None = None
    judge_criteria: list[dict[str, Any]] | None = None
    judge_reason: str | None = None
    passed: bool | None = None  # the item's quality verdict; None when nothing was measured
    failure_mode: str | None = None
    latency_ms: float | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    judge_cost_usd: float = 0.0
    attempts: int | None = None
    cached: bool = False  # served by the response cache: tokens of the original call, cost 0
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        # shallow: dataclasses.asdict deep-copies every field and was 11% of an embedded run
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Outcome":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _error(exc: BaseException, stage: str) -> dict[str, Any]:
    return {"class": type(exc).__name__, "stage": stage, "message": redact(str(exc))[:500],
            "status": getattr(exc, "status", None), "attempts": getattr(exc, "attempts", None)}


def finish_outcome(out: Outcome, judge_spec_pass: float | None) -> Outcome:
    """Set the verdict and failure mode once everything about the item is known."""
    if out.error is None:
        judged_ok = out.judge_score is None or judge_spec_pass is None or out.judge_score >= judge_spec_pass
        out.passed = bool(out.golden_passed) and judged_ok
    out.failure_mode = classify(out.to_dict())
    return out


async def _complete(item: Item, adapter: Adapter, cache: ResponseCache | None) -> tuple[Completion, bool]:
    if cache is None:
        return await adapter.complete(item.prompt, item.trial), False
    key = request_key(adapter.config(), item.prompt, item.trial)
    hit = await cache.get(key)
    if hit is not None:
        return Completion(text=hit["text"], finish_reason=hit["finish_reason"], input_tokens=hit["input_tokens"],
                          output_tokens=hit["output_tokens"], cost_usd=0.0, meta={"attempts": 0}), True
    completion = await adapter.complete(item.prompt, item.trial)
    await cache.put(key, {"text": completion.text, "finish_reason": completion.finish_reason,
                          "input_tokens": completion.input_tokens, "output_tokens": completion.output_tokens,
                          "cost_usd": completion.cost_usd})
    return completion, False


async def call_item(item: Item, adapter: Adapter, cache: ResponseCache | None = None) -> Outcome:
    """Stage 1: call the adapter (or the cache), run the deterministic checks."""
    out = Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
    started = time.perf_counter()
    try:
        completion, out.cached = await _complete(item, adapter, cache)
    except Exception as exc:  # a provider failure is a runtime error, never a quality failure
        out.error = _error(exc, "adapter")
        out.attempts = getattr(exc, "attempts", None)
        return out
    out.latency_ms = round((time.perf_counter() - started) * 1000.0, 3)
    out.output = completion.text
    out.finish_reason = completion.finish_reason
    out.input_tokens, out.output_tokens = completion.input_tokens, completion.output_tokens
    out.cost_usd = completion.cost_usd
    out.attempts = completion.meta.get("attempts")
    out.golden_passed, out.golden_reason = golden_check(item.prompt, completion.text)
    out.checks = run_checks(item.prompt, completion.text)
    failed = next((c for c in out.checks if not c["passed"]), None)
    if out.golden_passed and failed is not None:
        out.golden_passed, out.golden_reason = False, f"check {failed['kind']}: {failed['reason']}"
    return out


async def judge_item(item: Item, out: Outcome, judge: Judge | None, pass_score: float | None) -> Outcome:
    """Stage 2: judge a measured output (on the judge queue in the farm), then the verdict."""
    if judge is not None and out.error is None:
        try:
            result = await judge.judge(item.prompt, out.output or "")
        except Exception as exc:
            out.error = _error(exc, "judge")
            t_in, t_out, cost = getattr(exc, "tokens", (0, 0, 0.0))
            out.judge_input_tokens, out.judge_output_tokens, out.judge_cost_usd = t_in, t_out, cost
            return finish_outcome(out, pass_score)
        out.judge_score = clamp01(result.score)
        out.judge_criteria = result.criteria or None
        out.judge_reason = result.reason or None
        out.judge_input_tokens, out.judge_output_tokens = result.input_tokens, result.output_tokens
        out.judge_cost_usd = result.cost_usd
    return finish_outcome(out, pass_score)


async def run_item(item: Item, adapter: Adapter, judge: Judge | None, pass_score: float | None = None,
                   cache: ResponseCache | None = None) -> Outcome:
    return await judge_item(item, await call_item(item, adapter, cache), judge, pass_score)


async def _bounded(limit: int, calls: Iterable[Callable[[], Awaitable[T]]]) -> list[T]:
    """Await every call, at most ``limit`` at once; results in input order."""
    sem = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def run_items(items: Iterable[Item], adapters: dict[str, Adapter], judge: Judge | None,
                    max_in_flight: int = 64, pass_score: float | None = None,
                    cache: ResponseCache | None = None) -> list[Outcome]:
    """Call, check and judge items in one go (the in-process Runner)."""
    return await _bounded(max_in_flight, [
        lambda i=i: run_item(i, adapters[i.adapter], judge, pass_score, cache) for i in items])


class DeadlineExceeded(Exception):
    """The batch's time limit passed before this item finished: a runtime error, never quality."""


async def _within(deadline: float | None, coro, item: Item, stage: str, partial: Outcome | None = None) -> Outcome:
    """Await ``coro`` until ``deadline`` (time.monotonic); past it, the item is a runtime error.
    Celery's thread pool ignores task time limits, so the limit is enforced here."""
    if deadline is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout=max(0.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        out = partial or Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
        out.error = _error(DeadlineExceeded("the task's time limit passed before this item finished"), stage)
        return finish_outcome(out, None)


async def call_items(items: Iterable[Item], adapters: dict[str, Adapter], max_in_flight: int = 64,
                     cache: ResponseCache | None = None, deadline: float | None = None) -> list[Outcome]:
    """Stage 1 on the farm's provider queue."""
    return await _bounded(max_in_flight, [
        lambda i=i: _within(deadline, call_item(i, adapters[i.adapter], cache), i, "adapter") for i in items])


async def judge_items(pairs: list[tuple[Item, Outcome]], judge: Judge | None, pass_score: float | None,
                      max_in_flight: int = 64, deadline: float | None = None) -> list[Outcome]:
    """Stage 2 on the farm's judge queue."""
    return await _bounded(max_in_flight, [
        lambda i=i, o=o: _within(deadline, judge_item(i, o, judge, pass_score), i, "judge", o) for i, o in pairs])


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
