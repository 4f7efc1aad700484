"""A report as Markdown: the per-adapter figures, thresholds, spend and a sample of the failed items."""
from __future__ import annotations

from typing import Any

from .. import failure
from ..verdict import item_passed, run_verdict


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
    headline = failure.infra_headline(report["per_adapter"])
    if headline:  # more than a stated share of agent tasks failed for infrastructure: that first
        lines += [f"- **{headline}**"]
    lines += [f"- result: **{verdict}**"]
    lines += [f"- {adapter}: {f['coverage_line']}" for adapter, f in report["per_adapter"].items()
              if f.get("coverage_line")]
    for adapter, f in report["per_adapter"].items():
        if f.get("trajectory_mismatches"):
            lines.append(f"- {adapter}: {f['trajectory_mismatches']} trajectories MISMATCHED (the agent's account "
                         "of its model calls and the model relay's differ)")
            lines += [f"  - {m['prompt_id']} (trial {m['trial']}): {m['why']}"
                      for m in f.get("trajectory_mismatch_examples") or []]
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
