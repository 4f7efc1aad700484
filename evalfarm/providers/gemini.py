"""Gemini ``generateContent`` (``provider: gemini``, Google AI Studio, key in ``x-goog-api-key``) and
Vertex AI (``provider: vertex``, the same body at ``{base_url}/publishers/google/models/M:generateContent``
with ``Authorization: Bearer`` and an access token, e.g. ``gcloud auth print-access-token``).

The system prompt is ``systemInstruction``; params become ``generationConfig`` (``max_tokens`` ->
``maxOutputTokens``, ``top_p`` -> ``topP``, ``stop`` -> ``stopSequences``); usage is
``usageMetadata.promptTokenCount``/``candidatesTokenCount``; ``finishReason: MAX_TOKENS`` is truncated.
The params ``tools``, ``toolConfig`` and ``systemInstruction`` are request fields (the prompt's system wins);
function calls in the answer become JSON text after any text (``wire.tool_text``)."""
from __future__ import annotations

import json
import mimetypes
from typing import Any
from urllib.parse import quote

from .openai import OpenAIAdapter, openai_judge
from .wire import Wire, bad, parts_of, renamed, split_system, tokens, tool_text

BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
_CONFIG = {"max_tokens": "maxOutputTokens", "max_completion_tokens": "maxOutputTokens", "top_p": "topP",
           "top_k": "topK", "stop": "stopSequences", "presence_penalty": "presencePenalty",
           "frequency_penalty": "frequencyPenalty"}


def vertex_base(project: str, region: str) -> str:
    return f"https://{region}-aiplatform.googleapis.com/v1/projects/{project}/locations/{region}"


def _parts(content: Any) -> list[dict[str, Any]]:
    """Gemini's parts: the text, then each image inline (base64) or by URI (``file_data``)."""
    text, images = parts_of(content)
    return ([{"text": text}] if text or not images else []) + [
        {"file_data": {"mime_type": mimetypes.guess_type(im.url)[0] or "image/jpeg", "file_uri": im.url}} if im.url
        else {"inline_data": {"mime_type": im.media_type, "data": im.data}} for im in images]


class GeminiWire(Wire):
    kind = "gemini"

    def url(self, ep: Any) -> str:
        return f"{ep.base_url.rstrip('/')}/models/{quote(ep.model, safe='.-_')}:generateContent"

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": key} if key else {}

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        system, rest = split_system(messages)
        config = renamed(params, _CONFIG)
        if isinstance(config.get("stopSequences"), str):
            config["stopSequences"] = [config["stopSequences"]]
        body: dict[str, Any] = {"contents": [{"role": "model" if m["role"] == "assistant" else "user",
                                              "parts": _parts(m["content"])} for m in rest]}
        for key in ("tools", "toolConfig", "systemInstruction"):  # request fields, not generation options
            if key in config:
                body[key] = config.pop(key)
        if isinstance(body.get("systemInstruction"), str):  # promptfoo's short form: the text
            body["systemInstruction"] = {"parts": [{"text": body["systemInstruction"]}]}
        if system is not None:  # the prompt's system prompt wins over an adapter's systemInstruction
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if config:
            body["generationConfig"] = config
        return json.dumps(body).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        try:
            candidate = data["candidates"][0]
            parts = (candidate.get("content") or {}).get("parts") or []
            parts = [p for p in parts if isinstance(p, dict)]
            text = tool_text([p.get("text") or "" for p in parts], [p for p in parts if "functionCall" in p])
            finish = candidate.get("finishReason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise bad("not a Gemini generateContent answer", data) from None
        t_in, t_out = tokens(data.get("usageMetadata"), ("promptTokenCount", "candidatesTokenCount"))
        return text, "length" if finish == "MAX_TOKENS" else "stop", t_in, t_out


class VertexWire(GeminiWire):
    kind = "vertex"

    def url(self, ep: Any) -> str:
        return f"{ep.base_url.rstrip('/')}/publishers/google/models/{quote(ep.model, safe='.-_')}:generateContent"

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}


class GeminiAdapter(OpenAIAdapter):
    wire = GeminiWire()


class VertexAdapter(OpenAIAdapter):
    wire = VertexWire()


def gemini_judge(spec):
    """The rubric judge on this protocol (``judge: {provider: ...}``)."""
    return openai_judge(spec, GeminiWire())


def vertex_judge(spec):
    """The rubric judge on this protocol (``judge: {provider: ...}``)."""
    return openai_judge(spec, VertexWire())
