"""The item engine: call the adapter (or the cache), run the checks, judge, decide. No backend.

``Engine`` holds a run's adapters, judge and response cache. Both backends drive it:
the in-process backend runs ``engine.run(item)`` for every item under one cap on calls in
flight; the farm runs ``call`` on the provider queue and ``judge`` on the judge queue.
A provider or judge failure becomes the item's runtime error, never a quality verdict;
an ``InfrastructureError`` (the run store, the broker, a fleet limiter) is not an answer
from the provider, so it propagates: the item stays unfinished and is redelivered.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from ..core.checks import golden_verdict
from ..core.outcome import Outcome
from ..core.plan import Item
from ..core.verdict import decide
from ..errors import InfrastructureError
from ..redact import redact
from .adapters import Adapter, Completion
from .batching import CURRENT_KEY
from .budget import SKIPPED_BUDGET, BudgetExhausted, SpendGuard, guarding
from .cache import ResponseCache, request_key
from .judges import Judge, clamp01
from .observe import active, calling, outcome as observe_outcome
from .registry import similarities

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The task's time limit passed before this item finished: a runtime error, never quality."""


def error_of(exc: BaseException, stage: str) -> dict[str, Any]:
    """What a runtime error records: class, stage, message (secrets redacted, then cut), status, attempts."""
    return {"class": type(exc).__name__, "stage": stage, "message": redact(str(exc))[:500],
            "status": getattr(exc, "status", None), "attempts": getattr(exc, "attempts", None)}


def _unsent(out: Outcome, adapter: Any) -> Outcome:
    """An item the budget stopped before it was sent; an agent adapter's says so in its ``agent`` record,
    so its failure class is ``budget_stopped`` (core/failure.py) and the report counts it apart."""
    out.skipped = SKIPPED_BUDGET
    spec = getattr(adapter, "spec", None)
    if getattr(spec, "is_agent", False) is True:
        out.agent = {"agent": getattr(spec, "agent", None), "ran": False}
    return out


