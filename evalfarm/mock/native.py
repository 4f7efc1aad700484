"""The eval side of the native protocols mock-provider answers besides OpenAI chat: each one's request read
into OpenAI chat terms (model, messages, max_tokens, the key sent) and the echo/script/judge answer
written back in that protocol's shape. The same markers ([[status:N]], [[slow:MS]], ...) work on all.

    POST /v1/messages                                   Anthropic Messages (x-api-key, anthropic-version)
    POST /v1beta/models/M:generateContent, /v1/models/M:generateContent    Gemini (x-goog-api-key or ?key=)
    POST .../publishers/google/models/M:generateContent Vertex AI (Authorization: Bearer)
    POST /v1/responses                                  OpenAI Responses, not streamed
    POST /openai/deployments/D/chat/completions         Azure OpenAI (api-key, ?api-version= required)
    POST /model/M/converse, /v1/model/M/converse        Bedrock Converse (Authorization: Bearer)
    POST /v1/models/OWNER/NAME/predictions, /v1/predictions   Replicate (Authorization: Bearer): a finished
                                                        prediction whose output is the reply's words, a list
    POST /v1/embeddings                                 OpenAI embeddings, deterministic (see embed())
    POST any other path (not /v1/..., /v1beta/..., /openai/...: those are 404)
                                                        a JSON endpoint (provider: http): the prompt is the
                                                        first string holding text in the body; the answer
                                                        carries the reply under common keys (output,
                                                        response, result, text, message, data, choices)

With ``--agent-script`` the agent protocols (mock/agents.py) own /v1/messages, /v1/responses and
/v1beta/models instead: coding agents and evals are separate mock-provider processes.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web


class BadRequest(ValueError):
    """The request is not this protocol's: answered 400."""


@dataclass
class Asked:
    model: str
    messages: list[dict[str, str]]
    max_tokens: int | None
    key: str | None  # the key as this protocol sends it (compared with --api-key)


def _text(content: Any) -> str:
    """A message's text; each image part in it, checked in its protocol's shape, becomes a mark in the text
    (``[image <shape> <media type> <n> bytes]`` or ``[image <shape> url <url>]``) that the echo repeats."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks / parts
        return "".join(_image(c) or str(c.get("text") or "") for c in content if isinstance(c, dict))
    raise BadRequest("message content must be a string or a list of text blocks")


_DATA_URL = re.compile(r"data:(image/[a-z]+);base64,([A-Za-z0-9+/]*={0,2})$")


def _b64(shape: str, media: Any, data: Any) -> str:
    if not isinstance(media, str) or not media.startswith("image/") or not isinstance(data, str):
        raise BadRequest(f"{shape}: an image needs a media type and base64 data")
    try:
        n = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        raise BadRequest(f"{shape}: the image data is not base64") from None
    return f" [image {shape} {media} {n} bytes] "


def _url(shape: str, url: Any) -> str:
    if not isinstance(url, str) or not re.match(r"https?://\S+$", url):
        raise BadRequest(f"{shape}: an image url must be http(s)")
    return f" [image {shape} url {url}] "


def _image(c: dict[str, Any]) -> str | None:
    """The mark of an image part in any protocol's shape; None for a part that is not an image."""
    kind = c.get("type")
    if kind in ("image_url", "input_image"):  # OpenAI chat ({url}) / Responses (the URL itself)
        url = c.get("image_url")
        url = url.get("url") if isinstance(url, dict) and kind == "image_url" else url
        m = _DATA_URL.match(url) if isinstance(url, str) else None
        return _b64(kind, m.group(1), m.group(2)) if m else _url(kind, url)
    if kind == "image":  # Anthropic: a source, base64 or url
        src = c.get("source") if isinstance(c.get("source"), dict) else {}
        if src.get("type") == "url":
            return _url("anthropic", src.get("url"))
        if src.get("type") != "base64":
            raise BadRequest("anthropic image: source.type must be base64 or url")
        return _b64("anthropic", src.get("media_type"), src.get("data"))
    inline = c.get("inline_data") or c.get("inlineData")
    if isinstance(inline, dict):  # Gemini
        return _b64("gemini", inline.get("mime_type") or inline.get("mimeType"), inline.get("data"))
    ref = c.get("file_data") or c.get("fileData")
    if isinstance(ref, dict):
        return _url("gemini", ref.get("file_uri") or ref.get("fileUri"))
    if isinstance(c.get("image"), dict):  # Bedrock Converse: {format, source: {bytes}}
        fmt, src = c["image"].get("format"), c["image"].get("source")
        if fmt not in ("png", "jpeg", "gif", "webp") or not isinstance(src, dict):
            raise BadRequest("bedrock image: format must be png, jpeg, gif or webp, with source.bytes")
        return _b64("bedrock", f"image/{fmt}", src.get("bytes"))
    return None


