"""A report file's bytes: the head pretty-printed, then the outcome and prompt sections a line each."""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from ...canonical import canonical_json
from .model import RunReport

OUTCOMES_OPEN = ',\n  "outcomes": ['
PROMPTS_OPEN = b'\n  ],\n  "prompts": ['
REPORT_CLOSE = b"\n  ]\n}\n"
SECTIONS = ("outcomes", "prompts")


def head_bytes(head: dict[str, Any]) -> bytes:
    """The file's bytes up to the first outcome: the head, pretty-printed, and the list's opening."""
    text = json.dumps(head, indent=2, ensure_ascii=False)
    return (text[:-2] + OUTCOMES_OPEN).encode("utf-8")


def section_lines(lines: Iterable[str], first: bool) -> bytes:
    """Lines of a section (outcomes or prompts) as they follow each other in the file (``first``:
    nothing of the section precedes them)."""
    sep = ",\n    "
    body = sep.join(lines)
    return (("\n    " if first else sep) + body).encode("utf-8") if body else b""



def report_chunks(head: dict[str, Any], lines: Iterable[str], prompts: Iterable[str] = ()) -> Iterator[bytes]:
    """A whole report file from a head, outcome lines and prompt lines."""
    yield head_bytes(head)
    yield section_lines(list(lines), True)
    yield PROMPTS_OPEN
    yield section_lines(list(prompts), True)
    yield REPORT_CLOSE


def report_bytes(report: RunReport | dict[str, Any]) -> bytes:
    data = report.to_dict() if isinstance(report, RunReport) else dict(report)
    outcomes = data.pop("outcomes", None) or []
    prompts = data.pop("prompts", None) or []
    return b"".join(report_chunks(data, (json.dumps(o, ensure_ascii=False) for o in outcomes),
                                  (canonical_json(p) for p in prompts)))


def iter_outcome_lines(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The outcomes of a report file given as byte chunks (as the run store streams it), one line at a
    time: the file is never parsed whole. The file must be in this module's framing."""
    marker = OUTCOMES_OPEN.splitlines()[-1].strip().encode()  # the line the outcome lines follow
    started = False
    rest = b""
    for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            text = line.strip()
            if not started:
                started = text == marker
                continue
            if text.startswith(b"]"):
                return
            if text:
                yield json.loads(text.rstrip(b","))
    if not started:
        raise ValueError("not a report in evalfarm's framing (no outcomes section)")
