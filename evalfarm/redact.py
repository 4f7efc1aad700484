"""Keep secrets out of artifacts, logs and error messages.

``redact`` runs per log field, per errored item and per failed attempt, so the secret
values are computed once and recomputed only when the environment (or the set of key
variables in use) changes: comparing a snapshot of the environment is a C-level dict
comparison, rescanning it was ~135 us a call.
"""
from __future__ import annotations

import os
import re

_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.I)
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)([^@\s]+)(@)")
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._\-+/=]+", re.I)

_SECRET_ENV: set[str] = set()
_cache: tuple[dict, frozenset, list[str]] | None = None


def register_secret_env(name: str) -> None:
    """A variable a spec names as holding a key (``api_key_env``): its value is always masked,
    whatever the variable is called."""
    _SECRET_ENV.add(name)


def _environ() -> dict:
    data = getattr(os.environ, "_data", None)  # CPython: the raw mapping, copied in C
    return dict(data) if isinstance(data, dict) else dict(os.environ)


def secret_values() -> list[str]:
    """Values of registered key variables, and of variables whose names look secret
    (8+ chars, to avoid masking noise), longest first."""
    global _cache
    env, names = _environ(), frozenset(_SECRET_ENV)
    if _cache is not None and _cache[1] == names and _cache[0] == env:
        return _cache[2]
    named = [os.environ.get(n, "") for n in names]
    looks = [v for k, v in os.environ.items() if _SECRET_NAMES.search(k) and len(v) >= 8]
    values = sorted({v for v in named + looks if len(v) >= 4}, key=len, reverse=True)
    _cache = (env, names, values)
    return values


def redact(text: str) -> str:
    """Mask env secrets, URL passwords and bearer tokens in ``text`` (cut it afterwards, never before:
    a cut secret no longer matches)."""
    for value in secret_values():
        if value in text:
            text = text.replace(value, "***")
    text = _URL_PASSWORD.sub(r"\1***\3", text)
    return _BEARER.sub(r"\1***", text)
