"""A stored run as an Inspect AI eval log (the JSON log format, schema version 2).

An Inspect log holds one task run against one model, so each evalfarm adapter becomes one log.
Per item (sample): the input, the messages, the output, the model usage of the model under
test and of the judge, and three scores: ``checks`` (the deterministic checks, C/I),
``judge`` (the judge's score, 0-1, when there is a judge) and ``verdict`` (the item's verdict,
C/I). The field order of the top level follows Inspect's reader, which streams the header.
Written from Inspect's log schema (inspect_ai/log/_log.py); evalfarm does not import Inspect.
"""
from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from typing import Any

LOG_VERSION = 2
_STOP = {"stop": "stop", "length": "max_tokens", "content_filter": "content_filter", "tool_calls": "tool_calls"}
_GENERATE_PARAMS = ("temperature", "max_tokens", "top_p", "seed")


def _created(report: dict[str, Any]) -> str:
    for key in ("started_at", "finished_at"):
        value = report.get(key)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value).astimezone(timezone.utc).isoformat()
            except ValueError:
                pass
    match = re.match(r"(\d{8}T\d{6})(\d{6})?Z", report["run_id"])
    if match:
        stamp = datetime.strptime(match.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
        return stamp.isoformat()
    return datetime.now(timezone.utc).isoformat()


# Inspect's `inspect log list` and viewer list only .json logs whose names match this (inspect_ai
# log/_file.py: log_file_pattern); any other name is invisible to them, whatever the content.
INSPECT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}.*\.json$")


def _component(text: str) -> str:
    """A file-name part as Inspect cleans one (``_ / : +`` become ``-``), and safe on any filesystem."""
    text = re.sub(r"[_/:+]", "-", text)
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip(".-")[:80] or "x"


def file_name(log: dict[str, Any]) -> str:
    """The name Inspect gives a log, ``{created}_{task}_{model}_{id}.json`` (its eval_log_name with the
    pattern ``{task}_{model}_{id}``): ``2026-12-01T18-29-21-00-00_smoke_small_3f9c....json``. The model
    part is the adapter id; the id, unique per run and adapter; our run id stays inside the log
    (``eval.run_id`` and ``eval.metadata.evalfarm.run_id``)."""
    ev = log["eval"]
    created = datetime.fromisoformat(ev["created"]).astimezone(timezone.utc).replace(microsecond=0)
    stamp = created.isoformat().replace(":", "-").replace("+", "-")  # 2026-12-01T18-29-21-00-00
    adapter = ev["metadata"]["evalfarm"]["adapter"]
    return f"{stamp}_{_component(ev['task'])}_{_component(adapter)}_{ev['eval_id']}.json"


def _usage(tokens_in: int, tokens_out: int, cost: float | None) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": tokens_in, "output_tokens": tokens_out,
                             "total_tokens": tokens_in + tokens_out}
    if cost:
        usage["total_cost"] = cost
    return usage


