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


def read_text(path: Path, check_only: bool = False) -> str:
    """Read a file as UTF-8, failing with the line of the first bad byte."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError("file not found", path=str(path)) from None
    except IsADirectoryError:
        raise SpecError("is a directory, expected a file", path=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", path=str(path)) from None
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
    """SafeLoader that refuses duplicate mapping keys (a silent overwrite hides typos)."""


def _no_dup_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_dup_mapping)


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[path + (key,)] = key_node.start_mark.line + 1
            _walk(value_node, path + (key,), lines)
            lines[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _walk(child, path + (i,), lines)


def load_yaml(text: str, path: Path) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML text; malformed YAML raises SpecError with its line."""
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        raise SpecError(f"invalid YAML: {problem}", path=str(path), line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}", path=str(path)) from None
    lines: dict[Path_, int] = {}
    if node is not None:
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
