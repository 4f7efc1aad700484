"""Deterministic checks: free, fast, no judgement. Anything decidable without a judge
belongs here rather than in the rubric."""
from __future__ import annotations

import json
import re
from typing import Any

from ..spec.models import FORMAT_CHECKS, PromptSpec

_MISSING = object()


def _short(text: str, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def golden_check(prompt: PromptSpec, output: str) -> tuple[bool, str]:
    """The seed's golden check: every expected substring present and the regex (if any)
    matches via re.search. The reason names the first miss; no assertions passes."""
    for needle in prompt.expected_output_contains:
        if needle not in output:
            return False, f"missing expected substring {_short(needle)!r}"
    if prompt.expected_output_regex is not None and not re.search(prompt.expected_output_regex, output):
        return False, f"regex {_short(prompt.expected_output_regex)!r} did not match"
    if not prompt.expected_output_contains and prompt.expected_output_regex is None:
        return True, "no assertions"
    return True, "all assertions passed"


def parse_json_object(output: str) -> dict[str, Any] | None:
    """The output as one JSON object (code fences allowed), else None."""
    text = output.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)
    if fenced:
        text = fenced.group(1)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def embedded_json_objects(output: str, limit: int = 100, tries: int = 10_000) -> list[dict[str, Any]]:
    """The JSON objects found in ``output`` left to right, prose around them allowed: at each ``{``
    the valid object starting there (a found object is skipped whole, as promptfoo does). At most
    ``tries`` starting points, so an adversarial output cannot make a check quadratic."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    i = output.find("{")
    while i != -1 and len(found) < limit and tries > 0:
        tries -= 1
        try:
            value, end = decoder.raw_decode(output, i)
        except (ValueError, RecursionError):
            end = i + 1
        else:
            if isinstance(value, dict):
                found.append(value)
            else:
                end = i + 1
        i = output.find("{", end)
    return found


def _schema_errors(schema: dict[str, Any], value: Any) -> list:
    import jsonschema

    return sorted(jsonschema.validators.validator_for(schema)(schema).iter_errors(value), key=lambda e: list(e.path))


def _field(obj: dict[str, Any] | None, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def run_check(check: Any, output: str, figures: dict[str, Any] | None = None) -> tuple[bool, str]:
    """One check's verdict. ``figures`` are what the call measured besides the text: ``cost_usd``,
    ``latency_ms`` and ``similarity`` (check index -> cosine, measured by the engine); ``index`` is the
    check's position in the prompt's checks."""
    kind = check.kind
    figures = figures or {}
    if kind == "max_cost_usd":
        cost = figures.get("cost_usd")
        if cost is None:
            return False, "cost not measured"
        return (True, f"cost ${cost:.6g}") if cost <= check.value else (False, f"cost ${cost:.6g} > max ${check.value:g}")
    if kind == "max_latency_ms":
        ms = figures.get("latency_ms")
        if ms is None:
            return False, "latency not measured"
        return (True, f"{ms:.0f} ms") if ms <= check.value else (False, f"latency {ms:.0f} ms > max {check.value:g} ms")
    if kind == "similar":
        sim = (figures.get("similarity") or {}).get(figures.get("index"))
        if sim is None:
            return False, "similarity not measured (no embedding for this output)"
        return (True, f"similarity {sim:.3f} >= {check.threshold:g}") if sim >= check.threshold else \
            (False, f"similarity {sim:.3f} < {check.threshold:g} to {_short(check.value)!r}")
    if kind == "json":
        return (True, "parseable JSON object") if parse_json_object(output) is not None \
            else (False, "output is not a single parseable JSON object")
    if kind == "one_of":
        obj = parse_json_object(output)
        if obj is None:
            return False, f"one_of {check.field}: output is not a JSON object"
        value = _field(obj, check.field)
        if value is _MISSING:
            return False, f"one_of: field {check.field!r} is missing"
        return (True, f"{check.field}={value!r}") if value in check.values else \
            (False, f"{check.field}={_short(repr(value))} is not one of {check.values}")
    if kind == "contains":
        return (True, "contains") if check.value in output else (False, f"missing {_short(check.value)!r}")
    if kind == "not_contains":
        return (False, f"contains forbidden {_short(check.value)!r}") if check.value in output else (True, "absent")
    if kind == "regex":
        return (True, "regex matched") if re.search(check.pattern, output) else \
            (False, f"regex {_short(check.pattern)!r} did not match")
    if kind == "equals":
        if check.field:
            value = _field(parse_json_object(output), check.field)
            if value is _MISSING:
                return False, f"equals: field {check.field!r} is missing"
        else:
            value = output.strip()
        return (True, "equal") if value == check.value else \
            (False, f"expected {_short(repr(check.value))}, got {_short(repr(value))}")
    if kind == "contains_json":
        objects = embedded_json_objects(output)
        if check.schema_ is None:
            found = bool(objects)
            what = f"{len(objects)} JSON object(s) in the output" if objects else "no JSON object in the output"
        else:
            found = any(not _schema_errors(check.schema_, o) for o in objects)
            what = (f"{'a' if found else 'no'} JSON object matching the schema among {len(objects)} found"
                    if objects else "no JSON object in the output")
        return (not found if check.absent else found), what
    if kind == "json_schema":
        obj = parse_json_object(output)
        if obj is None:
            return False, "json_schema: output is not a JSON object"
        errors = _schema_errors(check.schema_, obj)
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "(root)"
            return False, f"json_schema: {where}: {_short(errors[0].message, 120)}"
        return True, "matches schema"
    if kind == "max_chars":
        return (True, f"{len(output)} chars") if len(output) <= check.value else \
            (False, f"{len(output)} chars > max {check.value}")
    raise ValueError(f"unknown check kind {kind!r}")


def run_checks(prompt: PromptSpec, output: str, figures: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every check's verdict, in order: ``{"kind", "passed", "reason", "format"}`` (a similar check adds
    its ``score``, so a stored report can be checked again without the embeddings endpoint)."""
    out = []
    for i, check in enumerate(prompt.checks):
        ok, why = run_check(check, output, {**(figures or {}), "index": i})
        entry = {"kind": check.kind, "passed": ok, "reason": why, "format": check.kind in FORMAT_CHECKS}
        sim = ((figures or {}).get("similarity") or {}).get(i)
        if check.kind == "similar" and sim is not None:
            entry["score"] = sim
        out.append(entry)
    return out


