"""The JSON paths a spec may name to pick a value out of an answer (``json.output``,
``json.choices[0].message.content``): promptfoo's common ``transformResponse`` expressions, as data
(no expression is evaluated)."""
from __future__ import annotations

import re

_STEP = re.compile(r"\.([A-Za-z_$][\w$]*)|\[(\d+)\]|\[\"([^\"]*)\"\]|\['([^']*)'\]")


def alternatives(expr: str) -> list[list[str | int] | None]:
    """``json?.response || json?.error || text`` as the steps of each alternative (None: the answer's
    text), tried in order like JavaScript's ``||``; ValueError for anything else (no expression runs)."""
    out: list[list[str | int] | None] = []
    for alt in expr.split("||"):
        alt = alt.strip()
        out.append(None if alt == "text" else path_steps(alt))
    return out


def path_steps(path: str) -> list[str | int]:
    """``json.a.b[0]["c d"]`` (optional chaining ``?.`` allowed) as steps; ValueError for anything that
    is not such a path."""
    rest = path.strip().replace("?.[", "[").replace("?.", ".")
    if not rest.startswith("json"):
        raise ValueError(f"response_path {path!r} must start with 'json' (json.output, json.choices[0].text)")
    rest, steps = rest[4:], []
    while rest:
        m = _STEP.match(rest)
        if m is None:
            raise ValueError(f"response_path {path!r}: only .name, [N] and [\"name\"] steps are supported "
                             f"(at {rest[:20]!r})")
        name, index, q1, q2 = m.groups()
        steps.append(int(index) if index is not None else (name if name is not None else (q1 if q1 is not None
                                                                                          else q2)))
        rest = rest[m.end():]
    return steps


