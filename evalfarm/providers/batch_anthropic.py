"""Anthropic's Message Batches: ``POST {base}/messages/batches`` with ``{requests: [{custom_id, params}]}``,
polled at ``{base}/messages/batches/{id}`` until ``processing_status: ended``; the results are a JSONL
(``succeeded``, ``errored``, ``canceled``, ``expired`` per ``custom_id``). The API takes no metadata: a
resumed coordinator knows only the batches the run store recorded (see README). Limits stated by
Anthropic: 100,000 requests and 256 MB per batch."""
from __future__ import annotations

import json
from typing import Any

from .batch_http import BatchHTTP, jsonl
from .batch_wire import BatchLimits, BatchState, LineResult, dumps_line, list_pages

MAX_REQUESTS, MAX_BYTES = 100_000, 256 * 1024 * 1024


class AnthropicBatches:
    kind = "anthropic"

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint
        self.limits = BatchLimits.for_provider(MAX_REQUESTS, MAX_BYTES)
        self.base = endpoint.base_url.rstrip("/").removesuffix("/messages") + "/messages/batches"
        self.http = BatchHTTP(endpoint)

    def line(self, custom_id: str, body: bytes) -> bytes:
        return dumps_line({"custom_id": custom_id, "params": json.loads(body)})

    @staticmethod
    def state(data: dict[str, Any]) -> BatchState:
        status = str(data.get("processing_status"))
        counts = dict(data.get("request_counts") or {})
        ended = status == "ended"
        word = status
        if ended:  # what the batch ended as, in the words the OpenAI API uses
            word = ("expired" if counts.get("expired") and not counts.get("succeeded") else
                    "cancelled" if data.get("cancel_initiated_at") else "completed")
        return BatchState(str(data.get("id")), ended, word, counts, None, data)

    async def submit(self, lines: list[bytes], metadata: dict[str, str]) -> BatchState:
        created = await self.http.request("POST", self.base, json_body={"requests": [json.loads(x) for x in lines]})
        return self.state(created)

    async def get(self, batch_id: str) -> BatchState:
        return self.state(await self.http.request("GET", f"{self.base}/{batch_id}"))

    async def cancel(self, batch_id: str) -> BatchState:
        return self.state(await self.http.request("POST", f"{self.base}/{batch_id}/cancel"))

    async def list(self, limit: int = 100) -> list[BatchState]:
        return await list_pages(lambda after: self.http.request("GET", f"{self.base}?limit=100" + (f"&after_id={after}" if after else "")), self.state, limit)

    async def results(self, state: BatchState) -> dict[str, LineResult]:
        url = f"{self.base}/{state.id}/results"  # never the answer's results_url: the key goes only where the spec says
        out: dict[str, LineResult] = {}
        for row in jsonl(await self.http.request("GET", url, raw=True)):
            result = row.get("result") if isinstance(row.get("result"), dict) else {}
            kind = result.get("type")
            if kind == "succeeded":
                out[row["custom_id"]] = LineResult("ok", result.get("message"))
            elif kind in ("expired", "canceled"):
                out[row["custom_id"]] = LineResult("expired" if kind == "expired" else "cancelled")
            else:
                out[row["custom_id"]] = LineResult("error", str(result.get("error"))[:300])
        return out

    async def aclose(self) -> None:
        await self.http.aclose()
