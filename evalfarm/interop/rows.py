"""A stored run as flat rows (one per item) for spreadsheets and pandas: JSONL and CSV.

Reports are untrusted input: every field a row uses is type-checked first, so a wrong type is
one line naming the item and field (exit 2), never a traceback or half an output file.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any, Iterable, Iterator


COLUMNS = ("run_id", "adapter", "prompt_id", "trial", "passed", "golden_passed", "judge_score", "failure_mode",
           "checks_passed", "checks_failed", "golden_reason", "input_tokens", "output_tokens",
           "judge_input_tokens", "judge_output_tokens", "cost_usd", "judge_cost_usd", "latency_ms",
           "finish_reason", "cached", "error_class", "error_message", "output")

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


def rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per item of a report checked on load (``load_report``)."""
    return [row_of(report["run_id"], o) for o in report["outcomes"]]


class RowWriter:
    """The rows of a report read as a stream, written to ``out`` (a binary file) as its outcomes
    arrive, as JSONL or CSV: the same bytes as ``jsonl_chunks``/``csv_chunks`` of ``rows``."""

    def __init__(self, out: Any, fmt: str, batch: int = 500) -> None:
        self.out, self.fmt, self.batch, self.n = out, fmt, batch, 0
        self.run_id = ""
        self.buf = io.StringIO()
        self.writer = csv.writer(self.buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")

    def start(self, head: dict[str, Any]) -> None:
        self.run_id = head["run_id"]
        if self.fmt == "csv":
            self.writer.writerow(COLUMNS)

    def add(self, o: dict[str, Any], new: dict[str, Any] | None = None) -> None:
        row = row_of(self.run_id, o)
        if self.fmt == "jsonl":
            self.buf.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        else:
            self.writer.writerow([csv_cell(row[c]) for c in COLUMNS])
        self.n += 1
        if self.n % self.batch == 0:
            self.flush()

    def flush(self) -> None:
        self.out.write(self.buf.getvalue().encode("utf-8"))
        self.buf.seek(0)
        self.buf.truncate()


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
