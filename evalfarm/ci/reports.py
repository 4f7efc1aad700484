"""Reports for CI: JUnit XML and a short Markdown summary for a pull-request comment.

JUnit: one ``<testsuite>`` per adapter, one ``<testcase>`` per (case, adapter) named after the
case id; a failed case carries ``<failure>`` with the reason (every failing trial's reason), an
errored one ``<error>`` (a runtime error is not a quality failure); with a gate, a ``gate`` suite
with one testcase per brake (skipped brakes as ``<skipped>``).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..core.verdict import NOTHING, PASSED, item_passed, run_verdict
from ..runs.archive import atomic_write
from .diff import case_pairing
from .gate import GateResult


def _reason(o: dict[str, Any]) -> str:
    if o.get("error"):
        e = o["error"]
        return f"runtime_error {e.get('class', 'Error')}: {e.get('message', '')}"
    parts = [str(o["golden_reason"])] if o.get("golden_reason") else []
    if o.get("failure_mode"):
        parts.append(f"failure mode {o['failure_mode']}")
    if o.get("judge_score") is not None:
        parts.append(f"judge score {o['judge_score']:.3f}")
    return "; ".join(dict.fromkeys(parts)) or "failed"


class JunitCases:
    """What the JUnit file needs of each (adapter, case), fed one outcome at a time: the summed
    latency, the trial count, and the failed and errored trials' reasons (a streamed report's
    outcomes are not kept). ``rechecked``: take the verdicts decided again (as the gate does)."""

    def __init__(self, rechecked: bool = True) -> None:
        self.cases: dict[str, dict[str, list[Any]]] = {}
        self.rechecked = rechecked

    def add(self, o: dict[str, Any], new: dict[str, Any] | None = None) -> None:
        o = new if self.rechecked and new is not None else o
        case = self.cases.setdefault(o["adapter"], {}).get(o["prompt_id"])
        if case is None:
            case = self.cases[o["adapter"]][o["prompt_id"]] = [0, 0, [], []]
        case[0] += o.get("latency_ms") or 0
        case[1] += 1
        verdict = item_passed(o)
        if verdict is not True:
            case[2 if verdict is False else 3].append((o["trial"], _reason(o)))


def junit_xml(report: dict[str, Any], gate: GateResult | None = None, cases: JunitCases | None = None) -> bytes:
    """``cases``: the report's outcomes as ``JunitCases`` collected them (a streamed report); default:
    from its ``outcomes``."""
    if cases is None:
        cases = JunitCases(rechecked=False)
        for o in report.get("outcomes") or []:
            cases.add(o)
    root = ET.Element("testsuites", name=f"evalfarm {report.get('spec_name', '')}".strip())
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for adapter, by_case in cases.cases.items():
        suite = ET.SubElement(root, "testsuite", name=f"{report.get('spec_name', 'evalfarm')}.{adapter}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for case_id, (latency_ms, trials, failed, errored) in by_case.items():
            counts["tests"] += 1
            latency = latency_ms / 1000.0
            tc = ET.SubElement(suite, "testcase", name=case_id, classname=f"{report.get('spec_name', 'evalfarm')}."
                               f"{adapter}", time=f"{latency:.3f}")
            if failed:
                counts["failures"] += 1
                head = (f"{len(failed)} of {trials} trials failed (pass^{trials}): " if trials > 1 else "")
                msg = head + failed[0][1]
                el = ET.SubElement(tc, "failure", message=msg[:1000], type="quality")
                el.text = "\n".join(f"trial {t}: {why}" for t, why in failed + errored)
            elif errored:
                counts["errors"] += 1
                el = ET.SubElement(tc, "error", message=errored[0][1][:1000], type="runtime_error")
                el.text = "\n".join(f"trial {t}: {why}" for t, why in errored)
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
    if gate is not None:
        suite = ET.SubElement(root, "testsuite", name=f"{report.get('spec_name', 'evalfarm')}.gate")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for brake in gate.brakes:
            counts["tests"] += 1
            tc = ET.SubElement(suite, "testcase", name=brake.name, classname="evalfarm.gate", time="0")
            body = "\n".join([brake.summary, *brake.details])
            if brake.status == "fail":
                counts["failures"] += 1
                ET.SubElement(tc, "failure", message=brake.summary[:1000], type="gate").text = body
            elif brake.status == "skipped":
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=brake.summary[:1000])
        if gate.nothing_measured:
            counts["tests"] += 1
            counts["errors"] += 1
            tc = ET.SubElement(suite, "testcase", name="measured", classname="evalfarm.gate", time="0")
            ET.SubElement(tc, "error", message="nothing was measured: every item errored", type="runtime_error")
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def write_junit(path: Path, report: dict[str, Any], gate: GateResult | None = None,
                cases: JunitCases | None = None) -> None:
    atomic_write(Path(path), junit_xml(report, gate, cases))


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def pr_summary(report: dict[str, Any], gate: GateResult | None = None, baseline: dict[str, Any] | None = None,
               prompt: dict[str, Any] | None = None, artifact: str | None = None, limit: int = 10) -> str:
    """A few lines of Markdown: verdict, per-adapter figures vs the baseline, the brakes, moving cases."""
    verdict = gate.verdict if gate is not None else run_verdict(report)
    if verdict == NOTHING:
        icon, verdict = "⚠️", "NOTHING MEASURED (every item errored: a configuration problem, not quality)"
    else:
        icon = "✅" if verdict == PASSED else "❌"
        verdict = f"gate {verdict}" if gate is not None else verdict
    title = f"### {icon} evalfarm `{report.get('spec_name')}`: {verdict}"
    meta = [f"run `{report.get('run_id')}`"]
    if prompt:
        meta.append(f"prompt `{prompt['name']}@{prompt['version']}` (`{prompt['hash'][7:19]}`)")
    if baseline is not None:
        name = gate.baseline.get("name") if gate and gate.baseline else None
        meta.append(f"baseline {f'`{name}` ' if name else ''}`{baseline.get('run_id')}`")
    lines = [title, "", " · ".join(meta), ""]
    base_fig = (baseline or {}).get("per_adapter", {})
    lines += ["| adapter | score | pass rate | errors | vs baseline |", "|---|---:|---:|---:|---:|"]
    base_of = {cur: b for b, cur in (case_pairing(baseline, report) or {}).items()} if baseline else {}
    for adapter, f in report["per_adapter"].items():
        ref = base_fig.get(base_of.get(adapter, adapter), {}).get("overall")
        delta = f"{f['overall'] - ref:+.3f}" if ref is not None and f.get("overall") is not None else "–"
        lines.append(f"| {adapter} | {_num(f.get('overall'))} | {_pct(f.get('pass_rate', f.get('golden_pass_rate')))} | "
                     f"{f.get('errors', 0)}/{f.get('items', 0)} | {delta} |")
    if gate is not None:
        lines += [""] + [f"- **{b.name}** {'❌' if b.failed else '✅' if b.status == 'pass' else '➖'} {b.summary}"
                         for b in gate.brakes]
        cases = gate.cases
        if cases and cases["measured"]:
            for cls, label in (("regressed", "Regressed"), ("fixed", "Fixed")):
                rows = cases[cls]
                if rows:
                    names = ", ".join(f"`{r['adapter']}/{r['case']}`" for r in rows[:limit])
                    more = f" and {len(rows) - limit} more" if len(rows) > limit else ""
                    lines.append(f"- {label} ({len(rows)}): {names}{more}")
            m = cases["mcnemar"]
            lines.append(f"- pass rate on {cases['measured']} shared cases {_pct(m['pass_rate_a'])} → "
                         f"{_pct(m['pass_rate_b'])}, McNemar p={m['p_value']:.3g}"
                         f" ({'significant' if m['significant'] else 'not significant'} at {m['alpha']:g})")
    elif report.get("threshold_failures"):
        lines += [""] + [f"- {x}" for x in report["threshold_failures"][:limit]]
    if artifact:
        lines += ["", f"<sub>report: `{artifact}`</sub>"]
    return "\n".join(lines) + "\n"


def write_pr_summary(path: Path, text: str) -> None:
    atomic_write(Path(path), text.encode("utf-8"))
