"""`evalfarm mock-provider`: the OpenAI chat-completions protocol as evals use it, for tests, demos and
load tests (the agents' protocols are attached beside it: mock/agents.py).

Replies echo the last user message (or follow a script), with usage figures and
a finish_reason. It can add latency, fail a fraction of requests with 5xx, and
enforce a request rate with 429 + Retry-After. Markers in the user message
script single requests, so tests stay deterministic:

    [[status:NNN]]        always answer with that HTTP status
    [[fail:N:NNN]]        the first N requests with this exact message fail with NNN, then succeed
    [[retry-after-date]]  with 429: send Retry-After as an HTTP date instead of seconds
    [[refuse]]            answer with a refusal
    [[length]]            cut the reply short with finish_reason "length"
    [[reply:TEXT]]        answer TEXT verbatim
    [[drop]]              close the connection without answering
    [[drop-mid]]          send the headers and part of the body, then close the connection
    [[echo-key:N]]        answer 200 with a non-JSON body: N characters, then the caller's key
    [[slow:MS]]           add MS milliseconds of latency
    [[quota]]             answer 429 insufficient_quota, OpenAI's "no credit left" (never Retry-After)

The batch APIs (OpenAI ``/v1/files`` + ``/v1/batches``, Anthropic ``/v1/messages/batches``) answer each
line with this same logic: mock/batches.py (``--batch-delay``, ``--batch-max-requests``, its own markers).

``quota_after=N`` (``--quota-after N``) runs the account dry: after N answered completions,
every request gets that 429 insufficient_quota.

Judge requests (the judging prompt carries ``EVALFARM-JUDGE``) get a JSON verdict:
every criterion id listed in the prompt passes unless the judged output holds
``[[fail-criterion:ID]]``; a rubric gets ``{"score": 1.0}`` unless
``[[judge-score:X]]``; ``[[judge-garbage]]`` makes the judge reply prose (twice),
``[[judge-garbage-once]]`` only the first time.
"""
from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import defaultdict, deque
from email.utils import formatdate
from pathlib import Path
from typing import Any

from aiohttp import web

from . import native
from .native import BadRequest, Protocol

JUDGE_MARKER = "EVALFARM-JUDGE"
RUBRIC_MARKER = "EVALFARM-RUBRIC"
_MARK = re.compile(r"\[\[([a-z-]+)(?::([^\]]*))?\]\]")


