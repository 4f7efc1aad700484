"""Image parts of a promptfoo chat prompt, as ``PromptSpec.images``. promptfoo sends a JSON prompt to
the provider as written, so its examples use each provider's own part shapes; the importer accepts
these and keeps only (text, images): OpenAI chat ``image_url``, Responses ``input_image``, Anthropic
``image`` (base64 or url source), Bedrock Converse ``image`` (bytes). Each image is a template, rendered
per test; a bare base64 value (an image file var, which promptfoo loads as base64) becomes a data URL."""
from __future__ import annotations

import base64
import binascii
from typing import Any

from ..spec.images import check_image
from .promptfoo_asserts import Refused

_TEXT = ("text", "input_text")
_MAGIC = ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"),
          (b"RIFF", "image/webp"))
_FORMATS = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}
_PREFIX = "\x00b64:"  # marks a template whose rendered value is bare base64 of a known media type


def user_parts(content: Any) -> tuple[str, list[str]]:
    """(text, image templates) of a user message; text parts are joined with a blank line, and the images
    go after the text (evalfarm's order), whatever their place in the message."""
    if isinstance(content, str):
        return content, []
    texts, images = [], []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise Refused(f"user message part {i}: a part must be a mapping")
        kind = part.get("type")
        if kind in _TEXT or (kind is None and set(part) == {"text"}):
            if not isinstance(part.get("text"), str):
                raise Refused(f"user message part {i}: text must be a string")
            texts.append(part["text"])
        else:
            images.append(_image(part, i))
    return "\n\n".join(texts), images


def _image(part: dict, i: int) -> str:
    kind = part.get("type")
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if isinstance(url, str):
            return url
    elif kind == "input_image" and isinstance(part.get("image_url"), str):
        return part["image_url"]
    elif kind == "image" and isinstance(part.get("source"), dict):  # Anthropic
        src = part["source"]
        if src.get("type") == "base64" and isinstance(src.get("data"), str):
            return f"{_PREFIX}{src.get('media_type') or ''}:{src['data']}"
        if src.get("type") == "url" and isinstance(src.get("url"), str):
            return src["url"]
    elif kind is None and isinstance(part.get("image"), dict):  # Bedrock Converse
        img = part["image"]
        data = (img.get("source") or {}).get("bytes") if isinstance(img.get("source"), dict) else None
        if isinstance(data, str):
            return f"{_PREFIX}{_FORMATS.get(str(img.get('format', '')).lower(), '')}:{data}"
    raise Refused(f"user message part {i} (type {kind or next(iter(part), '?')!r}): only text and image parts "
                  "(image_url, input_image, Anthropic image, Bedrock image bytes) are supported")


def image_url(rendered: str) -> str:
    """A rendered image template as an http(s) or data: URL; ValueError (one line) if it is neither."""
    media = None
    if rendered.startswith(_PREFIX):
        media, _, rendered = rendered[len(_PREFIX):].partition(":")
    value = rendered.strip()
    if not value.startswith(("http://", "https://", "data:")):
        try:
            head = base64.b64decode(value[:64] + "=" * (-len(value[:64]) % 4))
        except (binascii.Error, ValueError):
            head = b""
        sniffed = next((m for magic, m in _MAGIC if head.startswith(magic)), None)
        media = sniffed or media
        if not media:
            raise ValueError(f"image {value[:40]!r}: not an http(s) URL, a data: URL or base64 of a PNG, JPEG, "
                             "GIF or WebP image")
        value = f"data:{media};base64,{value}"
    return check_image(value, "image")


_B64_IMAGE = ("/9j/", "iVBORw0KGgo", "R0lGOD", "UklGR")  # base64 of the JPEG, PNG, GIF, WebP magic bytes


def lift_inline_images(text: str) -> tuple[str, list[str]]:
    """A text prompt's lines that are wholly a base64 image (an image file var on its own line) as images,
    as promptfoo's Gemini and Vertex providers send them (inlineData), instead of megabytes of text."""
    kept, images = [], []
    for line in text.split("\n"):
        value = line.strip()
        if len(value) > 64 and value.startswith(_B64_IMAGE) and not any(c.isspace() for c in value):
            try:
                images.append(image_url(value))
                continue
            except ValueError:
                pass
        kept.append(line)
    return "\n".join(kept), images
