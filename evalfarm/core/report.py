"""The run report: one shape for every backend, built in one streaming pass, and its Markdown.

A report is a head (what ran, the per-adapter figures, thresholds, spend, and why it
stopped early, if it did) followed by the outcomes in plan order, one JSON object per
line, then the prompts as they were sent (one per line: what each case asked and how it
is scored, so a reader or a re-score needs no spec file). ``ReportBuilder`` takes the stored outcomes one at a time (as the JSON the store
holds), aggregates them and passes their bytes through, so a 100,000-item report is
never a list in memory; ``report_chunks`` frames the head and the outcome lines as the
file's bytes. Both backends write reports through these functions, so their reports are
identical but for timings.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ..canonical import canonical_json
from ..names import label_problem, run_id_problem
from ..spec.models import EvalSpec
from .aggregate import Aggregator, nothing_measured, run_cost, threshold_failures
from .verdict import exit_code, item_passed, run_verdict
from .why import ErrorExamples

SCHEMA = "evalfarm.report/1"
# Fields that depend on when and how a run happened, not on what it measured.
VOLATILE = ("run_id", "mode", "started_at", "finished_at", "duration_s")
VOLATILE_FIGURES = ("latency_ms_p50", "latency_ms_p95")
VOLATILE_OUTCOME = ("latency_ms", "wait_ms")
OUTCOMES_OPEN = ',\n  "outcomes": ['
PROMPTS_OPEN = b'\n  ],\n  "prompts": ['
REPORT_CLOSE = b"\n  ]\n}\n"
SECTIONS = ("outcomes", "prompts")
FAILED_SAMPLE = 50  # failed items the Markdown lists


@dataclass
class RunReport:
    """The report as a Python object (the Python API); ``to_dict`` is the JSON file's content."""

    run_id: str
    spec_name: str
    lineage_tag: str
    spec_hash: str
    mode: str
    trials: int
    adapters: list[str]
    judge: dict[str, Any] | None
    thresholds: dict[str, Any]
    per_adapter: dict[str, dict[str, Any]]
    threshold_failures: list[str]
    thresholds_passed: bool
    nothing_measured: bool
    cost: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    items_planned: int = 0
    items_done: int = 0
    stopped: str | None = None  # "interrupted" (Ctrl-C), "budget", "cancelled": a partial report
    budget: dict[str, Any] | None = None  # limit_usd, spent_usd, items_left (runs with a budget)
    schema: str = SCHEMA
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        if out["budget"] is None:  # only runs with a budget carry the section
            del out["budget"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunReport":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    @property
    def exit_code(self) -> int:
        return exit_code(self.to_dict())


class ReportBuilder:
    """One pass over a run's stored outcomes (JSON text, plan order): figures, the failed items
    the Markdown lists, and the outcome lines of the report file."""

    def __init__(self, spec: EvalSpec, trials: int) -> None:
        self.spec, self.trials = spec, trials
        self.agg = Aggregator(spec.adapter_ids, trials, spec.judge.weight if spec.judge else None)
        self.errors = ErrorExamples(spec)
        self.failed: list[dict[str, Any]] = []
        self.count = 0
        self.skipped = 0  # items whose call was never sent (the budget ran out): not in the figures
        self.spend = 0.0  # model + judge cost of every stored item, skipped ones included

    def add(self, raw: str) -> str | None:
        """Aggregate one stored outcome; returns its line in the report file (None for a skipped item,
        which the report counts as left, not as an outcome)."""
        o = json.loads(raw)
        self.spend += (o.get("cost_usd") or 0.0) + (o.get("judge_cost_usd") or 0.0)
        if o.get("skipped"):
            self.skipped += 1
            return None
        self.agg.add(o)
        self.errors.add(o)
        if len(self.failed) < FAILED_SAMPLE and (o.get("error") or item_passed(o) is False):
            self.failed.append(o)
        self.count += 1
        return raw

    def head(self, **run: Any) -> dict[str, Any]:
        """The report without its outcomes. ``run``: run_id, spec_hash, mode, started_at,
        finished_at, duration_s, items_planned and stopped; with a budget, budget_usd and
        spent_usd (the run's spend counter, when the backend keeps one)."""
        if self.skipped and not run.get("stopped"):
            run["stopped"] = "budget"
        per_adapter = self.agg.figures()
        for adapter, fig in per_adapter.items():
            fig["error_examples"] = self.errors.of(adapter)
        failures = threshold_failures(per_adapter, self.spec.thresholds)
        empty = nothing_measured(per_adapter)
        spec = self.spec
        return {
            "schema": SCHEMA, "run_id": run["run_id"], "spec_name": spec.name, "lineage_tag": spec.tag,
            "spec_hash": run["spec_hash"], "mode": run["mode"], "trials": self.trials, "adapters": spec.adapter_ids,
            "judge": spec.judge.model_dump() if spec.judge else None, "thresholds": spec.thresholds.model_dump(),
            "per_adapter": per_adapter, "threshold_failures": failures,
            "thresholds_passed": not failures and not empty and not run.get("stopped"), "nothing_measured": empty,
            "cost": run_cost(per_adapter), "started_at": run["started_at"], "finished_at": run["finished_at"],
            "duration_s": round(run["duration_s"], 3), "items_planned": run["items_planned"],
            "items_done": self.count, "stopped": run.get("stopped"),
            # spawn mode: the repo and the commit every agent started from (absent for other runs)
            **({"workspace": spec.workspace.model_dump(mode="json")} if spec.workspace is not None else {}),
            **({"budget": self.budget(run)} if run.get("budget_usd") is not None else {}),
        }

    def budget(self, run: dict[str, Any]) -> dict[str, Any]:
        """The budget, what was spent against it (model + judge: the backend's spend counter, else every
        stored item's cost, a model answer whose judging the stop skipped included) and the items left."""
        spent = run.get("spent_usd")
        return {"limit_usd": run["budget_usd"], "spent_usd": round(self.spend if spent is None else spent, 8),
                "items_left": run["items_planned"] - self.count}


def head_bytes(head: dict[str, Any]) -> bytes:
    """The file's bytes up to the first outcome: the head, pretty-printed, and the list's opening."""
    text = json.dumps(head, indent=2, ensure_ascii=False)
    return (text[:-2] + OUTCOMES_OPEN).encode("utf-8")


def section_lines(lines: Iterable[str], first: bool) -> bytes:
    """Lines of a section (outcomes or prompts) as they follow each other in the file (``first``:
    nothing of the section precedes them)."""
    sep = ",\n    "
    body = sep.join(lines)
    return (("\n    " if first else sep) + body).encode("utf-8") if body else b""



def report_chunks(head: dict[str, Any], lines: Iterable[str], prompts: Iterable[str] = ()) -> Iterator[bytes]:
    """A whole report file from a head, outcome lines and prompt lines."""
    yield head_bytes(head)
    yield section_lines(list(lines), True)
    yield PROMPTS_OPEN
    yield section_lines(list(prompts), True)
    yield REPORT_CLOSE


def report_bytes(report: RunReport | dict[str, Any]) -> bytes:
    data = report.to_dict() if isinstance(report, RunReport) else dict(report)
    outcomes = data.pop("outcomes", None) or []
    prompts = data.pop("prompts", None) or []
    return b"".join(report_chunks(data, (json.dumps(o, ensure_ascii=False) for o in outcomes),
                                  (canonical_json(p) for p in prompts)))


def stable_view(report: dict[str, Any]) -> dict[str, Any]:
    """The report without timing and run identity: equal for equal work in any backend."""
    out = {k: v for k, v in report.items() if k not in VOLATILE}
    out["per_adapter"] = {a: {k: v for k, v in f.items() if k not in VOLATILE_FIGURES}
                          for a, f in report["per_adapter"].items()}
    out["outcomes"] = [{k: v for k, v in o.items() if k not in VOLATILE_OUTCOME} for o in report.get("outcomes", [])]
    return out


# -- checking a stored report (untrusted input) ------------------------------------------------------
# A report file, a Redis summary and a report given to diff/gate/baseline are untrusted: every field a
# reader uses is checked for its type here, once, so a wrong type is one line (exit 2), never a crash.

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


# -- Markdown --------------------------------------------------------------------------------------

def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "n/a"
    if pct:
        return f"{value * 100:.1f}%"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _why(o: dict[str, Any]) -> str:
    if o.get("error"):
        return f"runtime_error {o['error'].get('class')}: {o['error'].get('message')}"
    if not o.get("golden_passed"):
        return f"{o.get('failure_mode') or 'failed'}: {o.get('golden_reason')}"
    failed_c = [c["id"] for c in o.get("judge_criteria") or [] if c.get("verdict") == "fail"]
    return f"{o.get('failure_mode') or 'failed'}: judge score {o.get('judge_score')}" + \
        (f" (failed criteria: {', '.join(failed_c)})" if failed_c else "")


def render_markdown(report: dict[str, Any], failed: list[dict[str, Any]] | None = None) -> str:
    """The report as Markdown; ``failed`` are the failed items to list (default: from the outcomes)."""
    if failed is None:
        failed = [o for o in report.get("outcomes") or [] if o.get("error") or item_passed(o) is False]
    lines = [f"# evalfarm run `{report['run_id']}`", "",
             f"- spec: **{report['spec_name']}** (lineage tag `{report['lineage_tag']}`, spec hash "
             f"`{report['spec_hash'][:12]}`)",
             f"- mode: {report['mode']}, trials: {report['trials']}, finished: {report['finished_at']}, "
             f"duration: {report['duration_s']} s"]
    verdict = run_verdict(report)
    if verdict == "NOTHING MEASURED":
        verdict += " (every item errored)"
    if report.get("stopped"):
        verdict += f": {report.get('items_done')} of {report.get('items_planned')} items measured"
    lines += [f"- result: **{verdict}**"]
    if report.get("budget"):
        b = report["budget"]
        lines.append(f"- budget: ${b['limit_usd']:g}; spent ${b['spent_usd']:.6f}; items not measured "
                     f"(a call never sent): {b['items_left']}")
    lines += ["",
              "| adapter | prompts | items | errors | golden pass rate | judge mean | overall | p50 ms | p95 ms "
              "| tokens in | tokens out | cost $ | judge tokens | judge $ |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for adapter, f in report["per_adapter"].items():
        lines.append(f"| {adapter} | {f['prompts']} | {f['items']} | {f['errors']} | "
                     f"{_fmt(f['golden_pass_rate'], True)} | {_fmt(f['judge_mean'])} | {_fmt(f['overall'])} | "
                     f"{_fmt(f['latency_ms_p50'])} | {_fmt(f['latency_ms_p95'])} | {f.get('tokens_in', 0)} | "
                     f"{f.get('tokens_out', 0)} | {f.get('cost_usd') or 0:.6f} | "
                     f"{f.get('judge_tokens_in', 0) + f.get('judge_tokens_out', 0)} | "
                     f"{f.get('judge_cost_usd') or 0:.6f} |")
    cost = report.get("cost") or {}
    if cost:
        lines.append(f"\nSpend: models ${cost['model_usd']:.6f}, judge ${cost['judge_usd']:.6f} "
                     f"(total ${cost['total_usd']:.6f}; tokens: models {cost['model_tokens']}, "
                     f"judge {cost['judge_tokens']})")
    for adapter, f in report["per_adapter"].items():
        if f.get("failure_modes"):
            modes = ", ".join(f"{k} {v}" for k, v in f["failure_modes"].items())
            lines.append(f"\n{adapter} failure modes: {modes}")
    for adapter, f in report["per_adapter"].items():
        if "pass_k" in f:
            pk = f["pass_k"]
            flaky = ", ".join(pk["flaky"]) or "none"
            lines.append(f"\n{adapter}: pass^{pk['k']} = {_fmt(pk['rate'], True)}; flaky prompts: {flaky}")
    if report["threshold_failures"]:
        lines += ["", "## Threshold failures", ""] + [f"- {f}" for f in report["threshold_failures"]]
    n_failed = sum(f["items"] - f["passed"] for f in report["per_adapter"].values())
    if failed:
        lines += ["", f"## Failed items ({n_failed})", ""]
        lines += [f"- `{o['adapter']}` / `{o['prompt_id']}` trial {o['trial']}: {_why(o)}" for o in failed]
        if n_failed > len(failed):
            lines.append(f"- ... and {n_failed - len(failed)} more (see the JSON report)")
    return "\n".join(lines) + "\n"
