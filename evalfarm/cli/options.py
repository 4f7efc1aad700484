"""Options several commands share, defined once."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import click

state_dir_option = click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                                default=Path(".evalfarm"), show_default=True, envvar="EVALFARM_STATE_DIR",
                                help="Where runs (runs/), the registry and baselines live.")

broker_option = click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL",
                             help="The farm's Redis (or EVALFARM_BROKER_URL).")


strict_option = click.option("--strict", is_flag=True,
                             help="With the gate: count known flaky cases (flake history) as regressions too.")


def ci_run_options(f: Callable) -> Callable:
    """The CI flags of ``run``; they reach the command as keyword arguments (``**ci``)."""
    options = [
        click.option("--gate", is_flag=True,
                     help="Apply the three brakes (floor, drop, regressions) against the baseline; exit 1 on failure."),
        click.option("--promote", is_flag=True,
                     help="Make this run the baseline (--baseline NAME, default: the spec name) if it passes the gate."),
        click.option("--baseline", metavar="NAME",
                     help="Named baseline to compare with (default: the one named after the spec, if any)."),
        click.option("--prompt-version", metavar="V",
                     help="Version of the spec's prompt (prompts/<name>/<V>.txt|.yaml); default: its 'current' pointer."),
        click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                     help="Write JUnit XML: one testcase per case and adapter."),
        click.option("--pr-summary", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                     help="Write a short Markdown summary for a pull-request comment."),
        strict_option,
    ]
    for option in reversed(options):
        f = option(f)
    return f