def _add(totals: dict[str, dict[str, Any]], model: str, usage: dict[str, Any]) -> None:
    acc = totals.setdefault(model, {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        acc[key] += usage[key]
    if usage.get("total_cost"):
        acc["total_cost"] = round(acc.get("total_cost", 0.0) + usage["total_cost"], 10)


def _cv(passed: bool | None) -> str:
    return "C" if passed else "I"


def status_of(report: dict[str, Any]) -> tuple[str, str | None]:
    """Inspect's status and, for an error, its message."""
    stopped = report.get("stopped")
    if isinstance(stopped, str) and stopped:
        return "cancelled", None
    if report.get("nothing_measured"):
        return "error", "nothing was measured: every item errored (see the samples' errors)"
    return "success", None


def eval_log(report: dict[str, Any], adapter: str, prompts: dict[str, dict[str, Any]] | None = None,
             adapter_spec: dict[str, Any] | None = None, evalfarm_version: str = "",
             trajectories: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The Inspect log (a JSON-ready dict) for one adapter of a validated report.

    ``prompts`` maps prompt id -> {"text", "system", "target"} from the spec (the report stores
    outputs, not inputs); ``adapter_spec`` is the adapter's spec entry (model, provider, params);
    ``trajectories`` maps an agent item's key to its stored trajectory: the sample's ``events``
    (inspect_events.py)."""
    outcomes = [o for o in report["outcomes"] if o["adapter"] == adapter]
    model = f"{adapter_spec.get('provider', 'openai')}/{adapter_spec['model']}" if adapter_spec else adapter
    judge = report.get("judge") if isinstance(report.get("judge"), dict) else None
    judge_model = f"{judge.get('provider', 'openai')}/{judge.get('model')}" if judge else None
    figures = (report.get("per_adapter") or {}).get(adapter) or {}
    run_id = report["run_id"]
    created = _created(report)
    totals: dict[str, dict[str, Any]] = {}
    samples = []
    for o in outcomes:
        sample = _sample(o, model, judge_model, (prompts or {}).get(o["prompt_id"]), totals)
        trajectory = (trajectories or {}).get(o.get("key"))
        if trajectory is not None:
            from .inspect_events import events

            sample["events"] = events(trajectory, model, created)
            agent = o.get("agent") if isinstance(o.get("agent"), dict) else {}
            sample["metadata"]["trajectory"] = {"sha256": agent.get("trajectory_sha256"),
                                                "sources": trajectory.get("sources"),
                                                "mismatch": agent.get("trajectory_mismatch")}
        samples.append(sample)
    status, error = status_of(report)
    ids = list(dict.fromkeys(o["prompt_id"] for o in outcomes))
    params = (adapter_spec or {}).get("params") or {}
    generate = {k: params[k] for k in _GENERATE_PARAMS
                if isinstance(params.get(k), (int, float)) and not isinstance(params.get(k), bool)}
    log: dict[str, Any] = {
        "version": LOG_VERSION,
        "status": status,
        "eval": {
            "eval_id": hashlib.sha256(f"{run_id}\0{adapter}".encode()).hexdigest()[:22],
            "run_id": run_id,
            "created": created,
            "task": report.get("spec_name") or "evalfarm",
            "task_id": hashlib.sha256(str(report.get("spec_hash", "")).encode()).hexdigest()[:22],
            "task_version": 0,
            "task_attribs": {}, "task_args": {}, "task_args_passed": {},
            "solver": "evalfarm",
            "dataset": {"name": report.get("spec_name"), "samples": len(ids), "sample_ids": ids},
            "model": model,
            "model_generate_config": generate,
            "model_base_url": (adapter_spec or {}).get("base_url"),
            "model_args": {},
            "config": {"epochs": int(report.get("trials") or 1)},
            "packages": {"evalfarm": evalfarm_version} if evalfarm_version else {},
            "metadata": {"evalfarm": {
                "run_id": run_id, "adapter": adapter, "spec_hash": report.get("spec_hash"),
                "lineage_tag": report.get("lineage_tag"), "mode": report.get("mode"),
                "thresholds_passed": report.get("thresholds_passed"),
                "threshold_failures": report.get("threshold_failures"), "overall": figures.get("overall"),
                "inputs_from_spec": prompts is not None}},
            "scorers": [{"name": "checks"}, {"name": "verdict"}] + ([{"name": "judge"}] if judge else []),
        },
        "plan": {"name": "plan", "steps": [{"solver": "evalfarm/generate", "params": {}}], "config": generate},
        "results": _results(outcomes, figures, judge is not None),
        "stats": {"started_at": created, "completed_at": _completed(report, created), "model_usage": totals},
    }
    if error:
        log["error"] = {"message": error, "traceback": "", "traceback_ansi": ""}
    log["samples"] = samples
    return log


def _completed(report: dict[str, Any], created: str) -> str:
    value = report.get("finished_at")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).astimezone(timezone.utc).isoformat()
        except ValueError:
            pass
    return created


def _results(outcomes: list[dict[str, Any]], figures: dict[str, Any], has_judge: bool) -> dict[str, Any]:
    measured = [o for o in outcomes if not o.get("error")]
    n_scored, n_unscored = len(measured), len(outcomes) - len(measured)

    def score(name: str, metrics: dict[str, Any]) -> dict[str, Any]:
        kept = {k: {"name": k, "value": v} for k, v in metrics.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return {"name": name, "scorer": name, "scored_samples": n_scored, "unscored_samples": n_unscored,
                "params": {}, "metrics": kept}

    def rate(key: str) -> float | None:
        return sum(1 for o in measured if o.get(key)) / len(measured) if measured else None

    checks = score("checks", {"accuracy": rate("golden_passed")})
    verdict_metrics = {"accuracy": rate("passed")}
    pass_k = figures.get("pass_k") if isinstance(figures.get("pass_k"), dict) else None
    if pass_k and isinstance(pass_k.get("rate"), (int, float)):
        verdict_metrics[f"pass^{pass_k.get('k')}"] = pass_k["rate"]
    scores = [checks, score("verdict", verdict_metrics)]
    if has_judge:
        judged = [o["judge_score"] for o in measured if isinstance(o.get("judge_score"), (int, float))]
        scores.append(score("judge", {"mean": sum(judged) / len(judged) if judged else None}))
    return {"total_samples": len(outcomes), "completed_samples": n_scored, "scores": scores}


def judge_explanation(o: dict[str, Any]) -> str | None:
    """The judge's reason; for a weighted rubric, one line per criterion (id, verdict, score, reason),
    which the viewer shows under the judge's score."""
    if o.get("judge_reason"):
        return o["judge_reason"]
    lines = []
    for c in o.get("judge_criteria") or []:
        if isinstance(c, dict):
            score = f" {c['score']:g}" if isinstance(c.get("score"), (int, float)) else ""
            lines.append(f"{c.get('id')}: {c.get('verdict', '?')}{score} (weight {c.get('weight', 1)}): "
                         f"{c.get('reason') or 'no reason given'}")
    return "\n".join(lines) or None


def _sample(o: dict[str, Any], model: str, judge_model: str | None, prompt: dict[str, Any] | None,
            totals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if prompt is None:
        text, system, target = f"(prompt {o['prompt_id']}: its text is not stored in the evalfarm report; " \
                               "export with --spec SPEC to include it)", None, ""
    else:
        text, system, target = prompt["text"], prompt.get("system"), prompt.get("target") or ""
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system, "source": "input"})
    messages.append({"role": "user", "content": text, "source": "input"})
    usage = _usage(o.get("input_tokens") or 0, o.get("output_tokens") or 0, o.get("cost_usd"))
    model_usage = {model: usage}
    _add(totals, model, usage)
    if judge_model and (o.get("judge_input_tokens") or o.get("judge_output_tokens")):
        judge_usage = _usage(o.get("judge_input_tokens") or 0, o.get("judge_output_tokens") or 0,
                             o.get("judge_cost_usd"))
        model_usage[judge_model] = judge_usage if judge_model != model else {
            k: usage.get(k, 0) + judge_usage.get(k, 0) for k in set(usage) | set(judge_usage)}
        _add(totals, judge_model, judge_usage)
    seconds = round(o["latency_ms"] / 1000.0, 6) if isinstance(o.get("latency_ms"), (int, float)) else None
    sample: dict[str, Any] = {
        "id": o["prompt_id"], "epoch": int(o.get("trial") or 0) + 1,
        "input": messages if system else text, "target": target, "messages": messages,
        "metadata": {k: o.get(k) for k in ("failure_mode", "golden_reason", "finish_reason", "attempts", "cached",
                                           "checks", "judge_criteria", "key") if o.get(k) is not None},
        "model_usage": model_usage,
    }
    error = o.get("error")
    if error:
        message = f"{error.get('class', 'Error')}: {error.get('message', '')}"
        sample["output"] = {"model": model, "choices": [], "completion": "", "error": message}
        sample["error"] = {"message": message, "traceback": "", "traceback_ansi": ""}
        sample["scores"] = None
    else:
        output = o.get("output") or ""
        reply = {"role": "assistant", "content": output, "source": "generate", "model": model}
        sample["messages"] = messages + [reply]
        sample["output"] = {"model": model, "completion": output, "usage": usage, "time": seconds,
                            "choices": [{"message": reply,
                                         "stop_reason": _STOP.get(o.get("finish_reason") or "", "unknown")}]}
        answer = output if len(output) <= 2000 else output[:2000] + "..."  # the viewer's ANSWER column
        scores: dict[str, Any] = {
            "checks": {"value": _cv(o.get("golden_passed")), "answer": answer, "explanation": o.get("golden_reason")},
            "verdict": {"value": _cv(o.get("passed", o.get("golden_passed"))), "answer": answer,
                        "explanation": o.get("failure_mode") or "passed"},
        }
        if o.get("judge_score") is not None:
            scores["judge"] = {"value": o["judge_score"], "explanation": judge_explanation(o),
                               "metadata": {"criteria": o.get("judge_criteria")} if o.get("judge_criteria") else None}
        sample["scores"] = scores
    if seconds is not None:
        sample["total_time"] = seconds
    return sample
