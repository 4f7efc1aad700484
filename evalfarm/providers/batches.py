"""Provider batch APIs: calls collected into batches, submitted, polled with backoff and mapped back.

A ``Batcher`` (one per batched adapter, and one for a batched judge) collects the calls of a run: each
call is one line (its ``custom_id`` is the item's key) and waits for its answer. A batch is submitted
when it is full (the provider's stated limits, ``BatchLimits``) or when no call came for ``linger_s``.
Each open batch is polled with backoff (``poll_s`` doubling up to ``poll_max_s``); when it ends its
results are downloaded and handed to the waiting calls by ``custom_id``:

- an answered line is that call's answer (priced at the batch price: ``Price.batched``);
- a line the provider failed (the error file, ``errored``), or a batch it refused, is retried live;
- an expired batch's lines are submitted once more in a later batch, then are ``BatchExpired``;
- a batch cancelled by the budget: its unanswered lines are skipped (``BudgetExhausted``); cancelled by
  anyone else: ``BatchCancelled``. Neither is a model result.

The wire (``BatchClient``: OpenAI's files + batches, Anthropic's message batches) is in
batch_openai.py and batch_anthropic.py. ``journal`` sees every batch submitted and ended (the run
store's record, for ``status``, ``cancel`` and ``resume``).
"""
from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any, Awaitable, Callable

from ..engine.adapters import Completion
from ..engine.batching import CURRENT_KEY, judge_id
from ..engine.budget import BudgetExhausted, SpendGuard, _GUARD
from ..spec.models import PromptSpec
from .batch_wire import BatchClient, BatchState, LineResult
from .errors import ProviderError, TransportError


class BatchLineFailed(Exception):
    """The provider answered this line with an error (or refused its batch): retried live."""


class BatchExpired(Exception):
    """The batch expired before this request was answered (24 h window): not a model result."""


class BatchCancelled(Exception):
    """The batch was cancelled before this request was answered: not a model result."""


Journal = Callable[[str, dict[str, Any]], None]  # (event, record): "submitted" / "ended"


