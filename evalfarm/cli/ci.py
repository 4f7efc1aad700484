"""CI commands: list, diff, gate, baseline. Nothing here calls a model: they read stored reports."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import EXIT_NOTHING_MEASURED, EvalfarmError, UsageError
from .options import state_dir_option, strict_option


class NothingMeasuredError(EvalfarmError):
    exit_code = EXIT_NOTHING_MEASURED


@click.command("list")
@state_dir_option
@click.option("--spec", "spec_name", metavar="NAME", help="Only runs of this spec name.")
@click.option("--tag", metavar="TAG", help="Only runs with this lineage tag.")
@click.option("--baselines", is_flag=True, help="List the named baselines instead: name, run, promoted, spec, result, path.")
@click.option("--json", "as_json", is_flag=True, help="Registry entries as JSON.")
def list_cmd(state_dir: Path, spec_name: str | None, tag: str | None, baselines: bool, as_json: bool) -> None:
    """Recorded runs, newest first, tab-separated: id, finished, spec, result, path, overall per adapter,
    prompt@version, baselines pointing at it."""
    from ..runs.registry import baseline_lines, list_lines
    from ..runs.registry import DB_NAME, Registry

    if as_json:
        reg = Registry(state_dir) if (state_dir / "runs").is_dir() or (state_dir / DB_NAME).is_file() else None
        rows = [] if reg is None else (reg.baselines() if baselines else reg.runs(spec=spec_name, tag=tag))
        click.echo(json.dumps(rows, indent=2))
        return
    for line in (baseline_lines(state_dir) if baselines else list_lines(state_dir, spec_name, tag)):
        click.echo(line)


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--tolerance", type=click.FloatRange(0, 1), default=0.01, show_default=True)
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True,
              help="Significance level of McNemar's test on the shared cases.")
@state_dir_option
@click.option("--json", "as_json", is_flag=True)
def diff(run_a: str, run_b: str, tolerance: float, alpha: float, state_dir: Path, as_json: bool) -> None:
    """Compare two runs (paths, ids, id prefixes, baseline:NAME); b minus a.

    Per-adapter deltas, then each shared case: stable, regressed, fixed, still broken (pass^k with
    trials), and whether the change in pass rate is significant (McNemar's paired test).
    """
    from ..ci.diff import diff_output, diff_text
    from .console import diff_table, out_console, print_table

    result = diff_output(run_a, run_b, tolerance, alpha, state_dir)
    for note in result["notes"]:
        click.echo(f"evalfarm: note: {note}", err=True)
    if as_json:  # written as it is encoded: a million-case diff lists every case
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_table(out_console, diff_table(result))
        for line in diff_text(result):
            click.echo(line)



class _GateSink:
    """What gate keeps of each outcome of a streamed run: its case verdicts (decided again) when there
    is a baseline to compare them with, and, with --junit, JUnit's per-case lines."""

    def __init__(self, junit: bool, baseline_name: str | None, state_dir: Path) -> None:
        from ..ci.diff import CaseTrials
        from ..ci.reports import JunitCases

        self.cases = CaseTrials(rechecked=True)
        self.junit = JunitCases() if junit else None
        self.baseline_name, self.state_dir, self.compared = baseline_name, state_dir, True

    def start(self, head: dict) -> None:
        from ..ci.pipeline import baseline_path

        try:
            self.compared = baseline_path(self.baseline_name, head.get("spec_name"), self.state_dir) is not None
        except UsageError:  # said after the report's own checks, as ever
            self.compared = True

    def add(self, o: dict, new: dict | None) -> None:
        if self.compared:
            self.cases.add(o, new)
        if self.junit is not None:
            self.junit.add(o, new)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--baseline", "baseline_name", metavar="NAME",
              help="Baseline to compare with (a name, or any run reference); default: the one named after "
                   "the run's spec, if any.")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Take the thresholds from this spec (the current ones); default: those stored in the run.")
