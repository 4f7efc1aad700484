"""Load YAML while remembering the line of every node, so errors can name it.

``load_yaml`` returns ``(data, lines)`` where ``lines`` maps a path tuple such as
``("prompts", 0, "expected_output_regex")`` to its 1-based line number.
"""
from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError

Path_ = tuple[Any, ...]
MAX_BYTES = 16 << 20  # a YAML (or prompt text) file; bigger datasets are JSONL, streamed
MAX_DEPTH = 100  # nesting levels; a spec needs fewer than 10, Python's recursion limit allows ~400
MAX_NODES = 1_000_000  # values in one document, counting each alias as the values it expands to


def read_text(path: Path, check_only: bool = False) -> str:
    """Read a file as UTF-8, failing with the line of the first bad byte. A device is refused and
    at most MAX_BYTES are read (``/dev/zero`` or a huge file never fills memory); a pipe is read
    like a file, within the same limit."""
    try:
        if stat.S_ISCHR(path.stat().st_mode) or stat.S_ISBLK(path.stat().st_mode):
            raise SpecError("is a device; give a regular file", path=str(path))
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecError("file not found", path=str(path)) from None
    except IsADirectoryError:
        raise SpecError("is a directory, expected a file", path=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if len(raw) > MAX_BYTES:
        raise SpecError(f"larger than {MAX_BYTES >> 20} MiB, the limit for a YAML or text input; split it "
                        "(a folder of case files) or use a JSONL dataset", path=str(path))
    try:
        text = raw.decode("utf-8")
        return "" if check_only else text
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
                        path=str(path), line=line) from None


def check_regular_file(path: Path, what: str, where: str | None = None, line: int | None = None,
                       field: str | None = None) -> None:
    """A dataset must be a regular file: a FIFO or a device (/dev/zero) would block or never end."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SpecError(f"{what} not found: {path}", path=where or str(path), line=line, field=field) from None
    except OSError as exc:
        raise SpecError(f"{what} {path}: cannot read: {exc.strerror}", path=where or str(path), line=line,
                        field=field) from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "not a regular file"
        raise SpecError(f"{what} {path} is {kind}; give a regular file", path=where or str(path), line=line,
                        field=field)



class _Loader(yaml.SafeLoader):
    """SafeLoader with limits an untrusted document cannot get past: duplicate mapping keys are
    refused (a silent overwrite hides typos), keys are scalars, nesting stops at MAX_DEPTH (before
    Python's recursion limit), and the nodes composed stop at MAX_NODES."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        self._nodes += 1
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                  self.peek_event().start_mark)
            if self._nodes > MAX_NODES:
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES:,} values in one document",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _no_dup_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base': merged keys may be overridden
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain value, not a list or mapping", key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    loader.flatten_mapping(node)
    for key_node, _ in node.value:  # keys a merge brought in
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain value, not a list or mapping", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_dup_mapping)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Aliases make the node graph a DAG whose expansion can be exponential (a "billion laughs"
    document is 1 KB): count the expanded size from the graph, never by expanding it."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        nid = id(node)
        if finished:
            on_path.discard(nid)
            size[nid] = 1 + sum(size[id(k)] for k in _children(node))
            if size[nid] > MAX_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"aliases expand to more than {MAX_NODES:,} values (an alias bomb?); "
                    "refusing the document", node.start_mark)
            continue
        if nid in size:
            continue
        if nid in on_path:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a value that contains it",
                                              node.start_mark)
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    stack = [(node, path)]
    while stack:
        node, path = stack.pop()
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                lines[path + (key_node.value,)] = key_node.start_mark.line + 1
                stack.append((value_node, path + (key_node.value,)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, path + (i,)) for i, child in enumerate(node.value))


def load_yaml(text: str, path: Path) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML text; malformed YAML, and a document past the limits (size, nesting, values,
    alias expansion), raise SpecError with its line."""
    if len(text) > MAX_BYTES:
        raise SpecError(f"larger than {MAX_BYTES >> 20} MiB, the limit for a YAML document", path=str(path))
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        _check_expansion(node)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        raise SpecError(f"invalid YAML: {problem}", path=str(path), line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}", path=str(path)) from None
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", path=str(path)) from None
    finally:
        loader.dispose()
    lines: dict[Path_, int] = {}
    _walk(node, (), lines)
    return data, lines


def line_for(lines: dict[Path_, int], loc: Path_) -> int | None:
    """The line of ``loc`` or of its nearest ancestor that has one."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def dotted(loc: Path_) -> str:
    """``("prompts", 0, "id")`` -> ``prompts[0].id``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
