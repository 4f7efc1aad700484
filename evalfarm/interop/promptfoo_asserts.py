"""promptfoo assertions as evalfarm checks and judge criteria.

Each mapping reproduces promptfoo's verdict (its handlers in src/assertions/), using only the
check kinds evalfarm already has: case-insensitive and negated forms become ``regex`` checks
(``(?i)``, ``\\A`` anchors, a negative lookahead), ``equals`` becomes an exact regex because
promptfoo compares without trimming. What cannot be reproduced exactly is refused, or mapped
with a caveat the import prints, never silently approximated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .template import TemplateUnsupported, js_string, render

KNOWN = {"contains", "icontains", "starts-with", "regex", "equals", "is-json", "contains-json", "contains-all",
             "icontains-all", "contains-any", "icontains-any", "llm-rubric", "cost", "latency", "similar"}
_THRESHOLD_KINDS = {"cost", "latency", "similar"}  # their threshold is what they check, not a weighting
SUPPORTED_TEXT = ("contains, icontains, equals, regex, is-json, contains-json, starts-with, contains/icontains-all/-any, "
                  "llm-rubric and their not- forms; cost, latency, similar")
# keys an assertion may carry that do not change its pass/fail verdict here
_HARMLESS_KEYS = {"type", "value", "weight", "metric", "description"}


class Refused(ValueError):
    """This assertion (or part of the config) has no faithful evalfarm equivalent."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class Mapped:
    checks: list[dict[str, Any]] = field(default_factory=list)
    criteria: list[dict[str, Any]] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


def negated(pattern: str, flags: str = "") -> str:
    """A regex that matches (with re.search) exactly when ``pattern`` matches nowhere.

    ``\\A`` (not ``^``) pins the lookahead to the start even under a multiline flag, and
    ``[\\s\\S]`` spans newlines without turning on DOTALL for the user's own ``.``."""
    return f"{flags}\\A(?![\\s\\S]*?(?:{pattern}))"


def js_regex(source: str) -> str:
    """A JavaScript RegExp source (promptfoo's ``new RegExp(value)``) as a Python pattern.

    Named groups are the one common syntax Python spells differently; anything else that does
    not compile is refused."""
    py = re.sub(r"\(\?<([A-Za-z_][A-Za-z0-9_]*)>", r"(?P<\1>", source)
    py = re.sub(r"\\k<([A-Za-z_][A-Za-z0-9_]*)>", r"(?P=\1)", py)
    try:
        re.compile(py)
    except re.error as exc:
        raise Refused(f"regex {source!r} does not compile as a Python regex ({exc}); rewrite it") from None
    return py


def _scalar(value: Any, kind: str) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return js_string(value)
    raise Refused(f"{kind} needs a string or number value, got {type(value).__name__}")


def _string_list(value: Any, kind: str) -> list[str]:
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                  for v in value):
        return [js_string(v) for v in value]
    raise Refused(f"{kind} is supported with a YAML list of strings as its value "
                  "(a comma-separated string is not)")


def _schema(value: Any, kind: str) -> dict[str, Any]:
    import jsonschema
    import yaml

    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            raise Refused(f"{kind}: the value is not a JSON schema (unparseable YAML)") from None
    if not isinstance(value, dict):
        raise Refused(f"{kind}: the schema must be a mapping, got {type(value).__name__}")
    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except jsonschema.SchemaError as exc:
        raise Refused(f"{kind}: not a valid JSON schema: {exc.message}") from None
    return value


def _render(value: Any, variables: dict[str, Any], missing: list[str], load_file: Callable[[str], Any]) -> Any:
    """An assertion value as promptfoo sees it: a ``file://`` value is the file's content, a
    string (or each string of a list) is a Nunjucks template over the test's vars."""
    if isinstance(value, list):
        return [_render(v, variables, missing, load_file) if isinstance(v, str) else v for v in value]
    if not isinstance(value, str):
        return value
    if value.startswith("file://"):
        return load_file(value)
    try:
        text, absent = render(value, variables)
    except TemplateUnsupported as exc:
        raise Refused(str(exc), field="value") from None
    missing.extend(absent)
    return text


