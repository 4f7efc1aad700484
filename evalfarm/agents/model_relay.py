"""The per-task model relay: the one address a sealed agent can reach, and the only holder of the real key.

It runs in the worker (outside the jail), serving HTTP on a unix socket that is bound into the jail;
inside, ``netns_relay.py`` (the agent's parent) listens on ``127.0.0.1:PORT`` and pipes each
connection to that socket. The agent is given ``http://127.0.0.1:PORT/<base path>`` as its base URL
and, in its key variable, a per-task token. For each request the relay

- checks the token (``Authorization: Bearer``, ``x-api-key``, ``api-key``, ``x-goog-api-key`` or
  ``?key=``): anything else is a 401, and the call never leaves the worker;
- refuses (429) once the task has used ``max_tokens`` (``max_tokens_per_task:``), counted on the wire;
- forwards it to the adapter's real ``base_url`` with the token swapped for the real key (the adapter
  checked that host against ``EVALFARM_ENDPOINT_ALLOW`` before the task started: the relay forwards
  nowhere else), ``Accept-Encoding: identity`` so the reply can be read;
- streams the reply back as it arrives (aiohttp, one event loop per relay), and counts the tokens the reply reports (OpenAI
  chat and Responses, Anthropic Messages, Gemini; streamed or not), beside the agent's own account;
- keeps a record of each request (``calls``: when, path, model, status, latency, tokens, and the reply's
  first ``RECORD_BODY_MAX`` bytes, unparsed) for the task's trajectory (trajectory.py reads the replies
  after the run, off this path, and masks secrets before anything is written). Request bodies are not
  kept: an agent resends its whole conversation each call.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}
KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
MAX_JSON = 32 * 2**20
RECORD_BODY_MAX = 256 * 1024  # bytes of each reply kept for the trajectory
RECORD_TOTAL_MAX = 32 * 2**20  # a task's replies kept in all; past it, calls are recorded without their reply


def new_token() -> str:
    return "evalfarm-task-" + secrets.token_urlsafe(24)


@dataclass
class Counts:
    requests: int = 0
    refused: int = 0  # wrong or missing token
    capped: int = 0  # refused over max_tokens
    upstream_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("requests", "refused", "capped", "upstream_errors", "input_tokens",
                                               "output_tokens")}


def _model_of(path: str, body: bytes) -> str | None:
    """The model a request names: Gemini's in the path (``models/M:generateContent``), else the JSON body's."""
    if "/models/" in path and ":" in path:
        return path.rsplit("/models/", 1)[1].split(":", 1)[0] or None
    head = body[:4096]
    at = head.find(b'"model"')
    if at < 0:
        return None
    rest = head[at + 7:].lstrip()
    if rest[:1] != b":":
        return None
    rest = rest[1:].lstrip()
    if rest[:1] != b'"':
        return None
    end = rest.find(b'"', 1)
    return rest[1:end].decode("utf-8", "replace") if end > 0 else None


def _num(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0


def usage_of(obj: Any) -> tuple[int, int] | None:
    """(input, output) tokens an event or body reports, in any of the protocols the agents speak."""
    if not isinstance(obj, dict):
        return None
    for holder in (obj, obj.get("response"), obj.get("message")):
        if isinstance(holder, dict):
            u = holder.get("usage")
            if isinstance(u, dict):
                tin = _num(u.get("input_tokens")) + _num(u.get("cache_read_input_tokens")) + \
                    _num(u.get("cache_creation_input_tokens")) if "input_tokens" in u or "cache_read_input_tokens" in u \
                    else _num(u.get("prompt_tokens"))
                tout = _num(u.get("output_tokens")) if "output_tokens" in u else _num(u.get("completion_tokens"))
                return tin, tout
            g = holder.get("usageMetadata")
            if isinstance(g, dict):
                return _num(g.get("promptTokenCount")), _num(g.get("candidatesTokenCount"))
    return None


class _Meter:
    """Tokens of one reply: a JSON body parsed whole, a stream line by line (only lines naming usage).
    Per reply the largest figure of each kind wins (Anthropic's output count is cumulative)."""

    def __init__(self, content_type: str) -> None:
        self.whole = "json" in content_type and "stream" not in content_type
        self.buf = bytearray()
        self.tin = self.tout = 0

    def _take(self, obj: Any) -> None:
        u = usage_of(obj)
        if u:
            self.tin, self.tout = max(self.tin, u[0]), max(self.tout, u[1])

    def feed(self, data: bytes) -> None:
        if self.whole:
            if len(self.buf) < MAX_JSON:
                self.buf += data
            return
        self.buf += data
        *lines, rest = self.buf.split(b"\n")
        self.buf = bytearray(rest)
        for line in lines:
            if b"sage" in line:  # usage / usageMetadata
                self._line(line)

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if line.startswith(b"data:"):
            line = line[5:].strip()
        if line.startswith(b"{"):
            try:
                self._take(json.loads(line))
            except ValueError:
                pass

    def done(self) -> tuple[int, int]:
        if self.whole:
            try:
                self._take(json.loads(bytes(self.buf)))
            except ValueError:
                pass
        elif self.buf:
            self._line(bytes(self.buf))
        return self.tin, self.tout


class TaskRelay:
    """One task's relay: made with its socket, ``token`` handed to the jail, ``close`` at the end. It serves
    on an aiohttp event loop in a thread of its own (one loop for every connection: no thread per request)."""

    def __init__(self, sock_path: Path, base_url: str, real_key: str | None, max_tokens: int | None = None,
                 timeout_s: float = 600.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {base_url!r}: the relay forwards to an http(s) URL only")
        self.origin = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
        self.base_path = parts.path.rstrip("/")
        self.real_key, self.max_tokens, self.timeout_s = real_key, max_tokens, timeout_s
        self.token = new_token()
        self.counts = Counts()
        self.calls: list[dict[str, Any]] = []  # the record of every request (see the module's docstring)
        self._kept = 0
        self._closing = False
        self.path = Path(sock_path)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="evalfarm-model-relay", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # noqa: BLE001 (handed to the constructor)
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.timeout_s),
            auto_decompress=False)
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.path)).start()
        os.chmod(self.path, 0o666)  # the jail's user (root, or a mapped uid) connects

    def _authed(self, request: "web.Request") -> bool:
        tok = self.token
        return any(tok in (request.headers.get(h) or "") for h in KEY_HEADERS) or request.query.get("key") == tok

    @staticmethod
    def _error_reply(status: int, message: str) -> "web.Response":
        return web.json_response({"error": {"message": message, "type": "evalfarm_relay", "code": status}},
                                 status=status)

    async def _handle(self, request: "web.Request") -> "web.StreamResponse":
        c, tok = self.counts, self.token
        authed = self._authed(request)
        c.requests += 1  # one event loop: no lock needed against itself (readers take the figures after close)
        call: dict[str, Any] = {"time": time.time(), "method": request.method, "path": request.rel_url.path}
        self.calls.append(call)
        started = time.perf_counter()
        if not authed:
            c.refused += 1
            call.update(status=401, forwarded=False)
            return self._error_reply(401, "evalfarm relay: wrong or missing per-task token")
        if self.max_tokens is not None and c.input_tokens + c.output_tokens >= self.max_tokens:
            c.capped += 1
            call.update(status=429, forwarded=False)
            return self._error_reply(429, f"evalfarm relay: this task used its max_tokens_per_task ({self.max_tokens})")
        headers = {}
        for name, value in request.headers.items():
            low = name.lower()
            if low in HOP:
                continue
            if low in KEY_HEADERS and tok in value:
                if self.real_key is None:
                    continue
                value = value.replace(tok, self.real_key)
            headers[name] = value
        headers["Accept-Encoding"] = "identity"
        query = [(k, (self.real_key or "") if k == "key" and v == tok else v) for k, v in request.query.items()]
        body = await request.read()
        call["model"] = _model_of(call["path"], body)
        url = self.origin + request.rel_url.path
        try:
            upstream = await self._session.request(request.method, url, params=query or None, data=body or None,
                                                   headers=headers, allow_redirects=False)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            if self._closing:  # the task ended (its agent gone) while the endpoint still had not answered
                call.update(forwarded=True, unanswered=True)
                return self._error_reply(502, "evalfarm relay: closed before the model endpoint answered")
            c.upstream_errors += 1
            call.update(status=502, forwarded=True, error=type(exc).__name__,
                        latency_ms=round((time.perf_counter() - started) * 1000, 1))
            return self._error_reply(502, f"evalfarm relay: the model endpoint did not answer ({type(exc).__name__})")
        call.update(status=upstream.status, forwarded=True, content_type=upstream.headers.get("Content-Type") or "")
        kept = bytearray()
        room = min(RECORD_BODY_MAX, max(0, RECORD_TOTAL_MAX - self._kept))
        async with upstream:
            reply = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP and name.lower() != "content-encoding":
                    reply.headers.add(name, value)
            if upstream.headers.get("Content-Encoding"):
                reply.headers["Content-Encoding"] = upstream.headers["Content-Encoding"]
            meter = _Meter(upstream.headers.get("Content-Type") or "")
            await reply.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    meter.feed(chunk)
                    if len(kept) < room:
                        kept += chunk[:room - len(kept)]
                    await reply.write(chunk)
                await reply.write_eof()
            finally:
                tin, tout = meter.done()
                c.input_tokens += tin
                c.output_tokens += tout
                self._kept += len(kept)
                call.update(input_tokens=tin, output_tokens=tout, reply=bytes(kept),
                            latency_ms=round((time.perf_counter() - started) * 1000, 1))
            return reply

    def inside_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}{self.base_path}"

    def close(self) -> None:
        async def stop() -> None:
            self._closing = True
            await self._session.close()  # first: a call still waiting on the endpoint ends now, not at a timeout
            await self._runner.cleanup()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        try:
            self.path.unlink()
        except OSError:
            pass

    def as_dict(self) -> dict[str, Any]:
        return {**self.counts.as_dict(), "max_tokens": self.max_tokens}
