"""JSON read with bounded memory: a depth check before parsing, and a skimmer for values too big to hold.

A report's outcome is one line of its file. A line up to ``MAX_LINE`` bytes is parsed whole (C speed)
after ``too_deep`` has made sure no array or object nests deeper than ``MAX_DEPTH`` (Python's parser
would raise RecursionError, and anything that walked the value later could too). A longer line (one
output of 300 MB) is never read whole: ``Skim`` walks it from the file a chunk at a time, keeping the
first characters of each string, the small values as they are, and no container bigger or deeper
than its caps; ``iter_string`` streams one top-level string out of it, decoded, for a download.
"""
from __future__ import annotations

import json
import re
from typing import Any, BinaryIO, Iterator

MAX_DEPTH = 64  # arrays and objects nested deeper are not shown
MAX_LINE = 1 << 20  # an outcome line up to this many bytes is parsed whole
CHUNK = 256 << 10  # read a quarter of a megabyte at a time: the transient per request stays small
CONTAINER_CAP = 256 << 10  # a nested value in a skimmed line bigger than this is not shown

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")
_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)  # a JSON string's body up to its closing quote
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}$")
_WS = b" \t\r\n"
_END = b",}] \t\r\n"


class TooBig(ValueError):
    """A value that cannot be shown within the caps (nested too deeply, or not JSON)."""


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Does any array or object in the JSON text ``data`` nest deeper than ``limit``? Brackets inside
    strings do not count; a text with few brackets is answered without looking further."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    for m in _BRACKETS.finditer(_STRINGS.sub(b'""', data)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads(data: bytes, limit: int = MAX_DEPTH) -> Any:
    """``json.loads`` of a bounded text, refusing one nested deeper than ``limit`` (TooBig)."""
    if too_deep(data, limit):
        raise TooBig(f"nested deeper than {limit} levels")
    try:
        return json.loads(data)
    except RecursionError:
        raise TooBig(f"nested deeper than {limit} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise TooBig(f"not JSON ({exc})") from None


def _scan(buf: bytes, i: int) -> tuple[int, bool]:
    """In a JSON string's body from ``buf[i]``: (the index of its closing quote, True), or (how far the
    body surely goes in this buffer, False), leaving a trailing run of backslashes for the next chunk.
    Quotes are found with ``bytes.find`` (memchr speed) and checked for an escaping backslash; a body
    dense with escaped quotes or long backslash runs goes to the regex (C speed either way)."""
    j = i
    for _ in range(64):
        q = buf.find(b'"', j)
        if q < 0:
            t = len(buf)
            while t > j and buf[t - 1] == 0x5C and len(buf) - t < 64:
                t -= 1
            if len(buf) - t >= 64:
                break
            return t, False
        k = q
        while k > i and buf[k - 1] == 0x5C and q - k < 64:
            k -= 1
        if q - k >= 64:
            break
        if (q - k) % 2 == 0:
            return q, True
        j = q + 1
    end = _BODY.match(buf, j).end()
    return end, end < len(buf) and buf[end] == 0x22


def safe_cut(b: bytes) -> int:
    """Where a piece of a JSON string's raw body can end so that it decodes on its own: not inside an
    escape, between the halves of a surrogate pair, or inside a UTF-8 character."""
    n = cut = len(b)
    j = b.rfind(b"\\", max(0, n - 12))
    if j >= 0:
        k = j
        while k > 0 and b[k - 1] == 0x5C:
            k -= 1
        if (j - k + 1) % 2:  # an odd run: the last backslash starts an escape
            need = 6 if j + 1 < n and b[j + 1:j + 2] == b"u" else 2
            if n - j < need:
                cut = j
    if _HIGH_SURROGATE.search(b, 0, cut) and _starts_escape(b, cut - 6):
        cut -= 6  # keep a surrogate pair together
    i = cut - 1
    while i >= max(0, cut - 4) and (b[i] & 0xC0) == 0x80:
        i -= 1
    if i >= 0 and b[i] >= 0xC0:
        need = 2 if b[i] < 0xE0 else 3 if b[i] < 0xF0 else 4
        if cut - i < need:
            cut = i
    return cut


def _starts_escape(b: bytes, at: int) -> bool:
    if at < 0 or b[at] != 0x5C:
        return False
    k = at
    while k > 0 and b[k - 1] == 0x5C:
        k -= 1
    return (at - k) % 2 == 0


def decode_piece(raw: bytes) -> str:
    """A piece of a JSON string's body (cut with ``safe_cut``) as text."""
    try:
        return json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", "replace")


class _Reader:
    """Bytes ``[start, end)`` of a file, a chunk at a time."""

    def __init__(self, fh: BinaryIO, start: int, end: int) -> None:
        fh.seek(start)
        self.fh, self.left = fh, end - start
        self.buf, self.i = b"", 0
        self.base = start  # the file offset of buf[0]

    def fill(self) -> bool:
        """Read the next chunk, keeping what is not consumed yet; False at the end."""
        if self.left <= 0:
            return False
        chunk = self.fh.read(min(CHUNK, self.left))
        if not chunk:
            self.left = 0
            return False
        self.left -= len(chunk)
        self.base += self.i
        self.buf, self.i = self.buf[self.i:] + chunk, 0
        return True

    def pos(self) -> int:
        """The file offset of the next byte."""
        return self.base + self.i

    def peek(self) -> int | None:
        while self.i >= len(self.buf):
            if not self.fill():
                return None
        return self.buf[self.i]

    def skip_ws(self) -> int | None:
        while True:
            c = self.peek()
            if c is None or c not in _WS:
                return c
            self.i += 1

    def expect(self, byte: bytes) -> None:
        if self.skip_ws() != byte[0]:
            raise TooBig(f"not JSON (expected {byte.decode()!r})")
        self.i += 1

    def string(self, keep: int) -> tuple[bytes, int]:
        """After the opening quote: (the first ``keep`` bytes of the body, the body's length in bytes);
        consumes the closing quote."""
        kept, total = bytearray(), 0
        while True:
            if self.i >= len(self.buf) and not self.fill():
                raise TooBig("not JSON (a string never ends)")
            end, closing = _scan(self.buf, self.i)
            if len(kept) < keep:
                kept += self.buf[self.i:min(end, self.i + keep - len(kept))]
            total += end - self.i
            self.i = end
            if closing:
                self.i += 1
                return bytes(kept), total
            if not self.fill():  # the body goes on in the next chunk (a trailing backslash's escape too)
                raise TooBig("not JSON (a string never ends)")

    def stream_string(self) -> Iterator[str]:
        """After the opening quote: the string decoded, a piece at a time; consumes the closing quote."""
        carry = b""
        while True:
            if self.i >= len(self.buf) and not self.fill():
                raise TooBig("not JSON (a string never ends)")
            end, closing = _scan(self.buf, self.i)
            piece = carry + self.buf[self.i:end]
            self.i = end
            if closing:
                self.i += 1
                if piece:
                    yield decode_piece(piece)
                return
            cut = safe_cut(piece)
            if cut:
                yield decode_piece(piece[:cut])
            carry = piece[cut:]  # a lone backslash at the end of the chunk stays in it for the next
            if not self.fill():
                raise TooBig("not JSON (a string never ends)")

    def scalar(self) -> Any:
        token = bytearray()
        while True:
            c = self.peek()
            if c is None or c in _END:
                break
            token.append(c)
            self.i += 1
            if len(token) > 400:
                raise TooBig("not JSON (a value too long to be a number)")
        try:
            return json.loads(bytes(token))
        except ValueError:
            raise TooBig(f"not JSON ({bytes(token[:40])!r})") from None

    def container(self, cap: int, depth_cap: int) -> tuple[bytes | None, str | None]:
        """The raw bytes of the array or object starting here, or (None, why) when it is bigger than
        ``cap`` bytes or nests deeper than ``depth_cap`` (consumed either way)."""
        out: bytearray | None = bytearray()
        why = None
        depth = 0
        while True:
            c = self.peek()
            if c is None:
                raise TooBig("not JSON (an array or object never ends)")
            if c == 0x22:
                self.i += 1
                body, total = self.string(cap + 1 if out is not None else 0)
                if out is not None:
                    if total > cap or len(out) + total + 2 > cap:
                        out, why = None, f"bigger than {cap >> 10} KiB"
                    else:
                        out += b'"' + body + b'"'
                continue
            self.i += 1
            if out is not None:
                out.append(c)
                if len(out) > cap:
                    out, why = None, f"bigger than {cap >> 10} KiB"
            if c in (0x5B, 0x7B):
                depth += 1
                if depth > depth_cap and out is not None:
                    out, why = None, f"nested deeper than {depth_cap} levels"
            elif c in (0x5D, 0x7D):
                depth -= 1
                if depth == 0:
                    return (bytes(out) if out is not None else None), why


class Skim:
    """A JSON object read from bytes ``[start, end)`` of ``fh`` without holding it: each top-level
    string cut to ``keep`` characters (``cut`` says which were cut and their length in bytes), each
    nested value kept only up to ``CONTAINER_CAP`` bytes and ``MAX_DEPTH`` levels (``dropped`` says
    which were not, and why)."""

    def __init__(self, fh: BinaryIO, start: int, end: int) -> None:
        self.r = _Reader(fh, start, end)

    def _keys(self) -> Iterator[str]:
        """Each top-level key, the reader left before its value."""
        r = self.r
        r.expect(b"{")
        if r.skip_ws() == 0x7D:
            return
        while True:
            r.expect(b'"')
            raw, total = r.string(4096)
            if total > 4096:
                raise TooBig("not an outcome (a key of more than 4 KiB)")
            r.expect(b":")
            yield decode_piece(raw)
            c = r.skip_ws()
            if c == 0x2C:
                r.i += 1
                continue
            if c == 0x7D:
                r.i += 1
                return
            raise TooBig("not JSON (expected ',' or '}')")

    def read(self, keep: int) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
        """(the object with its values cut, key -> length in bytes of each cut string, key -> why a
        nested value was dropped). ``spans`` then holds where each value is in the file (start, end),
        so it can be read again without walking the object (``read_spans``)."""
        out: dict[str, Any] = {}
        cut: dict[str, int] = {}
        dropped: dict[str, str] = {}
        r = self.r
        self.spans: dict[str, tuple[int, int]] = {}
        for key in self._keys():
            c = r.skip_ws()
            start = r.pos()
            self._value(key, c, keep, out, cut, dropped)
            self.spans[key] = (start, r.pos())
        return out, cut, dropped

    def _value(self, key: str, c: int | None, keep: int, out: dict[str, Any], cut: dict[str, int],
               dropped: dict[str, str]) -> None:
        r = self.r
        if c == 0x22:
            r.i += 1
            raw, total = r.string(keep * 12 + 16)  # a character is at most 12 bytes (a surrogate pair escaped)
            text = decode_piece(raw[:safe_cut(raw)] if total > len(raw) else raw)
            if total > len(raw) or len(text) > keep:
                cut[key] = total
            out[key] = text[:keep]
        elif c in (0x5B, 0x7B):
            body, why = r.container(CONTAINER_CAP, MAX_DEPTH)
            if body is None:
                out[key], dropped[key] = None, why or "too big"
            else:
                out[key] = loads(body)
        else:
            out[key] = r.scalar()

    def string_of(self, key: str) -> Iterator[str] | None:
        """The top-level string ``key``, decoded a piece at a time (None when the object has no such
        string): for a download that never holds it."""
        r = self.r
        for k in self._keys():
            c = r.skip_ws()
            if k == key:
                if c != 0x22:
                    return None
                r.i += 1
                return r.stream_string()
            if c == 0x22:
                r.i += 1
                r.string(0)
            elif c in (0x5B, 0x7B):
                r.container(0, 1 << 30)
            else:
                r.scalar()
        return None


def read_spans(fh: BinaryIO, spans: dict[str, tuple[int, int]], keep: int
               ) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
    """What ``Skim.read`` returns, from the value spans it recorded: each value read on its own, a big
    string only as far as ``keep`` characters go (a page of a 300 MB output reads 800 KB, not 300 MB)."""
    out: dict[str, Any] = {}
    cut: dict[str, int] = {}
    dropped: dict[str, str] = {}
    for key, (start, end) in spans.items():
        fh.seek(start)
        first = fh.read(1)
        if first == b'"':
            raw = fh.read(min(end - start - 2, keep * 12 + 16))
            whole = len(raw) == end - start - 2
            text = decode_piece(raw if whole else raw[:safe_cut(raw)])
            if not whole or len(text) > keep:
                cut[key] = end - start - 2
            out[key] = text[:keep]
        elif first in (b"[", b"{"):
            if end - start > CONTAINER_CAP:  # say which cap it broke first: depth shows in its first bytes
                deep = too_deep(first + fh.read(CONTAINER_CAP - 1))
                out[key] = None
                dropped[key] = f"nested deeper than {MAX_DEPTH} levels" if deep else \
                    f"bigger than {CONTAINER_CAP >> 10} KiB"
                continue
            try:
                out[key] = loads(first + fh.read(end - start - 1))
            except TooBig as exc:
                out[key], dropped[key] = None, str(exc)
        else:
            try:
                out[key] = json.loads(first + fh.read(min(end - start - 1, 400)))
            except ValueError:
                out[key] = None
    return out, cut, dropped


def stream_span(fh: BinaryIO, start: int, end: int) -> Iterator[str]:
    """The JSON string at ``[start, end)`` (quotes included), decoded a piece at a time."""
    r = _Reader(fh, start, end)
    r.expect(b'"')
    return r.stream_string()


def iter_string(fh: BinaryIO, start: int, end: int, key: str) -> Iterator[str] | None:
    """The top-level string ``key`` of the JSON object at ``[start, end)`` of ``fh``, decoded piece by
    piece; None when there is none."""
    return Skim(fh, start, end).string_of(key)
