"""A JSON-over-HTTP endpoint of your own (``provider: http``, promptfoo's ``http`` provider in its common
JSON form): ``http.method`` (POST, PUT or PATCH) to ``base_url`` (the full URL) with ``http.headers`` and
``http.body``, a JSON value in which every string's ``{{prompt}}`` becomes the prompt (a system prompt,
if any, goes before it, separated by a blank line); the answer must be JSON, and ``http.response_path``
(``json.output``, ``json.choices[0].message.content``) picks the text (absent: the whole answer as JSON
text). The key in ``api_key_env``, when set, goes as ``Authorization: Bearer``. Token usage is not
reported by such endpoints: 0, so its cost is 0 unless the endpoint answers ``usage``."""
from __future__ import annotations

import json
import re
from typing import Any

from .openai import OpenAIAdapter
from ..spec.jsonpath import alternatives
from .wire import Wire, bad, no_images

PROMPT = re.compile(r"\{\{\s*prompt\s*\}\}")


def fill(value: Any, prompt: str) -> Any:
    if isinstance(value, str):
        return PROMPT.sub(lambda _m: prompt, value)
    if isinstance(value, list):
        return [fill(v, prompt) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, prompt) for k, v in value.items()}
    return value


class HttpJsonWire(Wire):
    kind = "http"

    def check(self, spec: Any) -> None:
        if spec.http is None:
            raise KeyError(f"adapter {spec.id!r}: provider http needs an http block (body, response_path)")

    def url(self, ep: Any) -> str:
        return ep.base_url

    def method(self, ep: Any) -> str:
        return ep.http.method

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        out = dict(ep.http.headers)
        if key:
            out["Authorization"] = f"Bearer {key}"
        return out

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        prompt = "\n\n".join(no_images(m["content"], "the http provider") for m in messages)
        return json.dumps(fill(ep.http.body, prompt)).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        value = data
        if ep.http.response_path:
            value = _pick(ep.http.response_path, data)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        usage = data.get("usage") if isinstance(data, dict) and isinstance(data.get("usage"), dict) else {}
        try:
            t_in = int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
            t_out = int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
        except (TypeError, ValueError):
            t_in = t_out = 0
        return text, "stop", t_in, t_out


_MISSING = object()


def _pick(expr: str, data: Any) -> Any:
    """The first alternative of ``response_path`` with a truthy value (JavaScript's ``||``); ``text`` is the
    answer as text. The last alternative's value is taken even when falsy; an error if it is missing."""
    value: Any = _MISSING
    for alt in alternatives(expr):
        if alt is None:
            value = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        else:
            value = data
            for step in alt:
                try:
                    value = value[step]
                except (KeyError, IndexError, TypeError):
                    value = _MISSING
                    break
        if value is not _MISSING and value not in (None, "", 0, False):
            return value
    if value is _MISSING:
        raise bad(f"response_path {expr} not found in the answer", data)
    return value


class HttpJsonAdapter(OpenAIAdapter):
    wire = HttpJsonWire()
