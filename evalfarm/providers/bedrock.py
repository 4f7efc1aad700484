"""Amazon Bedrock's Converse API (``provider: bedrock``): ``POST {base_url}/model/{model}/converse``, one
request shape for every Bedrock chat model, authenticated with a Bedrock API key (``Authorization:
Bearer``, the variable ``AWS_BEARER_TOKEN_BEDROCK``; SigV4 signing with access keys is not implemented).
``base_url`` is ``https://bedrock-runtime.REGION.amazonaws.com``. The system prompt is ``system``;
params become ``inferenceConfig`` (``max_tokens`` -> ``maxTokens``, ``top_p`` -> ``topP``, ``stop`` ->
``stopSequences``); usage is ``inputTokens``/``outputTokens``; ``stopReason: max_tokens`` is truncated."""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from .openai import OpenAIAdapter, openai_judge
from .wire import Wire, bad, renamed, split_system, tokens

_INFERENCE = {"max_tokens": "maxTokens", "max_completion_tokens": "maxTokens", "top_p": "topP",
              "stop": "stopSequences", "temperature": "temperature"}


def bedrock_base(region: str) -> str:
    return f"https://bedrock-runtime.{region}.amazonaws.com"


class BedrockWire(Wire):
    kind = "bedrock"

    def url(self, ep: Any) -> str:
        return f"{ep.base_url.rstrip('/')}/model/{quote(ep.model, safe='')}/converse"

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        system, rest = split_system(messages)
        config, extra = {}, {}
        for key, value in params.items():
            if key in _INFERENCE:
                config[_INFERENCE[key]] = value
            else:
                extra[key] = value  # additionalModelRequestFields: the model's own options
        if isinstance(config.get("stopSequences"), str):
            config["stopSequences"] = [config["stopSequences"]]
        body: dict[str, Any] = {"messages": [{"role": m["role"], "content": [{"text": m["content"]}]} for m in rest]}
        if system is not None:
            body["system"] = [{"text": system}]
        if config:
            body["inferenceConfig"] = config
        if extra:
            body["additionalModelRequestFields"] = extra
        return json.dumps(body).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        try:
            blocks = data["output"]["message"]["content"]
            text = "".join(b.get("text") or "" for b in blocks if isinstance(b, dict))
            stop = data.get("stopReason")
        except (KeyError, TypeError, AttributeError):
            raise bad("not a Bedrock Converse answer", data) from None
        t_in, t_out = tokens(data.get("usage"), ("inputTokens", "outputTokens"))
        return text, "length" if stop == "max_tokens" else "stop", t_in, t_out


class BedrockAdapter(OpenAIAdapter):
    wire = BedrockWire()


def bedrock_judge(spec):
    """The rubric judge on this protocol (``judge: {provider: ...}``)."""
    return openai_judge(spec, BedrockWire())
