"""A wire protocol: where a completion request goes, how the key travels, how the body is written
and how the answer is read. The call machinery (limits, budget, quota, retries, error mapping) is
one, in providers/openai.py; each native provider is one ``Wire`` in its own module.

A spec's ``params`` are written in OpenAI's names (``max_tokens``, ``temperature``, ``top_p``,
``stop``); a native wire renames the ones it knows into its protocol's names and passes any other
key through unchanged, so a provider-specific option still reaches the provider.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..redact import redact
from .errors import BadResponse


def bad(what: str, data: Any) -> BadResponse:
    return BadResponse(f"{what}: {redact(json.dumps(data))[:200]}", 200)


def tokens(usage: Any, names: tuple[str, str]) -> tuple[int, int]:
    """Input and output token counts from a usage object (absent: 0); anything else is a bad answer."""
    if usage is None:
        return 0, 0
    try:
        return int(usage.get(names[0]) or 0), int(usage.get(names[1]) or 0)
    except (TypeError, ValueError, AttributeError):
        raise bad("usage is not token counts", usage) from None


def renamed(params: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    return {names.get(k, k): v for k, v in params.items()}


class Wire:
    """OpenAI chat completions (the default): ``{base_url}/chat/completions``, ``Authorization: Bearer``."""

    kind = "openai"  # in the adapter's config (item keys): "openai" keeps the keys of existing runs

    def check(self, spec: Any) -> None:
        """Raise KeyError naming what the spec lacks for this protocol (called when the adapter is made)."""

    def url(self, ep: Any) -> str:
        base = ep.base_url.rstrip("/")
        # a full URL is used as it is: .../chat/completions, or a serving endpoint's .../invocations (Databricks)
        return base if base.endswith(("/chat/completions", "/invocations")) else base + "/chat/completions"

    def method(self, ep: Any) -> str:
        return "POST"

    def headers(self, ep: Any, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def body(self, ep: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> bytes:
        return json.dumps({"model": ep.model, "messages": messages, **params}).encode()

    def parse(self, ep: Any, data: Any) -> tuple[str, str, int, int]:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            calls = message.get("function_call") or message.get("tool_calls")
            finish = choice.get("finish_reason") or "stop"
        except (KeyError, IndexError, TypeError, AttributeError):
            raise bad("not a chat completion", data) from None
        if calls:  # as promptfoo's output: the calls, or the whole message when it also has text
            text = json.dumps(message if text else calls)
        t_in, t_out = tokens(data.get("usage"), ("prompt_tokens", "completion_tokens"))
        return text, finish, t_in, t_out


OPENAI_CHAT = Wire()


def tool_text(texts: list[str], calls: list[Any]) -> str:
    """An answer's text with its tool calls: each call as one JSON object after the text (promptfoo's
    output for the native APIs), so checks and judges see which tool was called with what."""
    if not calls:
        return "".join(texts)
    return "\n\n".join([t for t in texts if t] + [json.dumps(c) for c in calls])


def user_content(text: str, images: Any = ()) -> Any:
    """A prompt's user content in OpenAI chat's terms: its text, or its parts when it has images (text first,
    then each image as an ``image_url``: its URL, or a data: URL of its base64). Every other wire reads these
    parts back (``parts_of``) into its own shape."""
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for im in images:
        url = im.url if im.url is not None else f"data:{im.media_type};base64,{im.data}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


@dataclass(frozen=True)
class Image:
    """An image part: ``url`` (http/https), or ``media_type`` and base64 ``data``."""

    url: str | None
    media_type: str | None
    data: str | None


def parts_of(content: Any) -> tuple[str, list[Image]]:
    """(the text, the images) of a message's content written by ``user_content``."""
    if isinstance(content, str):
        return content, []
    texts, images = [], []
    for part in content:
        if part.get("type") == "text":
            texts.append(part["text"])
            continue
        url = part["image_url"]["url"]
        if url.startswith("data:"):
            head, _, data = url.partition(",")
            images.append(Image(None, head[5:].split(";")[0], data))
        else:
            images.append(Image(url, None, None))
    return "".join(texts), images


def no_images(content: Any, provider: str) -> str:
    """The text of a message for a wire that carries text only; a prompt with images is refused (its item
    errors) rather than sent without them."""
    text, images = parts_of(content)
    if images:
        raise ValueError(f"{provider} takes text only here: this prompt has {len(images)} image(s); "
                         "use an adapter whose API takes images (openai, anthropic, gemini, vertex, bedrock, "
                         "openai-responses, azure)")
    return text


def split_system(messages: list[dict[str, str]]) -> tuple[str | None, list[dict[str, str]]]:
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system") or None
    return system, [m for m in messages if m["role"] != "system"]