@state_dir_option
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
@click.option("--pr-summary", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print the gate result as JSON.")
@strict_option
def gate(run_ref: str, baseline_name: str | None, spec_path: Path | None, state_dir: Path, junit: Path | None,
         pr_summary: Path | None, as_json: bool, strict: bool) -> None:
    """Re-evaluate a stored RUN against the current thresholds; calls no model.

    Exit 0 passed, 1 a brake failed, 3 nothing was measured in RUN.
    """
    from ..runs.archive import require_complete
    from ..runs.report_pass import read_pass
    from ..ci.diff import CaseTrials, describe_cases
    from ..ci.flaky import known_flaky
    from ..ci.gate import evaluate
    from ..ci.pipeline import baseline_path, streamed_report
    from ..runs.registry import Registry, resolve_ref
    from ..runs.state import StateDir
    from ..ci.reports import pr_summary as render_summary, write_junit, write_pr_summary
    from ..spec.load import load_spec
    from ..spec.models import Thresholds

    path = resolve_ref(run_ref, state_dir)
    # one streamed pass: the hash checked (an edited report is exit 2: runs.trust), each verdict decided
    # again from its output, and only the case verdicts (and JUnit's per-case lines) kept
    run = read_pass(path, state_dir, "gate", lambda: _GateSink(bool(junit), baseline_name, state_dir), recheck=True)
    trusted = run.trusted
    require_complete(trusted.report, str(path))
    if spec_path is not None:
        thresholds = load_spec(spec_path).thresholds
    else:
        try:
            thresholds = Thresholds.model_validate(trusted.report.get("thresholds") or {})
        except Exception as exc:
            raise UsageError(f"{path}: thresholds stored in the run are not valid ({exc}); pass --spec FILE") from None
    # the verdicts, figures and thresholds decided again from the outputs: never the stored flags
    report = run.verdicts(thresholds if spec_path is not None else None).report
    found = baseline_path(baseline_name, report.get("spec_name"), state_dir)
    name, baseline, notes, trials = None, None, [], None
    if found is not None:
        name = found[0]
        baseline, notes, base_cases = streamed_report(found[1], state_dir, "gate", found[2],
                                                      lambda: CaseTrials(rechecked=True))
        trials = (base_cases.trials, run.sink.cases.trials)
    for note in [*trusted.notes, *notes]:
        click.echo(f"evalfarm: note: {note}", err=True)
    flaky = known_flaky(state_dir, report.get("run_id", "")) if baseline is not None else None
    result = evaluate(report, thresholds, baseline, name, flaky, strict, trials)
    entry = Registry(state_dir).get(report.get("run_id", "")) if StateDir.of(state_dir).has_registry() else None
    if entry is not None:
        Registry(state_dir).set_gate(entry["run_id"], result.to_dict())
    if junit:
        write_junit(junit, report, result, run.sink.junit)
    if pr_summary:
        write_pr_summary(pr_summary, render_summary(report, result, baseline, (entry or {}).get("prompt"), str(path)))
    if as_json:
        click.echo(json.dumps(result.to_dict(with_cases=True), indent=2))
    else:
        click.echo(f"run {report.get('run_id')} ({report.get('spec_name')}), thresholds from "
                   f"{spec_path if spec_path else 'the run'}")
        cases = describe_cases(result.cases) if result.cases is not None else []
        for line in result.lines() + ["  " + x for x in cases]:
            click.echo(line)
    sys.exit(result.exit_code)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--name", metavar="NAME", help="Baseline name; default: the run's spec name.")
@state_dir_option
def baseline(run_ref: str, name: str | None, state_dir: Path) -> None:
    """Promote a stored RUN (path, id, id prefix, baseline:NAME) to a named baseline."""
    from ..core.report.markdown import render_markdown
    from ..runs.archive import list_runs, require_complete, runs_dir, save_report_stream
    from ..runs.registry import Registry, check_baseline_name, is_stored, resolve_ref
    from ..runs.report_pass import read_pass
    from ..names import baseline_name_problem

    if name is not None:
        check_baseline_name(name, "--name")
    path = resolve_ref(run_ref, state_dir)
    # one streamed pass, nothing of the outcomes held but the few failed items a copy's Markdown lists:
    # edited: exit 2; from elsewhere: its verdicts checked (runs.trust)
    run = read_pass(path, state_dir, "baseline", _FailedSample)
    trusted = run.trusted
    report = require_complete(trusted.report, str(path))  # the head: no outcomes, no prompts
    for note in trusted.notes:
        click.echo(f"evalfarm: note: {note}", err=True)
    if name is None and baseline_name_problem(report["spec_name"]):
        raise UsageError(f"{path}: the run's spec name {report['spec_name']!r} cannot name a baseline "
                         f"({baseline_name_problem(report['spec_name'])}); pass --name NAME")
    if report.get("nothing_measured"):
        raise NothingMeasuredError(f"{path}: run {report.get('run_id')} measured nothing (every item errored); "
                                   "it cannot be a baseline")
    if "run_id" not in report:
        raise UsageError(f"{path}: not a complete evalfarm report (no run_id or outcomes)")
    if not is_stored(path, state_dir):  # a report from elsewhere: keep a copy the baseline can rely on
        stored = runs_dir(state_dir) / f"{report['run_id']}.json"
        if stored not in list_runs(state_dir):
            markdown = render_markdown(report, run.sink.failed).encode("utf-8")
            # sealed: the bytes copied are the bytes checked (their hash, taken as they are copied)
            save_report_stream(report, _same_bytes(path, trusted.digest), state_dir, markdown,
                               seal_kind="imported")
        path = stored
    target = name or report.get("spec_name")
    prev = Registry(state_dir).promote(target, report, path)  # records the run: its cases streamed
    click.echo(f"baseline {target!r} -> run {report['run_id']}" + (f" (was {prev})" if prev else " (new)"))


class _FailedSample:
    """All a baseline's pass keeps of the run's outcomes: the first failed items
    (``core.report.builder.FAILED_SAMPLE``), which an imported copy's Markdown lists as a run's own
    Markdown lists them."""

    def __init__(self) -> None:
        from ..core.report.builder import FAILED_SAMPLE
        from ..core.verdict import item_passed

        self.failed: list[dict] = []
        self.limit, self.item_passed = FAILED_SAMPLE, item_passed

    def add(self, o: dict, new: dict | None) -> None:
        if len(self.failed) < self.limit and (o.get("error") or self.item_passed(o) is False):
            self.failed.append(o)


def _same_bytes(path: Path, digest: str):
    """The file's bytes a megabyte at a time, hashed as they go: when they are not the bytes that were
    checked (``digest``), exit 2 before the copy is renamed into place (``archive.write_stream``)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            yield chunk
    if "sha256:" + h.hexdigest() != digest:
        raise UsageError(f"{path}: changed while it was being read; try again")
