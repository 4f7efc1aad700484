"""Report values made into what the pages show: every field of the right type (``safe``), whatever
the file holds. A report is untrusted input: one bad field renders as "n/a", never a 500."""
from __future__ import annotations

import math
from typing import Any

from . import safe
from .trajectory import artifact_refs, ref as trajectory_ref
from ..core.report.model import SCHEMA as REPORT_SCHEMA
from ..core.verdict import stopped
from ..runs.registry import result_of

TEXT_LIMIT = 5000  # a reason, a message
VERDICTS = ("PASS", "FAIL", "NOTHING", "PARTIAL", "UNKNOWN")  # PARTIAL: interrupted, or stopped by budget
PASS_RATE_FIELDS = ("overall", "pass_rate", "golden_pass_rate", "judge_mean")
THRESHOLD_OF = {"golden_pass_rate": "golden_pass_rate_min", "judge_mean": "judge_score_min",
                "overall": "overall_score_min", "pass_rate": "pass_rate_min"}
_FIG_NUM = ("golden_pass_rate", "judge_mean", "pass_rate", "overall", "latency_ms_p50", "latency_ms_p95",
            "cost_usd", "judge_cost_usd")
_FIG_INT = ("prompts", "items", "measured", "errors", "golden_passed", "passed", "tokens_in", "tokens_out",
            "cached", "judge_tokens_in", "judge_tokens_out")


def figures(raw: Any) -> dict[str, Any]:
    f = safe.mapping(raw)
    out: dict[str, Any] = {k: safe.num(f.get(k)) for k in _FIG_NUM}
    out.update({k: safe.count(f.get(k)) for k in _FIG_INT})
    out["failure_modes"] = safe.int_map(f.get("failure_modes"))
    out["error_classes"] = safe.int_map(f.get("error_classes"))
    pk = f.get("pass_k")
    if isinstance(pk, dict):
        out["pass_k"] = {"k": safe.count(pk.get("k")), "rate": safe.num(pk.get("rate")),
                         "flaky": safe.str_list(pk.get("flaky"))}
    return out


def verdict(raw: dict[str, Any]) -> str:
    """The registry's one-word result (core.verdict decides it); UNKNOWN for a report that does not say."""
    if not stopped(raw) and raw.get("nothing_measured") is not True and not isinstance(raw.get("thresholds_passed"),
                                                                                       bool):
        return "UNKNOWN"
    return result_of(raw)


