"""Keep secrets out of artifacts, logs and error messages."""
from __future__ import annotations

import os
import re

_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)([^@\s]+)(@)")
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-]+", re.I)


_SECRET_ENV: set[str] = set()


def register_secret_env(name: str) -> None:
    """A variable a spec names as holding a key (``api_key_env``): its value is always masked,
    whatever the variable is called."""
    _SECRET_ENV.add(name)


def secret_values() -> list[str]:
    """Values of registered key variables, and of variables whose names look secret
    (8+ chars, to avoid masking noise)."""
    named = [os.environ.get(n, "") for n in _SECRET_ENV]
    looks = [v for k, v in os.environ.items() if _SECRET_NAMES.search(k) and len(v) >= 8]
    return sorted({v for v in named + looks if len(v) >= 4}, key=len, reverse=True)


def redact(text: str) -> str:
    """Mask env secrets, URL passwords and bearer tokens in ``text``."""
    for value in secret_values():
        text = text.replace(value, "***")
    text = _URL_PASSWORD.sub(r"\1***\3", text)
    return _BEARER.sub(r"\1***", text)
