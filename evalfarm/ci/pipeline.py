"""What happens after a run is delivered (saved and recorded by ``runs.deliver``): gate it, promote it,
write JUnit and the PR summary. Nothing here calls a model or prints: the lines to show are returned.
The gate, diff and report writers are imported when a CI flag asks for them: a plain `evalfarm run`
does not pay for their import.
"""
from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..core.verdict import exit_code, stopped
from ..errors import UsageError
from ..spec.models import Thresholds
from ..runs.archive import require_complete
from ..runs.registry import BASELINE_PREFIX, Registry, resolve_ref


@dataclass
class Finished:
    code: int
    lines: list[str] = field(default_factory=list)  # what the gate, baseline and promotion say


def baseline_path(name: str | None, default: str | None, state_dir: Path) -> tuple[str, Path, str | None] | None:
    """(name, report path, what to call it) of the baseline to compare with: ``name`` (a baseline name
    or any run reference) must exist; ``default`` (the spec name) is used when it does; else None."""
    if name:
        if Registry(state_dir).baseline(name) is not None:
            return name, resolve_ref(BASELINE_PREFIX + name, state_dir), f"baseline {name!r}"
        try:
            path = resolve_ref(name, state_dir)
        except UsageError:
            raise UsageError(f"--baseline {name}: no baseline of that name and no such run in {state_dir}; "
                             "see 'evalfarm ls --baselines'") from None
        return name, path, None
    if default and Registry(state_dir).baseline(default) is not None:
        return default, resolve_ref(BASELINE_PREFIX + default, state_dir), f"baseline {default!r}"
    return None


def streamed_baseline(name: str | None, default: str | None, state_dir: Path):
    """The baseline to compare with (``baseline_path``), read in one pass (``streamed_report``), checked
    like any gate input with its verdicts decided again (a baseline edited to look worse would make a
    regression look like none): (name, the report's head with its
    verdicts and figures decided again, notes, its case trials as ``ci.diff.CaseTrials`` keeps them);
    a million-item baseline is never held."""
    from .diff import CaseTrials

    found = baseline_path(name, default, state_dir)
    if found is None:
        return None, None, [], None
    head, notes, cases = streamed_report(found[1], state_dir, "gate", found[2], lambda: CaseTrials(rechecked=True))
    return found[0], head, notes, cases.trials


def streamed_report(path: Path, state_dir: Path, use: str, where: str | None, make_sink) -> tuple[Any, ...]:
    """The complete report at ``path`` checked before ``use`` relies on it (``runs.trust``), read in one
    pass (``runs.report_pass``): (the report's head with its verdicts and figures decided again, the
    notes, the sink fed each outcome)."""
    from ..runs.report_pass import read_pass

    p = read_pass(path, state_dir, use, make_sink, recheck=True)
    require_complete(p.trusted.report, where or str(path))
    r = p.trusted.rechecked or p.verdicts()
    return r.report, list(p.trusted.notes), p.sink


def run_cases(run_id: str, summary: dict[str, Any], outcomes: Iterable[dict[str, Any]], junit: bool = False
              ) -> tuple[Any, Any]:
    """What the CI steps need of a finished run's outcomes, read once and never held: (its case
    trials, its JUnit cases or None). Each outcome is checked as a report file's would be (the run store
    is shared); a bad one is a one-line error."""
    from ..core.report.schema import head_problem, outcome_problem
    from .diff import CaseTrials
    from .reports import JunitCases

    problem = head_problem(summary)
    trials, lines = CaseTrials(), JunitCases(rechecked=False) if junit else None
    for i, o in enumerate(outcomes):
        if problem:
            break
        problem = outcome_problem(i, o)
        if not problem:
            trials.add(o, None)
            if lines is not None:
                lines.add(o)
    if problem:
        raise UsageError(f"run {run_id}: the report in the run store is not usable ({problem})")
    return trials, lines


def finish_run(report: dict[str, Any], json_path: Path | None, state_dir: Path, thresholds: Thresholds | None,
               prompt_info: dict[str, Any] | None, options: dict[str, Any], outcomes: Iterable[dict[str, Any]] = ()
               ) -> Finished:
    """After a run was delivered: gate, promote, write JUnit / PR summary; the exit code and what to say.
    A partial run (interrupted, stopped) is never gated or promoted. ``report``: its head (summary);
    ``outcomes``: its outcomes as they stream from the run store, read (once) only when a step needs them."""
    state_dir = Path(state_dir)
    gate_on, promote, name = bool(options.get("gate")), bool(options.get("promote")), options.get("baseline")
    info = prompt_info or {}
    prompt = info.get("prompt")
    registry = Registry(state_dir) if json_path is not None or gate_on or name else None
    out = Finished(exit_code(report))
    say = out.lines.extend
    if prompt:
        say([f"prompt {prompt['name']}@{prompt['version']} ({prompt['hash'][:19]}, by {prompt['resolved_by']})"])
    if not (gate_on or promote or name or options.get("junit") or options.get("pr_summary")):
        return out
    from .diff import compare_cases, describe_cases
    from .flaky import known_flaky
    from .gate import evaluate
    from .reports import pr_summary, write_junit, write_pr_summary

    if stopped(report):
        if gate_on or promote:
            say([f"not gated{' or promoted' if promote else ''}: the run stopped early ({report['stopped']}, "
                 f"{report.get('items_done')} of {report.get('items_planned')} items)"])
        return out

    cases, junit_cases = run_cases(report["run_id"], report, outcomes, junit=bool(options.get("junit")))
    result = baseline = trials = None
    base_name = None
    if gate_on or promote or name:
        try:  # the baseline streamed: its head and its case trials (the run's own report is in hand)
            base_name, baseline, notes, base_trials = streamed_baseline(name, report.get("spec_name"), state_dir)
            say([f"evalfarm: note: {n}" for n in notes])
            if baseline is not None:
                trials = (base_trials, cases.trials)
        except UsageError:
            if not promote:  # --promote --baseline NEW creates it
                raise
        if baseline is not None and not gate_on:
            say([f"against baseline {base_name!r} (run {baseline.get('run_id')}):",
                 *("  " + x for x in describe_cases(compare_cases(baseline, report, trials=trials)))])
    if gate_on or promote:
        thresholds = thresholds or Thresholds.model_validate(report["thresholds"])
        flaky = known_flaky(state_dir, report["run_id"]) if json_path is not None and baseline is not None else None
        result = evaluate(report, thresholds, baseline, base_name, flaky, bool(options.get("strict")), trials)
        if gate_on:
            say(result.lines())
            if result.cases is not None:
                say(["  " + x for x in describe_cases(result.cases)])
        if json_path is not None:
            registry.set_gate(report["run_id"], result.to_dict())
    if promote:
        target = name or report.get("spec_name")
        if result.passed:
            prev = registry.promote(target, report, json_path)
            say([f"promoted run {report['run_id']} to baseline {target!r}"
                 + (f" (was {prev})" if prev else " (new baseline)")])
        else:
            why = "nothing was measured" if result.nothing_measured else \
                "the gate failed: " + ", ".join(b.name for b in result.brakes if b.failed)
            say([f"not promoted to baseline {target!r}: {why}"])
    if options.get("junit"):
        write_junit(options["junit"], report, result if gate_on else None, junit_cases)
    if options.get("pr_summary"):
        write_pr_summary(options["pr_summary"], pr_summary(report, result if gate_on else None, baseline, prompt,
                                                           str(json_path) if json_path else None))
    if gate_on:
        out.code = result.exit_code
    return out
