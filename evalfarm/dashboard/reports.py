"""Report files read for pages: the head, an index of the outcomes, and one outcome at a time.

evalfarm writes a report as its head (pretty-printed), then one outcome per line, then one prompt
per line (``core.report.framing``). A page needs the head and the outcomes it shows, so a report is
read once, a chunk (256 KiB) at a time, into an ``Index``: where each outcome line starts and the few
fields the pages filter and count by (adapter, case, trial, status, failure mode, latency), kept in
arrays; the charts' figures are counted on the way, and the file's SHA-256 too (a report that no
longer matches its lineage stub is flagged). A page then reads only its outcomes from the file.

Memory, per report: its index, about 40 bytes an outcome plus each distinct adapter and case
name once (a 10,000-case run: well under 2 MB); per request, the outcomes shown, each parsed whole
only up to ``jsonscan.MAX_LINE`` (1 MiB), a longer one skimmed with every string cut; an output is
shown up to ``SHOWN_CHARS`` characters and downloaded whole as a stream. A file not in this layout
(reformatted, written by another tool) is parsed whole only up to ``WHOLE_LIMIT`` bytes.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from ..core.report.index import STATUSES, histogram, status_of  # noqa: F401  (one definition, the index's)
from . import jsonscan, safe

HEAD_LIMIT = 8 << 20  # the head: everything before the outcomes
WHOLE_LIMIT = 16 << 20  # a file not in evalfarm's layout is parsed whole up to this size
SHOWN_CHARS = 64 * 1024  # of an output on a page; the rest is a download
PREVIEW_CHARS = 160
HIST_BINS = 20
OUTCOMES_LINE = b'"outcomes": ['
PROMPTS_LINE = b'"prompts": ['


class ReportError(Exception):
    """A stored report that cannot be shown (unreadable, not JSON, not a report, too big)."""


def stat_key(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def read_head(path: Path) -> dict[str, Any] | None:
    """The report without its outcomes and prompts (everything before ``"outcomes": [``), or None when
    the file is not in the layout evalfarm writes. Reads at most ``HEAD_LIMIT`` bytes."""
    with open(path, "rb") as fh:
        head = bytearray()
        for line in _head_lines(fh):
            if line.strip() == OUTCOMES_LINE:
                return _parse_head(bytes(head))
            head += line
            if len(head) > HEAD_LIMIT:  # no head of evalfarm's: parsed whole, if small enough (_index_whole)
                return None
    return None


def _head_lines(fh: BinaryIO) -> Iterator[bytes]:
    """Lines of the head, each cut at ``HEAD_LIMIT`` (a longer line is no head line of ours)."""
    while True:
        line = fh.readline(HEAD_LIMIT + 1)
        if not line:
            return
        yield line


def _parse_head(head: bytes) -> dict[str, Any] | None:
    body = head.rstrip()
    if body.endswith(b","):
        body = body[:-1]
    try:
        data = jsonscan.loads(body + b"\n}")
    except jsonscan.TooBig as exc:
        if "deeper" in str(exc):
            raise ReportError(f"the report's head is {exc}") from None
        return None
    return data if isinstance(data, dict) else None


@dataclass
class Index:
    """Where each outcome is in the file, and what the pages filter and count by."""

    head: dict[str, Any]
    digest: str  # sha256: of the file's bytes
    source: str  # "file", or "memory" for a report not in evalfarm's layout (re-laid out in ``blob``)
    offsets: array = field(default_factory=lambda: array("q"))
    lengths: array = field(default_factory=lambda: array("q"))
    adapter: array = field(default_factory=lambda: array("I"))
    case: array = field(default_factory=lambda: array("I"))
    trial: array = field(default_factory=lambda: array("I"))
    status: array = field(default_factory=lambda: array("B"))
    mode: array = field(default_factory=lambda: array("I"))
    latency: array = field(default_factory=lambda: array("d"))
    names: list[str] = field(default_factory=list)  # adapter and case names and failure modes, each once
    prompts: dict[str, tuple[int, int]] = field(default_factory=dict)  # prompt id -> (offset, length)
    # outcomes skimmed at index time (a line over 1 MiB, or nested too deeply): where each value is, so
    # a page reads a value, not the line
    spans: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    blob: bytes | None = None
    narrow: bool = False  # adapter and failure-mode ids are all below 256 (a saved index, checked on load)
    _ids: dict[str, int] = field(default_factory=dict)
    _figures: dict[str, Any] | None = None

    def name_id(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.names)
            self.names.append(name)
        return i

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, offset: int, length: int, o: dict[str, Any]) -> None:
        self.offsets.append(offset)
        self.lengths.append(length)
        self.adapter.append(self.name_id(safe.text(o.get("adapter"), 200)))
        self.case.append(self.name_id(safe.text(o.get("prompt_id"), 500)))
        self.trial.append(min(safe.count(o.get("trial")), 2 ** 32 - 1))
        self.status.append(STATUSES.index(status_of(o)))
        self.mode.append(self.name_id(safe.opt_text(o.get("failure_mode"), 60) or ""))  # "" (id 0): none
        lat = safe.num(o.get("latency_ms"))
        self.latency.append(math.nan if lat is None else lat)

    def figures(self) -> dict[str, Any]:
        """The run page's chart figures: failure modes, statuses, the latency histogram (counted once)."""
        if self._figures is None:
            self._figures = self._count()
        return self._figures

    def _count(self) -> dict[str, Any]:
        modes: dict[str, int] = {}
        for m in self.mode:
            name = self.names[m]
            if name:
                modes[name] = modes.get(name, 0) + 1
        statuses: dict[str, int] = {}
        for s in self.status:
            statuses[STATUSES[s]] = statuses.get(STATUSES[s], 0) + 1
        return {"modes": modes, "statuses": statuses,
                "latency": histogram([x for x in self.latency if not math.isnan(x)])}

    def mode_name(self, i: int) -> str | None:
        return self.names[self.mode[i]] or None


def _lines(fh: BinaryIO, digest) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, length, bytes or None when longer than jsonscan.MAX_LINE) of every line, the file read
    a chunk at a time (``digest`` sees every byte)."""
    pos = 0
    start = 0
    pending: bytearray | None = bytearray()
    while True:
        chunk = fh.read(jsonscan.CHUNK)
        if not chunk:
            break
        digest.update(chunk)
        at = 0
        while True:
            nl = chunk.find(b"\n", at)
            piece = chunk[at:] if nl < 0 else chunk[at:nl]
            if pending is not None:
                if len(pending) + len(piece) > jsonscan.MAX_LINE:
                    pending = None
                else:
                    pending += piece
            if nl < 0:
                break
            end = pos + nl
            yield start, end - start, (bytes(pending) if pending is not None else None)
            start, at, pending = end + 1, nl + 1, bytearray()
        pos += len(chunk)
    if pos > start:
        yield start, pos - start, (bytes(pending) if pending is not None else None)


def _line_json(raw: bytes) -> bytes:
    body = raw.strip()
    return body[:-1] if body.endswith(b",") else body


class _LazyPrompts(dict):
    """prompt id -> (offset, length) from a saved index's columns, made into a dict on first use (a
    million prompts: the run page never asks, a case page once)."""

    def __init__(self, names: list[str], cols: dict[str, array]) -> None:
        super().__init__()
        self._src: tuple | None = (names, cols["prompt_id"], cols["prompt_offsets"], cols["prompt_lengths"])

    def _fill(self) -> None:
        if self._src is not None:
            names, ids, offs, lens = self._src
            self._src = None
            for i in range(len(ids) - 1, -1, -1):  # the first occurrence wins, as in _index_layout
                self[names[ids[i]]] = (offs[i], lens[i])

    def get(self, key, default=None):
        self._fill()
        return super().get(key, default)

    def __bool__(self) -> bool:
        return self._src is not None and len(self._src[1]) > 0 or super().__len__() > 0


def saved_index_path(path: Path) -> Path:
    return path.with_name(path.name[:-5] + ".index")


def load_index(path: Path, key: tuple[int, int, int]) -> Index | None:
    """The index saved beside the report (``core/report/index.py``, written when an archived run is
    delivered), if it is there and describes this very file (size, mtime, inode); None otherwise."""
    from ..core.report.index import read_index

    side = saved_index_path(path)
    try:
        data = side.read_bytes()
        got = read_index(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    header, names, cols = got["header"], got["names"], got["cols"]
    ident = header.get("report") or {}
    if (ident.get("size"), ident.get("mtime_ns"), ident.get("ino")) != key or not isinstance(ident.get("digest"), str):
        return None
    head = read_head(path)
    if head is None:
        return None
    index = Index(head=head, digest=ident["digest"], source="file",
                  **{name: cols[name] for name in ("offsets", "lengths", "adapter", "case", "trial", "status",
                                                   "mode", "latency")})
    index.names = names  # cut as the pages cut them when the index was written
    index._ids = {names[i]: i for i in range(len(header["small"]))}  # adapters and failure modes
    index.narrow = True
    index.prompts = _LazyPrompts(names, cols)
    figures = header.get("figures") or {}
    index._figures = {"modes": safe.mapping(figures.get("modes")), "statuses": safe.mapping(figures.get("statuses")),
                      "latency": safe.mapping(figures.get("latency")) or histogram([])}
    return index


def build_index(path: Path, size: int) -> Index:
    """One pass over the file: head, outcome index, prompt index, digest (see the module docstring)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        index = _index_layout(fh, digest)
        if index is None:
            fh.seek(0)
            return _index_whole(fh, size)
        return index


