"""A saved report's case index (``<run_id>.index`` beside ``<run_id>.json``): which outcome is where.

A page of a million-item run needs the head, the chart figures, and the outcomes it lists; without
this file the dashboard reads the whole report once to learn where each outcome line starts (19 s for
1,000,000 items here). The aggregate of an archived run parses every outcome anyway, so it writes the
index as it goes; ``deliver`` puts it beside the saved report with the report's size, mtime and hash,
and a reader trusts it only while the report file is that same file.

The file: a magic line, a JSON header line (counts, names, figures, the report's identity), then the
columns as raw little-endian arrays in ``COLUMNS`` order: outcome line offsets and lengths, adapter,
case, trial, status, failure mode and latency per outcome, then prompt id, offset and length per
prompt. About 45 bytes an outcome.
"""
from __future__ import annotations

import json
import math
import sys
from array import array
from typing import Any, Iterator

MAGIC = b"evalfarm-report-index 1\n"
STATUSES = ("passed", "failed", "errored", "unknown")
HIST_BINS = 20
COLUMNS = (("offsets", "q"), ("lengths", "q"), ("adapter", "I"), ("case", "I"), ("trial", "I"), ("status", "B"),
           ("mode", "I"), ("latency", "d"))
PROMPT_COLUMNS = (("prompt_id", "I"), ("prompt_offsets", "q"), ("prompt_lengths", "q"))
LINE_INDENT = 4  # an outcome line is "    {json}," in the report file (core/report/framing.py)


def status_of(o: dict[str, Any]) -> str:
    if o.get("error"):
        return "errored"
    verdict = o.get("passed")
    if verdict is None:
        verdict = o.get("golden_passed")
    return "passed" if verdict is True else "failed" if verdict is False else "unknown"


def histogram(values: list[float], bins: int = HIST_BINS) -> dict[str, Any]:
    if not values:
        return {"edges": [], "counts": [], "n": 0}
    lo, hi = min(values), max(values)
    if hi <= lo:
        return {"edges": [lo, lo + 1.0], "counts": [len(values)], "n": len(values)}
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {"edges": [lo + i * width for i in range(bins + 1)], "counts": counts, "n": len(values)}


def cut_text(value: Any, limit: int) -> str:
    """A name as the pages show it (a non-string as JSON), at most ``limit`` characters."""
    if value is None:
        out = ""
    elif isinstance(value, str):
        out = value
    else:
        try:
            out = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            out = repr(value)
    return out[:limit]


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0
    return min(int(value), 2 ** 32 - 1)


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return math.nan
    return float(value)


class IndexWriter:
    """Fed each outcome line as the report's outcomes section is written (offsets relative to the
    section's start) and each prompt line; ``chunks`` gives the file once the head's size is known."""

    def __init__(self) -> None:
        self.cols = {name: array(code) for name, code in COLUMNS + PROMPT_COLUMNS}
        self.names: list[str] = [""]  # id 0: no failure mode
        self._ids: dict[str, int] = {"": 0}
        self.small: set[int] = {0}  # adapter and failure-mode ids: the pages look them up by name
        self.modes: dict[str, int] = {}
        self.statuses: dict[str, int] = {}

    def _id(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.names)
            self.names.append(name)
        return i

    def add(self, offset: int, length: int, o: dict[str, Any]) -> None:
        c = self.cols
        c["offsets"].append(offset)
        c["lengths"].append(length)
        a = self._id(cut_text(o.get("adapter"), 200))
        c["adapter"].append(a)
        c["case"].append(self._id(cut_text(o.get("prompt_id"), 500)))
        c["trial"].append(_count(o.get("trial")))
        status = status_of(o)
        c["status"].append(STATUSES.index(status))
        self.statuses[status] = self.statuses.get(status, 0) + 1
        mode_name = "" if o.get("failure_mode") is None else cut_text(o.get("failure_mode"), 60)
        m = self._id(mode_name)
        c["mode"].append(m)
        self.small.update((a, m))
        if mode_name:
            self.modes[mode_name] = self.modes.get(mode_name, 0) + 1
        c["latency"].append(_num(o.get("latency_ms")))

    def add_prompt(self, prompt_id: Any, offset: int, length: int) -> None:
        self._prompt_kept = isinstance(prompt_id, str)  # a prompt without a string id is not indexed
        if self._prompt_kept:
            self.cols["prompt_id"].append(self._id(prompt_id))
            self.cols["prompt_offsets"].append(offset)
            self.cols["prompt_lengths"].append(length)

    def last_line_has_no_comma(self, section: str = "outcomes") -> None:
        """The section's last line ends without the comma the others have."""
        lengths = self.cols["lengths" if section == "outcomes" else "prompt_lengths"]
        if len(lengths) and (section == "outcomes" or getattr(self, "_prompt_kept", False)):
            lengths[-1] -= 1

    def chunks(self, outcomes_at: int, prompts_at: int, report: dict[str, Any]) -> Iterator[bytes]:
        """The index file: ``outcomes_at``/``prompts_at``, where the sections start in the report file;
        ``report``: its identity (size, mtime_ns, inode, digest) so a reader can tell it is the same file."""
        c = self.cols
        for name, shift in (("offsets", outcomes_at), ("prompt_offsets", prompts_at)):
            c[name] = array("q", (x + shift for x in c[name]))
        figures = {"modes": self.modes, "statuses": self.statuses,
                   "latency": histogram([x for x in c["latency"] if not math.isnan(x)])}
        names = "\n".join(n.replace("\n", "\\n") for n in self.names).encode("utf-8", "surrogatepass")
        header = {"outcomes": len(c["offsets"]), "prompts": len(c["prompt_id"]), "names": len(self.names),
                  "names_bytes": len(names), "small": sorted(self.small), "figures": figures, "report": report,
                  "byteorder": sys.byteorder}
        yield MAGIC + json.dumps(header).encode() + b"\n"
        yield names
        for name, _ in COLUMNS + PROMPT_COLUMNS:
            yield c[name].tobytes()


def read_index(data: bytes) -> dict[str, Any]:
    """An index file's header, names and columns; ValueError when it is not one (a reader then
    indexes the report itself)."""
    if not data.startswith(MAGIC):
        raise ValueError("not an index file")
    at = len(MAGIC)
    nl = data.index(b"\n", at)
    header = json.loads(data[at:nl])
    if not isinstance(header, dict) or header.get("byteorder") != sys.byteorder:
        raise ValueError("not an index of this machine's byte order")
    n, p, n_names = int(header["outcomes"]), int(header["prompts"]), int(header["names"])
    at = nl + 1
    end = at + int(header["names_bytes"])
    names = data[at:end].decode("utf-8", "surrogatepass").split("\n")  # a name's own newline is written \\n
    if len(names) != n_names:
        raise ValueError("the index's names do not add up")
    at = end
    cols: dict[str, array] = {}
    for name, code in COLUMNS + PROMPT_COLUMNS:
        col = array(code)
        size = (n if name in dict(COLUMNS) else p) * col.itemsize
        col.frombytes(data[at:at + size])
        if len(col) * col.itemsize != size:
            raise ValueError("the index file is cut short")
        cols[name] = col
        at += size
    for name in ("adapter", "case", "mode", "prompt_id"):
        if len(cols[name]) and max(cols[name]) >= len(names):
            raise ValueError("the index names an unknown name")
    if len(cols["status"]) and max(cols["status"]) >= len(STATUSES):
        raise ValueError("the index has an unknown status")
    return {"header": header, "names": names, "cols": cols}
