"""OpenAI's Batch API (and the gateways and local servers that speak it): the requests as a JSONL file
uploaded to ``{base}/files`` (purpose ``batch``), ``POST {base}/batches`` with ``metadata`` (the run and
the batch's sequence: how a resumed coordinator finds a batch it created but did not record), polled at
``{base}/batches/{id}``; answers in the output file, failed lines in the error file, each by
``custom_id``. Limits stated by OpenAI: 50,000 requests and 200 MB per batch."""
from __future__ import annotations

from typing import Any

from .batch_http import BatchHTTP, jsonl
from .batch_wire import BatchLimits, BatchState, LineResult, dumps_line, list_pages

MAX_REQUESTS, MAX_BYTES = 50_000, 200 * 1024 * 1024
ENDED = ("completed", "failed", "expired", "cancelled")


class OpenAIBatches:
    kind = "openai"

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint
        self.limits = BatchLimits.for_provider(MAX_REQUESTS, MAX_BYTES)
        base = endpoint.base_url.rstrip("/").removesuffix("/chat/completions")
        self.base = base
        self.path = "/v1/chat/completions"
        self.http = BatchHTTP(endpoint)

    def line(self, custom_id: str, body: bytes) -> bytes:
        import json

        return dumps_line({"custom_id": custom_id, "method": "POST", "url": self.path, "body": json.loads(body)})

    @staticmethod
    def state(data: dict[str, Any]) -> BatchState:
        status = str(data.get("status"))
        return BatchState(str(data.get("id")), status in ENDED, status, dict(data.get("request_counts") or {}),
                          data.get("metadata"), data)

    async def submit(self, lines: list[bytes], metadata: dict[str, str]) -> BatchState:
        up = await self.http.request("POST", f"{self.base}/files", data={"purpose": "batch"},
                                     files={"file": ("evalfarm-batch.jsonl", b"".join(lines), "application/jsonl")})
        created = await self.http.request("POST", f"{self.base}/batches", json_body={
            "input_file_id": up["id"], "endpoint": self.path, "completion_window": "24h", "metadata": metadata})
        return self.state(created)

    async def get(self, batch_id: str) -> BatchState:
        return self.state(await self.http.request("GET", f"{self.base}/batches/{batch_id}"))

    async def cancel(self, batch_id: str) -> BatchState:
        return self.state(await self.http.request("POST", f"{self.base}/batches/{batch_id}/cancel"))

    async def list(self, limit: int = 100) -> list[BatchState]:
        return await list_pages(lambda after: self.http.request("GET", f"{self.base}/batches?limit=100" + (f"&after={after}" if after else "")), self.state, limit)

    async def results(self, state: BatchState) -> dict[str, LineResult]:
        out: dict[str, LineResult] = {}
        for which in ("output_file_id", "error_file_id"):
            fid = state.raw.get(which)
            if not fid:
                continue
            data = await self.http.request("GET", f"{self.base}/files/{fid}/content", raw=True)
            for row in jsonl(data):
                resp, err = row.get("response"), row.get("error")
                if isinstance(resp, dict) and resp.get("status_code") == 200:
                    out[row["custom_id"]] = LineResult("ok", resp.get("body"))
                elif isinstance(err, dict) and err.get("code") == "batch_expired":
                    out[row["custom_id"]] = LineResult("expired", err.get("message"))
                elif isinstance(err, dict) and err.get("code") == "batch_cancelled":
                    out[row["custom_id"]] = LineResult("cancelled", err.get("message"))
                else:
                    status = resp.get("status_code") if isinstance(resp, dict) else None
                    body = resp.get("body") if isinstance(resp, dict) else err
                    out[row["custom_id"]] = LineResult("error", f"HTTP {status}: {str(body)[:300]}")
        return out

    async def aclose(self) -> None:
        await self.http.aclose()
