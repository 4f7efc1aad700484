"""The providers' batch APIs on mock-provider: OpenAI's Batch API (``/v1/files`` + ``/v1/batches``) and
Anthropic's Message Batches (``/v1/messages/batches``), answered line by line by the same echo/script/judge
logic as a live call (each line counts as one request at the server, like the live ones).

    POST /v1/files                         multipart (purpose=batch, file=JSONL): {id: file-...}
    GET  /v1/files/{id}/content            the file (inputs, outputs and error files alike)
    POST /v1/batches                       {input_file_id, endpoint, completion_window, metadata}
    GET  /v1/batches[?limit&after]         newest first; GET /v1/batches/{id}; POST /v1/batches/{id}/cancel
    POST /v1/messages/batches              {requests: [{custom_id, params}]} (Anthropic)
    GET  /v1/messages/batches[?limit&after_id], /{id}, /{id}/results (JSONL); POST /{id}/cancel

A batch is answered lazily, when it is read after its completion time: ``batch_delay_s`` after its creation
(``--batch-delay``), or the largest ``[[batch-delay:MS]]`` among its requests. Faults, per request line:
``[[batch-error]]`` fails that line inside a batch (500 in the error file / ``errored``) and only there (the
same prompt sent live is answered); ``[[fail:N:NNN]]`` counts batch lines like live requests;
``[[batch-expire]]`` anywhere in a batch makes it expire unanswered. A cancelled batch answers nothing it
had not answered. ``max_requests`` (``--batch-max-requests``) fails a larger batch at validation, as a
provider does. ``/stats?items=1`` shows how many times each ``custom_id`` was answered in a batch
(``batch_items``) and each user message was asked, live or batched (``asked``), plus creates and cancels.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from typing import Any

from aiohttp import web

from . import native

FAULT_ERROR, FAULT_EXPIRE, FAULT_DELAY = "[[batch-error]]", "[[batch-expire]]", "[[batch-delay:"


class _LineRequest:
    """What the chat handler reads of a request, for one line of a batch (the batch's own headers)."""

    def __init__(self, body: Any, headers: dict[str, str], path: str) -> None:
        self._body, self.headers, self.path = body, headers, path
        self.query: dict[str, str] = {}
        self.match_info: dict[str, str] = {}
        self.transport = None

    async def json(self) -> Any:
        return self._body


def _user_texts(body: Any) -> str:
    try:
        return json.dumps(body.get("messages"))
    except (AttributeError, TypeError, ValueError):
        return ""


class Batch:
    def __init__(self, kind: str, lines: list[dict[str, Any]], headers: dict[str, str], delay_s: float,
                 metadata: dict[str, str] | None, input_file_id: str | None, endpoint: str, size: int = 0) -> None:
        self.id = ("batch_" if kind == "openai" else "msgbatch_") + uuid.uuid4().hex[:20]
        self.kind, self.lines, self.headers, self.metadata = kind, lines, headers, metadata
        self.input_file_id, self.endpoint, self.size = input_file_id, endpoint, size
        self.created = time.time()
        texts = [_user_texts(line.get("body") or line.get("params") or {}) for line in lines]
        delays = [float(t.split(FAULT_DELAY, 1)[1].split("]]", 1)[0]) / 1000.0 for t in texts if FAULT_DELAY in t]
        self.complete_at = self.created + (max(delays) if delays else delay_s)
        self.expires = any(FAULT_EXPIRE in t for t in texts)
        self.status = "in_progress"  # in_progress, cancelling, completed, expired, cancelled, failed
        self.results: list[dict[str, Any]] = []  # {custom_id, status, body | error}
        self.errors: list[dict[str, Any]] | None = None  # validation errors of a failed batch
        self.ended: float | None = None
        self.cancel_at: float | None = None
        self.output_file_id: str | None = None
        self.error_file_id: str | None = None

    def counts(self) -> tuple[int, int, int]:
        ok = sum(1 for r in self.results if r["status"] == 200)
        return len(self.lines), ok, sum(1 for r in self.results if r["status"] != 200)


class BatchAPIs:
    """Both batch APIs over ``provider`` (a ``MockProvider``): its ``_chat`` answers each line."""

    def __init__(self, provider: Any, delay_s: float = 0.0, max_requests: int | None = None) -> None:
        self.provider, self.delay_s, self.max_requests = provider, delay_s, max_requests
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, content)
        self.batches: dict[str, Batch] = {}
        self.batch_items: dict[str, int] = defaultdict(int)  # custom_id -> lines answered in batches
        self.creates = 0
        self.cancels: list[str] = []
        self._lock = asyncio.Lock()

    def attach(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/v1/files", self.upload)
        r.add_get("/v1/files/{id}/content", self.file_content)
        r.add_get("/v1/files/{id}", self.file_info)
        r.add_post("/v1/batches", self.openai_create)
        r.add_get("/v1/batches", self.openai_list)
        r.add_get("/v1/batches/{id}", self.openai_get)
        r.add_post("/v1/batches/{id}/cancel", self.openai_cancel)
        r.add_post("/v1/messages/batches", self.anthropic_create)
        r.add_get("/v1/messages/batches", self.anthropic_list)
        r.add_get("/v1/messages/batches/{id}", self.anthropic_get)
        r.add_get("/v1/messages/batches/{id}/results", self.anthropic_results)
        r.add_post("/v1/messages/batches/{id}/cancel", self.anthropic_cancel)

    def stats(self) -> dict[str, Any]:
        return {"batch_items": dict(self.batch_items), "batch_creates": self.creates,
                "batch_cancels": list(self.cancels),
                "batches": {b.id: {"status": b.status, "requests": len(b.lines), "metadata": b.metadata,
                                   "bytes": b.size,
                                   "created": b.created, "ready_at": b.complete_at, "ended_at": b.ended}
                            for b in self.batches.values()}}

    # -- shared ---------------------------------------------------------------------------------------

    def _authorized(self, key: str | None) -> bool:
        return self.provider.api_key is None or key == self.provider.api_key

    def _err(self, status: int, message: str, kind: str = "openai") -> web.Response:
        if kind == "anthropic":
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error", "message": message}},
                                     status=status)
        return web.json_response({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                                 status=status)

    async def _settle(self, batch: Batch) -> None:
        """Answer a batch whose time has come (or end a cancelled one), once."""
        async with self._lock:
            now = time.time()
            if batch.status == "cancelling" and batch.cancel_at is not None:
                batch.status, batch.ended = "cancelled", now
                done = {r["custom_id"] for r in batch.results}
                batch.results += [{"custom_id": ln["custom_id"], "status": 0, "error": "cancelled"}
                                  for ln in batch.lines if ln["custom_id"] not in done]
                self._write_files(batch)
                return
            if batch.status != "in_progress" or now < batch.complete_at:
                return
            if batch.expires:
                batch.status, batch.ended = "expired", now
                batch.results = [{"custom_id": ln["custom_id"], "status": 0, "error": "expired"} for ln in batch.lines]
                self._write_files(batch)
                return
            proto = native.OPENAI if batch.kind == "openai" else native.ANTHROPIC
            for line in batch.lines:
                body = line.get("body") if batch.kind == "openai" else line.get("params")
                self.batch_items[line["custom_id"]] += 1
                if FAULT_ERROR in _user_texts(body):
                    self.provider.requests += 1
                    self.provider.count_asked(body)
                    batch.results.append({"custom_id": line["custom_id"], "status": 500, "body": {
                        "error": {"message": "scripted batch failure", "type": "server_error", "code": 500}}})
                    continue
                path = "/v1/chat/completions" if batch.kind == "openai" else "/v1/messages"
                try:
                    resp = await self.provider._chat(_LineRequest(body, batch.headers, path), proto, in_batch=True)
                    payload = json.loads(resp.body) if resp.body else {}
                    status = resp.status
                except Exception as exc:  # a marker that needs a socket ([[drop]]): a failed line
                    status, payload = 500, {"error": {"message": f"line failed: {exc!r}", "type": "server_error"}}
                batch.results.append({"custom_id": line["custom_id"], "status": status, "body": payload})
            batch.status, batch.ended = "completed", time.time()
            self._write_files(batch)

    def _write_files(self, batch: Batch) -> None:
        if batch.kind != "openai":
            return
        out, err = [], []
        for r in batch.results:
            rid = "batch_req_" + uuid.uuid4().hex[:16]
            if r["status"] == 200:
                out.append({"id": rid, "custom_id": r["custom_id"], "error": None,
                            "response": {"status_code": 200, "request_id": rid, "body": r["body"]}})
            elif r["status"]:
                err.append({"id": rid, "custom_id": r["custom_id"], "error": None,
                            "response": {"status_code": r["status"], "request_id": rid, "body": r["body"]}})
            else:
                code = "batch_expired" if r["error"] == "expired" else "batch_cancelled"
                err.append({"id": rid, "custom_id": r["custom_id"], "response": None,
                            "error": {"code": code, "message": f"This request was not executed: the batch was {r['error']}."}})
        if out:
            batch.output_file_id = self._store_file("batch_output", out)
        if err:
            batch.error_file_id = self._store_file("batch_output", err)

    def _store_file(self, purpose: str, rows: list[dict[str, Any]]) -> str:
        fid = "file-" + uuid.uuid4().hex[:24]
        self.files[fid] = (purpose, "".join(json.dumps(r) + "\n" for r in rows).encode())
        return fid

    def _fail_validation(self, batch: Batch, message: str) -> None:
        batch.status, batch.ended = "failed", time.time()
        batch.errors = [{"code": "batch_too_large", "message": message, "line": None, "param": None}]

    # -- OpenAI ---------------------------------------------------------------------------------------

    async def upload(self, request: web.Request) -> web.Response:
        if not self._authorized(native._bearer(request)):
            return self._err(401, "invalid api key")
        form = await request.post()
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose != "batch" or upload is None or not hasattr(upload, "file"):
            return self._err(400, "expected multipart purpose=batch and file=<JSONL>")
        content = upload.file.read()
        fid = "file-" + uuid.uuid4().hex[:24]
        self.files[fid] = (str(purpose), content)
        return web.json_response({"id": fid, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                                  "filename": getattr(upload, "filename", "batch.jsonl"), "purpose": purpose})

    async def file_info(self, request: web.Request) -> web.Response:
        got = self.files.get(request.match_info["id"])
        if got is None:
            return self._err(404, "no such file")
        return web.json_response({"id": request.match_info["id"], "object": "file", "bytes": len(got[1]),
                                  "purpose": got[0]})

    async def file_content(self, request: web.Request) -> web.Response:
        if not self._authorized(native._bearer(request)):
            return self._err(401, "invalid api key")
        got = self.files.get(request.match_info["id"])
        if got is None:
            return self._err(404, "no such file")
        return web.Response(body=got[1], content_type="application/jsonl")

    def _openai_view(self, b: Batch) -> dict[str, Any]:
        total, ok, failed = b.counts()
        return {"id": b.id, "object": "batch", "endpoint": b.endpoint, "input_file_id": b.input_file_id,
                "completion_window": "24h", "status": b.status,
                "errors": {"object": "list", "data": b.errors} if b.errors else None,
                "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
                "created_at": int(b.created), "in_progress_at": int(b.created),
                "expires_at": int(b.created + 86400), "completed_at": int(b.ended) if b.status == "completed" and b.ended else None,
                "cancelled_at": int(b.ended) if b.status == "cancelled" and b.ended else None,
                "expired_at": int(b.ended) if b.status == "expired" and b.ended else None,
                "failed_at": int(b.ended) if b.status == "failed" and b.ended else None,
                "request_counts": {"total": total, "completed": ok, "failed": failed},
                "metadata": b.metadata}

    async def openai_create(self, request: web.Request) -> web.Response:
        key = native._bearer(request)
        if not self._authorized(key):
            return self._err(401, "invalid api key")
        try:
            body = await request.json()
            fid, endpoint = body["input_file_id"], body["endpoint"]
        except (ValueError, KeyError, TypeError):
            return self._err(400, "expected {input_file_id, endpoint, completion_window}")
        metadata = body.get("metadata")
        if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > 16 or not all(
                isinstance(k, str) and isinstance(v, str) and len(v) <= 512 for k, v in metadata.items())):
            return self._err(400, "metadata: at most 16 string keys with string values of at most 512 characters")
        if endpoint != "/v1/chat/completions":
            return self._err(400, f"endpoint {endpoint!r}: this mock batches /v1/chat/completions only")
        if body.get("completion_window") != "24h":
            return self._err(400, "completion_window: must be 24h")
        got = self.files.get(fid)
        if got is None:
            return self._err(404, f"no such file {fid}")
        try:
            lines = [json.loads(x) for x in got[1].decode().splitlines() if x.strip()]
            ids = [ln["custom_id"] for ln in lines]
            if any(ln.get("url") != "/v1/chat/completions" or ln.get("method") != "POST" for ln in lines):
                return self._err(400, "every line needs method POST and url /v1/chat/completions")
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._err(400, "the input file is not a JSONL of {custom_id, method, url, body}")
        if len(set(ids)) != len(ids):
            return self._err(400, "custom_id values must be unique within a batch")
        self.creates += 1
        batch = Batch("openai", lines, {"Authorization": f"Bearer {key}"} if key else {}, self.delay_s, metadata,
                      fid, endpoint, len(got[1]))
        if self.max_requests is not None and len(lines) > self.max_requests:
            self._fail_validation(batch, f"{len(lines)} requests: at most {self.max_requests} per batch")
        self.batches[batch.id] = batch
        return web.json_response(self._openai_view(batch))

    async def _get(self, request: web.Request, kind: str) -> Batch | None:
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch.kind != kind:
            return None
        await self._settle(batch)
        return batch

    async def openai_get(self, request: web.Request) -> web.Response:
        if not self._authorized(native._bearer(request)):
            return self._err(401, "invalid api key")
        batch = await self._get(request, "openai")
        return web.json_response(self._openai_view(batch)) if batch else self._err(404, "no such batch")

    async def openai_cancel(self, request: web.Request) -> web.Response:
        if not self._authorized(native._bearer(request)):
            return self._err(401, "invalid api key")
        batch = await self._get(request, "openai")
        if batch is None:
            return self._err(404, "no such batch")
        if batch.status == "in_progress":
            batch.status, batch.cancel_at = "cancelling", time.time()
            self.cancels.append(batch.id)
        return web.json_response(self._openai_view(batch))

    async def _listing(self, request: web.Request, kind: str, after_key: str) -> tuple[list[Batch], bool]:
        mine = [b for b in self.batches.values() if b.kind == kind]
        for b in mine:
            await self._settle(b)
        mine.sort(key=lambda b: b.created, reverse=True)
        after = request.query.get(after_key)
        if after:
            ids = [b.id for b in mine]
            mine = mine[ids.index(after) + 1:] if after in ids else []
        limit = max(1, min(100, int(request.query.get("limit") or 20)))
        return mine[:limit], len(mine) > limit

    async def openai_list(self, request: web.Request) -> web.Response:
        if not self._authorized(native._bearer(request)):
            return self._err(401, "invalid api key")
        page, more = await self._listing(request, "openai", "after")
        return web.json_response({"object": "list", "data": [self._openai_view(b) for b in page], "has_more": more,
                                  "first_id": page[0].id if page else None, "last_id": page[-1].id if page else None})

    # -- Anthropic ------------------------------------------------------------------------------------

    def _anthropic_view(self, b: Batch, base: str) -> dict[str, Any]:
        by = defaultdict(int)
        for r in b.results:
            by["succeeded" if r["status"] == 200 else "errored" if r["status"] else
               "expired" if r["error"] == "expired" else "canceled"] += 1
        ended = b.status in ("completed", "expired", "cancelled", "failed")
        iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else None  # noqa: E731
        return {"id": b.id, "type": "message_batch",
                "processing_status": "ended" if ended else "canceling" if b.status == "cancelling" else "in_progress",
                "request_counts": {"processing": 0 if ended else len(b.lines), "succeeded": by["succeeded"],
                                   "errored": by["errored"], "canceled": by["canceled"], "expired": by["expired"]},
                "created_at": iso(b.created), "expires_at": iso(b.created + 86400), "ended_at": iso(b.ended),
                "cancel_initiated_at": iso(b.cancel_at), "archived_at": None,
                "results_url": f"{base}/v1/messages/batches/{b.id}/results" if ended else None}

    def _base(self, request: web.Request) -> str:
        return f"{request.scheme}://{request.host}"

    async def anthropic_create(self, request: web.Request) -> web.Response:
        key = request.headers.get("x-api-key")
        if not self._authorized(key):
            return self._err(401, "invalid x-api-key", "anthropic")
        if not request.headers.get("anthropic-version"):
            return self._err(400, "anthropic-version: header is required", "anthropic")
        try:
            body = await request.json()
            lines = [{"custom_id": r["custom_id"], "params": r["params"]} for r in body["requests"]]
        except (ValueError, KeyError, TypeError):
            return self._err(400, "requests: expected a list of {custom_id, params}", "anthropic")
        ids = [ln["custom_id"] for ln in lines]
        if len(set(ids)) != len(ids):
            return self._err(400, "custom_id values must be unique within a batch", "anthropic")
        if self.max_requests is not None and len(lines) > self.max_requests:
            return self._err(400, f"requests: at most {self.max_requests} per batch", "anthropic")
        self.creates += 1
        headers = {"anthropic-version": request.headers["anthropic-version"]}
        if key:
            headers["x-api-key"] = key
        batch = Batch("anthropic", lines, headers, self.delay_s, None, None, "/v1/messages",
                      request.content_length or 0)
        self.batches[batch.id] = batch
        return web.json_response(self._anthropic_view(batch, self._base(request)))

    async def anthropic_get(self, request: web.Request) -> web.Response:
        if not self._authorized(request.headers.get("x-api-key")):
            return self._err(401, "invalid x-api-key", "anthropic")
        batch = await self._get(request, "anthropic")
        if batch is None:
            return self._err(404, "no such message batch", "anthropic")
        return web.json_response(self._anthropic_view(batch, self._base(request)))

    async def anthropic_cancel(self, request: web.Request) -> web.Response:
        if not self._authorized(request.headers.get("x-api-key")):
            return self._err(401, "invalid x-api-key", "anthropic")
        batch = await self._get(request, "anthropic")
        if batch is None:
            return self._err(404, "no such message batch", "anthropic")
        if batch.status == "in_progress":
            batch.status, batch.cancel_at = "cancelling", time.time()
            self.cancels.append(batch.id)
        return web.json_response(self._anthropic_view(batch, self._base(request)))

    async def anthropic_list(self, request: web.Request) -> web.Response:
        if not self._authorized(request.headers.get("x-api-key")):
            return self._err(401, "invalid x-api-key", "anthropic")
        page, more = await self._listing(request, "anthropic", "after_id")
        return web.json_response({"data": [self._anthropic_view(b, self._base(request)) for b in page],
                                  "has_more": more, "first_id": page[0].id if page else None,
                                  "last_id": page[-1].id if page else None})

    async def anthropic_results(self, request: web.Request) -> web.Response:
        if not self._authorized(request.headers.get("x-api-key")):
            return self._err(401, "invalid x-api-key", "anthropic")
        batch = await self._get(request, "anthropic")
        if batch is None:
            return self._err(404, "no such message batch", "anthropic")
        if batch.status in ("in_progress", "cancelling"):
            return self._err(400, "results are available once the batch has ended", "anthropic")
        rows = []
        for r in batch.results:
            if r["status"] == 200:
                result = {"type": "succeeded", "message": r["body"]}
            elif r["status"]:
                inner = r["body"].get("error") if isinstance(r["body"], dict) else None
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "api_error" if r["status"] >= 500 else "invalid_request_error",
                    "message": (inner or {}).get("message") if isinstance(inner, dict) else str(r["body"])}}}
            else:
                result = {"type": "expired" if r["error"] == "expired" else "canceled"}
            rows.append({"custom_id": r["custom_id"], "result": result})
        return web.Response(body="".join(json.dumps(r) + "\n" for r in rows).encode(),
                            content_type="application/binary")
