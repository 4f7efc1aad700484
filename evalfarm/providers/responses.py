"""The OpenAI Responses API (``provider: openai-responses``): ``POST {base_url}/responses``, not
streamed; the system prompt is ``instructions``, the user message ``input``; ``max_tokens`` ->
``max_output_tokens``; the text is every ``output_text`` part of the ``message`` items; usage is
``input_tokens``/``output_tokens``; ``status: incomplete`` (max_output_tokens) is truncated."""
from __future__ import annotations

import json
from typing import Any

from .openai import OpenAIAdapter, openai_judge
from .wire import Wire, bad, parts_of, renamed, split_system, tokens, tool_text


class ResponsesWire(Wire):
    kind = "openai-responses"

    def url(self, ep: Any) -> str:
        base = ep.base_url.rstrip("/")
        return base if base.endswith("/responses") else base + "/responses"

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        system, rest = split_system(messages)
        params = renamed(params, {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens"})
        if "reasoning_effort" in params:
            params["reasoning"] = {"effort": params.pop("reasoning_effort")}
        body: dict[str, Any] = {"model": ep.model, "input": [{**m, "content": _input(m["content"])} for m in rest],
                                **params}
        if system is not None:
            body["instructions"] = system
        return json.dumps(body).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        try:
            text = tool_text([c.get("text") or "" for item in data["output"] if item.get("type") == "message"
                              for c in item.get("content") or [] if c.get("type") == "output_text"],
                             [item for item in data["output"] if item.get("type") == "function_call"])
            status = data.get("status")
        except (KeyError, TypeError, AttributeError):
            raise bad("not a Responses API answer", data) from None
        t_in, t_out = tokens(data.get("usage"), ("input_tokens", "output_tokens"))
        return text, "length" if status == "incomplete" else "stop", t_in, t_out


def _input(content: Any) -> Any:
    """The Responses API's input parts for a message with images (``input_text``, ``input_image``)."""
    if isinstance(content, str):
        return content
    text, images = parts_of(content)
    return ([{"type": "input_text", "text": text}] if text else []) + [
        {"type": "input_image", "image_url": im.url or f"data:{im.media_type};base64,{im.data}"} for im in images]


class ResponsesAdapter(OpenAIAdapter):
    wire = ResponsesWire()


def responses_judge(spec):
    """The rubric judge on this protocol (``judge: {provider: ...}``)."""
    return openai_judge(spec, ResponsesWire())
