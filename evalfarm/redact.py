"""Keep secrets out of artifacts, logs and error messages."""
from __future__ import annotations

import os
import re

_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)([^@\s]+)(@)")
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-]+", re.I)


def secret_values() -> list[str]:
    """Values of environment variables whose names look secret (8+ chars, to avoid noise)."""
    return [v for k, v in os.environ.items() if _SECRET_NAMES.search(k) and len(v) >= 8]


def redact(text: str) -> str:
    """Mask env secrets, URL passwords and bearer tokens in ``text``."""
    for value in secret_values():
        text = text.replace(value, "***")
    text = _URL_PASSWORD.sub(r"\1***\3", text)
    return _BEARER.sub(r"\1***", text)