_JSON_CAVEAT = ("evalfarm's json checks need a JSON object (promptfoo accepts any JSON value) and accept "
                "a ```json fence (promptfoo does not)")


def map_assert(raw: Any, variables: dict[str, Any], load_file: Callable[[str], Any],
               rubric_index: int) -> Mapped:
    """One promptfoo assertion (already known to be a mapping) under one test's vars."""
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise Refused("an assertion must be a mapping with a 'type'")
    kind = raw["type"]
    inverse = kind.startswith("not-")
    base = kind[4:] if inverse else kind
    if base not in KNOWN:
        raise Refused(f"assertion type {kind!r} is not supported by the importer (supported: {SUPPORTED_TEXT})")
    if base in _THRESHOLD_KINDS:
        return _threshold_assert(raw, kind, base, inverse, variables, load_file)
    extra = sorted(set(raw) - _HARMLESS_KEYS)
    if extra:
        raise Refused(f"assertion key {extra[0]!r} is not supported (it changes what is checked)", field=extra[0])
    missing: list[str] = []
    value = _render(raw.get("value"), variables, missing, load_file)
    out = Mapped()
    if missing:
        out.caveats.append(f"variable(s) {', '.join(sorted(set(missing)))} have no value in this test; "
                           "rendered empty, as promptfoo does")

    if base == "contains":
        text = _scalar(value, kind)
        out.checks.append({"kind": "not_contains" if inverse else "contains", "value": text})
    elif base == "icontains":
        text = re.escape(_scalar(value, kind))
        out.checks.append({"kind": "regex", "pattern": negated(text, "(?i)") if inverse else f"(?i){text}"})
    elif base == "starts-with":
        text = re.escape(_scalar(value, kind))
        out.checks.append({"kind": "regex", "pattern": f"\\A(?!{text})" if inverse else f"\\A{text}"})
    elif base == "regex":
        if not isinstance(value, str) or not value:
            raise Refused(f"{kind} needs a non-empty string value")
        pattern = js_regex(value)
        out.checks.append({"kind": "regex", "pattern": negated(pattern) if inverse else pattern})
    elif base == "equals":
        if isinstance(value, dict) and not inverse:
            # promptfoo deep-compares JSON.parse(output); a const schema does that for an object
            out.checks.append({"kind": "json_schema", "schema": {"const": value}})
            out.caveats.append(_JSON_CAVEAT)
        elif isinstance(value, (dict, list)):
            raise Refused(f"{kind} with a {type(value).__name__} value has no evalfarm check "
                          "(an object value maps to json_schema const; a negated or list one does not)")
        else:
            text = re.escape(_scalar(value, kind))
            # exact, untrimmed comparison, like promptfoo's String(value) === output
            out.checks.append({"kind": "regex", "pattern": f"\\A(?!{text}\\Z)" if inverse else f"\\A{text}\\Z"})
    elif base == "is-json":
        if inverse:
            raise Refused("not-is-json needs a negated json check (proposed: 'negate: true' on checks)")
        if value in (None, ""):
            out.checks.append({"kind": "json"})
        else:
            out.checks.append({"kind": "json_schema", "schema": _schema(value, kind)})
        out.caveats.append(_JSON_CAVEAT)
    elif base in ("contains-all", "icontains-all", "contains-any", "icontains-any"):
        values = _string_list(value, kind)
        flags = "(?i)" if base.startswith("i") else ""
        escaped = [re.escape(v) for v in values]
        if base.endswith("-all") and not inverse:
            if flags:
                out.checks += [{"kind": "regex", "pattern": f"(?i){e}"} for e in escaped]
            else:
                out.checks += [{"kind": "contains", "value": v} for v in values]
        elif base.endswith("-all"):  # not every value present
            ahead = "".join(f"(?=[\\s\\S]*?{e})" for e in escaped)
            out.checks.append({"kind": "regex", "pattern": f"{flags}\\A(?!{ahead})"})
        elif not inverse:  # at least one present
            out.checks.append({"kind": "regex", "pattern": f"{flags}(?:{'|'.join(escaped)})"})
        elif flags:  # none present
            out.checks.append({"kind": "regex", "pattern": negated("|".join(escaped), flags)})
        else:
            out.checks += [{"kind": "not_contains", "value": v} for v in values]
    elif base == "contains-json":
        check: dict[str, Any] = {"kind": "contains_json"}
        if value not in (None, ""):
            check["schema"] = _schema(value, kind)
        if inverse:
            check["absent"] = True
        out.checks.append(check)
        out.caveats.append("evalfarm's contains_json finds strict JSON objects in the output (promptfoo also "
                           "reads YAML-style objects, // comments and objects cut short)")
    else:  # llm-rubric
        if inverse:
            raise Refused("not-llm-rubric has no evalfarm equivalent (a criterion cannot be inverted)")
        if not isinstance(value, str) or not value.strip():
            raise Refused("llm-rubric needs a non-empty string value (the rubric)")
        weight = raw.get("weight", 1)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise Refused("llm-rubric weight must be a number above 0 for an evalfarm criterion", field="weight")
        out.criteria.append({"id": f"rubric-{rubric_index}", "weight": float(weight), "description": value.strip()})
    return out