class Engine:
    """A run's adapters (by adapter id), its judge and the judge's pass score, and a response cache."""

    def __init__(self, adapters: dict[str, Adapter], judge: Judge | None = None, pass_score: float | None = None,
                 cache: ResponseCache | None = None, budget: SpendGuard | None = None,
                 stored: Callable[[Item], dict[str, Any]] | None = None) -> None:
        self.adapters, self.judge_, self.pass_score, self.cache = adapters, judge, pass_score, cache
        self.budget = budget  # the run's spend counter: asked before every call, charged after
        # a replay (re-scoring): stage 1 comes from a stored run's outcome of the same item, never a call
        self.stored = stored

    async def _over_budget(self) -> bool:
        return self.budget is not None and await self.budget.exhausted()

    async def _charge(self, usd: float) -> None:
        if self.budget is not None and usd:
            await self.budget.charge(usd)

    @property
    def judged(self) -> bool:
        return self.judge_ is not None

    def configs(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
        """(adapter configs by id, judge config): what an item's key hashes besides the prompt."""
        return ({a: ad.config() for a, ad in self.adapters.items()},
                self.judge_.config() if self.judge_ is not None else None)

    async def _complete(self, item: Item, adapter: Adapter) -> tuple[Completion, bool]:
        if self.cache is None or not getattr(adapter, "cacheable", True):  # an agent run is never cached
            return await adapter.complete(item.prompt, item.trial), False
        key = request_key(adapter.config(), item.prompt, item.trial)
        hit = await self.cache.get(key)
        if hit is not None:
            return Completion(text=hit["text"], finish_reason=hit["finish_reason"], input_tokens=hit["input_tokens"],
                              output_tokens=hit["output_tokens"], cost_usd=0.0, meta={"attempts": 0}), True
        completion = await adapter.complete(item.prompt, item.trial)
        await self.cache.put(key, {"text": completion.text, "finish_reason": completion.finish_reason,
                                   "input_tokens": completion.input_tokens, "output_tokens": completion.output_tokens,
                                   "cost_usd": completion.cost_usd})
        return completion, False

    async def call(self, item: Item, since: float | None = None) -> Outcome:
        """Stage 1: call the adapter (or the cache) and run the deterministic checks. ``since``
        (perf_counter) is when the item was in hand (a farm batch's start): its wait counts from there."""
        if self.stored is not None:
            return self.replay(item)
        out = Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
        started = time.perf_counter() if since is None else since
        if await self._over_budget():
            return _unsent(out, self.adapters.get(item.adapter))
        token = CURRENT_KEY.set(item.key)  # a batched adapter's custom_id
        try:
            with guarding(self.budget), calling(item.adapter, time.perf_counter) as observed:
                completion, out.cached = await self._complete(item, self.adapters[item.adapter])
                observed["cached"], call_ms = out.cached, completion.meta.get("call_ms")
                if isinstance(call_ms, (int, float)) and call_ms > 0:
                    observed["seconds"] = call_ms / 1000.0
        except InfrastructureError:
            raise
        except BudgetExhausted:  # reached while this call waited for a slot or a retry: it was not sent
            return _unsent(out, self.adapters.get(item.adapter))
        except Exception as exc:  # a provider failure is a runtime error, never a quality failure
            out.error = error_of(exc, "adapter")
            out.attempts = getattr(exc, "attempts", None)
            out.agent = getattr(exc, "agent", None)  # what is known of a failed agent run
            return out
        finally:
            CURRENT_KEY.reset(token)
        await self._charge(completion.cost_usd)
        similarity: dict[int, float] = {}
        if any(c.kind == "similar" for c in item.prompt.checks):
            try:  # an embeddings endpoint that fails is a runtime error, never a quality failure
                similarity = await similarities(item.prompt.checks, completion.text)
            except InfrastructureError:
                raise
            except Exception as exc:
                out.error = error_of(exc, "similar")
                return out
        return self.score(item, out, completion, started, {"similarity": similarity})

    def score(self, item: Item, out: Outcome, completion: Completion, started: float,
              figures: dict[str, Any] | None = None) -> Outcome:
        """The deterministic part of stage 1 on a completion: figures and checks (re-scoring applies it
        to stored outputs; ``figures`` then holds the stored latency, cost and similarities)."""
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        out.latency_ms = round(completion.meta.get("call_ms") or elapsed_ms, 3)
        out.wait_ms = round(max(0.0, elapsed_ms - out.latency_ms), 3)
        # an adapter that says it has no price measured no cost (0 would pass any cost check)
        cost = None if completion.meta.get("priced") is False else completion.cost_usd
        figures = {"cost_usd": cost, "latency_ms": out.latency_ms, **(figures or {})}
        out.output = completion.text
        out.finish_reason = completion.finish_reason
        out.input_tokens, out.output_tokens = completion.input_tokens, completion.output_tokens
        out.cost_usd = completion.cost_usd
        out.attempts = completion.meta.get("attempts")
        out.agent = completion.meta.get("agent")
        # an adapter's own checks (an agent's `check` command) join the text checks: one verdict
        out.golden_passed, out.golden_reason, out.checks = golden_verdict(
            item.prompt, completion.text, completion.finish_reason,
            list(completion.meta.get("checks") or ()) if "checks" in completion.meta else None, figures)
        return out

    def replay(self, item: Item) -> Outcome:
        """Stage 1 of ``item`` from the stored run's outcome: the stored output scored by this run's checks.
        The model's tokens and latency are the stored ones; its cost is 0 (nothing was spent on it here). An
        item whose model call errored stays errored (there is no output); a judge error is forgotten (the
        output is there and this run judges it again)."""
        stored = self.stored(item)  # type: ignore[misc]
        out = Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
        error = stored.get("error")
        if error and (error.get("stage") or "adapter") != "judge":
            out.error, out.attempts = dict(error), stored.get("attempts")
            return out
        completion = Completion(text=stored.get("output") or "", finish_reason=stored.get("finish_reason") or "stop",
                                input_tokens=int(stored.get("input_tokens") or 0),
                                output_tokens=int(stored.get("output_tokens") or 0), cost_usd=0.0,
                                meta={"attempts": stored.get("attempts")})
        stored_checks = [c for c in stored.get("checks") or [] if isinstance(c, dict) and c.get("kind") != "command"]
        figures = {"cost_usd": stored.get("cost_usd"), "latency_ms": stored.get("latency_ms"),
                   "similarity": {i: c["score"] for i, c in enumerate(stored_checks)
                                  if c.get("kind") == "similar" and isinstance(c.get("score"), (int, float))}}
        out = self.score(item, out, completion, time.perf_counter(), figures)
        out.latency_ms, out.wait_ms = stored.get("latency_ms"), stored.get("wait_ms")
        return out

    def needs_judge(self, out: Outcome) -> bool:
        """Whether stage 2 has anything to do for this outcome (a judge, an answer, not skipped)."""
        return self.judge_ is not None and out.error is None and not out.skipped

    async def judge(self, item: Item, out: Outcome) -> Outcome:
        """Stage 2: judge a measured output (on the judge queue in the farm), then the verdict."""
        if out.skipped:
            return out
        if self.judge_ is not None and out.error is None:
            if await self._over_budget():
                out.skipped = SKIPPED_BUDGET  # the model's answer is kept (and its cost), but not judged
                return out
            token = CURRENT_KEY.set(item.key)
            try:
                with guarding(self.budget):
                    result = await self.judge_.judge(item.prompt, out.output or "")
            except InfrastructureError:
                raise
            except BudgetExhausted:
                out.skipped = SKIPPED_BUDGET
                return out
            except Exception as exc:
                out.error = error_of(exc, "judge")
                t_in, t_out, cost = getattr(exc, "tokens", (0, 0, 0.0))
                out.judge_input_tokens, out.judge_output_tokens, out.judge_cost_usd = t_in, t_out, cost
                await self._charge(cost)
                return self.decide(out)
            finally:
                CURRENT_KEY.reset(token)
            await self._charge(result.cost_usd)
            out.judge_score = clamp01(result.score)
            out.judge_criteria = result.criteria or None
            out.judge_reason = result.reason or None
            out.judge_input_tokens, out.judge_output_tokens = result.input_tokens, result.output_tokens
            out.judge_cost_usd = result.cost_usd
        return self.decide(out)

    async def run(self, item: Item) -> Outcome:
        """Both stages, for the in-process backend."""
        return await self.judge(item, await self.call(item))

    def decide(self, out: Outcome) -> Outcome:
        """The item's verdict; observers (worker metrics) see every finished item here. An item the
        budget skipped has none (it was never sent)."""
        if out.skipped:
            return out
        decide(out, self.pass_score)
        if active():
            observe_outcome(out.to_dict())
        return out

    async def aclose(self) -> None:
        """Release what the adapters and the judge hold on the running loop (pooled connections)."""
        for part in (*self.adapters.values(), self.judge_):
            close = getattr(part, "aclose", None)
            if close is not None:
                await close()


async def within(deadline: float | None, coro: Awaitable[Outcome], item: Item, stage: str,
                 partial: Outcome | None = None) -> Outcome:
    """Await ``coro`` until ``deadline`` (time.monotonic); past it, the item is a runtime error.
    Celery's thread pool ignores task time limits, so the limit is enforced here."""
    if deadline is None:
        return await coro
    loop = asyncio.get_running_loop()
    limit = asyncio.timeout_at(loop.time() + max(0.0, deadline - time.monotonic()))
    try:  # not wait_for: a task and a future per item (23 us against 11.5, a farm batch's CPU)
        async with limit:
            return await coro
    except TimeoutError:
        if not limit.expired():  # the call's own timeout, not the task's limit
            raise
        out = partial or Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
        out.error = error_of(DeadlineExceeded("the task's time limit passed before this item finished"), stage)
        return decide(out, None)


async def bounded(limit: int, calls: Iterable[Callable[[], Awaitable[T]]]) -> list[T]:
    """Await every call, at most ``limit`` at once; results in input order."""
    sem = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))
