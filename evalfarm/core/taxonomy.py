"""Failure-mode taxonomy: why a failed item failed, in one word."""
from __future__ import annotations

import re
from typing import Any

MODES = ("runtime_error", "truncation", "refusal", "format_error", "instruction_miss")

_REFUSAL = re.compile(
    r"\b(I\s*(?:'m|am)\s+(?:sorry|unable|not able)|I\s+(?:can(?:'|no)t|cannot|won't|will not)\s+"
    r"(?:help|assist|comply|provide|do that|fulfil|fulfill)|as an ai\b[^.]*\b(?:cannot|can't)|"
    r"I must (?:decline|refuse))", re.I)


def is_refusal(text: str | None) -> bool:
    return bool(text) and bool(_REFUSAL.search(text[:600]))


def classify(outcome: dict[str, Any]) -> str | None:
    """None for a passed item; otherwise the most specific mode, in MODES order."""
    if outcome.get("error"):
        return "runtime_error"
    if outcome.get("passed"):
        return None
    if outcome.get("finish_reason") == "length":
        return "truncation"
    if is_refusal(outcome.get("output")):
        return "refusal"
    if any(c["format"] and not c["passed"] for c in outcome.get("checks") or []):
        return "format_error"
    return "instruction_miss"
