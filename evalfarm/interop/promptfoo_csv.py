"""promptfoo's CSV test files: one test per row; a column is a var unless its name starts with ``__``:
``__expected``, ``__expected1``... hold assertions as strings (``contains: x``, ``not-icontains:x``,
``regex:...``, ``grade:``/``llm-rubric:`` a rubric, ``similar(0.8): text``, ``is-json``; a string with no
known type is ``equals``), ``__description`` the description, ``__metadata:NAME`` metadata. Other ``__``
columns (``__threshold``, ``__prefix``, ``__config:...``, ``__provider``) become test keys the importer
refuses by name. Values after ``TYPE:`` are trimmed; ``-any``/``-all`` values split on commas."""
from __future__ import annotations

import csv
import io
import re
from typing import Any

_ASSERTION = re.compile(r"^(not-)?([a-z]+(?:-[a-z]+)*)(?:\((-?\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$")
_KNOWN = {"contains", "icontains", "starts-with", "regex", "equals", "is-json", "contains-json", "contains-all",
          "icontains-all", "contains-any", "icontains-any", "llm-rubric", "grade", "similar", "javascript", "python",
          "fn", "eval", "cost", "latency", "levenshtein", "rouge-n", "bleu", "is-valid-openai-tools-call",
          "is-valid-function-call", "perplexity", "answer-relevance", "factuality", "model-graded-closedqa"}


def assertion(text: str) -> dict[str, Any]:
    """One ``__expected`` cell as a promptfoo assertion mapping."""
    m = _ASSERTION.match(text.strip())
    if m is None or m.group(2) not in _KNOWN or (m.group(4) is None and m.group(2) not in ("is-json", "contains-json")):
        return {"type": "equals", "value": text}
    neg, kind, threshold, value = m.groups()
    kind = {"grade": "llm-rubric", "fn": "javascript", "eval": "javascript"}.get(kind, kind)
    out: dict[str, Any] = {"type": f"{neg or ''}{kind}"}
    if value is not None:
        value = value.strip()
        out["value"] = [v.strip() for v in value.split(",")] if kind.endswith(("-any", "-all")) else value
    if threshold is not None:
        out["threshold"] = float(threshold)
    return out


def tests_from_csv(text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line, test mapping) for each data row."""
    reader = csv.reader(io.StringIO(text))
    rows = list(reader)
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    out = []
    line = 2
    for row in rows[1:]:
        test: dict[str, Any] = {}
        vars_: dict[str, Any] = {}
        asserts = []
        for name, cell in zip(header, row):
            if name.startswith("__expected"):
                if cell.strip():
                    asserts.append(assertion(cell))
            elif name == "__description":
                test["description"] = cell
            elif name.startswith("__metadata:"):
                test.setdefault("metadata", {})[name[len("__metadata:"):]] = cell
            elif name == "__metric":
                continue  # a name for the score: it changes no verdict
            elif name.startswith("__"):
                if cell.strip():
                    test[name] = cell  # refused by name (test key '__threshold' ...)
            else:
                vars_[name] = cell
        test["vars"] = vars_
        if asserts:
            test["assert"] = asserts
        out.append((line, test))
        line += 1 + sum(c.count("\n") for c in row)
    return out
