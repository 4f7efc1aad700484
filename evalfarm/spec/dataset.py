"""Prompt datasets: JSONL streamed line by line, or case YAML; duplicate ids caught with both places.

A JSONL dataset is read as bytes and split on ``\\n`` only (a ``\\r`` inside a line is JSON
whitespace, not a line break), one line at a time, so 100,000 prompts never sit in memory.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pydantic import ValidationError

from ..errors import SpecError
from .cases import load_cases
from .models import PromptSpec
from .sourcemap import check_regular_file, dotted
from .validation import message

Origin = tuple[PromptSpec, str, "int | None"]  # (prompt, file, line) for error messages


def check_duplicates(origins: Iterable[Origin], again: "Callable[[], Iterable[Origin]] | None" = None) -> int:
    """Raises on the first duplicate id (naming where the first was); returns how many prompts.

    With ``again`` (the same origins once more: a streamed dataset is read again) only each id's hash
    is kept, about 64 bytes an id instead of ~150 (a million-prompt dataset: 64 MB, not 143): where a
    hash was seen before, ``again`` finds the id's first place, or shows the two ids only share a hash."""
    if again is not None:
        return _check_by_hash(origins, again)
    first: dict[str, str] = {}
    for prompt, path, line in origins:
        where = f"{path}:{line}" if line else path
        if prompt.id in first:
            raise SpecError(f"duplicate prompt id {prompt.id!r} (first defined at {first[prompt.id]}); "
                            "ids must be unique across inline prompts and the dataset",
                            path=path, line=line, field="id")
        first[prompt.id] = where
    return len(first)


def _check_by_hash(origins: Iterable[Origin], again: "Callable[[], Iterable[Origin]]") -> int:
    seen: set[int] = set()
    n = 0
    for prompt, path, line in origins:
        h = hash(prompt.id)
        if h in seen:
            for i, (other, o_path, o_line) in enumerate(again()):
                if i >= n:
                    break  # the id only shares its hash with an earlier one: not a duplicate
                if other.id == prompt.id:
                    raise SpecError(f"duplicate prompt id {prompt.id!r} (first defined at "
                                    f"{f'{o_path}:{o_line}' if o_line else o_path}); ids must be unique across "
                                    "inline prompts and the dataset", path=path, line=line, field="id")
        seen.add(h)
        n += 1
    return n


def is_case_yaml(path: Path) -> bool:
    return path.is_dir() or path.suffix in (".yaml", ".yml")


def load_any(path: Path) -> list[Origin]:
    """Every prompt of a case YAML file/folder, or of a JSONL file."""
    if is_case_yaml(path):
        return load_cases([path])
    return list(iter_jsonl(path))


def iter_jsonl(path: Path, spec_path: Path | None = None) -> Iterator[Origin]:
    """Stream a JSONL dataset; each non-blank line is one PromptSpec."""
    check_regular_file(path, "dataset file", str(spec_path or path), field="dataset" if spec_path else None)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield _parse_line(raw, path, lineno), str(path), lineno


def _parse_line(raw: bytes, path: Path, lineno: int) -> PromptSpec:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
                        path=str(path), line=lineno) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=str(path), line=lineno) from None
    except RecursionError:
        raise SpecError("invalid JSON: nested too deeply", path=str(path), line=lineno) from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit limit
        raise SpecError(f"invalid JSON: {str(exc).split(';')[0]}", path=str(path), line=lineno) from None
    if not isinstance(obj, dict):
        raise SpecError(f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=lineno)
    try:
        return PromptSpec.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SpecError(message(err, PromptSpec), path=str(path), line=lineno,
                        field=dotted(tuple(err["loc"])) or None) from None
    except RecursionError:
        raise SpecError("nested too deeply", path=str(path), line=lineno) from None