def summary(raw: Any, run_id: str) -> dict[str, Any]:
    """Every summary field a page shows, each of the right type, from a report's head."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    problems = []
    if raw.get("schema") != REPORT_SCHEMA:
        problems.append(f"schema is {safe.text(raw.get('schema'), 60)!r}, expected {REPORT_SCHEMA!r}")
    if raw.get("run_id") != run_id:
        problems.append(f"run_id inside is {safe.text(raw.get('run_id'), 80)!r}")
    per = {safe.text(a, 200): figures(f) for a, f in safe.mapping(raw.get("per_adapter")).items()}
    thresholds = {safe.text(k, 80): safe.num(v) for k, v in safe.mapping(raw.get("thresholds")).items()}
    cost_raw = safe.mapping(raw.get("cost"))
    model_usd = safe.num(cost_raw.get("model_usd"))
    judge_usd = safe.num(cost_raw.get("judge_usd"))
    if model_usd is None:
        model_usd = math.fsum(f["cost_usd"] or 0.0 for f in per.values())
    if judge_usd is None:
        judge_usd = math.fsum(f["judge_cost_usd"] or 0.0 for f in per.values())
    items = sum(f["items"] for f in per.values())
    measured = sum(f["measured"] for f in per.values())
    passed = sum(f["passed"] for f in per.values())
    errors = sum(f["errors"] for f in per.values())
    judge = raw.get("judge")
    adapters = safe.str_list(raw.get("adapters")) or list(per)
    return {
        "run_id": run_id, "spec_name": safe.text(raw.get("spec_name"), 300),
        "lineage_tag": safe.text(raw.get("lineage_tag"), 300), "spec_hash": safe.text(raw.get("spec_hash"), 80),
        "mode": safe.text(raw.get("mode"), 40), "trials": safe.count(raw.get("trials")),
        "adapters": adapters, "per_adapter": per, "thresholds": thresholds,
        "threshold_failures": safe.str_list(raw.get("threshold_failures")),
        "thresholds_passed": safe.flag(raw.get("thresholds_passed")),
        "nothing_measured": safe.flag(raw.get("nothing_measured")), "verdict": verdict(raw),
        "judge": ({"model": safe.text(judge.get("model"), 200), "provider": safe.text(judge.get("provider"), 200)}
                  if isinstance(judge, dict) else None),
        "cost": {"model_usd": model_usd, "judge_usd": judge_usd, "total_usd": model_usd + judge_usd,
                 "model_tokens": safe.count(cost_raw.get("model_tokens")),
                 "judge_tokens": safe.count(cost_raw.get("judge_tokens"))},
        "started_at": safe.text(raw.get("started_at"), 64), "finished_at": safe.text(raw.get("finished_at"), 64),
        "duration_s": safe.num(raw.get("duration_s")),
        "items": items, "measured": measured, "passed": passed, "errors": errors,
        "pass_rate": passed / measured if measured else None, "problems": problems,
    }


def bad_row(rid: str, why: str) -> dict[str, Any]:
    row = summary({}, rid)
    row.update(verdict="UNREADABLE", problems=[safe.text(why, 300)])
    return row


def _checks(raw: Any) -> list[dict[str, Any]]:
    return [{"kind": safe.text(c.get("kind"), 80), "passed": safe.flag(c.get("passed")),
             "reason": safe.text(c.get("reason"), TEXT_LIMIT), "format": safe.flag(c.get("format"))}
            for c in safe.seq(raw) if isinstance(c, dict)]


def _criteria(raw: Any) -> list[dict[str, Any]]:
    return [{"id": safe.text(c.get("id"), 200), "weight": safe.num(c.get("weight")), "score": safe.num(c.get("score")),
             "verdict": safe.text(c.get("verdict"), 40), "reason": safe.text(c.get("reason"), TEXT_LIMIT)}
            for c in safe.seq(raw) if isinstance(c, dict)]


def _error(err: Any) -> dict[str, Any] | None:
    if not err:
        return None
    e = safe.mapping(err) or {"message": err}
    return {"class": safe.text(e.get("class") or "Error", 120), "stage": safe.text(e.get("stage"), 40),
            "message": safe.text(e.get("message"), TEXT_LIMIT), "status": safe.opt_text(e.get("status"), 20)}


def status(o: dict[str, Any], error: dict[str, Any] | None) -> str:
    if error is not None:
        return "errored"
    v = safe.flag(o.get("passed"))
    if v is None:
        v = safe.flag(o.get("golden_passed"))
    return "passed" if v else "failed" if v is False else "unknown"


def outcome(i: int, o: dict[str, Any], cut: dict[str, int], limit: int) -> dict[str, Any]:
    """One case as the case page and its JSON show it; ``cut``: the strings that were cut (their length
    in bytes), an output among them gets ``output_truncated`` and its full length."""
    error = _error(o.get("error"))
    out = {
        "index": i, "key": safe.text(o.get("key"), 200), "adapter": safe.text(o.get("adapter"), 200),
        "prompt_id": safe.text(o.get("prompt_id"), 500), "trial": safe.count(o.get("trial")),
        "output": safe.opt_text(o.get("output"), limit),
        "output_truncated": "output" in cut or (isinstance(o.get("output"), str) and len(o["output"]) > limit),
        "output_bytes": cut.get("output"),
        "passed": safe.flag(o.get("passed")) if error is None else None,
        "golden_passed": safe.flag(o.get("golden_passed")),
        "golden_reason": safe.opt_text(o.get("golden_reason"), TEXT_LIMIT),
        "failure_mode": safe.opt_text(o.get("failure_mode"), 60) or None,
        "latency_ms": safe.num(o.get("latency_ms")), "finish_reason": safe.opt_text(o.get("finish_reason"), 40),
        "checks": _checks(o.get("checks")), "judge_score": safe.num(o.get("judge_score")),
        "judge_criteria": _criteria(o.get("judge_criteria")),
        "judge_reason": safe.opt_text(o.get("judge_reason"), TEXT_LIMIT),
        "input_tokens": safe.count(o.get("input_tokens")), "output_tokens": safe.count(o.get("output_tokens")),
        "cost_usd": safe.num(o.get("cost_usd")) or 0.0, "judge_input_tokens": safe.count(o.get("judge_input_tokens")),
        "judge_output_tokens": safe.count(o.get("judge_output_tokens")),
        "judge_cost_usd": safe.num(o.get("judge_cost_usd")) or 0.0, "attempts": safe.num(o.get("attempts")),
        "cached": o.get("cached") is True, "error": error,
        "failure_class": safe.opt_text(o.get("failure_class"), 40) or None,
        "trajectory_sha256": trajectory_ref(o), "artifacts": artifact_refs(o),
    }
    out["status"] = status(o, error)
    return out


def input_of(o: dict[str, Any], prompt: dict[str, Any] | None, limit: int) -> str | None:
    """The case's input: ``input``/``prompt`` on the outcome, else the report's prompts section (what
    was sent)."""
    for key in ("input", "prompt"):
        v = o.get(key)
        if isinstance(v, dict):
            v = v.get("text")
        if v is not None:
            return safe.text(v, limit)
    if prompt is None:
        return None
    return safe.opt_text(prompt.get("text"), limit)


def case_row(i: int, o: dict[str, Any], preview: int) -> dict[str, Any]:
    """A row of the run page's case list."""
    error = _error(o.get("error"))
    text = safe.text(o.get("output"), preview)
    cost = (safe.num(o.get("cost_usd")) or 0.0) + (safe.num(o.get("judge_cost_usd")) or 0.0)
    return {"index": i, "adapter": safe.text(o.get("adapter"), 200), "prompt_id": safe.text(o.get("prompt_id"), 500),
            "trial": safe.count(o.get("trial")), "status": status(o, error),
            "failure_mode": safe.opt_text(o.get("failure_mode"), 60) or None,
            "latency_ms": safe.num(o.get("latency_ms")), "judge_score": safe.num(o.get("judge_score")),
            "cost_usd": cost, "output_preview": text, "error_class": error["class"] if error else None}