def _number(value: Any, what: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise Refused(f"{what} must be a number >= 0", field="threshold")


def _threshold_assert(raw: dict[str, Any], kind: str, base: str, inverse: bool, variables: dict[str, Any],
                      load_file: Callable[[str], Any]) -> Mapped:
    """cost (USD per call), latency (ms) and similar (cosine of embeddings), as promptfoo checks them:
    ``cost <= threshold``, ``latency <= threshold``, ``similarity >= threshold`` (default 0.75)."""
    allowed = _HARMLESS_KEYS | {"threshold"} | ({"provider"} if base == "similar" else set())
    extra = sorted(set(raw) - allowed)
    if extra:
        raise Refused(f"assertion key {extra[0]!r} is not supported (it changes what is checked)", field=extra[0])
    if inverse:
        raise Refused(f"{kind} has no evalfarm equivalent (a threshold check cannot be inverted)")
    out = Mapped()
    if base in ("cost", "latency"):
        if "threshold" not in raw:
            raise Refused(f"{kind} needs a threshold", field="threshold")
        limit = _number(raw["threshold"], f"{kind} threshold")
        if base == "cost":
            out.checks.append({"kind": "max_cost_usd", "value": limit})
            out.caveats.append("evalfarm prices a call from its adapter's price (USD per million tokens): an "
                               "adapter without price fails this check ('cost not measured'); add price to it")
        else:
            out.checks.append({"kind": "max_latency_ms", "value": limit})
            out.caveats.append("latency is the answered request's round trip; a cached answer keeps the "
                               "latency measured when it was stored (promptfoo fails a cached one)")
        return out
    missing: list[str] = []
    value = _render(raw.get("value"), variables, missing, load_file)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or not value.strip():
        raise Refused(f"{kind} needs one non-empty string value (a list of expected texts is not supported)")
    threshold = raw.get("threshold", 0.75)
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not -1 <= threshold <= 1:
        raise Refused(f"{kind} threshold must be a number in [-1, 1]", field="threshold")
    check: dict[str, Any] = {"kind": "similar", "value": value, "threshold": float(threshold)}
    provider = raw.get("provider")
    if provider is not None:
        pid = provider.get("id") if isinstance(provider, dict) else provider
        m = re.fullmatch(r"openai:(?:embedding|embeddings):(\S+)", pid) if isinstance(pid, str) else None
        if m is None or (isinstance(provider, dict) and set(provider) - {"id"}):
            raise Refused(f"{kind} provider {pid!r}: only openai:embedding:MODEL is supported", field="provider")
        check["embeddings"] = {"model": m.group(1)}
    out.checks.append(check)
    out.caveats.append("similar calls an OpenAI embeddings endpoint (EVAL_EMBEDDINGS_BASE_URL, default OpenAI's; "
                       "key OPENAI_API_KEY)")
    if missing:
        out.caveats.append(f"variable(s) {', '.join(sorted(set(missing)))} have no value in this test; "
                           "rendered empty, as promptfoo does")
    return out
