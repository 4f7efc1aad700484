"""A stored report checked as untrusted input: every field a reader uses is checked for its type here,
once, so a wrong type is one line (exit 2), never a crash (a report file, a Redis summary, a report
given to diff, gate or baseline)."""
from __future__ import annotations

import math
from typing import Any, Callable

from ...names import label_problem, run_id_problem
from .model import SCHEMA


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _kind(want: str, test: Callable[[Any], bool], optional: bool = False) -> tuple[str, Callable[[Any], bool]]:
    return (want + (" or null" if optional else ""), (lambda v: v is None or test(v)) if optional else test)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_counts(v: Any) -> bool:
    return isinstance(v, dict) and all(_is_int(x) for x in v.values())


def _is_pass_k(v: Any) -> bool:
    return (isinstance(v, dict) and _is_int(v.get("k")) and (v.get("rate") is None or _is_num(v["rate"]))
            and _is_int(v.get("measured", 0)) and _is_str_list(v.get("flaky"))
            and isinstance(v.get("per_prompt", {}), dict)
            and all(x is None or isinstance(x, bool) for x in v.get("per_prompt", {}).values()))


def _is_examples(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(e, dict) and _is_int(e.get("count")) and isinstance(e.get("example"), str)
        and all(e.get(k) is None or isinstance(e[k], str) for k in ("stage", "hint")) for e in v.values())


INT, NUM, STR = _kind("a whole number", _is_int), _kind("a number", _is_num), _kind("a string", _is_str)
OPT_NUM, OPT_STR = _kind("a number", _is_num, True), _kind("a string", _is_str, True)
OPT_OBJ = _kind("an object", lambda v: isinstance(v, dict), True)
_HEAD = {"spec_hash": STR, "mode": STR, "trials": _kind("a whole number >= 1", lambda v: _is_int(v) and v >= 1),
         "adapters": _kind("a list of strings", _is_str_list), "judge": OPT_OBJ, "thresholds": OPT_OBJ,
         "threshold_failures": _kind("a list of strings", _is_str_list),
         "thresholds_passed": _kind("true/false", lambda v: isinstance(v, bool)),
         "nothing_measured": _kind("true/false", lambda v: isinstance(v, bool)),
         "cost": _kind("an object of numbers", lambda v: isinstance(v, dict) and all(_is_num(x) for x in v.values())),
         "started_at": STR, "finished_at": STR, "duration_s": NUM, "items_planned": INT, "items_done": INT,
         "stopped": OPT_STR}
_REQUIRED_HEAD = ("thresholds_passed", "nothing_measured")
_FIGURES = {**{k: INT for k in ("prompts", "golden_passed", "passed", "tokens_in", "tokens_out", "cached",
                                "judge_tokens_in", "judge_tokens_out")},
            **{k: OPT_NUM for k in ("golden_pass_rate", "judge_mean", "pass_rate", "overall", "latency_ms_p50",
                                    "latency_ms_p95", "cost_usd", "judge_cost_usd")},
            "error_classes": _kind("an object of counts", _is_counts),
            "failure_modes": _kind("an object of counts", _is_counts),
            "pass_k": _kind("an object with k, rate, per_prompt and flaky", _is_pass_k),
            "error_examples": _kind("an object of {count, example, stage, hint}", _is_examples)}
_OUTCOME_TYPES = {"adapter": (str, "a string"), "prompt_id": (str, "a string"), "trial": (int, "an integer >= 0")}
_OPTIONAL_TYPES = {"error": (dict, "null or an object"), "passed": (bool, "true, false or null"),
                   "golden_passed": (bool, "true, false or null"), "output": (str, "a string or null"),
                   "failure_mode": (str, "a string or null"), "checks": (list, "a list or null"),
                   "judge_criteria": (list, "a list or null"), "golden_reason": (str, "a string or null"),
                   "judge_reason": (str, "a string or null"), "finish_reason": (str, "a string or null"),
                   "key": (str, "a string or null"), "cached": (bool, "true, false or null")}
_OUTCOME_NUMBERS = ("judge_score", "latency_ms", "wait_ms", "cost_usd", "judge_cost_usd")
_OUTCOME_COUNTS = ("input_tokens", "output_tokens", "judge_input_tokens", "judge_output_tokens", "attempts")
_JSON_NAMES = {str: "a string", int: "a number", float: "a number", bool: "true/false", list: "a list",
               dict: "an object", type(None): "null"}