class Batcher:
    """Collects calls into batches on the running loop; see the module docstring."""

    def __init__(self, client: BatchClient, label: str, run_id: str = "", journal: Journal | None = None) -> None:
        self.client, self.label, self.run_id, self.journal = client, label, run_id, journal
        self.limits = client.limits
        self.pending: list[tuple[str, bytes, asyncio.Future]] = []
        self.pending_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task] = set()
        self.open: dict[str, BatchState] = {}
        self.seq = 0
        self.guard: SpendGuard | None = None
        self.budget_cancelled: set[str] = set()
        self.submitted = 0

    async def call(self, custom_id: str, body: bytes) -> Any:
        """The provider's answer to ``body`` (its JSON), sent as one line of a batch."""
        if self.guard is None:
            self.guard = _GUARD.get()  # the run's spend guard (the engine sets it around each call)
        line = self.client.line(custom_id, body)
        if len(line) > self.limits.max_bytes:
            raise BatchLineFailed(f"request of {len(line)} bytes exceeds the batch limit of {self.limits.max_bytes}")
        if self.pending and (len(self.pending) + 1 > self.limits.max_requests
                             or self.pending_bytes + len(line) > self.limits.max_bytes):
            self.flush()
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((custom_id, line, fut))
        self.pending_bytes += len(line)
        if len(self.pending) >= self.limits.max_requests:
            self.flush()
        else:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = asyncio.get_running_loop().call_later(self.limits.linger_s, self.flush)
        return await fut

    def flush(self) -> None:
        """Submit what is pending as one batch (in a task of its own: no caller waits on the submit)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.pending:
            return
        lines, self.pending, self.pending_bytes = self.pending, [], 0
        task = asyncio.get_running_loop().create_task(self._run(lines))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, lines: list[tuple[str, bytes, asyncio.Future]]) -> None:
        futures = {cid: fut for cid, _, fut in lines}
        try:
            if self.guard is not None and await self.guard.exhausted():
                self._fail(futures, lambda: BudgetExhausted("the run's budget is spent: the batch was not sent"))
                return
            seq, self.seq = self.seq, self.seq + 1
            metadata = {"evalfarm_run": self.run_id, "evalfarm_batch": f"{self.label}:{seq}"}
            try:
                state = await self.client.submit([line for _, line, _ in lines], metadata)
            except ProviderError as exc:  # the provider refused the batch: its calls go live
                self._fail(futures, lambda: BatchLineFailed(f"batch refused: {exc}"))
                return
            self.submitted += 1
            self.open[state.id] = state
            self._note("submitted", state, list(futures), metadata)
            state = await self._wait(state)
            results = await self.client.results(state) if state.status != "failed" else {}
            self.open.pop(state.id, None)
            self._note("ended", state, None, metadata)
            for cid, fut in futures.items():
                if fut.done():
                    continue
                got = results.get(cid)
                if got is not None and got.kind == "ok":
                    fut.set_result(got.body)
                elif got is not None and got.kind == "error":
                    fut.set_exception(BatchLineFailed(str(got.body)))
                elif state.id in self.budget_cancelled and (got is None or got.kind == "cancelled"):
                    fut.set_exception(BudgetExhausted("the run's budget is spent: its batch was cancelled"))
                elif got is not None and got.kind == "expired" or state.status == "expired":
                    fut.set_exception(BatchExpired(f"batch {state.id} expired before this request was answered"))
                elif got is not None and got.kind == "cancelled" or state.status in ("cancelled", "canceled"):
                    fut.set_exception(BatchCancelled(f"batch {state.id} was cancelled before this request was "
                                                     "answered"))
                else:  # a failed batch, or a line the results do not hold
                    fut.set_exception(BatchLineFailed(f"batch {state.id} ({state.status}) holds no answer to it"))
        except BaseException as exc:
            self._fail(futures, lambda: exc if isinstance(exc, Exception) else BatchCancelled(
                "the run stopped before this batch ended"))
            if not isinstance(exc, Exception):
                raise

    @staticmethod
    def _fail(futures: dict[str, asyncio.Future], make: Callable[[], BaseException]) -> None:
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(make())

    async def _wait(self, state: BatchState) -> BatchState:
        """Poll until the batch ends, with backoff; a spent budget cancels it at the provider."""
        delay = self.limits.poll_s
        failures = 0
        while not state.ended:
            await asyncio.sleep(delay)
            delay = min(self.limits.poll_max_s, delay * 2)
            if (self.guard is not None and state.id not in self.budget_cancelled
                    and await self.guard.exhausted()):
                self.budget_cancelled.add(state.id)
                state = await self.client.cancel(state.id)
                delay = self.limits.poll_s
                continue
            try:
                state = await self.client.get(state.id)
                failures = 0
            except (TransportError, ProviderError) as exc:  # a blip while polling is not the batch's end
                failures += 1
                if failures >= 10 or (isinstance(exc, ProviderError) and exc.status in (401, 403, 404)):
                    raise
        return state

    def _note(self, event: str, state: BatchState, keys: list[str] | None, metadata: dict[str, str]) -> None:
        if self.journal is not None:
            self.journal(event, {"id": state.id, "label": self.label, "kind": self.client.kind,
                                 "status": state.status, "counts": state.counts, "metadata": metadata,
                                 "keys": keys, "at": time.time()})

    async def aclose(self) -> None:
        """Cancel what is open at the provider (the run is over: nobody will read its answers), then close."""
        self.flush()
        for task in list(self.tasks):
            task.cancel()
        for batch_id in list(self.open):
            try:
                await self.client.cancel(batch_id)
            except Exception:  # best effort: the batch expires on its own
                pass
        self.open.clear()
        await self.client.aclose()


def custom_id_for(body: bytes) -> str:
    """The item's key (the engine sets it around each call); outside the engine, the body's hash."""
    return CURRENT_KEY.get() or hashlib.sha256(body).hexdigest()


class BatchedAdapter:
    """An ``OpenAIAdapter`` (or a native one with a batch API) whose calls go through a ``Batcher``. Same
    ``id`` and ``config()`` (item keys do not change), same request body, same parsing."""

    batched = True

    def __init__(self, inner: Any, batcher: Batcher) -> None:
        self.inner, self.batcher, self.id = inner, batcher, inner.id
        ep = inner.endpoint
        self.price = ep.price.batched() if ep.price is not None else None

    def config(self) -> dict[str, Any]:
        return self.inner.config()

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        from .openai import cost_of

        ep = self.inner.endpoint
        messages = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + \
                   [{"role": "user", "content": prompt.text}]
        body = ep.wire.body(ep, messages, dict(ep.params))
        started = time.perf_counter()
        try:
            data = await self._answer(custom_id_for(body), body)
        except BatchLineFailed as exc:  # the provider failed this line: one live call, as a live run makes
            live = await self.inner.complete(prompt, trial)
            live.meta["batch"] = f"retried live: {str(exc)[:200]}"
            return live
        text, finish, t_in, t_out = ep.wire.parse(ep, data)
        return Completion(text=text, finish_reason=finish, input_tokens=t_in, output_tokens=t_out,
                          cost_usd=cost_of(self.price, t_in, t_out),
                          meta={"attempts": 1, "call_ms": round((time.perf_counter() - started) * 1e3, 3),
                                "priced": ep.price is not None, "batch": "answered"})

    async def _answer(self, custom_id: str, body: bytes) -> Any:
        try:
            return await self.batcher.call(custom_id, body)
        except BatchExpired:  # once more, in a later batch
            return await self.batcher.call(custom_id, body)

    async def aclose(self) -> None:
        await self.batcher.aclose()
        await self.inner.aclose()


def batched_judge_transport(endpoint: Any, batcher: Batcher,
                            live: Callable[[list[dict[str, str]]], Awaitable[Any]]) -> Callable:
    """The judge's transport through ``batcher`` (``live`` for a line the provider failed)."""
    from .openai import ChatResult, cost_of

    price = endpoint.price.batched() if endpoint.price is not None else None
    sent: dict[str, int] = {}

    async def transport(messages: list[dict[str, str]]) -> ChatResult:
        body = endpoint.wire.body(endpoint, messages, dict(endpoint.params))
        key = CURRENT_KEY.get()
        cid = judge_id(key) if key else custom_id_for(body)
        n = sent[cid] = sent.get(cid, 0) + 1  # a judge's second try (an unparseable verdict) is a new request
        if n > 1:
            cid = cid[:-2] + f"-{n % 10}"
        try:
            try:
                data = await batcher.call(cid, body)
            except BatchExpired:
                data = await batcher.call(cid, body)
        except BatchLineFailed:
            return await live(messages)
        text, finish, t_in, t_out = endpoint.wire.parse(endpoint, data)
        return ChatResult(text, finish, t_in, t_out, cost_of(price, t_in, t_out), 1)

    return transport


