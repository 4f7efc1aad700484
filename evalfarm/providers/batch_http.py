"""The few HTTP calls a batch API needs (upload, create, poll, download, cancel, list): low in number, so
a plain httpx client of their own, apart from the live calls' pooled transport."""
from __future__ import annotations

import json
from typing import Any

import httpx

from ..redact import redact
from .access import key_for
from .errors import BadResponse, TransportError, error_for_status
from .retry import parse_retry_after


class BatchHTTP:
    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint
        self._client: httpx.AsyncClient | None = None

    def headers(self, url: str) -> dict[str, str]:
        ep = self.endpoint
        return ep.wire.headers(ep, key_for(ep.api_key_env, url))

    async def request(self, method: str, url: str, *, json_body: Any = None, files: Any = None,
                      data: Any = None, raw: bool = False) -> Any:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.endpoint.timeout_s, connect=10.0))
        try:
            resp = await self._client.request(method, url, json=json_body, files=files, data=data,
                                              headers=self.headers(url))
        except httpx.HTTPError as exc:
            raise TransportError(f"batch API {method} {url}: {type(exc).__name__}: {redact(str(exc))}") from None
        if resp.status_code != 200:
            raise error_for_status(resp.status_code, redact(resp.text),
                                   parse_retry_after(resp.headers.get("retry-after")))
        if raw:
            return resp.content
        try:
            return resp.json()
        except (ValueError, RecursionError):
            raise BadResponse(f"batch API {method} {url}: not JSON: {redact(resp.text)[:200]}", 200) from None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def jsonl(data: bytes) -> list[dict[str, Any]]:
    """The objects of a JSONL download; a line that is not an object is skipped (its call goes live)."""
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str):
            out.append(obj)
    return out
