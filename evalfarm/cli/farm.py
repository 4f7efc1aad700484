"""Commands that talk to the farm: worker, status, wait, cancel, resume."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import EvalfarmError
from ..names import printable, run_id_problem
from .options import broker_option, state_dir_option


def _run_id_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A run id on the command line is checked before it reaches Redis keys or file names."""
    if value is not None and run_id_problem(value):
        raise click.BadParameter(f"{run_id_problem(value)}; see 'evalfarm status'")
    return value


def report_options(f):
    """Where and how a finished run's report goes: the options `wait` and `resume` share."""
    for option in reversed([state_dir_option, click.option("--no-save", is_flag=True),
                            click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path)),
                            click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True)),
                            click.option("--json", "as_json", is_flag=True)]):
        f = option(f)
    return f


def farm(broker: str | None):
    """The farm's coordinator for ``broker`` (``runs.farm.connect``)."""
    from ..runs.farm import connect

    return connect(broker)


def check_report_outputs(state_dir: Path, no_save: bool, output: Path | None) -> None:
    """Where the report will go is checked before waiting (maybe for hours) or dispatching anything."""
    from ..runs.archive import check_state_dir, check_writable

    if output is not None:
        check_writable(output, "--output")
    if not no_save:
        check_state_dir(state_dir)


def attach(backend, run_id: str, state_dir: Path, no_save: bool, as_json: bool, output: Path | None,
           timeout_s: float | None) -> None:
    """Show live progress until the report exists, then save, print and exit with its code."""
    from .live import LiveProgress
    from .deliver import finish

    with LiveProgress(enabled=None if not as_json else False) as bar:
        try:
            backend.wait(run_id, on_progress=bar.update, timeout_s=timeout_s)
        except KeyboardInterrupt:
            still_running(run_id)
    from ..runs.farm import attach as handle

    sys.exit(finish(handle(backend, run_id), state_dir, no_save, as_json, output))


def still_running(run_id: str) -> None:
    """Ctrl-C while attached to a farm run: the run goes on without us. The bar stops first, so its
    last redraw cannot land over this line."""
    from .live import stop_live

    stop_live()
    click.echo(f"\nevalfarm: detached; run {run_id} goes on on the farm. 'evalfarm wait {run_id}' attaches "
               f"again, 'evalfarm cancel {run_id}' stops it.", err=True)
    sys.exit(130)


@click.command()
@click.option("--pool", type=click.Choice(["provider", "judge", "spawn", "aggregate", "all"]), default="all",
              show_default=True, help="Which queues to consume, with that pool's settings "
                                      "(evalfarm/executors/celery/pools.py). 'all' means all: provider, judge "
                                      "and aggregate in this process, and spawn (coding agents) in a child "
                                      "'worker --pool spawn' started when a spawn task first waits.")
@click.option("-c", "--concurrency", type=click.IntRange(1, 512),
              help="Tasks this worker runs at once (threads sharing one event loop); default: the pool's.")
@broker_option
@click.option("--loglevel", default="WARNING", show_default=True)
@click.option("--metrics-port", type=click.IntRange(1, 65535), metavar="N",
              help="Serve Prometheus metrics on this port (/metrics): items, latency, in flight, retries, 429 "
                   "pauses, spend, queue depth.")
@click.option("--no-events", is_flag=True, help="Send no task events (seen by Flower and `celery events`); "
                                                 "worker heartbeats stay on.")
@click.option("--allow-unsandboxed", is_flag=True, help="Spawn pool: also run agent tasks whose workspace says "
                                                         "isolation: none (refused by default: the item fails).")
def worker(pool: str, concurrency: int | None, broker: str | None, loglevel: str, metrics_port: int | None,
           no_events: bool, allow_unsandboxed: bool) -> None:
    """Start a worker consuming one pool's queues; it announces itself (a heartbeat key the dashboard reads)."""
    from ..runs.farm import start_worker

    start_worker(pool, concurrency=concurrency, broker=broker, loglevel=loglevel, metrics_port=metrics_port,
                 events=not no_events, allow_unsandboxed=allow_unsandboxed)


