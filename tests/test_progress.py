"""The live progress bar, rendered to a real terminal console during a real embedded run."""
from __future__ import annotations

import io

from rich.console import Console

from conftest import EXAMPLES
from evalfarm.cli.console import LiveProgress
from evalfarm.backends.inprocess import InProcessBackend
from evalfarm.backends.store import Progress
from evalfarm.orchestrator import Orchestrator
from evalfarm.spec.load import open_spec


def test_rows_are_rates_over_the_run_and_spend_per_adapter():
    p = Progress(run_id="r", total=200, done=150, errors=3, cost_usd=0.25, per_adapter={"a": (100, 1), "b": (50, 2)},
                 elapsed_s=10.0, state="running", cost_per_adapter={"a": 0.2, "b": 0.05})
    rows = LiveProgress.rows(p)
    assert rows["total"] == (150, 3, 200, "15.0", "$0.2500")
    assert rows["a"] == (100, 1, 100, "10.0", "$0.2000") and rows["b"] == (50, 2, 100, "5.0", "$0.0500")


def test_bar_during_a_real_run_shows_every_field():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, emoji=False)
    sf = open_spec(EXAMPLES / "smoke.yaml")
    orchestrator = Orchestrator(InProcessBackend(progress_s=0.001))
    with LiveProgress(enabled=True, console=console) as bar:
        orchestrator.submit(sf.spec, sf.source, on_progress=bar.update)
    out = buf.getvalue()
    for needle in ("total", "mock:shouty", "20/20", "10/10", "it/s", "err 0", "$0.0000", "ETA"):
        assert needle in out, needle
