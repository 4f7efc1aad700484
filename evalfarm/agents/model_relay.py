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
- streams the reply back (chunked) as it arrives, and counts the tokens the reply reports (OpenAI
  chat and Responses, Anthropic Messages, Gemini; streamed or not), beside the agent's own account.
"""
from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}
KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
MAX_JSON = 32 * 2**20


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args: Any) -> None:  # noqa: D401 (no access log on stderr)
        pass

    def address_string(self) -> str:
        return "jail"

    def _reply(self, status: int, message: str) -> None:
        body = json.dumps({"error": {"message": message, "type": "evalfarm_relay", "code": status}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        relay: TaskRelay = self.server.relay
        body = self._body()
        parts = urlsplit(self.path)
        query = parse_qsl(parts.query, keep_blank_values=True)
        tok = relay.token
        authed = any(tok in (self.headers.get(h) or "") for h in KEY_HEADERS) or any(v == tok for k, v in query if k == "key")
        with relay.counts.lock:
            relay.counts.requests += 1
            if not authed:
                relay.counts.refused += 1
            capped = authed and relay.max_tokens is not None and \
                relay.counts.input_tokens + relay.counts.output_tokens >= relay.max_tokens
            if capped:
                relay.counts.capped += 1
        if not authed:
            self.close_connection = True
            return self._reply(401, "evalfarm relay: wrong or missing per-task token")
        if capped:
            return self._reply(429, f"evalfarm relay: this task used its max_tokens_per_task ({relay.max_tokens})")
        headers = {}
        for name, value in self.headers.items():
            low = name.lower()
            if low in HOP:
                continue
            if low in KEY_HEADERS and tok in value:
                if relay.real_key is None:
                    continue
                value = value.replace(tok, relay.real_key)
            headers[name] = value
        headers["Host"] = relay.netloc
        headers["Accept-Encoding"] = "identity"
        if body or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        query = [(k, relay.real_key or "" if k == "key" and v == tok else v) for k, v in query]
        path = urlunsplit(("", "", parts.path, urlencode(query), ""))
        try:
            resp = self._upstream(relay, path, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            with relay.counts.lock:
                relay.counts.upstream_errors += 1
            return self._reply(502, f"evalfarm relay: the model endpoint did not answer ({type(exc).__name__})")
        self.send_response_only(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in HOP:
                self.send_header(name, value)
        meter = _Meter(resp.getheader("Content-Type") or "")
        if self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200:
            self.send_header("Content-Length", "0")
            self.end_headers()
            resp.read()
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while chunk := resp.read1(65536):
                    meter.feed(chunk)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            finally:
                tin, tout = meter.done()
                with relay.counts.lock:
                    relay.counts.input_tokens += tin
                    relay.counts.output_tokens += tout
        if resp.will_close:
            self._conn = None

    def _upstream(self, relay: "TaskRelay", path: str, body: bytes, headers: dict[str, str]):
        for attempt in (0, 1):
            conn = getattr(self, "_conn", None)
            fresh = conn is None
            if fresh:
                conn = self._conn = relay.connect()
            try:
                conn.request(self.command, path, body=body or None, headers=headers)
                return conn.getresponse()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._conn = None
                if fresh or attempt:  # a kept-alive connection the server closed: once more on a new one
                    raise
        raise OSError("unreachable")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _relay


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    relay: "TaskRelay"


class TaskRelay:
    """One task's relay: ``start``, hand ``token`` and the socket to the jail, ``close`` at the end."""

    def __init__(self, sock_path: Path, base_url: str, real_key: str | None, max_tokens: int | None = None,
                 timeout_s: float = 600.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {base_url!r}: the relay forwards to an http(s) URL only")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.netloc = parts.netloc.rsplit("@", 1)[-1]
        self.base_path = parts.path.rstrip("/")
        self.real_key, self.max_tokens, self.timeout_s = real_key, max_tokens, timeout_s
        self.token = new_token()
        self.counts = Counts()
        self.path = Path(sock_path)
        self._server = _Server(str(self.path), _Handler)
        self._server.relay = self
        os.chmod(self.path, 0o666)  # the jail's user (root or a mapped uid) connects
        self._ctx = ssl.create_default_context() if self.scheme == "https" else None
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="evalfarm-model-relay", daemon=True)
        self._thread.start()

    def inside_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}{self.base_path}"

    def connect(self) -> http.client.HTTPConnection:
        if self._ctx is not None:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s, context=self._ctx)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        try:
            self.path.unlink()
        except OSError:
            pass

    def over_cap(self) -> bool:
        return self.max_tokens is not None and (self.counts.capped > 0 or
                                                self.counts.input_tokens + self.counts.output_tokens > self.max_tokens)

    def as_dict(self) -> dict[str, Any]:
        return {**self.counts.as_dict(), "max_tokens": self.max_tokens}


__all__ = ["TaskRelay", "new_token", "usage_of"]
