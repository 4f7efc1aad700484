"""A saved report read in one streaming pass: its head, then each outcome parsed as its line is read,
then its prompts, with the SHA-256 of every byte taken as it goes by (the hash the lineage stub and
the seal record, ``runs.trust``). gate, diff, rescore and export read a million-item run this way:
one outcome is held at a time, never the file.

The prompts come after the outcomes in the file but are needed beside them (to decide a verdict
again): a second cursor reads the prompts section from where it starts, in step with the outcomes
(both are in plan order), and keeps a prompt it passed only until an outcome asks for it. Its bytes
are checked against what the main cursor later reads (a digest of the section each), so what was
looked up is what was hashed.

A file not in the streamed layout (``core/report/framing.py``: reformatted, or written by another
tool) raises ``NotStreamed``; the caller then reads it whole, as before.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, BinaryIO, Iterator

from ..core.report.framing import OUTCOMES_OPEN, PROMPTS_OPEN

CHUNK = 1 << 20
OUTCOMES_LINE = OUTCOMES_OPEN.splitlines()[-1].encode()  # '  "outcomes": ['
PROMPTS_LINE = PROMPTS_OPEN.splitlines()[-1]  # '  "prompts": ['
SECTION_END = b"  ],"
FILE_END = b"  ]"
ITEM = b"    {"


def chunked_lines(fh: BinaryIO, digest: Any) -> Iterator[tuple[bytes, int]]:
    """(line without its newline, 1 if it had one) of ``fh``, read ``CHUNK`` bytes at a time, each chunk
    hashed into ``digest`` as it is read; a last piece without a newline comes with 0."""
    rest = b""
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            break
        digest.update(chunk)
        parts = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = parts.pop()
        for line in parts:
            yield line, 1
    if rest:
        yield rest, 0


class NotStreamed(ValueError):
    """The file is not in the layout the report writer streams; read it whole."""


class ChangedWhileRead(ValueError):
    """The prompts section read by the lookup cursor is not the one the hash covers."""


_scan = json.JSONDecoder().scan_once  # the C scanner: json.loads' per-call overhead is a third of a line's parse


def item_of(line: bytes) -> tuple[Any, bool]:
    """(the JSON value, whether a comma followed it) of one section line ``    {...}[,]``."""
    if not line.startswith(ITEM):
        raise NotStreamed("not an item line")
    try:
        text = line.decode("utf-8")
        value, end = _scan(text, 4)
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        raise NotStreamed("an item line is not JSON") from None
    if end == len(text):
        return value, False
    if end == len(text) - 1 and text[end] == ",":
        return value, True
    raise NotStreamed("more than one value on an item line")


class ReportStream:
    """One pass over a report file: ``head`` on open, then ``outcomes()``, then ``prompts()`` (or
    ``finish()`` to read the rest); ``digest`` once the file is read to its end.

    ``lookup`` opens the second cursor on the prompts section (``prompt(id)``): a function applied to
    each prompt as the cursor reads it, ``(index, stored prompt)`` -> what ``prompt`` returns (every
    prompt of the section goes through it once, looked up or not: it may check them), or True."""

    def __init__(self, path: os.PathLike | str, lookup: Any = False) -> None:
        self.path = path
        self._fh = open(path, "rb")
        self._hash = hashlib.sha256()
        self._section: Any = None  # the main cursor's digest of the prompts section, once in it
        self.pos = 0  # bytes of the file the lines yielded so far cover
        self._lines = self._read_lines()
        self.digest: str | None = None
        self.outcomes_read = 0
        self.line = b""
        self.prompts_read = 0
        self._cursor: _PromptCursor | None = None
        self._problem: str | None = None
        self._state = "head"
        try:
            self.head = self._read_head()
            if lookup:
                self._cursor = _PromptCursor(path, None if lookup is True else lookup)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._fh.close()
        if self._cursor is not None:
            self._cursor.close()

    def __enter__(self) -> "ReportStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _read_lines(self) -> Iterator[bytes]:
        """The file's lines (``chunked_lines``), counted in ``pos``; inside the prompts section each line
        is digested apart as well (``_section``)."""
        for line, newline in chunked_lines(self._fh, self._hash):
            self.pos += len(line) + newline
            if self._section is not None:
                self._section.update(line + b"\n" if newline else line)
            yield line

    def _read_head(self) -> dict[str, Any]:
        parts = []
        for line in self._lines:
            if line == OUTCOMES_LINE:
                break
            parts.append(line)
        else:
            raise NotStreamed("no outcomes line")
        text = b"\n".join(parts)
        if not text.endswith(b","):
            raise NotStreamed("the head does not end before the outcomes")
        try:
            head = json.loads(text[:-1] + b"\n}")
        except (ValueError, RecursionError):
            raise NotStreamed("the head is not JSON") from None
        if not isinstance(head, dict) or "outcomes" in head or "prompts" in head:
            raise NotStreamed("the head is not a report's head")
        self._state = "outcomes"
        return head

    def outcomes(self) -> Iterator[Any]:
        """Each outcome line parsed, in file order (a value that is not an object is yielded as is:
        the caller's schema check names it)."""
        if self._state != "outcomes":
            raise RuntimeError("outcomes already read")
        comma = True
        for line in self._lines:
            if line == SECTION_END:
                if comma and self.outcomes_read:
                    raise NotStreamed("a comma before the end of the outcomes")
                self._state = "prompts_open"
                return
            if not comma:
                raise NotStreamed("an outcome line without a comma before another")
            value, comma = item_of(line)
            self.outcomes_read += 1
            self.line = line  # the outcome's line as read (a sink may keep it rather than the object)
            yield value
        raise NotStreamed("the outcomes never end")

    def prompts(self, parse: bool = True) -> Iterator[Any]:
        """Each prompt of the prompts section, in file order (after ``outcomes()``, read to their end
        here if the caller did not)."""
        if self._state == "outcomes":
            for _ in self.outcomes():
                pass
        if self._state != "prompts_open":
            raise RuntimeError("prompts already read")
        if next(self._lines, None) != PROMPTS_LINE:
            raise NotStreamed("no prompts section after the outcomes")
        if self._cursor is not None and self._cursor.start != self.pos:
            raise NotStreamed("the prompts section is not where the lookup found it")
        self._section = hashlib.sha256()
        comma = True
        for line in self._lines:
            if line == FILE_END:
                if comma and self.prompts_read:
                    raise NotStreamed("a comma before the end of the prompts")
                break
            if not comma:
                raise NotStreamed("a prompt line without a comma before another")
            if parse:
                value, comma = item_of(line)
                if self._problem is None and not (isinstance(value, dict) and isinstance(value.get("id"), str)):
                    self._problem = "prompts is not a list of prompts with ids"
            elif line.startswith(ITEM):
                value, comma = None, line.endswith(b",")
            else:
                raise NotStreamed("not an item line")
            self.prompts_read += 1
            yield value
        else:
            raise NotStreamed("the prompts never end")
        tail, more = next(self._lines, None), next(self._lines, None)  # never more than one line is held
        if tail != b"}" or more is not None or self.pos != os.fstat(self._fh.fileno()).st_size:
            raise NotStreamed("something after the report's end")
        self._state = "done"
        self.digest = "sha256:" + self._hash.hexdigest()
        if self._cursor is not None and self._cursor.section_digest() != self._section.hexdigest():
            raise ChangedWhileRead(f"{self.path}: changed while it was being read; try again")

    def finish(self) -> str:
        """Read what is left (the digest covers the whole file); returns ``sha256:<hex>``. With the
        lookup cursor, the prompt lines are parsed by it (once each), here only their framing is checked."""
        if self._state != "done":
            for _ in self.prompts(parse=self._cursor is None):
                pass
        return self.digest  # type: ignore[return-value]

    @property
    def prompts_problem(self) -> str | None:
        """After ``finish``: what makes the section not a list of prompts with ids, else None."""
        return self._cursor.problem if self._cursor is not None else self._problem

    def open_lookup(self, convert: Any = None) -> bool:
        """Open the second cursor (see ``lookup``) once the head is read; False when the prompts
        section is empty (nothing to look up)."""
        if self._cursor is None:
            self._cursor = _PromptCursor(self.path, convert)
        return not self._cursor.empty

    def prompt(self, prompt_id: str) -> Any:
        """The prompt with this id (what ``lookup`` made of it; the stored object for True), or None."""
        assert self._cursor is not None
        got = self._cursor.find(prompt_id)
        return None if got is None else got[2]


def _section_start(fh: BinaryIO) -> int:
    """Where the prompts section's first line starts: the last ``PROMPTS_OPEN`` of the file, found
    reading backwards (no outcome or prompt line can hold it: their newlines are escaped)."""
    size = fh.seek(0, 2)
    end, tail = size, b""
    while end > 0:
        start = max(0, end - CHUNK)
        fh.seek(start)
        block = fh.read(end - start) + tail
        at = block.rfind(PROMPTS_OPEN + b"\n")
        if at >= 0:
            return start + at + len(PROMPTS_OPEN) + 1
        tail, end = block[:len(PROMPTS_OPEN) + 1], start
    raise NotStreamed("no prompts section")


class _PromptCursor:
    """The prompts section read from its start, in step with the outcomes: ``find`` reads on until
    the prompt asked for, keeping the prompts it passed (an outcome later may answer one of them:
    then the map is the price of a file not in plan order). Holds one prompt in the normal case."""

    def __init__(self, path: os.PathLike | str, convert: Any = None) -> None:
        self._convert = convert
        self._fh = open(path, "rb")
        self.start = _section_start(self._fh)
        self._fh.seek(self.start)
        self.empty = self._fh.read(len(FILE_END) + 1) == FILE_END + b"\n"
        self._fh.seek(self.start)
        self._hash = hashlib.sha256()
        self._lines = self._read_lines()
        self._current: tuple[int, Any, Any] | None = None  # the prompt the last outcome answered
        self._all: dict[str, tuple[int, Any, Any]] | None = None  # every prompt, once the order failed
        self._index = 0
        self._done = False
        self.problem: str | None = None

    def close(self) -> None:
        self._fh.close()

    def _read_lines(self) -> Iterator[bytes]:
        return (line for line, _ in chunked_lines(self._fh, self._hash))

    def _next(self) -> tuple[int, Any, Any] | None:
        if self._done:
            return None
        line = next(self._lines, None)
        if line is None or line == FILE_END:
            self._done = True
            return None
        value, _ = item_of(line)
        if self.problem is None and not (isinstance(value, dict) and isinstance(value.get("id"), str)):
            self.problem = "prompts is not a list of prompts with ids"
        self._index += 1
        if self._convert is not None:
            return self._index - 1, value, self._convert(self._index - 1, value)
        return self._index - 1, value, value

    def find(self, prompt_id: str) -> tuple[int, Any, Any] | None:
        if self._all is not None:
            return self._all.get(prompt_id)
        if self._current is not None and self._current[1].get("id") == prompt_id:
            return self._current  # several outcomes answer one prompt (adapters, trials)
        while (got := self._next()) is not None:
            if isinstance(got[1], dict) and got[1].get("id") == prompt_id:
                self._current = got
                return got
        return self._whole().get(prompt_id)  # not ahead: the outcomes are not in plan order

    def _whole(self) -> dict[str, tuple[int, Any, Any]]:
        """Every prompt by id (the first of a duplicated id), read again from the section's start:
        the fallback for a file whose outcomes are not in its prompts' order."""
        self.section_digest()
        self._fh.seek(self.start)
        first, self._hash = self._hash, hashlib.sha256()
        self._lines, self._index, self._done, self._all = self._read_lines(), 0, False, {}
        while (got := self._next()) is not None:
            if isinstance(got[1], dict) and isinstance(got[1].get("id"), str):
                self._all.setdefault(got[1]["id"], got)
        if self.section_digest() != first.hexdigest():
            raise ChangedWhileRead(f"{self._fh.name}: changed while it was being read; try again")
        return self._all

    def section_digest(self) -> str:
        """The SHA-256 of the section's bytes, from its first line to the file's end; the prompts not
        looked up are parsed on the way (the file must be JSON throughout)."""
        while self._next() is not None:
            pass
        for _ in self._lines:
            pass
        return self._hash.hexdigest()
