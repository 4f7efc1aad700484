"""OpenAI-compatible chat completions: the adapter under test and the judge's transport.

The call machinery here (limits, budget, quota, retries, error mapping) is shared by every wire
protocol: an ``Endpoint`` carries a ``wire`` (providers/wire.py) that says where to POST, how the key
is sent, how the body is written and how the answer is read. OpenAI chat is the default wire; the
native ones (Anthropic, Gemini, Vertex, Responses, Azure, HTTP JSON) live in their own modules.

The API key is read from the environment variable the spec names, at call
time, on the worker; it is never stored, logged or put in an error message.
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..engine import observe
from ..engine.adapters import Completion
from ..engine.budget import before_send
from ..engine.judges import LLMJudge
from ..redact import redact, register_secret_env
from ..spec.models import AdapterSpec, JudgeSpec, Price, PromptSpec
from .access import key_for
from .errors import BadResponse, ProviderError, error_for_status
from .limits import Limiter, Limits, endpoint_id, limiter_for
from .quota import exhausted_now, is_quota, refuse_if_exhausted
from .retry import RetryPolicy, parse_retry_after, with_retries
from .wire import OPENAI_CHAT, Wire, user_content


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key_env: str
    timeout_s: float = 120.0
    price: Price | None = None
    params: dict[str, Any] = field(default_factory=dict)
    limits: Limits = Limits()
    wire: Wire = OPENAI_CHAT
    api_version: str | None = None
    http: Any = None  # the http wire's request shape (spec.models.HttpSpec)

    @property
    def url(self) -> str:
        return self.wire.url(self)

    @functools.cached_property
    def host(self) -> str:
        """The endpoint without credentials or path, for metrics labels."""
        try:
            parts = urlsplit(self.url)
            return f"{parts.hostname or ''}:{parts.port or ''}".rstrip(":")
        except ValueError:  # a port that is not a number: the call says so; the label stays readable
            return "invalid-url"


@dataclass
class ChatResult:
    text: str
    finish_reason: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    attempts: int
    call_ms: float = 0.0  # the answered request's round trip: the provider's latency
    wait_ms: float = 0.0  # everything else: waiting for a limiter slot, failed attempts, backoff


def cost_of(price: Price | None, tokens_in: int, tokens_out: int) -> float:
    if price is None:
        return 0.0
    return (tokens_in * price.input + tokens_out * price.output) / 1_000_000


_POST: Any = None  # http.post: aiohttp is imported at the first call (a coordinator builds adapters, never calls)


async def _post_once(ep: Endpoint, body: bytes) -> dict[str, Any]:
    global _POST
    if _POST is None:
        from .http import post as _POST  # once per process: an import statement per call costs ~4 us
    headers = {"Content-Type": "application/json", **ep.wire.headers(ep, key_for(ep.api_key_env, ep.url))}
    url = ep.url
    resp = await _POST(url, body, headers, ep.timeout_s, min(10.0, ep.timeout_s), ep.wire.method(ep))
    text = resp.body.decode("utf-8", errors="replace")
    if resp.status != 200:
        raise error_for_status(resp.status, redact(text), parse_retry_after(resp.headers.get("retry-after")))
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise BadResponse(f"response is not JSON: {redact(text)[:200]}", 200) from None


async def chat(ep: Endpoint, messages: list[dict[str, str]], params: dict[str, Any] | None = None,
               policy: RetryPolicy = RetryPolicy(), limiter: Limiter | None = None, label: str = "") -> ChatResult:
    """One chat completion with retries, under the endpoint's fleet limits (``label``: the adapter id, or
    "judge", for metrics)."""
    body = ep.wire.body(ep, messages, {**ep.params, **(params or {})})
    limiter = limiter or limiter_for(ep.base_url, ep.api_key_env, ep.limits)
    eid = endpoint_id(ep.base_url, ep.api_key_env)
    attempts = 0
    call_s = 0.0
    started = time.perf_counter()

    async def once() -> dict[str, Any]:
        nonlocal attempts, call_s
        attempts += 1
        async with limiter.slot():
            await before_send()  # the run's budget, asked before every request (retries included)
            await refuse_if_exhausted(eid, ep.url)  # a fleet-wide exhausted quota: nothing is sent
            sent = time.perf_counter()
            try:
                data = await _post_once(ep, body)
                call_s = time.perf_counter() - sent  # the answered request's own round trip
                return data
            except ProviderError as exc:
                if is_quota(exc):  # no credit left: not retried, the endpoint stops for the whole fleet
                    raise await exhausted_now(eid, ep.url, exc) from None
                if exc.status == 429 and exc.retry_after is not None:
                    # a server asking for a day must not freeze the fleet for a day
                    seconds = min(exc.retry_after, policy.max_retry_after_s)
                    await limiter.pause(seconds)
                    observe.pause(ep.host, seconds)
                raise

    data = await with_retries(once, policy, on_retry=lambda exc, delay: observe.retry(label or ep.model))
    text, finish, t_in, t_out = ep.wire.parse(ep, data)
    total_s = time.perf_counter() - started
    return ChatResult(text, finish, t_in, t_out, cost_of(ep.price, t_in, t_out), attempts,
                      round(call_s * 1e3, 3), round((total_s - call_s) * 1e3, 3))


ADAPTER_VERSION = 1  # bump when what the adapter sends changes: it is part of item and cache keys


class OpenAIAdapter:
    """The model under test. ``PromptSpec.system`` becomes the system message. ``wire`` is the
    protocol (OpenAI chat unless a native provider's factory says otherwise)."""

    wire: Wire = OPENAI_CHAT

    def __init__(self, spec: "AdapterSpec | str") -> None:
        if isinstance(spec, str):
            raise KeyError(f"adapter {spec!r}: an OpenAI-compatible adapter is an object with id, model and "
                           "base_url (adapters: [{id: ..., model: ..., base_url: ...}])")
        if not spec.base_url:
            raise KeyError(f"adapter {spec.id!r} has no base_url: set it in the spec, pass --base-url "
                           "or set EVAL_BASE_URL")
        self.id, self.spec = spec.id, spec
        register_secret_env(spec.api_key_env)
        self.wire.check(spec)
        self.endpoint = Endpoint(spec.base_url, spec.model, spec.api_key_env, spec.timeout_s, spec.price,
                                 dict(spec.params), Limits(spec.max_in_flight, spec.requests_per_minute),
                                 self.wire, spec.api_version, spec.http)

    async def aclose(self) -> None:
        await close_current()

    def config(self) -> dict[str, Any]:
        config = {"kind": self.wire.kind, "version": ADAPTER_VERSION, "id": self.id, "model": self.spec.model,
                  "base_url": self.spec.base_url, "params": self.spec.params}
        if self.spec.api_version is not None:
            config["api_version"] = self.spec.api_version
        if self.spec.http is not None:
            config["http"] = self.spec.http.model_dump(mode="json")
        return config

    async def complete(self, prompt: PromptSpec, trial: int) -> Completion:
        messages = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + \
                   [{"role": "user", "content": user_content(prompt.text, prompt.images)}]
        r = await chat(self.endpoint, messages, label=self.id)
        return Completion(text=r.text, finish_reason=r.finish_reason, input_tokens=r.input_tokens,
                          output_tokens=r.output_tokens, cost_usd=r.cost_usd,
                          meta={"attempts": r.attempts, "call_ms": r.call_ms, "wait_ms": r.wait_ms,
                                "priced": self.spec.price is not None})


def openai_judge(spec: JudgeSpec, wire: Wire = OPENAI_CHAT) -> LLMJudge:
    """A rubric judge on an OpenAI-compatible endpoint (or a native ``wire``), with its own key, price and
    limits."""
    if not spec.base_url:
        raise KeyError("the judge has no base_url: set judge.base_url, pass --judge-base-url, "
                       "or set EVAL_JUDGE_BASE_URL / EVAL_BASE_URL")
    register_secret_env(spec.api_key_env)
    endpoint = Endpoint(spec.base_url, spec.model, spec.api_key_env, spec.timeout_s, spec.price, dict(spec.params),
                        Limits(spec.max_in_flight, spec.requests_per_minute), wire)
    return LLMJudge(spec, lambda messages: chat(endpoint, messages, label="judge"), kind=wire.kind,
                    aclose=close_current)


async def close_current() -> None:
    """Close this loop's pooled HTTP sessions (nothing to close if no call was made: aiohttp stays unimported)."""
    import sys

    if "evalfarm.providers.http" in sys.modules:
        from .http import close_current as close

        await close()
