"""The prompts a run asks, in plan order: one object every planning path reads.

``PromptSource`` holds the spec's inline prompts and its dataset (a JSONL file is
re-read on each pass rather than held, so 100,000 prompts never sit in memory; case
YAML is held), narrowed by ``--tag``/``--case`` and with a prompt-store version
applied to each prompt as it is read. The spec itself never changes: the Python API,
``run``, the selftest and the farm all plan from a source, so they plan the same prompts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from ..errors import SpecError
from .dataset import iter_jsonl
from .models import PromptSpec
from .prompts import PromptVersion


@dataclass(frozen=True)
class PromptSource:
    inline: tuple[PromptSpec, ...] = ()
    loaded: tuple[PromptSpec, ...] = ()  # a case-YAML dataset, held
    stream: Path | None = None  # a JSONL dataset, validated at load and re-read on every pass
    count: int = 0  # prompts after selection
    tags: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    version: PromptVersion | None = None
    checked: bool = False  # ``stream`` was written by evalfarm from prompts it checked (runs.rescore)

    def raw(self) -> Iterator[PromptSpec]:
        """Every prompt as written (inline first), before selection and versions."""
        yield from self.inline
        yield from self.loaded
        if self.stream is not None and self.checked:  # parsed in pydantic-core: twice as fast as loads + validate
            with open(self.stream, "rb") as fh:
                for line in fh:
                    yield PromptSpec.model_validate_json(line)
        elif self.stream is not None:
            for prompt, _, _ in iter_jsonl(self.stream):
                yield prompt

    def selected(self) -> Iterator[PromptSpec]:
        """The prompts --tag/--case keep, before the prompt version (what the dataset hash covers)."""
        for p in self.raw():
            if self._keeps(p):
                yield p

    def __iter__(self) -> Iterator[PromptSpec]:
        if self.version is None:
            yield from self.selected()
            return
        for p in self.selected():
            yield self.version.apply(p)

    def __len__(self) -> int:
        return self.count

    def _keeps(self, p: PromptSpec) -> bool:
        if self.cases and p.id not in self.cases:
            return False
        return not self.tags or bool(set(p.tags) & set(self.tags))

    def select(self, tags: tuple[str, ...] = (), cases: tuple[str, ...] = ()) -> "PromptSource":
        """Only prompts carrying one of ``tags`` and/or named in ``cases``; an unknown case id or an
        empty selection is an error (one pass over the prompts)."""
        if not tags and not cases:
            return self
        narrowed = replace(self, tags=tuple(tags), cases=tuple(cases))
        known: set[str] = set()
        count = 0
        for p in self.raw():
            known.add(p.id)
            count += narrowed._keeps(p)
        unknown = [c for c in cases if c not in known]
        if unknown:
            listed = ", ".join(sorted(known)[:10]) + (", ..." if len(known) > 10 else "")
            raise SpecError(f"--case {unknown[0]!r}: no such case id (known: {listed})")
        if not count:
            raise SpecError(f"no case left after --tag {', '.join(tags)}" if tags else "no case selected")
        return replace(narrowed, count=count)

    def with_version(self, version: PromptVersion | None) -> "PromptSource":
        return replace(self, version=version)
