"""Overnight without surprises, on the command line: the budget options and what a stopped run says
(the budget itself is ``runs/budget.py``), ``evalfarm rescore`` (``runs/rescore.py``) and ``evalfarm
flaky`` (flake history)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ..errors import UsageError
from .options import broker_option, state_dir_option


def budget_options(f: Callable) -> Callable:
    """``--max-cost USD`` and ``--force``, shared by ``run`` and ``ab``."""
    f = click.option("--force", is_flag=True,
                     help="Start even when the estimate exceeds the budget or an adapter has no price.")(f)
    return click.option("--max-cost", type=click.FloatRange(0, min_open=True), metavar="USD",
                        help="Stop sending once the run's spend (model + judge, every worker) reaches USD; "
                             "a run estimated above it does not start (wins over the spec's budget_usd).")(f)


def check_budget(spec: Any, prompts: Iterable[Any], trials: int | None, max_cost: float | None, force: bool,
                 prices: Mapping[str, Any] | None = None, priced_only: bool = True) -> float | None:
    """``runs.budget.check``, its lines shown on stderr; returns the run's budget."""
    from ..runs.budget import check

    result = check(spec, prompts, trials, max_cost, force, prices, priced_only)
    for line in result.lines:
        click.echo(f"evalfarm: {line}", err=True)
    return result.enforce()


def stopped_lines(summary: dict[str, Any]) -> list[str]:
    """What a run the budget stopped, or one that met an exhausted quota, says (on stderr)."""
    from ..runs.budget import quota_line, stopped_line

    return [f"evalfarm: {line}" for line in (stopped_line(summary), quota_line(summary)) if line]


# -- rescore ------------------------------------------------------------------------------------------

@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="New scoring: the checks, criteria and expected answers of its prompts (by id), its judge "
                   "and thresholds; default: the run's own.")
@click.option("--judge-model", metavar="M", help="Judge with this model instead.")
@click.option("--judge-base-url", metavar="URL", help="The judge's endpoint (default: EVAL_JUDGE_BASE_URL, "
                                                      "then EVAL_BASE_URL).")
@broker_option
@state_dir_option
@click.option("--concurrency", type=click.IntRange(1, 4096), help="Judge calls in flight at most.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True),
              help="Farm: give up waiting after this many seconds (the run goes on).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Also write the report here.")
@click.option("--no-save", is_flag=True, help="Do not persist the new run under the state dir.")
@click.option("--json", "as_json", is_flag=True, help="Print the new report JSON on stdout.")
def rescore(run_ref: str, spec_path: Path | None, judge_model: str | None, judge_base_url: str | None,
            broker: str | None, state_dir: Path, concurrency: int | None, timeout_s: float | None,
            output: Path | None, no_save: bool, as_json: bool) -> None:
    """Score a stored RUN's outputs again (checks, judge, verdicts, thresholds) without calling the
    model under test; only the judge is called. The new run records RUN as its source."""
    from ..runs import rescore as rescoring
    from ..runs.archive import check_state_dir, check_writable
    from ..runs.state import StateDir
    from ..runs.submit import Target
    from .live import LiveProgress
    from .deliver import finish

    state = StateDir.of(state_dir)
    if output is not None:
        check_writable(Path(output), "--output")
    if not no_save:
        check_state_dir(state_dir)
    if broker is None and timeout_s:
        raise UsageError("--timeout applies to a farm run (--broker); an in-process run stops with Ctrl-C")
    job = rescoring.prepare(run_ref, state, spec_path=spec_path, judge_model=judge_model,
                            judge_base_url=judge_base_url)
    for note in job.notes:
        click.echo(f"evalfarm: note: {note}", err=True)
    for note in job.input.notes:
        click.echo(f"evalfarm: {note}", err=True)
    with LiveProgress(enabled=False if as_json else None) as bar:
        run = job.start(Target(broker=broker, concurrency=concurrency), bar.update)
        run.wait(bar.update, timeout_s)
    rin = job.input
    click.echo(f"evalfarm: re-scored the stored outputs of run {rin.source_run} as run {run.run_id}: the model "
               f"under test was not called; {rin.judge_calls} item(s) for the judge", err=True)
    sys.exit(finish(run, state_dir, no_save, as_json, output, rin.spec.thresholds, job.prompt_info, {}))


# -- flaky --------------------------------------------------------------------------------------------

@click.command()
@state_dir_option
@click.option("--spec", "spec_name", metavar="NAME", help="Only runs of this spec name.")
@click.option("--last", "last_n", type=click.IntRange(2, 10000), default=10, show_default=True,
              help="How many comparable runs to look back over.")
@click.option("--json", "as_json", is_flag=True)
def flaky(state_dir: Path, spec_name: str | None, last_n: int, as_json: bool) -> None:
    """Cases whose verdict changed across the last N comparable runs (same prompt version, model and
    dataset hash), with their flip counts, most flips first."""
    from ..ci.flaky import flaky_cases
    from ..runs.state import StateDir

    state = StateDir.of(state_dir)
    if not state.has_registry() and not state.runs.is_dir():
        raise UsageError(f"no runs recorded in {state_dir}; run a spec first (or pass --state-dir)")
    rows = flaky_cases(state_dir, spec=spec_name, last=last_n)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no flaky case in the last {last_n} comparable runs" + (f" of {spec_name}" if spec_name else ""))
        return
    click.echo("\t".join(["adapter", "case", "flips", "runs", "verdicts (oldest first)", "spec", "model",
                          "prompt", "dataset"]))
    for r in rows:
        click.echo("\t".join([r["adapter"], r["case"], str(r["flips"]), str(r["runs"]), r["history"],
                              r["spec_name"] or "-", r["model"] or "-", r["prompt"] or "-",
                              (r["dataset_hash"] or "-")[:19]]))
