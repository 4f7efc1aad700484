"""The subset of Nunjucks (promptfoo's template language) that an import can reproduce exactly:
``{{ name }}`` with a plain variable name. Filters, dotted paths, tags (``{% ... %}``) and
comments (``{# ... #}``) are refused with their position rather than rendered approximately,
because a prompt rendered differently from promptfoo is a different eval.
"""
from __future__ import annotations

import math
import re
from typing import Any

_OPEN = re.compile(r"\{\{|\{%|\{#")
_PLAIN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# an unclosed tag on a line: promptfoo then wraps the whole text in {% raw %} and sends it as written
_PARTIAL = re.compile(r"(\{%[^%]*$|\{\{[^}]*$|\{#[^#]*$)", re.M)
_REFERENCE = re.compile(r"\{\{\s*(\w+)\s*\}\}", re.ASCII)


class TemplateUnsupported(ValueError):
    """A template construct outside the subset; ``offset`` is where it starts in the text."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def js_string(value: Any) -> str:
    """A scalar as JavaScript's String() renders it (what promptfoo's templates and asserts see)."""
    if value is None:
        return ""  # Nunjucks renders null/undefined as an empty string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return str(value)


def variables(text: str) -> list[str]:
    """The variable names a template uses, in order (raises on anything outside the subset)."""
    names = []
    for match in _OPEN.finditer(text):
        plain = _PLAIN.match(text, match.start())
        if plain is None:
            raise TemplateUnsupported(_describe(text, match.start()), match.start())
        names.append(plain.group(1))
    return names


def render(text: str, values: dict[str, Any]) -> tuple[str, list[str]]:
    """``(rendered text, names that had no value)``; a missing name renders empty, as in Nunjucks."""
    missing: list[str] = []
    variables(text)  # refuse before substituting anything

    def one(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            missing.append(name)
            return ""
        return js_string(values[name])

    return _PLAIN.sub(one, text), missing


def is_partial(text: str) -> bool:
    return _PARTIAL.search(text) is not None


def prepare_vars(values: dict[str, Any]) -> dict[str, Any]:
    """What promptfoo does to a test's vars before rendering (renderPrompt): one trailing newline
    dropped from each string, then ``{{ other }}`` references between vars substituted, first one
    per var per pass, at most 5 passes (resolveVariables). Assertions see these vars too."""
    out = {k: v[:-1] if isinstance(v, str) and v.endswith("\n") else v for k, v in values.items()}
    for _ in range(5):
        changed = False
        for key in list(out):
            value = out[key]
            match = _REFERENCE.search(value) if isinstance(value, str) else None
            if match and match.group(1) in out:
                ref = out[match.group(1)]
                out[key] = value.replace(match.group(0), "null" if ref is None else js_string(ref), 1)
                changed = True
        if not changed:
            break
    return out


def render_prompt(text: str, values: dict[str, Any]) -> tuple[str, list[str]]:
    """A text prompt as promptfoo renders it: a var whose own template references only known
    vars is rendered first; a text with an unclosed tag is sent as written."""
    if is_partial(text):
        return text, []
    variables(text)
    rendered: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(value, str) or is_partial(value):
            rendered[key] = value
            continue
        try:
            names = variables(value)
        except TemplateUnsupported as exc:
            raise TemplateUnsupported(f"var {key!r}: {exc}", 0) from None
        rendered[key] = value if any(n not in values for n in names) else render(value, values)[0]
    return render(text, rendered)


def _describe(text: str, offset: int) -> str:
    snippet = text[offset:offset + 40].split("\n", 1)[0]
    kind = {"{%": "a template tag", "{#": "a template comment"}.get(text[offset:offset + 2],
                                                                     "a template expression")
    return (f"{kind} {snippet!r} is beyond the supported Nunjucks subset (plain {{{{ name }}}} only); "
            "render it by hand or drop it")


def line_of(text: str, offset: int) -> int:
    """1-based line of ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1
