"""Overnight without surprises: the budget options, the estimate before a run, what a stopped run
says; ``evalfarm rescore`` (stored outputs, new scoring) and ``evalfarm flaky`` (flake history)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ..errors import EXIT_FAILED, EXIT_USAGE, EvalfarmError, UsageError
from .options import broker_option, state_dir_option


class BudgetError(EvalfarmError):
    exit_code = EXIT_USAGE


class BudgetStopped(EvalfarmError):
    """A run the budget stopped where only a whole run means anything (an A/B comparison)."""

    exit_code = EXIT_FAILED


def budget_options(f: Callable) -> Callable:
    """``--max-cost USD`` and ``--force``, shared by ``run`` and ``ab``."""
    f = click.option("--force", is_flag=True,
                     help="Start even when the estimate exceeds the budget or an adapter has no price.")(f)
    return click.option("--max-cost", type=click.FloatRange(0, min_open=True), metavar="USD",
                        help="Stop sending once the run's spend (model + judge, every worker) reaches USD; "
                             "a run estimated above it does not start (wins over the spec's budget_usd).")(f)


def check_budget(spec: Any, prompts: Iterable[Any], trials: int | None, max_cost: float | None, force: bool,
                 prices: Mapping[str, Any] | None = None, priced_only: bool = True) -> float | None:
    """Estimate the run before anything is sent and print it (with a budget, or when ``priced_only``
    and something in the run has a price); refuse (exit 2) a run its budget cannot cover unless
    ``force``. Returns the budget (``--max-cost``, else the spec's ``budget_usd``)."""
    from ..engine.budget import budget_problem, estimate

    budget = max_cost if max_cost is not None else getattr(spec, "budget_usd", None)
    flag = "--max-cost" if max_cost is not None else "budget_usd"
    if budget is None and not priced_only:
        return None
    est = estimate(spec, prompts, trials, prices)
    if budget is not None or est.total_usd > 0:
        click.echo(f"evalfarm: {est.line()}" + (f"; budget ${budget:g} ({flag})" if budget is not None else ""),
                   err=True)
    if budget is not None:
        problem = budget_problem(est, budget, flag)
        if problem and not force:
            raise BudgetError(problem)
        if problem:
            click.echo("evalfarm: --force: starting anyway; sending stops when the spend reaches the budget", err=True)
    return budget


def stopped_line(summary: dict[str, Any]) -> str | None:
    """One line for a run the budget stopped."""
    b = summary.get("budget") or {}
    if summary.get("stopped") != "budget" or not b:
        return None
    from ..runs.spend import spend_parts

    return (f"evalfarm: stopped at the budget: ${b['spent_usd']:.6f} spent of ${b['limit_usd']:g} "
            f"({spend_parts(summary)}); {b['items_left']} of {summary.get('items_planned')} items were not measured "
            "(never sent, or their judge call was not); the partial report says "
            "stopped: budget (diff, gate and baselines refuse it)")


def quota_line(summary: dict[str, Any]) -> str | None:
    """One line for a run that met an exhausted quota."""
    count, example = 0, None
    for f in (summary.get("per_adapter") or {}).values():
        e = (f.get("error_examples") or {}).get("QuotaExhausted")
        if e:
            count += e["count"]
            example = example or e.get("example")
    if not count:
        return None
    return (f"evalfarm: quota exhausted (HTTP 429 insufficient_quota): not retried; the endpoint was paused for "
            f"the whole fleet and {count} item(s) ended as runtime_error QuotaExhausted, most without a request "
            f"(e.g. {str(example)[:160]})")


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
    from ..executors.rescore import judge_here, start_rescore
    from ..runs.archive import check_state_dir, check_writable, require_complete
    from ..runs.registry import Registry, resolve_ref
    from ..ci.rescore import rescoring
    from ..envvars import env_int
    from .console import LiveProgress
    from .deliver import finish

    from ..runs.trust import load_trusted

    path = resolve_ref(run_ref, state_dir)
    trusted = load_trusted(path, state_dir, "rescore")  # an edited report is exit 2 (runs.trust)
    report = require_complete(trusted.report, str(path))
    if output is not None:
        check_writable(Path(output), "--output")
    if not no_save:
        check_state_dir(state_dir)
    if broker is None and timeout_s:
        raise UsageError("--timeout applies to a farm run (--broker); an in-process run stops with Ctrl-C")
    source_entry = Registry(state_dir).get(report["run_id"]) if (state_dir / "registry.db").is_file() else None
    rin = rescoring(report, path, spec_path=spec_path, judge_model=judge_model, judge_base_url=judge_base_url)
    for note in trusted.notes:
        click.echo(f"evalfarm: note: {note}", err=True)
    for note in rin.notes:
        click.echo(f"evalfarm: {note}", err=True)
    stored = lambda item: rin.stored(item.prompt.id, item.adapter, item.trial)  # noqa: E731
    total = rin.source.count * len(rin.spec.adapters) * rin.trials
    with LiveProgress(enabled=False if as_json else None) as bar:
        if broker is None:
            from ..executors.store import MemoryStore

            store = MemoryStore()
            plan, engine, _ = start_rescore(store, "embedded", rin.spec, rin.source, rin.trials, stored)
            judge_here(store, plan.run_id, engine, concurrency or env_int("EVALFARM_MAX_IN_FLIGHT", 64, 1, 100000),
                       bar.update)
        else:
            from ..executors.celery.coordinator import CeleryBackend
            from ..executors.celery.rescore import judge_on_farm
            from ..executors.celery.settings import FarmSettings, pick_batch_size

            backend = CeleryBackend(FarmSettings.from_env(broker_url=broker))
            store = backend.store
            options = {"max_in_flight": concurrency} if concurrency else {}
            plan, _, _ = start_rescore(store, backend.mode, rin.spec, rin.source, rin.trials, stored, options,
                                       pick_batch_size(total, backend.settings.batch_size))
            judge_on_farm(backend, plan.run_id, total)
            backend.wait(plan.run_id, bar.update, timeout_s)
    prompt = (source_entry or {}).get("prompt")
    info = {"dataset_hash": (source_entry or {}).get("dataset_hash"),
            "prompt": {**prompt, "resolved_by": f"run {report['run_id']}"} if prompt else None,
            "models": (source_entry or {}).get("models"), "source_run": report["run_id"],
            "source_hash": rin.source_hash}
    click.echo(f"evalfarm: re-scored the stored outputs of run {report['run_id']} as run {plan.run_id}: the model "
               f"under test was not called; {rin.judge_calls} item(s) for the judge", err=True)
    code = finish(store, plan.run_id, state_dir, no_save, as_json, output, rin.spec.thresholds, info, {})
    sys.exit(code)


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
    from ..runs.registry import DB_NAME

    if not (state_dir / DB_NAME).is_file() and not (state_dir / "runs").is_dir():
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