class TokenBucket:
    def __init__(self, rate: float) -> None:
        self.rate, self.tokens, self.stamp = rate, rate, time.monotonic()

    def take(self) -> float:
        """0 if a request may pass now, else the seconds until one may."""
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class MockProvider:
    def __init__(self, latency_ms: float = 0, error_rate: float = 0.0, rate_limit: float | None = None,
                 api_key: str | None = None, script: list[dict[str, Any]] | None = None, seed: int = 0,
                 quota_after: int | None = None, batch_delay_s: float = 0.0,
                 batch_max_requests: int | None = None) -> None:
        from .batches import BatchAPIs

        self.quota_after = quota_after
        self.batch_apis = BatchAPIs(self, batch_delay_s, batch_max_requests)
        self.asked: dict[str, int] = defaultdict(int)  # user message -> requests asking it (live and batched)
        self.answered = 0  # 200 completions (for quota_after)
        self.latency_s = latency_ms / 1000.0
        self.error_rate = error_rate
        self.bucket = TokenBucket(rate_limit) if rate_limit else None
        self.api_key = api_key
        self.script = [(re.compile(r["match"]), r) for r in (script or [])]
        self.rng = random.Random(seed)
        self.seen: dict[str, int] = defaultdict(int)
        self.requests = 0
        self.tokens_sent = [0, 0]  # input, output of every completion answered here (not the agent scripts')
        self.statuses: dict[int, int] = defaultdict(int)
        self.in_flight = self.max_in_flight = 0
        self.log: list[tuple[float, int]] = []  # (arrival, status), for tests of fleet-wide limits
        self.recent: deque[dict[str, Any]] = deque(maxlen=20000)  # what was asked: /stats?requests=1
        self.started = time.monotonic()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)  # a batch input file (OpenAI's cap: 200 MB)
        self.batch_apis.attach(app)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/chat/completions", self.chat)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/embeddings", self.embeddings)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self.handler(native.AZURE))
        app.router.add_post("/v1/projects/{project}/locations/{location}/publishers/google/models/{call}",
                            self.handler(native.VERTEX))
        app.router.add_post("/v1/publishers/google/models/{call}", self.handler(native.VERTEX))
        app.router.add_post("/v1/models/{call}", self.handler(native.GEMINI))
        app.router.add_post("/model/{model:.+}/converse", self.handler(native.BEDROCK))
        app.router.add_post("/v1/model/{model:.+}/converse", self.handler(native.BEDROCK))
        app.router.add_post("/v1/models/{name:[^/]+/[^/]+}/predictions", self.handler(native.REPLICATE))
        app.router.add_post("/v1/predictions", self.handler(native.REPLICATE))
        if getattr(self, "agents", None) is not None:  # --agent-script: mock/agents.py
            self.agents.attach(app)
        else:  # the eval side of the agents' protocols (mock/native.py)
            app.router.add_post("/v1/messages", self.handler(native.ANTHROPIC))
            app.router.add_post("/v1beta/models/{call}", self.handler(native.GEMINI))
            app.router.add_post("/v1/responses", self.handler(native.RESPONSES))
            app.router.add_post("/responses", self.handler(native.RESPONSES))
            app.router.add_post("/{tail:.*}", self.json_endpoint)
        return app

    def handler(self, proto: Protocol):
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.chat(request, proto)
        return handle

    async def json_endpoint(self, request: web.Request) -> web.StreamResponse:
        """provider: http's JSON endpoint, on any path outside the APIs' own prefixes (a mistyped API
        path stays a 404)."""
        if request.path.startswith(("/v1/", "/v1beta/", "/openai/")):
            self.requests += 1
            return self._error(404, f"no such endpoint: POST {request.path}")
        return await self.chat(request, native.JSON_ENDPOINT)

    async def embeddings(self, request: web.Request) -> web.Response:
        self.requests += 1
        resp = await native.embeddings(request, lambda key: self.api_key is None or key == self.api_key)
        self.statuses[resp.status] += 1
        return resp

    async def stats(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"requests": self.requests, "statuses": self.statuses,
                                "max_in_flight": self.max_in_flight,
                                "tokens_sent": {"input_tokens": self.tokens_sent[0], "output_tokens": self.tokens_sent[1]}}
        if request.query.get("log"):
            body["log"] = self.log
        if request.query.get("requests"):
            body["recent"] = list(self.recent)
        if request.query.get("items"):
            body.update(self.batch_apis.stats(), asked=dict(self.asked))
        return web.json_response(body)

    def _error(self, status: int, message: str, retry_after: str | None = None) -> web.Response:
        self.statuses[status] += 1
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return web.json_response({"error": {"message": message, "type": "mock_error", "code": status}},
                                 status=status, headers=headers)

    async def chat(self, request: web.Request, proto: Protocol = native.OPENAI) -> web.StreamResponse:
        arrival = round(time.monotonic() - self.started, 4)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            resp = await self._chat(request, proto)
        finally:
            self.in_flight -= 1
        self.log.append((arrival, resp.status))
        return resp

    def count_asked(self, body: Any) -> None:
        """One more request asking the body's last user message (the per-item count tests read)."""
        try:
            user = next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "user")
        except (KeyError, TypeError, StopIteration, AttributeError):
            return
        self.asked[user if isinstance(user, str) else json.dumps(user)] += 1

    async def _chat(self, request: web.Request, proto: Protocol, in_batch: bool = False) -> web.StreamResponse:
        """One completion; ``in_batch``: a line of a batch (no latency: the batch's delay stands for it)."""
        self.requests += 1
        if self.api_key is not None and proto.key(request) != self.api_key:
            # like some gateways, echo what was sent: clients must redact it from their errors
            return self._error(401, f"invalid api key: {request.headers.get('Authorization', '(none)')}")
        try:
            body = await request.json()
            asked = proto.read(request, body)
            messages = asked.messages
            user = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
        except BadRequest as exc:
            return self._error(400, str(exc))
        except (ValueError, KeyError, StopIteration, TypeError, AttributeError):
            return self._error(400, "expected a JSON chat completion request with a user message")
        self.recent.append({"t": time.time(), "model": asked.model, "user": user, "protocol": proto.name,
                            "authorization": request.headers.get("Authorization"), "key": asked.key,
                            "path": request.path, "query": dict(request.query),
                            "headers": {k.lower(): v for k, v in request.headers.items()
                                        if k.lower() in ("anthropic-version", "content-type")},
                            "body": body if proto.name != "openai" else None,
                            "system": "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
                            or None})
        self.asked[user if isinstance(user, str) else json.dumps(user)] += 1
        marks = {name: arg for name, arg in _MARK.findall(user)}
        delay = 0.0 if in_batch else self.latency_s + float(marks.get("slow") or 0) / 1000.0
        if delay:
            await asyncio.sleep(delay)
        if "drop" in marks:
            request.transport.close()
            raise asyncio.CancelledError()
        if "drop-mid" in marks:  # headers and the start of a body, then the connection closes
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                           "Content-Length": "4096"})
            await resp.prepare(request)
            await resp.write(b'{"id": "chatcmpl-cut", "choices": [')
            request.transport.close()
            raise asyncio.CancelledError()
        if "echo-key" in marks:  # a broken gateway: 200, not JSON, the caller's key after some padding
            auth = request.headers.get("Authorization", "").removeprefix("Bearer ")
            self.statuses[200] += 1
            return web.Response(text="x" * int(marks["echo-key"] or 0) + auth + " <- your key", status=200)
        if "quota" in marks or (self.quota_after is not None and self.answered >= self.quota_after):
            self.statuses[429] += 1
            return web.json_response({"error": {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}, status=429)
        if "status" in marks:
            status = int(marks["status"])
            return self._error(status, f"scripted status {status}", "1" if status == 429 else None)
        if "fail" in marks:
            n, status = marks["fail"].split(":")
            self.seen[user] += 1
            if self.seen[user] <= int(n):
                when = formatdate(time.time() + 1, usegmt=True) if "retry-after-date" in marks else "1"
                return self._error(int(status), f"scripted failure {self.seen[user]} of {n}",
                                   when if int(status) in (429, 503) else None)
        if self.bucket is not None:
            wait = self.bucket.take()
            if wait > 0:
                return self._error(429, "rate limit exceeded", str(max(1, round(wait + 0.5))))
        if self.error_rate and self.rng.random() < self.error_rate:
            return self._error(self.rng.choice([500, 502, 503]), "injected server error")
        system = " ".join(m.get("content", "") for m in messages if m.get("role") == "system")
        if JUDGE_MARKER in system:
            text, finish = self._judge(user, marks), "stop"
        elif RUBRIC_MARKER in system:
            text, finish = self._rubric(user), "stop"
        else:
            text, finish = self._reply(asked.model, user, marks)
        max_tokens = asked.max_tokens
        words = text.split()
        if max_tokens and len(words) > int(max_tokens):
            text, finish = " ".join(words[: int(max_tokens)]), "length"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        self.statuses[200] += 1
        self.answered += 1
        self.tokens_sent[0] += prompt_tokens
        self.tokens_sent[1] += len(text.split())  # what every protocol's answer reports as output
        return web.json_response(proto.answer(asked, text, finish, prompt_tokens, self.requests))

    def _reply(self, model: str, user: str, marks: dict[str, str]) -> tuple[str, str]:
        for pattern, rule in self.script:
            if pattern.search(user):
                return rule["reply"], rule.get("finish_reason", "stop")
        if "reply" in marks:
            return marks["reply"], "stop"
        if "refuse" in marks:
            return "I'm sorry, but I can't help with that request.", "stop"
        clean = _MARK.sub("", user).strip()
        if "length" in marks:
            return " ".join(clean.split()[: max(1, len(clean.split()) // 2)]), "length"
        return clean, "stop"

    def _rubric(self, user: str) -> str:
        """One criterion per sentence of the specification; 'JSON' in it adds a json check."""
        body = user.split("## Specification", 1)[-1]
        sentences = [x.strip() for x in re.split(r"(?<=[.!?])\s+", body) if len(x.strip()) > 3]
        criteria = []
        for sentence in sentences[:6]:
            cid = "_".join(re.findall(r"[a-z0-9]+", sentence.lower())[:3]) or f"c{len(criteria)}"
            weight = 3 if re.search(r"\b(must|never|always)\b", sentence, re.I) else 1
            criteria.append({"id": cid, "weight": weight, "description": sentence})
        checks = [{"kind": "json"}] if "json" in body.lower() else []
        return json.dumps({"criteria": criteria, "checks": checks})

    def _judge(self, user: str, marks: dict[str, str]) -> str:
        if "judge-garbage" in marks:
            return "I think the answer is quite good overall, but I will not format it."
        if "judge-garbage-once" in marks:
            self.seen["judge:" + user] += 1
            if self.seen["judge:" + user] == 1:
                return "Let me think... it looks fine."
        fails = set(re.findall(r"\[\[fail-criterion:([^\]]+)\]\]", user))
        ids = re.findall(r"^- id: (\S+) \(weight", user, re.M)
        if ids:
            verdicts = [{"id": i, "verdict": "fail" if i in fails else "pass", "reason": "scripted by mock-provider"}
                        for i in ids]
            return "Here is my verdict:\n```json\n" + json.dumps({"criteria": verdicts}) + "\n```"
        score = float(marks.get("judge-score") or 1.0)
        return json.dumps({"score": score, "reason": "scripted by mock-provider"})


def load_script(path: Path) -> list[dict[str, Any]]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(data, list) or not all(isinstance(r, dict) and "match" in r and "reply" in r for r in data):
        raise ValueError(f"{path}: expected a YAML list of {{match: REGEX, reply: TEXT}}")
    return data


def serve(host: str, port: int, provider: MockProvider, ready_message: bool = True) -> None:
    def on_startup(_app: web.Application) -> None:
        if ready_message:
            print(f"mock-provider listening on http://{host}:{port}/v1", flush=True)

    app = provider.app()
    app.on_startup.append(lambda a: asyncio.sleep(0, on_startup(a)))
    web.run_app(app, host=host, port=port, access_log=None, print=None, handle_signals=True)