def _index_layout(fh: BinaryIO, digest) -> Index | None:
    head = bytearray()
    lines = _lines(fh, digest)
    for off, length, raw in lines:
        if raw is None or len(head) + length > HEAD_LIMIT:
            return None
        if raw.strip() == OUTCOMES_LINE:
            break
        head += raw + b"\n"
    else:
        return None
    data = _parse_head(bytes(head))
    if data is None:
        return None
    index = Index(head=data, digest="", source="file")
    index.name_id("")  # failure mode 0: none
    section = "outcomes"
    bad = 0
    for off, length, raw in lines:
        text = raw.strip() if raw is not None else b"{"
        if section == "outcomes":
            if text in (b"],", b"]"):
                section = "between"
                continue
            o, spans = _outcome_at(fh, off, length, raw)
            if o is None:
                bad += 1
                continue
            if spans is not None:
                index.spans[len(index)] = spans
            index.add(off, length, o)
        elif section == "between":
            if text == PROMPTS_LINE:
                section = "prompts"
        elif section == "prompts":
            if text in (b"]", b"],"):
                section = "tail"
                continue
            pid = _prompt_id(fh, off, length, raw)
            if pid is not None:
                index.prompts.setdefault(pid, (off, length))
    for _ in lines:  # the rest of the file, for the digest
        pass
    index.digest = "sha256:" + digest.hexdigest()
    if bad:
        index.problems.append(f"{bad} outcome(s) are not JSON objects and are not shown")
    return index