def client_for(endpoint: Any) -> BatchClient:
    """The batch API of an endpoint's protocol."""
    kind = endpoint.wire.kind
    if kind == "anthropic":
        from .batch_anthropic import AnthropicBatches

        return AnthropicBatches(endpoint)
    if kind == "openai":
        from .batch_openai import OpenAIBatches

        return OpenAIBatches(endpoint)
    raise ValueError(f"provider {kind!r} has no batch API here (batch: true goes with openai or anthropic)")



def batch_engine(engine: Any, spec: Any, run_id: str, journal: Journal | None = None) -> list[str]:
    """Send the calls of the spec's ``batch: true`` adapters (and judge) through batch APIs: their
    adapters in ``engine`` become ``BatchedAdapter``s, its judge a judge on a batched transport.
    Returns what is batched (adapter ids, and "judge")."""
    from ..spec.models import AdapterSpec

    done: list[str] = []
    for entry in spec.adapters:
        if isinstance(entry, AdapterSpec) and entry.batch:
            inner = engine.adapters[entry.id]
            if not hasattr(inner, "endpoint"):
                raise ValueError(f"adapter {entry.id!r}: batch: true needs a provider with a batch API")
            engine.adapters[entry.id] = BatchedAdapter(inner, Batcher(client_for(inner.endpoint), entry.id, run_id,
                                                                      journal))
            done.append(entry.id)
    if spec.judge is not None and spec.judge.batch and engine.judge_ is not None:
        engine.judge_ = batched_judge(spec.judge, run_id, journal)
        done.append("judge")
    return done


def judge_endpoint(spec: Any) -> Any:
    """The endpoint of the spec's rubric judge (its batch API and its live calls)."""
    from ..redact import register_secret_env
    from .limits import Limits
    from .openai import Endpoint
    from .wire import OPENAI_CHAT

    wire = OPENAI_CHAT
    if spec.provider == "anthropic":
        from .anthropic import AnthropicWire

        wire = AnthropicWire()
    if not spec.base_url:
        raise KeyError("the judge has no base_url: set judge.base_url, pass --judge-base-url, "
                       "or set EVAL_JUDGE_BASE_URL / EVAL_BASE_URL")
    register_secret_env(spec.api_key_env)
    return Endpoint(spec.base_url, spec.model, spec.api_key_env, spec.timeout_s, spec.price, dict(spec.params),
                    Limits(spec.max_in_flight, spec.requests_per_minute), wire)


def batched_judge(spec: Any, run_id: str, journal: Journal | None = None) -> Any:
    """The spec's rubric judge with its calls in batches (a line the provider failed goes live)."""
    from ..engine.judges import LLMJudge
    from .http import close_current
    from .openai import chat

    endpoint = judge_endpoint(spec)
    batcher = Batcher(client_for(endpoint), "judge", run_id, journal)

    async def aclose() -> None:
        await batcher.aclose()
        await close_current()

    return LLMJudge(spec, batched_judge_transport(endpoint, batcher, lambda m: chat(endpoint, m, label="judge")),
                    kind=endpoint.wire.kind, aclose=aclose)