def side(i: int, o: dict[str, Any], limit: int, cut: bool) -> dict[str, Any]:
    """One trial of a case on the diff page (output cut to ``limit``; ``cut`` when it was)."""
    error = _error(o.get("error"))
    return {"index": i, "trial": safe.count(o.get("trial")), "status": status(o, error),
            "failure_mode": safe.opt_text(o.get("failure_mode"), 60) or None,
            "output": safe.opt_text(o.get("output"), limit), "output_truncated": cut, "error": error,
            "judge_score": safe.num(o.get("judge_score"))}


def gate(raw: Any) -> dict[str, Any] | None:
    """The gate result the registry keeps for a run (``evalfarm gate`` or ``run --gate``), for its page."""
    g = safe.mapping(raw)
    if not g:
        return None
    base = safe.mapping(g.get("baseline"))
    return {"verdict": safe.text(g.get("verdict"), 40) or ("PASSED" if g.get("passed") is True else "FAILED"),
            "passed": g.get("passed") is True,
            "baseline": ({"name": safe.opt_text(base.get("name"), 200), "run_id": safe.text(base.get("run_id"), 80)}
                         if base else None),
            "brakes": [{"name": safe.text(b.get("name"), 40), "status": safe.text(b.get("status"), 20),
                        "summary": safe.text(b.get("summary"), 500)}
                       for b in safe.seq(g.get("brakes")) if isinstance(b, dict)]}