@click.command()
@click.argument("run_id", required=False, callback=_run_id_arg)
@broker_option
@click.option("--json", "as_json", is_flag=True)
def status(run_id: str | None, broker: str | None, as_json: bool) -> None:
    """Where a run stands (done, errors, judge backlog, duplicates, spend), or the recent runs."""
    backend = farm(broker)
    if run_id is None:
        runs = backend.runs()
        if as_json:
            click.echo(json.dumps(runs, indent=2))
        for r in runs if not as_json else []:
            click.echo("\t".join(printable(x) for x in (r["run_id"], r["state"], f"{r['done']}/{r['total']}",
                                                         r["spec"], r["started_at"])))
        return
    meta = backend.meta(run_id)
    # the counters and the broker are read one after the other while workers record items: read again
    # until nothing moved between the two reads, so an item finishing in between is not shown "missing"
    for _ in range(5):
        before = backend.progress(run_id)
        queued, in_hands = backend.open_items(run_id)  # not done, not awaiting the judge
        p = backend.progress(run_id)
        if (p.stored, p.pending_judge) == (before.stored, before.pending_judge):
            break
    batch_lines, in_batches = backend.batches(run_id)
    info = {"run_id": run_id, "spec": meta["spec"]["name"], "state": meta.get("state"), "total": p.total,
            "done": p.done, "errors": p.errors, "pending_judge": p.pending_judge, "queued": queued,
            "in_hands": in_hands, "in_broker": queued + in_hands, "in_provider_batches": in_batches,
            "provider_batches": batch_lines,
            "missing": p.total - p.stored - p.pending_judge - queued - in_hands - in_batches,
            "stored": p.stored, "lost_results": p.lost,
            "executed": p.executed, "duplicate_executions": max(0, p.executed - p.stored),
            "cost_usd": round(p.cost_usd, 6), "per_adapter": {a: {"done": d, "errors": e}
                                                                for a, (d, e) in p.per_adapter.items()},
            "started_at": meta.get("started_at"), "finished_at": meta.get("finished_at"),
            "report_ready": bool(backend.store.report_size(run_id)), "resumed": meta.get("resumed", 0),
            "failure": meta.get("failure"), "fleet_slots": backend.fleet_slots(run_id)}
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    pct = 100.0 * p.done / p.total if p.total else 100.0
    click.echo(f"run {run_id} ({info['spec']}): {info['state']}, {p.done}/{p.total} done ({pct:.1f}%), "
               f"{p.errors} errored, {p.pending_judge} awaiting the judge, {queued} queued, {in_hands} in workers' "
               f"hands, {max(0, info['missing'])} missing")
    if p.lost:
        click.echo(f"  {p.lost} of the done items lost their results (Redis restored from an older snapshot?) and "
                   "run again; done holds until they are back")
    if meta.get("failure"):
        click.echo(f"  failed: {meta['failure']}")
    for a, d in info["per_adapter"].items():
        click.echo(f"  {a}: {d['done']} done, {d['errors']} errored")
    click.echo(f"  spend ${p.cost_usd:.6f}; executions {p.executed} ({info['duplicate_executions']} duplicates, "
               f"counted once); report {'ready' if info['report_ready'] else 'not yet'}")
    if info["fleet_slots"]:
        click.echo(f"  run --concurrency: {info['fleet_slots']}")
    if batch_lines:
        click.echo(f"  provider batches: {len(batch_lines)}, holding {in_batches} items not done yet")
        for line in batch_lines:
            click.echo(f"    {printable(line)}")
    if info["missing"] > 0 and info["state"] not in ("done", "failed"):
        click.echo(f"  'evalfarm resume {run_id}' dispatches the {info['missing']} missing items")


@click.command()
@click.argument("run_id", callback=_run_id_arg)
@broker_option
@report_options
def wait(run_id: str, broker: str | None, state_dir: Path, no_save: bool, output: Path | None,
         timeout_s: float | None, as_json: bool) -> None:
    """Attach to a run: live progress until its report exists, then save and print it."""
    check_report_outputs(state_dir, no_save, output)
    backend = farm(broker)
    backend.meta(run_id)
    attach(backend, run_id, state_dir, no_save, as_json, output, timeout_s)


@click.command()
@click.argument("run_id", callback=_run_id_arg)
@broker_option
def cancel(run_id: str, broker: str | None) -> None:
    """Stop a run: workers skip its remaining batches; `resume` continues it later."""
    backend = farm(broker)
    what = backend.cancel(run_id)
    at = f"{what['done']}/{what['total']} items"
    if what["outcome"] == "already":
        click.echo(f"run {run_id} was already cancelled ({at} done); 'evalfarm resume {run_id}' continues it")
    elif what["outcome"] == "too_late":
        click.echo(f"too late to cancel run {run_id} ({at} done): nothing was still queued, and the "
                   f"{what['in_hands']} remaining items are already in workers' hands; the run finishes, "
                   f"'evalfarm wait {run_id}' saves its report")
    else:
        hands = f"; {what['in_hands']} items already in workers' hands finish" if what.get("in_hands") else ""
        click.echo(f"cancelled {run_id} at {at}{hands}")


RERUN_CLASSES = ("infra_failed", "verifier_failed", "agent_timeout", "agent_failed")  # core/failure.py


@click.command()
@click.argument("run_id", callback=_run_id_arg)
@broker_option
@report_options
@click.option("--detach", is_flag=True, help="Dispatch and return; 'evalfarm wait RUN' attaches later.")
@click.option("--only", type=click.Choice(RERUN_CLASSES),
              help="Re-run a finished run's agent items of this failure class (e.g. infra_failed once the "
                   "endpoint is back); its report is built again from every item.")
def resume(run_id: str, broker: str | None, state_dir: Path, no_save: bool, output: Path | None, detach: bool,
           timeout_s: float | None, as_json: bool, only: str | None) -> None:
    """Re-dispatch only a run's missing items (not done, not awaiting the judge, not in the broker),
    then wait for its report."""
    if not detach:
        check_report_outputs(state_dir, no_save, output)
    backend = farm(broker)
    what = backend.resume(run_id, only=only) if only else backend.resume(run_id)
    click.echo(f"resumed {run_id}: dispatched {what['dispatched']} {only or 'missing'} items"
               f"{', ' + str(what['judge']) + ' to the judge' if what['judge'] else ''}; "
               f"{what.get('already_done', 0)} already done, {what.get('in_broker', 0)} still in the broker",
               err=True)
    if detach:
        click.echo(run_id)
        return
    attach(backend, run_id, state_dir, no_save, as_json, output, timeout_s)
