"""The ``evalfarm`` command line: thin click commands over the core and the farm.

Exit codes: 0 passed, 1 a threshold or gate failed, 2 bad usage or input,
3 nothing was measured (every item errored).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .cli_ci import ci_run_options
from .prompt_store import apply_prompt_version
from .errors import EXIT_USAGE, EvalfarmError


class EvalfarmGroup(click.Group):
    """Turns our errors, click's usage errors and OS errors into one line on stderr with the
    documented exit code (2 for bad usage or input)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EvalfarmError as exc:
            click.echo(f"evalfarm: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:  # a path the user gave that cannot be written or read
            from .redact import redact

            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"evalfarm: error: {where}{redact(exc.strerror or str(exc))}", err=True)
            sys.exit(EXIT_USAGE)

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            super().main(*args, **kwargs)
            return None  # as in click's standalone mode, a command's return value is not the exit code
        except click.UsageError as exc:
            hint = f" (see 'evalfarm {exc.ctx.command_path.split(' ', 1)[1]} --help')" \
                if exc.ctx is not None and " " in exc.ctx.command_path else " (see 'evalfarm --help')"
            click.echo(f"evalfarm: error: {exc.format_message()}{hint}", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            click.echo(f"evalfarm: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("evalfarm: aborted", err=True)
            sys.exit(130)

    def resolve_command(self, ctx, args):
        aliases = {"ls": "list"}
        if args and args[0] in aliases:
            args = [aliases[args[0]], *args[1:]]
        return super().resolve_command(ctx, args)


@click.group(cls=EvalfarmGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="WARNING", envvar="EVALFARM_LOG_LEVEL", show_default=True)
def main(log_level: str) -> None:
    """evalfarm: a distributed eval farm for LLM prompts, models and coding agents."""
    from . import load_plugins
    from .logs import configure

    configure(log_level)
    try:
        load_plugins()
    except ImportError as exc:
        raise EvalfarmError(f"EVALFARM_PLUGINS: cannot import {exc.name!r}: {exc}") from None


from .cli_options import state_dir_option  # noqa: E402


@main.command()
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
              help="Calls in flight in this process (embedded farm); workers use EVALFARM_MAX_IN_FLIGHT.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report JSON here.")
@click.option("--no-save", is_flag=True, help="Do not persist the run under the state dir.")
@state_dir_option
@click.option("--trials", type=click.IntRange(1, 1000), help="Trials per (prompt, adapter); overrides the spec.")
@click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL",
              help="redis://... to dispatch to workers; default: the embedded farm, in this process.")
@click.option("--batch-size", type=click.IntRange(1, 10000), help="Items per task (default: by run size).")
@click.option("--timeout", "timeout_s", type=float, help="Give up waiting after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--detach", is_flag=True, help="Print the run id and return; 'evalfarm wait RUN' attaches later.")
@click.option("--cache", "use_cache", is_flag=True,
              help="Reuse provider responses for identical requests (same model, messages, params, trial).")
@ci_run_options
def run(spec_path: Path | None, datasets: tuple[Path, ...], model: str | None, base_url: str | None,
        judge_model: str | None, judge_base_url: str | None, tags: tuple[str, ...], cases: tuple[str, ...],
        concurrency: int | None, output: Path | None, no_save: bool, state_dir: Path, trials: int | None,
        broker: str | None, batch_size: int | None, timeout_s: float | None, as_json: bool, detach: bool,
        use_cache: bool, **ci) -> None:
    """Validate SPEC (or --dataset cases with --model), run every item on the farm, aggregate,
    apply thresholds."""
    from .console import LiveProgress
    from .farm.coordinator import Coordinator
    from .farm.settings import FarmSettings
    from .spec import load_spec

    from .runner import bind_environment, spec_from_cases

    if (spec_path is None) == (not datasets):
        raise EvalfarmError("give a SPEC file or --dataset CASES (with --model), not both and not neither")
    if spec_path is not None:
        if model or judge_model:
            raise EvalfarmError("--model/--judge-model go with --dataset; a SPEC names its adapters and judge")
        spec = load_spec(spec_path)
    else:
        if not model:
            raise EvalfarmError("--dataset needs --model (the model under test)")
        spec = spec_from_cases(list(datasets), model=model, judge_model=judge_model)
    spec = bind_environment(spec, base_url=base_url, judge_base_url=judge_base_url)
    if tags or cases:
        spec.restrict_to(tags, cases)
    spec, _ = apply_prompt_version(spec, ci.get("prompt_version"), state_dir=state_dir)  # before anything is sent
    from .artifacts import check_state_dir, check_writable

    # every file this run will write is checked now, before anything is spent
    for flag, path in (("--output", output), ("--junit", ci.get("junit")), ("--pr-summary", ci.get("pr_summary"))):
        if path is not None:
            check_writable(Path(path), flag)
    if not no_save:
        check_state_dir(state_dir)
        from .registry import Registry

        if (state_dir / "registry.db").exists():
            Registry(state_dir).runs(spec=spec.name)  # a corrupt registry stops the run here, not after it
    if detach:
        dropped = [f for f, v in (("--output", output), ("--json", as_json), ("--gate", ci.get("gate")),
                                  ("--promote", ci.get("promote")), ("--baseline", ci.get("baseline")),
                                  ("--junit", ci.get("junit")), ("--pr-summary", ci.get("pr_summary"))) if v]
        if dropped:
            raise EvalfarmError(f"--detach returns before the report exists, so {', '.join(dropped)} cannot "
                                "apply; drop them, then 'evalfarm wait RUN' and 'evalfarm gate RUN' later")
    overrides: dict = {"batch_size": batch_size} if batch_size else {}
    if concurrency:
        overrides["max_in_flight"] = concurrency
    settings = FarmSettings.from_env(broker_url=broker, **overrides)
    coord = Coordinator(settings)
    if detach and settings.embedded:
        raise EvalfarmError("--detach needs a farm to run on: pass --broker redis://... (an embedded run "
                            "lives in this process)")
    run_id = coord.submit(spec, trials, options={"cache": use_cache, "state_dir": str(state_dir.resolve())})
    if detach:
        click.echo(run_id)
        return
    with LiveProgress(enabled=None if not as_json else False) as bar:
        coord.wait(run_id, on_progress=bar.update, timeout_s=timeout_s, fetch=False)
    from .cli_farm import finish

    sys.exit(finish(coord, run_id, state_dir, no_save, as_json, output, spec=spec, ci=ci))


