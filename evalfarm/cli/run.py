"""``evalfarm run``: validate, check every output before spending, then ``runs`` submits, waits and
delivers; this module parses and prints."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import EvalfarmError, UsageError
from .options import ci_run_options, state_dir_option
from .overnight import budget_options, check_budget, stopped_lines


@click.command()
@click.argument("spec_path", metavar="[SPEC]", type=click.Path(path_type=Path), required=False)
@click.option("--dataset", "datasets", multiple=True, type=click.Path(path_type=Path),
              help="Case YAML file(s) or folder(s) to run instead of a SPEC (repeatable).")
@click.option("--model", help="With --dataset: the model under test (OpenAI-compatible).")
@click.option("--base-url", help="OpenAI-compatible endpoint; wins over EVAL_BASE_URL and the spec.")
@click.option("--judge-model", help="With --dataset: the judge's model (default: --model).")
@click.option("--judge-base-url", help="The judge's endpoint (default: EVAL_JUDGE_BASE_URL, then the base URL).")
@click.option("--tag", "tags", multiple=True, help="Only cases carrying this tag (repeatable).")
@click.option("--case", "cases", multiple=True, help="Only this case id (repeatable).")
@click.option("--concurrency", type=click.IntRange(1, 4096),
              help="Calls in flight at most, in either backend [default: 64 in this process; the workers' "
                   "EVALFARM_MAX_IN_FLIGHT on the farm].")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report JSON here.")
@click.option("--no-save", is_flag=True, help="Do not persist the run under the state dir.")
@state_dir_option
@click.option("--trials", type=click.IntRange(1, 1000), help="Trials per (prompt, adapter); overrides the spec.")
@click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL",
              help="redis://... to dispatch to workers; default: in this process, no server.")
@click.option("--batch-size", type=click.IntRange(1, 10000), help="Farm: items per task (default: by run size).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True),
              help="Farm: give up waiting after this many seconds (the run goes on).")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--batch", "use_batch", is_flag=True,
              help="Send the openai/anthropic adapters' (and judge's) calls through the provider's batch API: "
                   "answers within 24 h at the batch price (as if batch: true were set on each).")
@click.option("--detach", is_flag=True, help="Farm: print the run id and return; 'evalfarm wait RUN' attaches later.")
@click.option("--cache", "use_cache", is_flag=True,
              help="Reuse provider responses for identical requests (same model, messages, params, trial).")
@click.option("--until-decided", is_flag=True,
              help="With --gate: rounds of one trial per case until an anytime-valid test shows the drop against the "
                   "baseline within the margin (pass) or beyond it (fail), or --max-trials rounds (fail: open).")
@click.option("--max-trials", type=click.IntRange(1, 1000), help="With --until-decided: the most rounds [default: 20].")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="With --until-decided: the error rate of either call, however often looked at [default: 0.05].")
@click.option("--margin", type=click.FloatRange(0, 1, max_open=True),
              help="With --until-decided: the drop allowed [default: thresholds.max_drop, else 0.05].")
@budget_options
@ci_run_options
def run(spec_path: Path | None, datasets: tuple[Path, ...], model: str | None, base_url: str | None,
        judge_model: str | None, judge_base_url: str | None, tags: tuple[str, ...], cases: tuple[str, ...],
        concurrency: int | None, output: Path | None, no_save: bool, state_dir: Path, trials: int | None,
        broker: str | None, batch_size: int | None, timeout_s: float | None, as_json: bool, use_batch: bool,
        detach: bool,
        use_cache: bool, max_cost: float | None, force: bool, until_decided: bool, max_trials: int | None,
        alpha: float | None, margin: float | None, **ci) -> None:
    """Validate SPEC (or --dataset cases with --model), run every item, aggregate, apply thresholds."""
    from ..runs.archive import check_state_dir, check_writable
    from ..ci.pipeline import streamed_baseline
    from ..runs.registry import Registry, check_baseline_name, check_prompt_unchanged
    from ..runs.state import StateDir
    from ..names import baseline_name_problem
    from ..runs.submit import Target, start
    from ..spec.binding import bind_environment
    from ..spec.load import open_spec, spec_from_cases
    from ..spec.prompts import dataset_hash, version_for
    from .live import LiveProgress, warm_later

    if (spec_path is None) == (not datasets):
        raise EvalfarmError("give a SPEC file or --dataset CASES (with --model), not both and not neither")
    if spec_path is not None:
        if model or judge_model:
            raise EvalfarmError("--model/--judge-model go with --dataset; a SPEC names its adapters and judge")
        spec_file = open_spec(spec_path)
        if spec_file.spec.workspace is not None:  # agents: the repo's base pinned to a commit (runs git)
            from ..agents.workspace import pin_spec_file

            spec_file = pin_spec_file(spec_file)
    else:
        if not model:
            raise EvalfarmError("--dataset needs --model (the model under test)")
        spec_file = spec_from_cases(list(datasets), model=model, judge_model=judge_model)
    spec = bind_environment(spec_file.spec, base_url=base_url, judge_base_url=judge_base_url)
    if use_batch:
        from ..spec.models import BATCH_PROVIDERS, with_batch

        spec = with_batch(spec)
        if not any(getattr(a, "batch", None) for a in spec.adapters) and not (spec.judge and spec.judge.batch):
            raise UsageError(f"--batch: no adapter or judge of {spec.name!r} has a batch API (provider "
                             f"{' or '.join(BATCH_PROVIDERS)}); drop --batch")
    source = spec_file.source.select(tags, cases)
    version = version_for(spec.prompt, ci.get("prompt_version"), spec_file.base_dir, spec_path=spec_file.path)
    if version is not None:
        check_prompt_unchanged(state_dir, version)  # a changed version stops here, before anything is sent
    source = source.with_version(version)

    # every file this run will write, and every flag combination, is checked now, before anything is spent
    for flag, path in (("--output", output), ("--junit", ci.get("junit")), ("--pr-summary", ci.get("pr_summary"))):
        if path is not None:
            check_writable(Path(path), flag)
    if ci.get("promote") and no_save:
        raise UsageError("--promote needs the run saved under the state dir; drop --no-save")
    if ci.get("promote"):
        if ci.get("baseline") is not None:
            check_baseline_name(ci["baseline"], "--baseline")
        elif baseline_name_problem(spec.name):
            raise UsageError(f"--promote: the spec name {spec.name!r} cannot name a baseline "
                             f"({baseline_name_problem(spec.name)}); pass --baseline NAME")
    elif ci.get("baseline") is not None:
        streamed_baseline(ci["baseline"], None, state_dir)  # an unknown --baseline stops here, not after the spend
    if not no_save:
        check_state_dir(state_dir)
        if StateDir.of(state_dir).has_registry():
            Registry(state_dir).runs(spec=spec.name)  # a corrupt registry stops the run here, not after it
    if detach:
        if not broker:
            raise EvalfarmError("--detach needs a farm to run on: pass --broker redis://... (an in-process run "
                                "lives in this process)")
        dropped = [f for f, v in (("--output", output), ("--json", as_json), ("--gate", ci.get("gate")),
                                  ("--promote", ci.get("promote")), ("--baseline", ci.get("baseline")),
                                  ("--junit", ci.get("junit")), ("--pr-summary", ci.get("pr_summary"))) if v]
        if dropped:
            raise EvalfarmError(f"--detach returns before the report exists, so {', '.join(dropped)} cannot "
                                "apply; drop them, then 'evalfarm wait RUN' and 'evalfarm gate RUN' later")
    if broker is None and (batch_size or timeout_s):
        flag = "--batch-size" if batch_size else "--timeout"
        raise UsageError(f"{flag} applies to a farm run (--broker); an in-process run has no batches and "
                         "stops with Ctrl-C")

    if not until_decided and (max_trials or alpha is not None or margin is not None):
        raise UsageError("--max-trials, --alpha and --margin only apply with --gate --until-decided")
    if until_decided:
        _check_sequential(ci, trials, detach, output, as_json)
        base = streamed_baseline(ci.get("baseline"), spec.name, state_dir)  # its head and case trials, never whole
        if base[1] is None:
            raise UsageError("--until-decided decides against a baseline: pass --baseline NAME (or promote one named "
                             f"{spec.name!r} first)")
        trials = 1  # the estimate and budget check: one round now, the next before each round
    budget = check_budget(spec, source, trials, max_cost, force)  # the estimate, before anything is sent
    options: dict = {"cache": use_cache, "state_dir": str(state_dir.resolve())}
    if budget is not None:
        options["budget_usd"] = budget
    target = Target(broker=broker, concurrency=concurrency, batch_size=batch_size)
    prompt_info = {"dataset_hash": dataset_hash(source.selected()) if not no_save else None,
                   "prompt": version.info() if version is not None else None,
                   "models": {a.id: a.model for a in spec.adapters if not isinstance(a, str)}}
    if until_decided:
        sys.exit(_gate_until_decided(spec, source, target, spec_file.where, options, budget, base, state_dir, no_save,
                                     prompt_info, max_trials or 20, 0.05 if alpha is None else alpha,
                                     margin if margin is not None else (spec.thresholds.max_drop if spec.thresholds
                                                                        and spec.thresholds.max_drop is not None
                                                                        else 0.05), as_json))
    with LiveProgress(enabled=False if as_json or detach else None) as bar:
        # the summary's modules (rich) are imported while the run waits on its calls
        progress = bar.update if detach else warm_later(bar.update, "evalfarm.cli.deliver", "evalfarm.runs.deliver")
        run = start(spec, source, target, trials=trials, options=options, where=spec_file.where,
                    on_progress=progress)
        if detach:
            click.echo(run.run_id)
            return
        try:
            run.wait(progress, timeout_s)
        except KeyboardInterrupt:
            from .farm import still_running

            still_running(run.run_id)
    from .deliver import finish

    code = finish(run, state_dir, no_save, as_json, output, spec.thresholds, prompt_info, ci)
    for line in stopped_lines(run.summary()):
        click.echo(line, err=True)
    if run.interrupted:
        click.echo("evalfarm: interrupted: the calls in flight were cancelled and nothing more was sent; the items "
                   "that finished are in the partial report above (diff and gate refuse it)", err=True)
    sys.exit(code)


def _check_sequential(ci: dict, trials: int | None, detach: bool, output: Path | None, as_json: bool) -> None:
    """--until-decided: the flag combinations it takes, refused before anything is sent."""
    if not ci.get("gate"):
        raise UsageError("--until-decided applies to the gate: pass --gate (and the baseline to compare with)")
    clash = [f for f, v in (("--trials", trials), ("--detach", detach), ("--promote", ci.get("promote")),
                            ("--output", output), ("--junit", ci.get("junit")), ("--pr-summary", ci.get("pr_summary")))
             if v]
    if clash:
        raise UsageError(f"{', '.join(clash)} and --until-decided: the rounds are runs of one trial each, saved like "
                         "any run; the sequential gate prints its call (--json: as JSON)")


def _gate_until_decided(spec, source, target, where, options, budget, base, state_dir: Path, no_save: bool,
                        prompt_info, max_trials: int, alpha: float, margin: float, as_json: bool) -> int:
    """Rounds until the sequential gate decides; each round delivered (saved) like a run. Exit 0 passed, 1
    regressed or undecided, 3 nothing measured."""
    import json

    from ..ci.diff import case_rates
    from ..ci.gate_rounds import run_rounds
    from ..ci.sequential_gate import SequentialGate
    from ..runs.deliver import deliver
    from ..runs.state import StateDir
    from .live import LiveProgress

    name, report, notes, trials = base
    for note in notes:
        click.echo(f"evalfarm: {note}", err=True)
    gate = SequentialGate(alpha, margin)
    cases = source.count * len(spec.adapter_ids)

    def on_round(run, state) -> None:
        done = deliver(run.store, run.run_id, StateDir.of(state_dir), save=not no_save, prompt_info=prompt_info)
        if not state:
            for line in stopped_lines(done.summary):
                click.echo(line, err=True)
            return
        click.echo(f"evalfarm: round {state['round']}: run {run.run_id}: {state['n']} pairs, run - baseline "
                   f"{state['estimate']:+.4f}, anytime-valid interval [{state['lo']:+.4f}, {state['hi']:+.4f}]: "
                   f"{state['decision']}", err=True)

    with LiveProgress(enabled=False if as_json else None) as bar:
        rounds = run_rounds(spec, source, target, gate, report, max_trials=max_trials, options=options, where=where,
                            budget_usd=budget, on_progress=bar.update, on_round=on_round, rates=case_rates(trials))
    summary = {**gate.summary(cases), "baseline": {"name": name, "run_id": report.get("run_id")},
               "stopped_because": rounds.stopped_because, "max_trials": max_trials,
               "runs": [r.run_id for r in rounds.runs]}
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    for line in gate.lines(cases, max_trials):
        click.echo(line, err=as_json)
    if gate.test.n == 0:
        click.echo("evalfarm: nothing was measured against the baseline (every item errored, or no case is shared); "
                   "exit 3", err=True)
        return 3
    return 0 if gate.decision == "passed" else 1