COMMAND_NOT_RUN = {"kind": "command", "passed": False, "format": False,
                   "reason": "this adapter does not run check commands (agents do: provider: agent)"}


def golden_verdict(prompt: PromptSpec, output: str, finish_reason: str | None,
                   adapter_checks: list[dict[str, Any]] | None,
                   figures: dict[str, Any] | None = None) -> tuple[bool, str, list[dict[str, Any]]]:
    """An answer's deterministic verdict, decided the same way when it is first scored (engine) and
    when a stored report is checked again (core.recheck): the expected substrings and regex, every
    text check, the checks the adapter ran itself (``adapter_checks``: an agent's ``check`` command;
    None when the adapter runs none, which fails a prompt that has one: never a silent pass), and no
    answer cut at max_tokens unless the prompt allows it. Returns (golden_passed, reason, checks)."""
    golden, reason = golden_check(prompt, output)
    checks = run_checks(prompt, output, figures) + list(adapter_checks or ())
    if prompt.check and adapter_checks is None:
        checks.append(dict(COMMAND_NOT_RUN))
    failed = next((c for c in checks if not c["passed"]), None)
    if golden and failed is not None:
        golden, reason = False, f"check {failed['kind']}: {failed['reason']}"
    if golden and finish_reason == "length" and not prompt.allow_truncation:
        # the model did not finish: whatever it said so far is not an answer to pass
        golden, reason = False, "truncated: the reply stopped at max_tokens (finish_reason length); " \
                                "allow_truncation: true accepts it"
    return golden, reason, checks
