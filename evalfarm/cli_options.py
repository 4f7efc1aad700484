"""Options several commands share, defined once."""
from __future__ import annotations

from pathlib import Path

import click

state_dir_option = click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                                default=Path(".evalfarm"), show_default=True, envvar="EVALFARM_STATE_DIR",
                                help="Where runs (runs/), the registry and baselines live.")

broker_option = click.option("--broker", envvar="EVALFARM_BROKER_URL", metavar="URL",
                             help="The farm's Redis (or EVALFARM_BROKER_URL).")