def _bearer(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization")
    return auth.removeprefix("Bearer ") if auth and auth.startswith("Bearer ") else auth


class Protocol:
    name = "openai"

    def key(self, request: web.Request) -> str | None:
        """The key as this protocol sends it (compared with --api-key before the body is read)."""
        return _bearer(request)

    def read(self, request: web.Request, body: Any) -> Asked:
        try:
            messages = [{"role": m["role"], "content": _text(m.get("content", ""))} for m in body["messages"]]
        except (KeyError, TypeError):
            raise BadRequest("expected a JSON chat completion request with a user message") from None
        return Asked(body.get("model", "mock"), messages, body.get("max_tokens") or body.get("max_completion_tokens"),
                     self.key(request))

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        t_out = len(text.split())
        return {"id": f"chatcmpl-mock-{n}", "object": "chat.completion", "created": int(time.time()),
                "model": asked.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": t_in, "completion_tokens": t_out, "total_tokens": t_in + t_out}}


class Anthropic(Protocol):
    name = "anthropic"

    def read(self, request: web.Request, body: Any) -> Asked:
        if not request.headers.get("anthropic-version"):
            raise BadRequest("anthropic-version: header is required")
        if not isinstance(body.get("max_tokens"), int):
            raise BadRequest("max_tokens: Field required")
        system = body.get("system")
        try:
            messages = ([{"role": "system", "content": _text(system)}] if system else []) + \
                [{"role": m["role"], "content": _text(m["content"])} for m in body["messages"]]
        except (KeyError, TypeError):
            raise BadRequest("messages: Field required") from None
        return Asked(body.get("model", "mock"), messages, body["max_tokens"], self.key(request))

    def key(self, request: web.Request) -> str | None:
        return request.headers.get("x-api-key")

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        return {"id": "msg_" + uuid.uuid4().hex[:16], "type": "message", "role": "assistant", "model": asked.model,
                "content": [{"type": "text", "text": text}], "stop_sequence": None,
                "stop_reason": "max_tokens" if finish == "length" else "end_turn",
                "usage": {"input_tokens": t_in, "output_tokens": len(text.split())}}


class Gemini(Protocol):
    name = "gemini"

    def read(self, request: web.Request, body: Any) -> Asked:
        call = request.match_info.get("call", "")
        if not call.endswith(":generateContent"):
            raise BadRequest(f"{call}: only :generateContent is answered")
        system = (body.get("systemInstruction") or {}).get("parts")
        try:
            messages = ([{"role": "system", "content": _text(system)}] if system else []) + \
                [{"role": "assistant" if c.get("role") == "model" else "user", "content": _text(c["parts"])}
                 for c in body["contents"]]
        except (KeyError, TypeError, AttributeError):
            raise BadRequest("contents: a list of {role, parts} is required") from None
        config = body.get("generationConfig") or {}
        return Asked(call.split(":")[0], messages, config.get("maxOutputTokens"), self.key(request))

    def key(self, request: web.Request) -> str | None:
        return request.headers.get("x-goog-api-key") or request.query.get("key")

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        t_out = len(text.split())
        return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0,
                                "finishReason": "MAX_TOKENS" if finish == "length" else "STOP"}],
                "usageMetadata": {"promptTokenCount": t_in, "candidatesTokenCount": t_out,
                                  "totalTokenCount": t_in + t_out},
                "modelVersion": asked.model, "responseId": uuid.uuid4().hex[:16]}


class Vertex(Gemini):
    name = "vertex"

    def key(self, request: web.Request) -> str | None:
        return _bearer(request)


class Bedrock(Protocol):
    name = "bedrock"

    def read(self, request: web.Request, body: Any) -> Asked:
        system = body.get("system")
        try:
            messages = ([{"role": "system", "content": _text(system)}] if system else []) + \
                [{"role": m["role"], "content": _text(m["content"])} for m in body["messages"]]
        except (KeyError, TypeError):
            raise BadRequest("messages: a list of {role, content: [{text}]} is required") from None
        config = body.get("inferenceConfig") or {}
        return Asked(request.match_info.get("model", "mock"), messages, config.get("maxTokens"), self.key(request))

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        t_out = len(text.split())
        return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
                "stopReason": "max_tokens" if finish == "length" else "end_turn",
                "usage": {"inputTokens": t_in, "outputTokens": t_out, "totalTokens": t_in + t_out},
                "metrics": {"latencyMs": 1}}