def _got(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _item_problem(items: Any, what: str) -> str | None:
    """``checks`` and ``judge_criteria``: lists of objects whose id/verdict/reason are strings."""
    for j, c in enumerate(items or []):
        if not isinstance(c, dict):
            return f"{what}[{j}]: expected an object, got {_got(c)}"
        for key in ("id", "kind", "verdict", "reason", "detail"):
            if c.get(key) is not None and not isinstance(c[key], str):
                return f"{what}[{j}].{key}: expected a string or null, got {_got(c[key])}"
        if c.get("passed") is not None and not isinstance(c["passed"], bool):
            return f"{what}[{j}].passed: expected true, false or null, got {_got(c['passed'])}"
    return None


def _outcome_problem(i: int, o: Any) -> str | None:
    if not isinstance(o, dict):
        return f"outcomes[{i}] is not an object"
    for key, (kind, want) in _OUTCOME_TYPES.items():
        v = o.get(key)
        if not isinstance(v, kind) or isinstance(v, bool) or (kind is int and v < 0):
            return f"outcomes[{i}].{key}: expected {want}, got {_got(v)}"
    for key, (kind, want) in _OPTIONAL_TYPES.items():
        if o.get(key) is not None and not isinstance(o[key], kind):
            return f"outcomes[{i}].{key}: expected {want}, got {_got(o[key])}"
    for key in _OUTCOME_NUMBERS:
        if o.get(key) is not None and not _is_num(o[key]):
            return f"outcomes[{i}].{key}: expected a number or null, got {_got(o[key])}"
    for key in _OUTCOME_COUNTS:
        v = o.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            return f"outcomes[{i}].{key}: expected a whole number >= 0 or null, got {_got(v)}"
    error = o.get("error")
    if error is not None:
        for key in ("class", "message", "stage"):
            if error.get(key) is not None and not isinstance(error[key], str):
                return f"outcomes[{i}].error.{key}: expected a string, got {_got(error[key])}"
    return _item_problem(o.get("checks"), f"outcomes[{i}].checks") or \
        _item_problem(o.get("judge_criteria"), f"outcomes[{i}].judge_criteria")


def head_problem(data: Any) -> str | None:
    """What makes ``data`` unusable as a report's head (a stored report without its outcomes, the
    run store's summary), else None: readers and printers rely on every field checked here."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("schema") != SCHEMA:
        return f"schema is {str(data.get('schema'))[:40]!r}, expected {SCHEMA!r}"
    if not isinstance(data.get("run_id"), str):
        return "no run_id"
    problem = run_id_problem(data["run_id"])
    if problem:
        return problem
    problem = label_problem(data.get("spec_name"))
    if problem:
        return f"spec_name {problem}"
    if data.get("lineage_tag") is not None and label_problem(data["lineage_tag"]):
        return f"lineage_tag {label_problem(data['lineage_tag'])}"
    for key, (want, test) in _HEAD.items():
        if (key in data or key in _REQUIRED_HEAD) and not test(data.get(key)):
            return f"{key}: expected {want}, got {_got(data.get(key))}"
    per = data.get("per_adapter")
    if not isinstance(per, dict) or not all(isinstance(f, dict) for f in per.values()):
        return "per_adapter is not a mapping of adapter figures"
    for adapter, f in per.items():
        for key in ("items", "measured", "errors"):
            if not _is_int(f.get(key)):
                return f"per_adapter.{adapter}.{key} is not a whole number"
        for key, (want, test) in _FIGURES.items():
            if key in f and not test(f[key]):
                return f"per_adapter.{adapter}.{key}: expected {want}, got {_got(f[key])}"
    return None


def report_problem(data: Any) -> str | None:
    """What makes ``data`` unusable as a report (readers would crash on it), else None."""
    problem = head_problem(data)
    if problem:
        return problem
    outcomes = data.get("outcomes")
    if not isinstance(outcomes, list):
        return "outcomes is not a list of items"
    for i, o in enumerate(outcomes):
        problem = _outcome_problem(i, o)
        if problem:
            return problem
    prompts = data.get("prompts", [])
    if not isinstance(prompts, list) or not all(isinstance(p, dict) and isinstance(p.get("id"), str)
                                                for p in prompts):
        return "prompts is not a list of prompts with ids"
    return None


def outcome_problem(i: int, o: Any) -> str | None:
    """What makes ``o``, the report's ``i``-th outcome, unusable (``report_problem`` for one outcome
    of a report read as a stream), else None."""
    return _outcome_problem(i, o)
