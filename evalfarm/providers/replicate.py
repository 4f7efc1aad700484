"""Replicate predictions (``provider: replicate``, promptfoo's ``replicate:OWNER/NAME[:VERSION]``):
``POST {base_url}/models/OWNER/NAME/predictions``, or ``{base_url}/predictions`` with ``version`` when the
model names one, with ``Authorization: Bearer`` and ``Prefer: wait=60`` (the answer waits for the
prediction to finish). The input is the user message as ``prompt``, the system prompt as
``system_prompt`` and the params under their own names (each Replicate model names its inputs:
``max_new_tokens``, ``temperature``, ...); a ``prompt: {prefix, suffix}`` param wraps the prompt, as
promptfoo's config does. The text is ``output``: a string, or a list of strings joined (a language
model's tokens); usage is ``metrics.input_token_count``/``output_token_count``. A prediction still
running after the wait is not polled: it is an error (ServerError, retried)."""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from .errors import ServerError
from .openai import OpenAIAdapter
from .wire import Wire, bad, no_images, split_system, tokens

BASE_URL = "https://api.replicate.com/v1"


class ReplicateWire(Wire):
    kind = "replicate"

    def url(self, ep: Any) -> str:
        base = ep.base_url.rstrip("/")
        if ":" in ep.model:
            return base + "/predictions"
        return f"{base}/models/{quote(ep.model, safe='/._-')}/predictions"

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        return {"Prefer": "wait=60", **({"Authorization": f"Bearer {key}"} if key else {})}

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        system, rest = split_system(messages)
        params = dict(params)
        wrap = params.pop("prompt", None)
        wrap = wrap if isinstance(wrap, dict) else {}
        user = no_images(next((m["content"] for m in reversed(rest) if m["role"] == "user"), ""), "Replicate")
        data: dict[str, Any] = {"input": {**params, "prompt": f"{wrap.get('prefix') or ''}{user}"
                                                              f"{wrap.get('suffix') or ''}"}}
        if system is not None:
            data["input"]["system_prompt"] = system
        if ":" in ep.model:
            data["version"] = ep.model.split(":", 1)[1]
        return json.dumps(data).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        if not isinstance(data, dict):
            raise bad("not a Replicate prediction", data)
        status, output = data.get("status"), data.get("output")
        if status in ("starting", "processing"):
            raise ServerError(f"the Replicate prediction {data.get('id')} is still {status} after the 60 s wait "
                              "(evalfarm does not poll)", 503)
        if status in ("failed", "canceled"):
            raise bad(f"the Replicate prediction {status}", data.get("error") or data)
        if isinstance(output, list) and all(isinstance(x, str) for x in output):
            output = "".join(output)
        if not isinstance(output, str):
            raise bad("the Replicate prediction's output is not text", data)
        t_in, t_out = tokens(data.get("metrics"), ("input_token_count", "output_token_count"))
        return output, "stop", t_in, t_out


class ReplicateAdapter(OpenAIAdapter):
    wire = ReplicateWire()
