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


def _is_image(part: dict) -> bool:
    """An image part in any wire's shape: OpenAI chat image_url, Anthropic image, Responses input_image,
    Gemini inlineData/fileData, Bedrock Converse image."""
    return (part.get("type") in ("image_url", "image", "input_image") or "inlineData" in part or "fileData" in part
            or isinstance(part.get("image"), dict))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks / parts (images are accepted and not read)
        return "".join(str(c.get("text") or "") for c in content if isinstance(c, dict) and not _is_image(c))
    raise BadRequest("message content must be a string or a list of text blocks")


def _short(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value[:64] + "..." if isinstance(value, str) and len(value) > 64 else value


def image_parts(body: Any) -> list[dict[str, Any]]:
    """The image parts of a request as sent (long strings cut), for /stats?requests=1 and tests."""
    if not isinstance(body, dict):
        return []
    found = []
    for key in ("messages", "contents", "input"):
        items = body.get(key) if isinstance(body.get(key), list) else []
        for m in items:
            parts = (m.get("content") if "content" in m else m.get("parts")) if isinstance(m, dict) else None
            if isinstance(parts, list):
                found += [_short(p) for p in parts if isinstance(p, dict) and _is_image(p)]
    return found


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
