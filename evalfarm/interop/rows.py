"""A stored run as flat rows (one per item) for spreadsheets and pandas: JSONL and CSV.

Reports are untrusted input: every field a row uses is type-checked first, so a wrong type is
one line naming the item and field (exit 2), never a traceback or half an output file.
"""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Iterable, Iterator

from ._compat import UsageError

COLUMNS = ("run_id", "adapter", "prompt_id", "trial", "passed", "golden_passed", "judge_score", "failure_mode",
           "checks_passed", "checks_failed", "golden_reason", "input_tokens", "output_tokens",
           "judge_input_tokens", "judge_output_tokens", "cost_usd", "judge_cost_usd", "latency_ms",
           "finish_reason", "cached", "error_class", "error_message", "output")

_STR = (str, type(None))
# field -> (accepted check, what the message says)
_FIELDS: dict[str, tuple[Any, str]] = {
    "adapter": (lambda v: isinstance(v, str), "a string"),
    "prompt_id": (lambda v: isinstance(v, str), "a string"),
    "trial": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "passed": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "golden_passed": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "cached": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "judge_score": (lambda v: v is None or _finite(v), "a number or null"),
    "latency_ms": (lambda v: v is None or _finite(v), "a number or null"),
    "cost_usd": (lambda v: v is None or _finite(v), "a number or null"),
    "judge_cost_usd": (lambda v: v is None or _finite(v), "a number or null"),
    "input_tokens": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "output_tokens": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "judge_input_tokens": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "judge_output_tokens": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "attempts": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "failure_mode": (lambda v: isinstance(v, _STR), "a string or null"),
    "golden_reason": (lambda v: isinstance(v, _STR), "a string or null"),
    "judge_reason": (lambda v: isinstance(v, _STR), "a string or null"),
    "finish_reason": (lambda v: isinstance(v, _STR), "a string or null"),
    "output": (lambda v: isinstance(v, _STR), "a string or null"),
    "checks": (lambda v: v is None or (isinstance(v, list) and all(
        isinstance(c, dict) and isinstance(c.get("passed"), bool) and isinstance(c.get("kind"), str)
        and isinstance(c.get("reason", ""), str) for c in v)),
        "a list of {kind, passed, reason} or null"),
    "judge_criteria": (lambda v: v is None or (isinstance(v, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) for c in v)), "a list of {id, verdict, ...} or null"),
    "error": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("class", ""), str)
                                      and isinstance(v.get("message", ""), str)),
              "null or an object with string class and message"),
}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a number ({value!r})" if isinstance(value, (int, float)) else type(value).__name__)


def validate_outcomes(report: dict[str, Any], source: str) -> list[dict[str, Any]]:
    """The report's outcomes, each field checked; the first bad one is a UsageError (exit 2)."""
    outcomes = report["outcomes"]
    for i, outcome in enumerate(outcomes):
        for name, (ok, what) in _FIELDS.items():
            if name in outcome and not ok(outcome[name]):
                raise UsageError(f"{source}: outcomes[{i}].{name}: expected {what}, got {_kind(outcome[name])}; "
                                 "the report is damaged or not from evalfarm")
    for name in ("spec_name", "started_at", "finished_at"):
        if name in report and not isinstance(report[name], str):
            raise UsageError(f"{source}: {name}: expected a string, got {_kind(report[name])}")
    return outcomes


def row_of(run_id: str, o: dict[str, Any]) -> dict[str, Any]:
    checks = o.get("checks") or []
    error = o.get("error") or {}
    return {
        "run_id": run_id, "adapter": o["adapter"], "prompt_id": o["prompt_id"], "trial": o.get("trial", 0),
        "passed": o.get("passed", o.get("golden_passed")), "golden_passed": o.get("golden_passed"),
        "judge_score": o.get("judge_score"), "failure_mode": o.get("failure_mode"),
        "checks_passed": sum(1 for c in checks if c["passed"]), "checks_failed": sum(1 for c in checks if not c["passed"]),
        "golden_reason": o.get("golden_reason"),
        "input_tokens": o.get("input_tokens") or 0, "output_tokens": o.get("output_tokens") or 0,
        "judge_input_tokens": o.get("judge_input_tokens") or 0, "judge_output_tokens": o.get("judge_output_tokens") or 0,
        "cost_usd": o.get("cost_usd") or 0.0, "judge_cost_usd": o.get("judge_cost_usd") or 0.0,
        "latency_ms": o.get("latency_ms"), "finish_reason": o.get("finish_reason"), "cached": bool(o.get("cached")),
        "error_class": error.get("class") if error else None, "error_message": error.get("message") if error else None,
        "output": o.get("output"),
    }


def rows(report: dict[str, Any], source: str) -> list[dict[str, Any]]:
    outcomes = validate_outcomes(report, source)
    return [row_of(report["run_id"], o) for o in outcomes]


def jsonl_chunks(items: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for row in items:
        yield (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A cell a spreadsheet shows as text, never runs: text starting like a formula gets a leading
    quote (OWASP's CSV-injection advice); booleans are true/false, null is empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_chunks(items: Iterable[dict[str, Any]], batch: int = 500) -> Iterator[bytes]:
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for n, row in enumerate(items, start=1):
        writer.writerow([csv_cell(row[c]) for c in COLUMNS])
        if n % batch == 0:
            yield buf.getvalue().encode("utf-8")
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue().encode("utf-8")
