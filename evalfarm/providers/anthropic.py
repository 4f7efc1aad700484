"""Anthropic Messages (``provider: anthropic``): ``POST {base_url}/messages`` with ``x-api-key`` and
``anthropic-version`` (``api_version``, default 2023-06-01); the system prompt is the top-level
``system``; ``max_tokens`` is required by the API (default 1024, as promptfoo sends); usage is
``input_tokens``/``output_tokens``; ``stop_reason: max_tokens`` is a truncated answer."""
from __future__ import annotations

import json
from typing import Any

from .openai import OpenAIAdapter, openai_judge
from .wire import Wire, bad, parts_of, renamed, split_system, tokens, tool_text

BASE_URL = "https://api.anthropic.com/v1"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024


class AnthropicWire(Wire):
    kind = "anthropic"

    def url(self, ep: Any) -> str:
        base = ep.base_url.rstrip("/")
        return base if base.endswith("/messages") else base + "/messages"

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        out = {"anthropic-version": ep.api_version or API_VERSION}
        if key:
            out["x-api-key"] = key
        return out

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        system, rest = split_system(messages)
        params = renamed(params, {"stop": "stop_sequences", "max_completion_tokens": "max_tokens"})
        if isinstance(params.get("stop_sequences"), str):
            params["stop_sequences"] = [params["stop_sequences"]]
        body: dict[str, Any] = {"model": ep.model, "max_tokens": DEFAULT_MAX_TOKENS,
                                "messages": [{**m, "content": _blocks(m["content"])} for m in rest], **params}
        if system is not None:
            body["system"] = system
        return json.dumps(body).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        try:
            blocks = data["content"]
            text = tool_text([b.get("text") or "" for b in blocks if b.get("type") == "text"],
                             [b for b in blocks if b.get("type") == "tool_use"])
            stop = data.get("stop_reason")
        except (KeyError, TypeError, AttributeError):
            raise bad("not an Anthropic message", data) from None
        t_in, t_out = tokens(data.get("usage"), ("input_tokens", "output_tokens"))
        return text, "length" if stop == "max_tokens" else "stop", t_in, t_out


def _blocks(content: Any) -> Any:
    """Anthropic's content blocks for a message with images (text blocks and image blocks: base64 or url)."""
    if isinstance(content, str):
        return content
    text, images = parts_of(content)
    return ([{"type": "text", "text": text}] if text else []) + [
        {"type": "image", "source": {"type": "url", "url": im.url} if im.url else
         {"type": "base64", "media_type": im.media_type, "data": im.data}} for im in images]


class AnthropicAdapter(OpenAIAdapter):
    wire = AnthropicWire()


def anthropic_judge(spec):
    """The rubric judge on this protocol (``judge: {provider: ...}``)."""
    return openai_judge(spec, AnthropicWire())