def _outcome_at(fh: BinaryIO, off: int, length: int, raw: bytes | None
                ) -> tuple[dict[str, Any] | None, dict[str, tuple[int, int]] | None]:
    """(the fields the index keeps, from a line of the outcomes section (None: not an outcome); where
    each value is when the line had to be skimmed)."""
    if raw is not None:
        try:
            o = jsonscan.loads(_line_json(raw))
            return (o if isinstance(o, dict) else None), None
        except jsonscan.TooBig as exc:
            if "deeper" not in str(exc):
                return None, None
            # nested too deeply somewhere: skimmed like a long line (the deep value is dropped)
    pos = fh.tell()
    skim = jsonscan.Skim(fh, off, off + length)
    try:
        o, _, _ = skim.read(keep=600)  # names are cut at 500 (safe.text)
    except jsonscan.TooBig:
        return None, None
    finally:
        fh.seek(pos)
    return o, skim.spans


def _prompt_id(fh: BinaryIO, off: int, length: int, raw: bytes | None) -> str | None:
    o, _ = _outcome_at(fh, off, length, raw)
    pid = o.get("id") if isinstance(o, dict) else None
    return pid if isinstance(pid, str) else None


def _index_whole(fh: BinaryIO, size: int) -> Index:
    """A report not in evalfarm's layout: parsed whole (up to WHOLE_LIMIT), then laid out one outcome
    and one prompt per line in memory, so the pages read it like any other."""
    if size > WHOLE_LIMIT:
        raise ReportError(f"not in the layout evalfarm writes, and {size >> 20} MiB: the dashboard parses such a "
                          f"file whole only up to {WHOLE_LIMIT >> 20} MiB")
    raw = fh.read(WHOLE_LIMIT + 1)
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    try:
        data = jsonscan.loads(raw)
    except jsonscan.TooBig as exc:
        raise ReportError(str(exc)) from None
    if not isinstance(data, dict):
        raise ReportError("not a JSON object")
    outcomes = safe.seq(data.get("outcomes"))
    prompts = safe.seq(data.get("prompts"))
    head = {k: v for k, v in data.items() if k not in ("outcomes", "prompts")}
    index = Index(head=head, digest=digest, source="memory")
    index.name_id("")
    blob = io.BytesIO()
    bad = 0
    for o in outcomes:
        if not isinstance(o, dict):
            bad += 1
            continue
        line = json.dumps(o, ensure_ascii=False).encode("utf-8")
        index.add(blob.tell(), len(line), o)
        blob.write(line + b"\n")
    for p in prompts:
        if isinstance(p, dict) and isinstance(p.get("id"), str):
            line = json.dumps(p, ensure_ascii=False).encode("utf-8")
            index.prompts.setdefault(p["id"], (blob.tell(), len(line)))
            blob.write(line + b"\n")
    if isinstance(data.get("prompts"), dict):  # an older report's map of prompts by id
        for pid, p in data["prompts"].items():
            line = json.dumps(p if isinstance(p, dict) else {"text": p}, ensure_ascii=False).encode("utf-8")
            index.prompts.setdefault(safe.text(pid), (blob.tell(), len(line)))
            blob.write(line + b"\n")
    index.blob = blob.getvalue()
    if bad or (data.get("outcomes") is not None and not isinstance(data.get("outcomes"), list)):
        index.problems.append(f"{bad} outcome(s) are not JSON objects and are not shown" if bad
                              else "outcomes is not a list: no case is shown")
    return index


