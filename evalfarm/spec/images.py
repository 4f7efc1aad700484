"""Images in a prompt (``PromptSpec.images``): one string each, an http(s) URL or a base64 ``data:`` URL,
so a spec stays plain YAML and each wire protocol can put the image in its own shape."""
from __future__ import annotations

import base64
import binascii
import re

_DATA = re.compile(r"data:(?P<mime>image/[A-Za-z0-9.+-]+);base64,(?P<data>[A-Za-z0-9+/=\s]+)", re.S)


def split_data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64 data)`` of a data URL, None for an http(s) URL."""
    m = _DATA.fullmatch(url)
    return (m.group("mime"), re.sub(r"\s+", "", m.group("data"))) if m else None


def check_image(url: str, where: str) -> str:
    """ValueError (one line) unless ``url`` is an http(s) URL or a valid base64 image data URL."""
    if not isinstance(url, str):
        raise ValueError(f"{where}: an image is a string (an http(s) URL or a data:image/...;base64, URL)")
    if url.startswith(("http://", "https://")):
        if any(c.isspace() for c in url):
            raise ValueError(f"{where}: an image URL has no spaces")
        return url
    parts = split_data_url(url)
    if parts is None:
        raise ValueError(f"{where}: an image must be an http(s) URL or a data:image/<type>;base64,<data> URL "
                         f"(got {url[:30]!r})")
    try:
        base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: the data URL's base64 does not decode") from None
    return url
