"""Loading A/B inputs: variant files, task files and suites, with ``file:line: field: message`` errors.

- a variant file: ``name``, ``prompt`` and optionally ``model``;
- a tasks file (variant mode): a top-level ``tasks:`` list of ``id``, ``input``, ``expected``;
- a suite (suite mode): the same ``tasks:`` list, plus optional ``name`` (default: the file's
  stem) and ``scorer`` (``contains`` by default, ``exact`` or ``none``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..canonical import content_key
from ..errors import SpecError
from ..names import label_problem
from ..spec.sourcemap import line_for, load_yaml, read_text
from ..spec.validation import spec_error

Scorer = Literal["exact", "contains", "none"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _label(value: str | None) -> str | None:
    """Names and ids are printed in rows: no tab, newline or other control character."""
    problem = None if value is None else label_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class Task(_Model):
    id: str = Field(min_length=1)
    input: str
    expected: str | None = None  # required unless the suite's scorer is none

    @field_validator("id")
    @classmethod
    def _no_slash(cls, value: str) -> str:
        if "/" in value or not value.strip():
            raise ValueError("task id must be non-blank and must not contain '/'")
        return _label(value)


class Variant(_Model):
    name: str = Field(min_length=1)
    prompt: str
    model: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return _label(value)


class TaskFile(_Model):
    tasks: list[Task] = Field(min_length=1)


class Suite(_Model):
    name: str | None = None
    scorer: Scorer = "contains"
    tasks: list[Task] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return _label(value)

    def content_hash(self) -> str:
        """What the suite asks, independent of YAML formatting."""
        return content_key({"name": self.name, "scorer": self.scorer,
                            "tasks": [t.model_dump() for t in self.tasks]})


def _validate(model: type[_Model], path: Path, what: str) -> _Model:
    data, lines = load_yaml(read_text(path), path)
    if not isinstance(data, dict):
        raise SpecError(f"a {what} must be a YAML mapping", path=str(path), line=1)
    try:
        obj = model.model_validate(data)
    except ValidationError as exc:  # the spec's own one-line errors (spec/validation.py)
        raise spec_error(exc, model, str(path), lines,
                         hints={"tasks": "add at least one task with id, input and expected"}) from None
    tasks = getattr(obj, "tasks", None) or []
    first: dict[str, int | None] = {}
    for i, task in enumerate(tasks):
        line = line_for(lines, ("tasks", i, "id"))
        if task.id in first:
            raise SpecError(f"duplicate task id {task.id!r} (first on line {first[task.id]}); ids must be unique",
                            path=str(path), line=line, field=f"tasks[{i}].id")
        first[task.id] = line
    scorer = getattr(obj, "scorer", "exact")  # a tasks file (variant mode) is always scored
    for i, task in enumerate(tasks):
        if task.expected is None and scorer != "none":
            raise SpecError(f"required with scorer {scorer!r}: the expected answer (or set scorer: none in a suite)",
                            path=str(path), line=line_for(lines, ("tasks", i)), field=f"tasks[{i}].expected")
    return obj


def load_variant(path: Path | str) -> Variant:
    return _validate(Variant, Path(path), "variant file")  # type: ignore[return-value]


def load_tasks(path: Path | str) -> list[Task]:
    return list(_validate(TaskFile, Path(path), "tasks file").tasks)  # type: ignore[attr-defined]


def load_suite(path: Path | str) -> Suite:
    path = Path(path)
    suite = _validate(Suite, path, "suite")
    if suite.name is None:  # type: ignore[attr-defined]
        if label_problem(path.stem):
            raise SpecError(f"the file name {path.stem!r} cannot name the suite ({label_problem(path.stem)}); "
                            "add a 'name:'", path=str(path), line=1)
        suite = suite.model_copy(update={"name": path.stem})
    return suite  # type: ignore[return-value]
