"""CLI commands that talk to a running farm: status, wait, cancel, resume."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .errors import EvalfarmError

from .cli_options import broker_option, state_dir_option


def report_options(f):
    """Where and how a finished run's report goes: the options `wait` and `resume` share."""
    for option in reversed([state_dir_option, click.option("--no-save", is_flag=True),
                            click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path)),
                            click.option("--timeout", "timeout_s", type=float),
                            click.option("--json", "as_json", is_flag=True)]):
        f = option(f)
    return f


def coordinator(broker: str | None):
    from .farm.coordinator import Coordinator
    from .farm.settings import FarmSettings

    if not broker:
        raise EvalfarmError("this command needs the farm's Redis: pass --broker redis://HOST:6379/0 "
                            "or set EVALFARM_BROKER_URL")
    return Coordinator(FarmSettings.from_env(broker_url=broker))


FULL_REPORT_OPTIONS = ("gate", "promote", "baseline", "junit", "pr_summary")


def finish(coord, run_id: str, state_dir: Path, no_save: bool, as_json: bool, output: Path | None,
           spec=None, ci: dict | None = None) -> int:
    """Persist and print a finished run's report; returns the exit code.

    The report's bytes stream from the store to the files (and stdout) in chunks.
    Printing, the registry and the exit code need only the summary the aggregate stored
    beside it; the outcomes are parsed only for what needs them (the gate, baselines,
    JUnit), so a 100,000-item run stays cheap for the coordinator.
    """
    from .artifacts import list_runs, save_report_stream, write_stream
    from .cli_ci import finish_run
    from .console import print_summary

    ci = ci or {}
    store = coord.store
    summary = json.loads(store.get_blob(run_id, "summary") or b"{}")
    markdown = store.get_blob(run_id, "markdown") or b""
    paths: list[str] = []
    json_path = None
    if output is not None:
        write_stream(output, store.iter_report(run_id))
        paths.append(str(output))
    if not no_save:
        existing = [p for p in list_runs(state_dir) if p.stem == run_id]
        if existing:  # already saved by an earlier wait
            json_path = existing[0]
            paths.append(str(json_path))
        else:
            json_path, md_path = save_report_stream(summary, store.iter_report(run_id), state_dir, markdown)
            paths += [str(json_path), str(md_path)]
    if as_json:
        for chunk in store.iter_report(run_id):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    else:
        print_summary(summary, paths)
    report = summary
    if any(ci.get(k) for k in FULL_REPORT_OPTIONS):
        report = json.loads(b"".join(store.iter_report(run_id)))
    return finish_run(report, b"", json_path, state_dir, spec, {**ci, "as_json": as_json})


def attach(coord, run_id: str, state_dir: Path, no_save: bool, as_json: bool, output: Path | None,
           timeout_s: float | None) -> None:
    """Show live progress until the report exists, then save, print and exit with its code."""
    from .console import LiveProgress

    with LiveProgress(enabled=None if not as_json else False) as bar:
        coord.wait(run_id, on_progress=bar.update, timeout_s=timeout_s, fetch=False)
    sys.exit(finish(coord, run_id, state_dir, no_save, as_json, output))


@click.command()
@click.argument("run_id", required=False)
@broker_option
@click.option("--json", "as_json", is_flag=True)
def status(run_id: str | None, broker: str | None, as_json: bool) -> None:
    """Where a run stands (done, errors, judge backlog, duplicates, spend), or the recent runs."""
    coord = coordinator(broker)
    if run_id is None:
        runs = coord.runs()
        if as_json:
            click.echo(json.dumps(runs, indent=2))
        for r in runs if not as_json else []:
            click.echo(f"{r['run_id']}\t{r['state']}\t{r['done']}/{r['total']}\t{r['spec']}\t{r['started_at']}")
        return
    meta = coord.meta(run_id)
    p = coord.progress(run_id)
    queued = coord.in_broker(run_id)
    info = {"run_id": run_id, "spec": meta["spec"]["name"], "state": meta.get("state"), "total": p.total,
            "done": p.done, "errors": p.errors, "pending_judge": p.pending_judge,
            "in_broker": len(queued), "missing": p.total - p.done - p.pending_judge - len(queued),
            "executed": p.executed, "duplicate_executions": max(0, p.executed - p.done),
            "cost_usd": round(p.cost_usd, 6), "per_adapter": {a: {"done": d, "errors": e}
                                                                for a, (d, e) in p.per_adapter.items()},
            "started_at": meta.get("started_at"), "finished_at": meta.get("finished_at"),
            "report_ready": coord.store.get_report(run_id) is not None, "resumed": meta.get("resumed", 0)}
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    pct = 100.0 * p.done / p.total if p.total else 100.0
    click.echo(f"run {run_id} ({info['spec']}): {info['state']}, {p.done}/{p.total} done ({pct:.1f}%), "
               f"{p.errors} errored, {p.pending_judge} awaiting the judge, {len(queued)} queued or in flight, "
               f"{max(0, info['missing'])} missing")
    for a, d in info["per_adapter"].items():
        click.echo(f"  {a}: {d['done']} done, {d['errors']} errored")
    click.echo(f"  spend ${p.cost_usd:.6f}; executions {p.executed} ({info['duplicate_executions']} duplicates, "
               f"counted once); report {'ready' if info['report_ready'] else 'not yet'}")
    if info["missing"] > 0 and info["state"] not in ("done",):
        click.echo(f"  'evalfarm resume {run_id}' dispatches the {info['missing']} missing items")


@click.command()
@click.argument("run_id")
@broker_option
@report_options
def wait(run_id: str, broker: str | None, state_dir: Path, no_save: bool, output: Path | None,
         timeout_s: float | None, as_json: bool) -> None:
    """Attach to a run: live progress until its report exists, then save and print it."""
    coord = coordinator(broker)
    coord.meta(run_id)
    attach(coord, run_id, state_dir, no_save, as_json, output, timeout_s)


@click.command()
@click.argument("run_id")
@broker_option
def cancel(run_id: str, broker: str | None) -> None:
    """Stop a run: workers skip its remaining batches; `resume` continues it later."""
    coord = coordinator(broker)
    coord.cancel(run_id)
    p = coord.progress(run_id)
    click.echo(f"cancelled {run_id} at {p.done}/{p.total} items")


@click.command()
@click.argument("run_id")
@broker_option
@report_options
@click.option("--detach", is_flag=True, help="Dispatch and return; 'evalfarm wait RUN' attaches later.")
def resume(run_id: str, broker: str | None, state_dir: Path, no_save: bool, output: Path | None, detach: bool,
           timeout_s: float | None, as_json: bool) -> None:
    """Re-dispatch only a run's missing items (not done, not awaiting the judge, not in the broker),
    then wait for its report."""
    coord = coordinator(broker)
    what = coord.resume(run_id)
    click.echo(f"resumed {run_id}: dispatched {what['dispatched']} missing items"
               f"{', ' + str(what['judge']) + ' to the judge' if what['judge'] else ''}"
               f"{' (re-planned)' if what['replanned'] else ''}; "
               f"{what.get('already_done', 0)} already done, {what.get('in_broker', 0)} still in the broker",
               err=True)
    if detach:
        click.echo(run_id)
        return
    attach(coord, run_id, state_dir, no_save, as_json, output, timeout_s)
