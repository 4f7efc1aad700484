"""The case format: a case is an input, weighted criteria and optional checks.

One case per file, a list of cases, or several YAML documents; a directory
means every *.yaml / *.yml in it. Cases become PromptSpecs: one item model for
both formats.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from ..errors import SpecError
from .models import Check, Criterion, PromptSpec, _Model
from .sourcemap import check_regular_file, dotted, line_for, load_yaml, read_text
from .validation import message


class CaseSpec(_Model):
    id: str = Field(min_length=1)
    input: str
    criteria: list[Criterion] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    system: str | None = None
    allow_truncation: bool = False

    def to_prompt(self) -> PromptSpec:
        return PromptSpec(id=self.id, text=self.input, criteria=self.criteria, checks=self.checks,
                          tags=self.tags, system=self.system, allow_truncation=self.allow_truncation)


def case_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
            if not found:
                raise SpecError("no *.yaml case files in this directory", path=str(p))
            out += found
        else:
            check_regular_file(p, "case file")
            out.append(p)
    return out


def _documents(text: str, path: Path) -> list[tuple[Any, dict]]:
    """Each YAML document with its own line map (lines counted from the file's start)."""
    docs: list[tuple[Any, dict]] = []
    offset = 0
    for chunk in _split_documents(text):
        data, lines = load_yaml(chunk, path)
        docs.append((data, {k: v + offset for k, v in lines.items()}))
        offset += chunk.count("\n")
    return docs


def _split_documents(text: str) -> list[str]:
    parts, current = [], []
    for line in text.splitlines(keepends=True):
        if line.rstrip() == "---" and current:
            parts.append("".join(current))
            current = ["\n"]  # keep line numbering: the separator line becomes blank
            continue
        current.append(line if line.rstrip() != "---" else "\n")
    parts.append("".join(current))
    return [p for p in parts if p.strip()] or [""]


def load_cases(paths: list[Path]) -> list[tuple[PromptSpec, str, int | None]]:
    """Validate case files; returns (prompt, file, line) for duplicate-id messages."""
    out: list[tuple[PromptSpec, str, int | None]] = []
    for path in case_files(paths):
        for data, lines in _documents(read_text(path), path):
            if data is None:
                continue
            entries = data.get("cases") if isinstance(data, dict) and "cases" in data else data
            if isinstance(entries, dict):
                entries, base = [entries], ()
            elif isinstance(entries, list):
                base = ("cases",) if isinstance(data, dict) else ()
            else:
                raise SpecError("a case file holds a case mapping, a list of cases or 'cases: [...]'",
                                path=str(path), line=1)
            for i, entry in enumerate(entries):
                loc = base + ((i,) if len(entries) > 1 or isinstance(data, list) or base else ())
                if not isinstance(entry, dict):
                    raise SpecError("a case must be a mapping with id and input", path=str(path),
                                    line=line_for(lines, loc))
                try:
                    case = CaseSpec.model_validate(entry)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    full = loc + tuple(err["loc"])
                    raise SpecError(message(err, CaseSpec), path=str(path), line=line_for(lines, full),
                                    field=dotted(tuple(err["loc"])) or None) from None
                out.append((case.to_prompt(), str(path), line_for(lines, loc + ("id",))))
    return out


def dump_case(case: dict[str, Any]) -> str:
    return yaml.safe_dump(case, sort_keys=False, allow_unicode=True, width=100)
