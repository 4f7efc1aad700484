"""Showing a delivered run: ``runs.deliver`` saves and records it; this prints its summary (or streams
its report JSON to stdout), runs the CI steps the flags ask for and returns the exit code."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..spec.models import Thresholds
from .console import print_summary


def finish(run, state_dir: Path, no_save: bool, as_json: bool, output: Path | None,
           thresholds: Thresholds | None = None, prompt_info: dict[str, Any] | None = None,
           ci: dict[str, Any] | None = None) -> int:
    """Deliver a finished ``run`` (a ``runs.submit.RunHandle``) and print it; returns the exit code."""
    from ..ci.pipeline import finish_run
    from ..runs.deliver import deliver
    from ..runs.state import StateDir

    ci = ci or {}
    done = deliver(run.store, run.run_id, StateDir.of(state_dir), save=not no_save, output=output,
                   prompt_info=prompt_info)
    if as_json:
        for chunk in run.report_chunks():
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    else:
        print_summary(done.summary, done.paths)
    # the outcomes a line at a time, read only if a CI step needs them (each checked: the run store is shared)
    finished = finish_run(done.summary, done.json_path, state_dir, thresholds, prompt_info, ci, run.outcomes())
    for line in finished.lines:
        click.echo(line, err=as_json)  # stdout carries the report JSON: talk on stderr
    return finished.code
