"""Pydantic errors turned into one line that names the field the user wrote, and its line."""
from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import SpecError
from .sourcemap import dotted, line_for


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Allowed field names of the model that owns ``loc``'s last part."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = _model_in(field.annotation)
    return sorted(current.model_fields) if current else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found:
            return found
    return None


def message(err: dict, model: type[BaseModel], hints: dict[str, str] | None = None) -> str:
    """One pydantic error as a sentence a user can act on (``hints``: what to add, by list field name)."""
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        allowed = _fields_at(model, tuple(err["loc"]))
        name = err["loc"][-1] if err["loc"] else ""
        close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.6) if allowed else []
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown field{hint}; allowed fields are {', '.join(allowed)}" if allowed else "unknown field"
    if kind == "missing":
        return "required field is missing"
    last = err["loc"][-1] if err["loc"] else None
    if kind == "too_short" and hints and last in hints and isinstance(err.get("input"), list):
        return f"the '{last}' list is empty; {hints[last]}"
    msg = msg.removeprefix("Value error, ")
    if kind not in ("value_error", "assertion_error") and "input" in err and not isinstance(err["input"], (dict, list)):
        shown = repr(err["input"])
        msg += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return msg


_UNION_TAGS = {"str", "AdapterSpec", "JudgeSpec", "PromptSpec"}
_VALIDATOR_TAG = re.compile(r"(\w+)\]+$")  # the model a validator wraps, last in the tag


def _tag(part: Any) -> Any:
    """A union branch's tag as its model name (``function-after[_v(), function-before[_w(), AdapterSpec]]``
    -> ``AdapterSpec``): a model with validators is tagged by them."""
    m = _VALIDATOR_TAG.search(part) if isinstance(part, str) and part.startswith("function-") else None
    return m.group(1) if m else part


def useful_errors(errors: list[dict]) -> list[dict]:
    """For ``str | AdapterSpec`` entries pydantic reports both branches; keep the branch that
    matches what the user wrote (a mapping is an adapter object) and drop the union tags from
    the location, so the message names the real field and line."""
    kept = []
    for err in errors:
        loc = tuple(_tag(p) for p in err["loc"])
        if "str" in loc and isinstance(err.get("input"), dict):
            continue
        if "AdapterSpec" in loc and loc[-1] == "AdapterSpec" and isinstance(err.get("input"), str):
            continue
        err = dict(err, loc=tuple(p for p in loc if p not in _UNION_TAGS or not isinstance(p, str)))
        kept.append(err)
    return kept or errors


def spec_error(exc: ValidationError, model: type[BaseModel], path: str | None, lines: dict | None,
               base: tuple = (), hints: dict[str, str] | None = None) -> SpecError:
    """The first useful error of ``exc`` as a SpecError naming file, line and field. A misspelt field
    comes first: it explains the "required field is missing" that usually comes with it."""
    errors = useful_errors(exc.errors())
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = tuple(err["loc"])
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return SpecError(message(err, model, hints) + more, path=path, line=line_for(lines or {}, base + loc),
                     field=dotted(loc) or None)
