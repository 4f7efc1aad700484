"""The live progress bar, rendered to a real terminal console during a real embedded run."""
from __future__ import annotations

import io
import json

from rich.console import Console

from conftest import EXAMPLES
from evalfarm.cli.console import print_summary
from evalfarm.cli.live import LiveProgress, eta
from evalfarm.executors.inprocess import InProcessBackend
from evalfarm.executors.store import Progress
from evalfarm.runs.submit import Orchestrator
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


def _smoke_report() -> dict:
    sf = open_spec(EXAMPLES / "smoke.yaml")
    orchestrator = Orchestrator(InProcessBackend())
    plan = orchestrator.submit(sf.spec, sf.source)
    return json.loads(orchestrator.report_bytes(plan.run_id))


def test_the_summary_fits_80_columns_on_a_terminal_and_is_whole_when_piped():
    report = _smoke_report()
    buf = io.StringIO()
    print_summary(report, [], Console(file=buf, force_terminal=True, width=80, emoji=False, color_system=None))
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out and "mock:shouty" in out and "0.760" in out and "60.0%" in out, out
    piped = io.StringIO()
    print_summary(report, [], Console(file=piped, force_terminal=False, width=80, emoji=False))
    wide = piped.getvalue()
    assert "…" not in wide and "tokens in/out" in wide and "mock:shouty" in wide
    row = next(line for line in wide.splitlines() if line.startswith("│ mock:shouty"))
    assert "0.760" in row and "60/70" in row  # one row per adapter, every figure on it


def test_eta_before_the_first_result_and_after():
    def p(done, elapsed):
        return Progress(run_id="r", total=100, done=done, errors=0, cost_usd=0.0, per_adapter={"a": (done, 0)},
                        elapsed_s=elapsed, state="running")
    assert eta(p(0, 3.0)) == "ETA after the first results"
    assert eta(p(50, 10.0)) == "ETA 0:10" and eta(p(1, 40.0)) == "ETA 1:06:00" and eta(p(100, 9.0)) == "ETA 0:00"


def test_farm_progress_moves_item_by_item_not_batch_by_batch(tmp_path, provider, redis_server, start_worker):
    """Batches of 100 at 8 calls in flight: results are recorded as they finish, so the done counter (and the
    live bar reading it) climbs in small steps, not in jumps of 100."""
    import subprocess
    import time

    import redis as redis_lib

    from conftest import EVALFARM, env_for

    server = provider("--latency-ms", "100")
    (tmp_path / "s.yaml").write_text(f"name: steps\nadapters:\n  - {{id: m, model: mock, base_url: '{server.url}'}}\n"
                                     "prompts:\n" + "".join(f"  - {{id: p{i}, text: t{i}}}\n" for i in range(400)))
    start_worker(redis_server.url, concurrency=4, EVALFARM_MAX_IN_FLIGHT="8")
    proc = subprocess.Popen([*EVALFARM, "run", str(tmp_path / "s.yaml"), "--no-save", "--batch-size", "100"],
                            env=env_for(redis_server.url), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    r = redis_lib.Redis.from_url(redis_server.url)
    seen: list[int] = []
    while proc.poll() is None:
        for key in r.scan_iter("ef:run:*:counts"):
            seen.append(int(r.hget(key, "done") or 0))
        time.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read()
    steps = [b - a for a, b in zip(seen, seen[1:]) if b != a]
    assert len(set(seen)) >= 15 and max(steps) <= 40, (sorted(set(seen)), steps)
