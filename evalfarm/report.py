"""The run report: one dict shape for every mode, plus its Markdown rendering."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .aggregate import aggregate, nothing_measured, run_cost, threshold_failures
from .spec import EvalSpec

SCHEMA = "evalfarm.report/1"
# Fields that depend on when and how a run happened, not on what it measured.
VOLATILE = ("run_id", "mode", "started_at", "finished_at", "duration_s")
VOLATILE_FIGURES = ("latency_ms_p50", "latency_ms_p95")


@dataclass
class RunReport:
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
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunReport":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.to_dict())


def exit_code_of(report: dict[str, Any]) -> int:
    """3 nothing measured, 1 a threshold failed, 0 passed (works on a summary too)."""
    if report.get("nothing_measured"):
        return 3
    return 0 if report.get("thresholds_passed") else 1


def outcome_order(adapters: list[str]):
    """Sort key putting outcomes in plan order (adapter, prompt, trial)."""
    rank = {a: i for i, a in enumerate(adapters)}
    return lambda o: (rank.get(o["adapter"], len(rank)), o["prompt_id"], o["trial"])


def build_report(*, run_id: str, spec: EvalSpec, spec_hash: str, mode: str, trials: int,
                 outcomes: Iterable[dict[str, Any]], started_at: str, finished_at: str,
                 duration_s: float) -> RunReport:
    ordered = sorted(outcomes, key=outcome_order(spec.adapter_ids))
    weight = spec.judge.weight if spec.judge else None
    per_adapter = aggregate(ordered, spec.adapter_ids, trials=trials, judge_weight=weight)
    failures = threshold_failures(per_adapter, spec.thresholds)
    empty = nothing_measured(per_adapter)
    return RunReport(
        run_id=run_id, spec_name=spec.name, lineage_tag=spec.tag, spec_hash=spec_hash, mode=mode,
        trials=trials, adapters=spec.adapter_ids, judge=spec.judge.model_dump() if spec.judge else None,
        thresholds=spec.thresholds.model_dump(), per_adapter=per_adapter, threshold_failures=failures,
        thresholds_passed=not failures and not empty, nothing_measured=empty, outcomes=ordered,
        cost=run_cost(per_adapter),
        started_at=started_at, finished_at=finished_at, duration_s=round(duration_s, 3))


def stable_view(report: dict[str, Any]) -> dict[str, Any]:
    """The report without timing and run identity: equal for equal work in any mode."""
    out = {k: v for k, v in report.items() if k not in VOLATILE}
    out["per_adapter"] = {a: {k: v for k, v in f.items() if k not in VOLATILE_FIGURES}
                          for a, f in report["per_adapter"].items()}
    out["outcomes"] = [{k: v for k, v in o.items() if k != "latency_ms"} for o in report["outcomes"]]
    return out


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "n/a"
    if pct:
        return f"{value * 100:.1f}%"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def render_markdown(report: dict[str, Any], max_failures: int = 50) -> str:
    lines = [f"# evalfarm run `{report['run_id']}`", "",
             f"- spec: **{report['spec_name']}** (lineage tag `{report['lineage_tag']}`, spec hash "
             f"`{report['spec_hash'][:12]}`)",
             f"- mode: {report['mode']}, trials: {report['trials']}, finished: {report['finished_at']}, "
             f"duration: {report['duration_s']} s"]
    if report["nothing_measured"]:
        verdict = "NOTHING MEASURED (every item errored)"
    else:
        verdict = "PASSED" if report["thresholds_passed"] else "FAILED"
    lines += [f"- result: **{verdict}**", "",
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
    failed = [o for o in report["outcomes"] if o.get("error") or o.get("passed", o.get("golden_passed")) is False]
    if failed:
        lines += ["", f"## Failed items ({len(failed)})", ""]
        for o in failed[:max_failures]:
            if o.get("error"):
                why = f"runtime_error {o['error']['class']}: {o['error']['message']}"
            elif not o.get("golden_passed"):
                why = f"{o.get('failure_mode') or 'failed'}: {o['golden_reason']}"
            else:
                failed_c = [c['id'] for c in o.get("judge_criteria") or [] if c["verdict"] == "fail"]
                why = f"{o.get('failure_mode') or 'failed'}: judge score {o.get('judge_score')}" + \
                    (f" (failed criteria: {', '.join(failed_c)})" if failed_c else "")
            lines.append(f"- `{o['adapter']}` / `{o['prompt_id']}` trial {o['trial']}: {why}")
        if len(failed) > max_failures:
            lines.append(f"- ... and {len(failed) - max_failures} more (see the JSON report)")
    return "\n".join(lines) + "\n"
