"""promptfoo's images, imported: a chat prompt's image parts in each shape promptfoo passes through, and
image vars (a file's base64) rendered per test into the spec's ``images`` (spec/models.py ``ImageInput``)."""
from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ..spec.models import IMAGE_TYPES
from .promptfoo_asserts import Refused
from .template import render

IMAGE_FILES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


def sniff_image(raw: bytes) -> str | None:
    """An image's media type from its first bytes (JPEG, PNG, GIF, WebP), else None."""
    if raw[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if raw[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if raw[:4] == b"GIF8":
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def chat_content(content: Any) -> tuple[str, list[dict[str, str]]]:
    """A message's text (its text parts joined by newlines) and its image parts as templates, from any of
    the chat shapes promptfoo passes through: OpenAI (text, image_url), the Responses API (input_text,
    input_image), Anthropic (text, image with a base64 or url source), Bedrock Converse ({text},
    {image: {format, source: {bytes}}}) and Gemini ({text}, inline_data)."""
    if isinstance(content, str):
        return content, []
    texts, images = [], []
    for part in content:
        if not isinstance(part, dict):
            raise Refused("a content part must be a mapping (text or image)")
        kind = part.get("type")
        if kind in ("text", "input_text") or (kind is None and isinstance(part.get("text"), str)):
            texts.append(str(part.get("text") or ""))
        elif kind == "image_url":
            url = part.get("image_url")
            images.append({"url": str(url.get("url") if isinstance(url, dict) else url)})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            images.append({"url": part["image_url"]})
        elif kind == "image" and isinstance(part.get("source"), dict):
            src = part["source"]
            if src.get("type") == "url":
                images.append({"url": str(src.get("url"))})
            else:
                images.append({"data": str(src.get("data")), "media_type": str(src.get("media_type") or "")})
        elif kind is None and isinstance(part.get("image"), dict) and isinstance(part["image"].get("source"), dict):
            fmt = str(part["image"].get("format") or "").lower().replace("jpg", "jpeg")
            images.append({"data": str(part["image"]["source"].get("bytes")), "media_type": f"image/{fmt}" if fmt else ""})
        elif kind is None and isinstance(part.get("inline_data") or part.get("inlineData"), dict):
            inline = part.get("inline_data") or part.get("inlineData")
            images.append({"data": str(inline.get("data")),
                           "media_type": str(inline.get("mime_type") or inline.get("mimeType") or "")})
        else:
            raise Refused(f"a content part of type {kind or sorted(part)!r} is not supported (text and images are)")
    return "\n".join(texts), images


def render_images(parts: list[dict[str, str]], user: str, values: dict[str, Any],
                  media: dict[str, str]) -> tuple[str, list[dict[str, str]]]:
    """The rendered image parts of a chat prompt (``media``: image vars' base64 -> media type), and the images a
    text prompt carries the way promptfoo's Gemini provider reads them: a line that is only an image var's base64 becomes an image (after the
    text). An image var anywhere else in the text is refused: it would be sent as base64 text."""
    images = [_image(part, values, media) for part in parts]
    if media and any(v in media for v in values.values() if isinstance(v, str)):
        kept = []
        for line in user.split("\n"):
            if line.strip() in media:
                images.append({"data": line.strip(), "media_type": media[line.strip()]})
            else:
                kept.append(line)
        user = "\n".join(kept).strip("\n")
        if any(data in user for data in media):
            raise Refused("an image var inside the prompt's text: evalfarm sends images as image parts")
    return user, images


def _image(part: dict[str, str], values: dict[str, Any], media: dict[str, str]) -> dict[str, str]:
    """One image part rendered: an http(s) URL, a data: URL, or base64 (its media type from the part, the
    var's file, or the bytes themselves)."""
    key = "url" if "url" in part else "data"
    value, _ = render(part[key], values)
    value = value.strip()
    if re.match(r"https?://\S+$", value):
        return {"url": value}
    m = re.match(r"data:(image/[a-z]+);base64,(.*)$", value, re.S)
    if m:
        return {"data": m.group(2), "media_type": m.group(1)}
    try:
        head = base64.b64decode(value[:64] + "=" * (-len(value[:64]) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise Refused(f"an image {key} that is not a URL or base64: {value[:40]!r}") from None
    kind = media.get(value) or sniff_image(head) or part.get("media_type") or ""
    if kind not in IMAGE_TYPES:
        raise Refused(f"an image of media type {kind or 'unknown'!r} (JPEG, PNG, GIF and WebP are)")
    return {"data": value, "media_type": kind}