@dataclass
class Item:
    """One outcome as read for a page: its values (strings cut), and what was cut."""

    values: dict[str, Any]
    cut: dict[str, int]  # key -> length in bytes of a string that was cut
    dropped: dict[str, str]  # key -> why a nested value is not shown


def read_item(path: Path, index: Index, i: int, keep: int = SHOWN_CHARS) -> Item:
    """Outcome ``i`` of the report: parsed whole when its line is short, skimmed otherwise; strings
    longer than ``keep`` characters cut."""
    return read_items(path, index, [i], keep)[0]


def read_items(path: Path, index: Index, ids: list[int], keep: int = SHOWN_CHARS) -> list[Item]:
    """Outcomes ``ids`` (a page of them), read through one open file in file order."""
    out: dict[int, Item] = {}
    with _open(path, index) as fh:
        for i in sorted(set(ids)):
            spans = index.spans.get(i)
            if spans is not None:  # a line too long (or too deep) to parse: its values read one by one
                try:
                    out[i] = Item(*jsonscan.read_spans(fh, spans, keep))
                except jsonscan.TooBig as exc:
                    raise ReportError(f"an outcome of this report cannot be shown ({exc})") from None
            else:
                out[i] = _read(fh, index.offsets[i], index.lengths[i], keep)
    return [out[i] for i in ids]