class Replicate(Protocol):
    name = "replicate"

    def read(self, request: web.Request, body: Any) -> Asked:
        data = body.get("input") if isinstance(body, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
            raise BadRequest("input.prompt: a string is required")
        if request.match_info.get("name") is None and not body.get("version"):
            raise BadRequest("version: required on /v1/predictions")
        system = data.get("system_prompt")
        messages = ([{"role": "system", "content": str(system)}] if system else []) + \
            [{"role": "user", "content": data["prompt"]}]
        model = request.match_info.get("name") or body["version"]
        return Asked(model, messages, data.get("max_new_tokens") or data.get("max_tokens"), self.key(request))

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        words = text.split(" ")
        return {"id": uuid.uuid4().hex[:20], "model": asked.model, "status": "succeeded",
                "output": [w if i == 0 else " " + w for i, w in enumerate(words)],  # streamed tokens, as LLMs answer
                "metrics": {"input_token_count": t_in, "output_token_count": len(text.split())}}


class Responses(Protocol):
    name = "responses"

    def read(self, request: web.Request, body: Any) -> Asked:
        raw = body.get("input")
        try:
            messages = [{"role": "user", "content": raw}] if isinstance(raw, str) else \
                [{"role": m["role"], "content": _text(m["content"])} for m in raw]
        except (KeyError, TypeError):
            raise BadRequest("input: a string or a list of messages is required") from None
        if body.get("instructions"):
            messages.insert(0, {"role": "system", "content": str(body["instructions"])})
        return Asked(body.get("model", "mock"), messages, body.get("max_output_tokens"), self.key(request))

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        t_out = len(text.split())
        out = {"id": "resp_" + uuid.uuid4().hex[:16], "object": "response", "created_at": int(time.time()),
               "model": asked.model, "status": "incomplete" if finish == "length" else "completed",
               "output": [{"type": "message", "id": "msg_" + uuid.uuid4().hex[:12], "role": "assistant",
                           "status": "completed", "content": [{"type": "output_text", "text": text,
                                                               "annotations": []}]}],
               "usage": {"input_tokens": t_in, "output_tokens": t_out, "total_tokens": t_in + t_out}}
        if finish == "length":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        return out


class Azure(Protocol):
    name = "azure"

    def read(self, request: web.Request, body: Any) -> Asked:
        if not request.query.get("api-version"):
            raise BadRequest("api-version: query parameter is required")
        asked = super().read(request, body)
        asked.model = request.match_info.get("deployment", asked.model)
        return asked

    def key(self, request: web.Request) -> str | None:
        return request.headers.get("api-key")


def _first_text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for v in items:
        found = _first_text(v)
        if found is not None:
            return found
    return None


class JsonEndpoint(Protocol):
    name = "http"

    def read(self, request: web.Request, body: Any) -> Asked:
        text = _first_text(body)
        if text is None:
            raise BadRequest("no text in the request body")
        return Asked("http", [{"role": "user", "content": text}], None, self.key(request))

    def answer(self, asked: Asked, text: str, finish: str, t_in: int, n: int) -> dict[str, Any]:
        return {"output": text, "response": text, "result": text, "text": text, "answer": text, "message": text,
                "data": text, "choices": [{"message": {"role": "assistant", "content": text}, "text": text}]}


DIMENSIONS = 256


def embed(text: str) -> list[float]:
    """A deterministic embedding: a normalised bag of lower-cased words hashed into 256 buckets, so the
    cosine of two texts is their word overlap (same words: 1.0; no common word: 0.0)."""
    vec = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vec[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [round(v / norm, 6) for v in vec]


async def embeddings(request: web.Request, check_key: Callable[[str | None], bool]) -> web.Response:
    if not check_key(_bearer(request)):
        return web.json_response({"error": {"message": "invalid api key", "code": 401}}, status=401)
    try:
        body = await request.json()
        raw = body["input"]
        texts = [raw] if isinstance(raw, str) else [str(t) for t in raw]
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": {"message": "input: a string or a list of strings is required"}},
                                 status=400)
    n = sum(len(t.split()) for t in texts)
    return web.json_response({"object": "list", "model": body.get("model", "mock-embedding"),
                              "data": [{"object": "embedding", "index": i, "embedding": embed(t)}
                                       for i, t in enumerate(texts)],
                              "usage": {"prompt_tokens": n, "total_tokens": n}})


OPENAI, ANTHROPIC, GEMINI, VERTEX, RESPONSES, AZURE, JSON_ENDPOINT, BEDROCK, REPLICATE = (
    Protocol(), Anthropic(), Gemini(), Vertex(), Responses(), Azure(), JsonEndpoint(), Bedrock(), Replicate())
