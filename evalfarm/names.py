"""The formats of identifiers that reach file names, rows and references: run ids and names.

A run id becomes ``runs/<id>.json``, and reports, Redis summaries and CLI arguments carry
it, so one that is not exactly what ``new_run_id`` makes (a UTC timestamp to the
microsecond and six hex digits; every evalfarm version made this format) is refused
wherever it is read: a hand-edited ``/any/dir/planted`` or ``../../x`` never becomes a
path. Names (spec names, lineage tags, suite names) are labels printed in tab-separated
rows, so they hold no control or line-break characters; baseline names are also
references (``baseline:NAME``, dashboard URLs), so they hold no path separators either.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

RUN_ID_PATTERN = r"[0-9]{8}T[0-9]{12}Z-[0-9a-f]{6}"
_RUN_ID = re.compile(RUN_ID_PATTERN)
NAME_MAX = 200
RUN_ID_EXAMPLE = "20261130T120000123456Z-0a1b2c"


def is_run_id(value: Any) -> bool:
    return isinstance(value, str) and _RUN_ID.fullmatch(value) is not None


def run_id_problem(value: Any) -> str | None:
    """Why ``value`` is not a run id, else None."""
    if is_run_id(value):
        return None
    shown = repr(value)[:80] if isinstance(value, str) else f"a {type(value).__name__}"
    return f"run id {shown} is not an evalfarm run id (like {RUN_ID_EXAMPLE})"


def _bad_char(value: str) -> str | None:
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            return f"holds the control character {ch!r}"
    return None


def label_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a spec name, lineage tag or suite name (shown in rows), else None."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value.strip():
        return "must not be empty"
    if len(value) > NAME_MAX:
        return f"is {len(value)} characters long; at most {NAME_MAX}"
    if value != value.strip():
        return "must not start or end with whitespace"
    return _bad_char(value)


def baseline_name_problem(value: Any) -> str | None:
    """Why ``value`` cannot name a baseline (a label that is also a reference), else None."""
    problem = label_problem(value)
    if problem:
        return problem
    if "/" in value or "\\" in value:
        return "must not contain '/' or '\\'"
    if value in (".", ".."):
        return "must not be '.' or '..'"
    return None


def printable(value: Any) -> str:
    """A value for one cell of a tab-separated row: control characters shown escaped."""
    text = value if isinstance(value, str) else str(value)
    if _bad_char(text) is None:
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch)[0] in "CZ"
                   and ch != " " else ch for ch in text)
