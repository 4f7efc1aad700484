"""Each case's verdict in a run, as the registry keeps it for flake history.

A case is (adapter, case id); its verdict is pass^k over its trials (``core.verdict``):
``pass``, ``fail`` or ``unmeasured`` (no trial failed, one errored). The outcomes are read
from the report file a line at a time (the report writes one outcome per line), so a
100,000-item run is recorded without holding its report.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..core.verdict import case_verdict, item_passed

PASS, FAIL, UNMEASURED = "pass", "fail", "unmeasured"
OUTCOMES_LINE = '"outcomes": ['  # the line of a report file (core.report.head_bytes) the outcome lines follow


def word(verdict: bool | None) -> str:
    return UNMEASURED if verdict is None else (PASS if verdict else FAIL)


def case_rows(outcomes: Iterable[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    """(adapter, case id, verdict, trials) per case, in first-seen order."""
    trials: dict[tuple[str, str], list[bool | None]] = {}
    for o in outcomes:
        trials.setdefault((str(o["adapter"]), str(o["prompt_id"])), []).append(item_passed(o))
    return [(a, c, word(case_verdict(v)), len(v)) for (a, c), v in trials.items()]


def case_rows_of_file(path: Path) -> list[tuple[str, str, str, int]]:
    """``case_rows`` of a stored report, its outcomes read a line at a time; a file not in that layout
    (reformatted, or written by another tool) is read whole."""
    try:
        return case_rows(_outcome_lines(path))
    except ValueError:
        with open(path, encoding="utf-8") as fh:
            return case_rows(json.load(fh).get("outcomes") or [])


def _outcome_lines(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() == OUTCOMES_LINE:
                break
        else:
            raise ValueError("no outcomes line")
        for line in fh:
            text = line.strip()
            if text.startswith("]"):
                return
            item = json.loads(text.rstrip(","))
            if not isinstance(item, dict):
                raise ValueError("not an outcome")
            yield item
        raise ValueError("the outcomes never end")
