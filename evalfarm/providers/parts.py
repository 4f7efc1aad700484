"""A user message with images: built once in OpenAI chat's shape (text and ``image_url`` parts), then
put in each native wire's own shape (Anthropic image blocks, Responses ``input_image``, Gemini
``inlineData``/``fileData``, Bedrock Converse ``image``)."""
from __future__ import annotations

import base64
import mimetypes
from typing import Any

from ..spec.images import split_data_url


def user_content(text: str, images: list[str] | None) -> Any:
    """The user message's content: the text alone, or the text then one ``image_url`` part per image."""
    if not images:
        return text
    return [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in images]


def _pieces(content: Any) -> list[tuple[str, str]]:
    """``("text", text)`` / ``("image", url)`` in order, from a string or OpenAI chat parts."""
    if isinstance(content, str):
        return [("text", content)]
    out = []
    for part in content:
        if part.get("type") == "image_url":
            out.append(("image", part["image_url"]["url"]))
        else:
            out.append(("text", part.get("text") or ""))
    return out


def anthropic_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    out = []
    for kind, value in _pieces(content):
        if kind == "text":
            out.append({"type": "text", "text": value})
            continue
        data = split_data_url(value)
        source = ({"type": "base64", "media_type": data[0], "data": data[1]} if data
                  else {"type": "url", "url": value})
        out.append({"type": "image", "source": source})
    return out


def responses_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    return [{"type": "input_text", "text": v} if k == "text" else {"type": "input_image", "image_url": v}
            for k, v in _pieces(content)]


def gemini_parts(content: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, value in _pieces(content):
        if kind == "text":
            out.append({"text": value})
            continue
        data = split_data_url(value)
        if data:
            out.append({"inlineData": {"mimeType": data[0], "data": data[1]}})
        else:
            out.append({"fileData": {"mimeType": mimetypes.guess_type(value)[0] or "image/jpeg", "fileUri": value}})
    return out


def bedrock_content(content: Any) -> list[dict[str, Any]]:
    """Converse takes image bytes only (base64 in JSON): an http(s) image is refused in one line."""
    out: list[dict[str, Any]] = []
    for kind, value in _pieces(content):
        if kind == "text":
            out.append({"text": value})
            continue
        data = split_data_url(value)
        if data is None:
            raise ValueError(f"bedrock takes images as bytes, not URLs: give {value[:60]} as a data: URL")
        fmt = data[0].split("/", 1)[1].replace("jpg", "jpeg")
        base64.b64decode(data[1])  # checked by the spec; bytes go as base64 in Converse's JSON
        out.append({"image": {"format": fmt, "source": {"bytes": data[1]}}})
    return out


def text_only(content: Any, provider: str) -> str:
    """The text of a message for a wire that sends text alone; a prompt with images is refused in one line."""
    if isinstance(content, str):
        return content
    raise ValueError(f"provider {provider} sends text only: drop this prompt's images or use a vision provider")
