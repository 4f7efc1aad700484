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


def cut_text(value: Any, limit: int | None) -> str:
    """A name as the pages show it (a non-string as JSON), at most ``limit`` characters (None: whole)."""
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
    section's start) and each prompt line; ``chunks`` gives the file once the head's size is known.

    Flat in memory whatever the run's size: the columns spill to temporary files every ``SPILL``
    entries; only adapter and failure-mode names are kept (a case name is written once per run of
    consecutive outcomes of that case, which plan order makes one per case and adapter)."""

    SPILL = 1 << 16

    def __init__(self) -> None:
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="evalfarm-index-")
        self.cols = {name: array(code) for name, code in COLUMNS + PROMPT_COLUMNS}
        self.counts = {name: 0 for name, _ in COLUMNS + PROMPT_COLUMNS}
        self._files = {name: open(f"{self._dir.name}/{name}", "w+b") for name, _ in COLUMNS + PROMPT_COLUMNS}
        self._names = open(f"{self._dir.name}/names", "w+b")  # case and prompt names, one a line
        self.n_names = 0
        self.small: list[str] = [""]  # adapter and failure-mode names (id 0: no failure mode)
        self._small_ids: dict[str, int] = {"": 0}
        self._last_case: str | None = None
        self.modes: dict[str, int] = {}
        self.statuses: dict[str, int] = {}
        self._prompt_kept = False

    def _small(self, name: str) -> int:
        i = self._small_ids.get(name)
        if i is None:
            i = self._small_ids[name] = len(self.small)
            self.small.append(name)
        return i

    def _name(self, name: str) -> int:
        """A case or prompt name's sequence number among the written names."""
        self._names.write(name.replace("\n", "\\n").encode("utf-8", "surrogatepass") + b"\n")
        self.n_names += 1
        return self.n_names - 1

    def _push(self, name: str, value) -> None:
        col = self.cols[name]
        col.append(value)
        if len(col) >= self.SPILL:
            self._spill(name)

    def _spill(self, name: str) -> None:
        col = self.cols[name]
        self._files[name].write(col.tobytes())
        self.counts[name] += len(col)
        self.cols[name] = array(col.typecode)

    def add(self, offset: int, length: int, o: dict[str, Any]) -> None:
        self._push("offsets", offset)
        self._push("lengths", length)
        self._push("adapter", self._small(cut_text(o.get("adapter"), 200)))
        case = cut_text(o.get("prompt_id"), 500)
        if case != self._last_case:
            self._last_case, self._case_id = case, self._name(case)
        self._push("case", self._case_id)
        self._push("trial", _count(o.get("trial")))
        status = status_of(o)
        self._push("status", STATUSES.index(status))
        self.statuses[status] = self.statuses.get(status, 0) + 1
        mode_name = "" if o.get("failure_mode") is None else cut_text(o.get("failure_mode"), 60)
        self._push("mode", self._small(mode_name))
        if mode_name:
            self.modes[mode_name] = self.modes.get(mode_name, 0) + 1
        self._push("latency", _num(o.get("latency_ms")))

    def add_prompt(self, prompt_id: Any, offset: int, length: int) -> None:
        self._prompt_kept = isinstance(prompt_id, str)  # a prompt without a string id is not indexed
        if self._prompt_kept:
            self._push("prompt_id", self._name(prompt_id))
            self._push("prompt_offsets", offset)
            self._push("prompt_lengths", length)

    def last_line_has_no_comma(self, section: str = "outcomes") -> None:
        """The section's last line ends without the comma the others have."""
        name = "lengths" if section == "outcomes" else "prompt_lengths"
        if section == "prompts" and not self._prompt_kept:
            return
        col = self.cols[name]
        if len(col):
            col[-1] -= 1
        elif self.counts[name]:  # the last entry is already on disk
            fh, size = self._files[name], array("q").itemsize
            fh.seek(-size, 2)
            last = array("q", fh.read(size))
            fh.seek(-size, 2)
            fh.write(array("q", [last[0] - 1]).tobytes())
            fh.seek(0, 2)

    def _column(self, name: str, shift: int = 0, chunk: int = 1 << 16) -> Iterator[array]:
        self._spill(name)
        fh = self._files[name]
        fh.flush()
        fh.seek(0)
        code = dict(COLUMNS + PROMPT_COLUMNS)[name]
        size = array(code).itemsize
        while True:
            data = fh.read(chunk * size)
            if not data:
                return
            col = array(code, data)
            yield array(code, (x + shift for x in col)) if shift else col

    def _latency_histogram(self) -> dict[str, Any]:
        lo, hi, n = math.inf, -math.inf, 0
        for col in self._column("latency"):
            for x in col:
                if not math.isnan(x):
                    lo, hi, n = min(lo, x), max(hi, x), n + 1
        if not n:
            return histogram([])
        if hi <= lo:
            return {"edges": [lo, lo + 1.0], "counts": [n], "n": n}
        width = (hi - lo) / HIST_BINS
        counts = [0] * HIST_BINS
        for col in self._column("latency"):
            for x in col:
                if not math.isnan(x):
                    counts[min(HIST_BINS - 1, int((x - lo) / width))] += 1
        return {"edges": [lo + i * width for i in range(HIST_BINS + 1)], "counts": counts, "n": n}

    def chunks(self, outcomes_at: int, prompts_at: int, report: dict[str, Any]) -> Iterator[bytes]:
        """The index file: ``outcomes_at``/``prompts_at``, where the sections start in the report file;
        ``report``: its identity (size, mtime_ns, inode, digest) so a reader can tell it is the same file.
        Names: the adapter and failure-mode names first, then the case and prompt names."""
        try:
            small = "\n".join(n.replace("\n", "\\n") for n in self.small).encode("utf-8", "surrogatepass")
            self._names.flush()
            names_bytes = len(small) + (self._names.tell() if self.n_names else 0)  # "\n" + names - the last "\n"
            figures = {"modes": self.modes, "statuses": self.statuses, "latency": self._latency_histogram()}
            for name in self.cols:
                self._spill(name)
            header = {"outcomes": self.counts["offsets"], "prompts": self.counts["prompt_id"],
                      "names": len(self.small) + self.n_names, "names_bytes": names_bytes,
                      "small": list(range(len(self.small))), "figures": figures, "report": report,
                      "byteorder": sys.byteorder}
            yield MAGIC + json.dumps(header).encode() + b"\n"
            yield small
            if self.n_names:
                self._names.seek(0)
                rest = self._names.read(1 << 20)
                yield b"\n"
                while rest:
                    more = self._names.read(1 << 20)
                    yield rest if more else rest[:-1]  # the last name has no newline after it
                    rest = more
            shift = {"offsets": outcomes_at, "prompt_offsets": prompts_at, "case": len(self.small),
                     "prompt_id": len(self.small)}
            for name, _ in COLUMNS + PROMPT_COLUMNS:
                for col in self._column(name, shift.get(name, 0)):
                    yield col.tobytes()
        finally:
            for fh in self._files.values():
                fh.close()
            self._names.close()
            self._dir.cleanup()


