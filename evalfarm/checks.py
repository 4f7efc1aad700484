"""Deterministic golden checks: free, fast, no judgement."""
from __future__ import annotations

import re

from .spec import PromptSpec


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def golden_check(prompt: PromptSpec, output: str) -> tuple[bool, str]:
    """Pass iff every expected substring is present and the regex (if any) matches.

    The reason names the first miss; a prompt with no assertions passes.
    """
    for needle in prompt.expected_output_contains:
        if needle not in output:
            return False, f"missing expected substring {_short(needle)!r}"
    if prompt.expected_output_regex is not None and not re.search(prompt.expected_output_regex, output):
        return False, f"regex {_short(prompt.expected_output_regex)!r} did not match"
    if not prompt.expected_output_contains and prompt.expected_output_regex is None:
        return True, "no assertions"
    return True, "all assertions passed"