@main.command("list")
@state_dir_option
@click.option("--spec", "spec_name", metavar="NAME", help="Only runs of this spec name.")
@click.option("--tag", metavar="TAG", help="Only runs with this lineage tag.")
@click.option("--baselines", is_flag=True, help="List the named baselines instead: name, run, promoted, spec, result, path.")
@click.option("--json", "as_json", is_flag=True, help="Registry entries as JSON.")
def list_cmd(state_dir: Path, spec_name: str | None, tag: str | None, baselines: bool, as_json: bool) -> None:
    """Recorded runs, newest first, tab-separated: id, finished, spec, result, path, overall per adapter,
    prompt@version, baselines pointing at it."""
    from .cli_ci import baseline_lines, list_lines
    from .registry import DB_NAME, Registry

    if as_json:
        reg = Registry(state_dir) if (state_dir / "runs").is_dir() or (state_dir / DB_NAME).is_file() else None
        rows = [] if reg is None else (reg.baselines() if baselines else reg.runs(spec=spec_name, tag=tag))
        click.echo(json.dumps(rows, indent=2))
        return
    for line in (baseline_lines(state_dir) if baselines else list_lines(state_dir, spec_name, tag)):
        click.echo(line)


@main.command()
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
    from .cli_ci import diff_output, diff_text
    from .console import diff_table, out_console

    result = diff_output(run_a, run_b, tolerance, alpha, state_dir)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        out_console.print(diff_table(result))
        for line in diff_text(result):
            click.echo(line)


@main.command()
@click.option("--pool", type=click.Choice(["provider", "judge", "spawn", "aggregate", "all"]), default="all",
              show_default=True, help="Which queues to consume, with that pool's settings (evalfarm/farm/pools.py).")
@click.option("-c", "--concurrency", type=click.IntRange(1, 512),
              help="Tasks this worker runs at once (threads sharing one event loop); default: the pool's.")
@click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL")
@click.option("--loglevel", default="WARNING", show_default=True)
def worker(pool: str, concurrency: int | None, broker: str | None, loglevel: str) -> None:
    """Start a worker consuming one pool's queues."""
    from .farm.app import create_app
    from .farm.pools import POOLS
    from .farm.settings import FarmSettings

    if not broker:
        raise EvalfarmError("a worker needs a broker: pass --broker redis://HOST:6379/0 "
                            "or set EVALFARM_BROKER_URL")
    spec = POOLS[pool]
    import os

    limit = float(os.environ.get("EVALFARM_TASK_TIME_LIMIT") or spec.soft_time_limit)
    settings = FarmSettings.from_env(broker_url=broker, time_limit_s=limit)
    app = create_app(settings, pool=spec)
    app.worker_main(["worker", "-Q", ",".join(spec.queues), "-P", "threads",
                     "-c", str(concurrency or spec.concurrency), "--loglevel", loglevel,
                     "-n", f"{pool}-%i@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"])


from .cli_ci import baseline, gate  # noqa: E402

main.add_command(gate)
main.add_command(baseline)


from .cli_providers import mock_provider, rubric, selftest  # noqa: E402
from .cli_farm import cancel, resume, status, wait  # noqa: E402

for _command in (status, wait, cancel, resume):
    main.add_command(_command)

main.add_command(mock_provider)
main.add_command(rubric)
main.add_command(selftest)


from .cli_ab import ab, audit  # noqa: E402

main.add_command(ab)
main.add_command(audit)

from .interop.cli import register_interop  # noqa: E402

register_interop(main)


if __name__ == "__main__":  # pragma: no cover
    main()
