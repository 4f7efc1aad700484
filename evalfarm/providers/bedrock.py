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
from .wire import Wire, bad, parts_of, renamed, split_system, tokens, tool_text

_INFERENCE = {"max_tokens": "maxTokens", "max_completion_tokens": "maxTokens", "top_p": "topP",
              "stop": "stopSequences", "temperature": "temperature"}


_TOOL_KEYS = ("toolConfig", "tools", "toolChoice", "tool_choice")


def _tool_spec(tool: Any) -> Any:
    """One tool as Converse's ``toolSpec``: written so already, or in OpenAI's or Anthropic's form."""
    if not isinstance(tool, dict) or "toolSpec" in tool or "cachePoint" in tool:
        return tool
    fn = tool.get("function") if tool.get("type") == "function" else tool
    schema = fn.get("parameters", fn.get("input_schema", fn.get("inputSchema", {"type": "object"})))
    spec = {"name": fn.get("name"), "inputSchema": schema if "json" in schema else {"json": schema}}
    if fn.get("description"):
        spec["description"] = fn["description"]
    return {"toolSpec": spec}


def _tool_config(params: dict[str, Any]) -> dict[str, Any] | None:
    """Converse's ``toolConfig``: as given, or built from ``tools`` and ``toolChoice``/``tool_choice``
    (auto, any, or a tool name; Anthropic's {type: tool, name} too)."""
    config = dict(params.get("toolConfig") or {})
    if params.get("tools"):
        config["tools"] = [_tool_spec(t) for t in params["tools"]]
    choice = params.get("toolChoice", params.get("tool_choice"))
    if isinstance(choice, str):
        choice = {choice: {}} if choice in ("auto", "any") else {"tool": {"name": choice}}
    elif isinstance(choice, dict) and choice.get("type") in ("auto", "any"):
        choice = {choice["type"]: {}}
    elif isinstance(choice, dict) and choice.get("type") == "tool":
        choice = {"tool": {"name": choice.get("name")}}
    if choice is not None and config.get("tools"):
        config["toolChoice"] = choice
    return config or None


def bedrock_base(region: str) -> str:
    return f"https://bedrock-runtime.{region}.amazonaws.com"


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Converse content blocks: the text, then each image as bytes (base64 in JSON); Converse takes no URL."""
    text, images = parts_of(content)
    blocks: list[dict[str, Any]] = [{"text": text}] if text or not images else []
    for im in images:
        if im.url:
            raise ValueError("Bedrock's Converse API takes an image's bytes, not a URL: give the image as data")
        blocks.append({"image": {"format": str(im.media_type).split("/")[1], "source": {"bytes": im.data}}})
    return blocks


class BedrockWire(Wire):
    kind = "bedrock"

    def url(self, ep: Any) -> str:
        return f"{ep.base_url.rstrip('/')}/model/{quote(ep.model, safe='')}/converse"

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        system, rest = split_system(messages)
        config, extra = {}, {}
        tools = _tool_config(params)
        for key, value in params.items():
            if key in _TOOL_KEYS:
                continue
            if key in _INFERENCE:
                config[_INFERENCE[key]] = value
            else:
                extra[key] = value  # additionalModelRequestFields: the model's own options
        if isinstance(config.get("stopSequences"), str):
            config["stopSequences"] = [config["stopSequences"]]
        body: dict[str, Any] = {"messages": [{"role": m["role"], "content": _blocks(m["content"])} for m in rest]}
        if system is not None:
            body["system"] = [{"text": system}]
        if config:
            body["inferenceConfig"] = config
        if extra:
            body["additionalModelRequestFields"] = extra
        if tools:
            body["toolConfig"] = tools
        return json.dumps(body).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        try:
            blocks = data["output"]["message"]["content"]
            blocks = [b for b in blocks if isinstance(b, dict)]
            text = tool_text([b.get("text") or "" for b in blocks], [b for b in blocks if "toolUse" in b])
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