class Names:
    """An index's names: the adapter and failure-mode names split at once, the case and prompt names
    (a million of them) only when a page first asks for one; an id past the end reads as ""."""

    def __init__(self, blob: bytes, n: int, n_small: int) -> None:
        self.n, self.small, at = n, [], 0
        for _ in range(min(n_small, n)):
            nl = blob.find(b"\n", at)
            nl = len(blob) if nl < 0 else nl
            self.small.append(blob[at:nl].decode("utf-8", "surrogatepass"))
            at = nl + 1
        self._blob: bytes | None = blob[at:]
        self._rest: list[str] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> str:
        if 0 <= i < len(self.small):
            return self.small[i]
        if self._blob is not None:
            self._rest = self._blob.decode("utf-8", "surrogatepass").split("\n") if self._blob else []
            self._blob = None
        j = i - len(self.small)
        return self._rest[j] if 0 <= j < len(self._rest) else ""


def _only_below(col: array, limit: int) -> bool:
    """Every value of an unsigned column is below ``limit`` (<= 256), checked in C: the low byte of
    each value is one of 0 .. limit - 1 and the other bytes are zero."""
    data, size = col.tobytes(), col.itemsize
    low = 0 if sys.byteorder == "little" else size - 1
    for k in range(size):
        part = data[k::size]
        if part.translate(None, bytes(range(limit))) if k == low else part.strip(b"\0"):
            return False
    return True


def read_index(data: bytes) -> dict[str, Any]:
    """An index file's header, names and columns; ValueError when it is not one (a reader then
    indexes the report itself). Checked so that a page cannot be sent astray by it: adapter, status
    and failure-mode values name something, a case or prompt id past the names reads as ""."""
    if not data.startswith(MAGIC):
        raise ValueError("not an index file")
    at = len(MAGIC)
    nl = data.index(b"\n", at)
    header = json.loads(data[at:nl])
    if not isinstance(header, dict) or header.get("byteorder") != sys.byteorder:
        raise ValueError("not an index of this machine's byte order")
    n, p, n_names = int(header["outcomes"]), int(header["prompts"]), int(header["names"])
    n_small = len(header.get("small") or [])
    if not 0 < n_small <= 256:
        raise ValueError("the index has too many adapter and failure-mode names")
    at = nl + 1
    end = at + int(header["names_bytes"])
    names = Names(data[at:end], n_names, n_small)  # a name's own newline is written \\n
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
    if not (_only_below(cols["adapter"], n_small) and _only_below(cols["mode"], n_small)
            and _only_below(cols["status"], len(STATUSES))):
        raise ValueError("the index names an unknown adapter, failure mode or status")
    return {"header": header, "names": names, "cols": cols}