def read_prompt(path: Path, index: Index, prompt_id: str, keep: int = SHOWN_CHARS) -> Item | None:
    where = index.prompts.get(prompt_id)
    if where is None:
        return None
    with _open(path, index) as fh:
        return _read(fh, where[0], where[1], keep)


def _read(fh: BinaryIO, off: int, length: int, keep: int) -> Item:
    """One line: parsed whole when short, skimmed otherwise."""
    if length <= jsonscan.MAX_LINE:
        fh.seek(off)
        raw = fh.read(length)
        try:
            o = jsonscan.loads(_line_json(raw))
        except jsonscan.TooBig as exc:
            if "deeper" not in str(exc):
                raise ReportError(f"an outcome of this report cannot be shown ({exc})") from None
            o = None  # nested too deeply somewhere: skimmed below (the deep value is dropped)
        if o is not None:
            if not isinstance(o, dict):
                raise ReportError("an outcome of this report is not a JSON object")
            cut = {}
            for k, v in o.items():
                if isinstance(v, str) and len(v) > keep:
                    cut[k] = len(v.encode("utf-8"))
                    o[k] = v[:keep]
            return Item(o, cut, {})
    try:
        o, cut, dropped = jsonscan.Skim(fh, off, off + length).read(keep=keep)
    except jsonscan.TooBig as exc:
        raise ReportError(f"an outcome of this report cannot be shown ({exc})") from None
    return Item(o, cut, dropped)


class _open:
    def __init__(self, path: Path, index: Index) -> None:
        self.path, self.index = path, index

    def __enter__(self) -> BinaryIO:
        self.fh = io.BytesIO(self.index.blob) if self.index.blob is not None else open(self.path, "rb")
        return self.fh

    def __exit__(self, *exc: Any) -> None:
        self.fh.close()


def iter_output(path: Path, index: Index, i: int, key: str = "output") -> Iterator[str] | None:
    """Outcome ``i``'s ``key`` string decoded a piece at a time (a download: never held whole); None
    when it has none."""
    off, length = index.offsets[i], index.lengths[i]
    fh = io.BytesIO(index.blob) if index.blob is not None else open(path, "rb")
    span = (index.spans.get(i) or {}).get(key)
    try:
        if span is not None:  # known from the index: straight to it
            fh.seek(span[0])
            stream = jsonscan.stream_span(fh, *span) if fh.read(1) == b'"' else None
        else:
            stream = jsonscan.iter_string(fh, off, off + length, key)
    except jsonscan.TooBig:
        fh.close()
        return None
    if stream is None:
        fh.close()
        return None

    def pieces() -> Iterator[str]:
        try:
            yield from stream
        finally:
            fh.close()
    return pieces()


def lineage_problem(path: Path, digest: str) -> str | None:
    """Why the report does not match the lineage stub saved beside it, if it does not."""
    stub = path.with_name(path.name[:-5] + ".lineage.json")
    try:
        if stub.stat().st_size > 1 << 16:
            return "its lineage stub is not one (too big)"
        recorded = json.loads(stub.read_bytes()).get("content_hash")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError, RecursionError):
        return "its lineage stub is unreadable"
    if recorded != digest:
        return (f"edited after it was saved: the file hashes to {digest[:19]}..., its lineage stub records "
                f"{safe.text(recorded, 19)}... (gate, diff and baseline refuse it)")
    return None


def file_size(path: Path) -> int:
    return os.stat(path).st_size
