"""Issue 17 item 7 (the wording): `evalfarm status` mid-run counts what is really queued and in workers'
hands (a batch's message carries its finished items until it is acknowledged: the old figure said
"238/2000 done ... 2000 queued or in flight"), and the Farm page shows a finished run's own rate (items
over its own start to finish), not one that decays with its age. A real redis-server, a real worker,
the real CLI and `evalfarm serve --broker` in subprocesses, Debian's chromium for the page."""
from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime

import redis

from conftest import EVALFARM, env_for, run_cli, wait_for
from dashboard_support import Serve, browser, page  # noqa: F401 (fixtures)

PLUGINS = "ef_test_adapters"


def slow_spec(tmp, n: int, ms: int):
    spec = tmp / "slow.yaml"
    spec.write_text(f"name: slow\nadapters: ['slow:{ms}']\nprompts:\n"
                    + "".join(f"  - {{id: p{i:03d}, text: t{i}}}\n" for i in range(n)))
    return spec


def test_status_mid_run_counts_only_unfinished_items_as_queued_or_in_hands(tmp_path, redis_server, start_worker):
    # one batch of 160 slow items, 8 in flight at once in the worker: its message stays unacknowledged
    # (in the worker's hands) while its items finish 8 at a time (~8 s)
    start_worker(redis_server.url, concurrency=1, EVALFARM_PLUGINS=PLUGINS, EVALFARM_MAX_IN_FLIGHT="8")
    spec = slow_spec(tmp_path, 160, 400)
    res = run_cli("run", str(spec), "--detach", "--batch-size", "160", "--no-save", broker=redis_server.url,
                  EVALFARM_PLUGINS=PLUGINS)
    assert res.returncode == 0, res.stderr
    rid = re.search(r"\d{8}T\d{12}Z-[0-9a-f]{6}", res.stdout + res.stderr).group()

    def mid():
        info = json.loads(run_cli("status", rid, "--json", broker=redis_server.url).stdout)
        return info if 16 <= info["done"] <= 136 else None

    info = wait_for(mid, 60, "the run to be part done")
    total, done = info["total"], info["done"]
    assert total == 160
    assert info["in_broker"] <= total - done, info  # queued or in workers' hands: never more than what is left
    assert info["queued"] + info["in_hands"] == info["in_broker"], info
    assert done + info["pending_judge"] + info["queued"] + info["in_hands"] + max(0, info["missing"]) == total, info
    assert info["in_hands"] > 0 and info["missing"] == 0, info
    text = run_cli("status", rid, broker=redis_server.url).stdout
    m = re.search(r"(\d+)/160 done .* (\d+) queued, (\d+) in workers' hands, (\d+) missing", text)
    assert m, text
    shown_done, queued, hands, missing = map(int, m.groups())
    assert shown_done + queued + hands + missing <= 160, text
    print(f"\nstatus mid-run: {text.splitlines()[0]}")
    waited = run_cli("wait", rid, "--no-save", broker=redis_server.url, timeout=120)
    assert waited.returncode == 0, waited.stderr


def test_the_farm_page_shows_a_finished_runs_own_rate(tmp_path, redis_server, start_worker, page):
    start_worker(redis_server.url, concurrency=2, EVALFARM_PLUGINS=PLUGINS)
    spec = slow_spec(tmp_path, 60, 100)
    res = subprocess.run([*EVALFARM, "run", str(spec), "--no-save", "--batch-size", "6"],
                         env=env_for(redis_server.url, EVALFARM_PLUGINS=PLUGINS), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    r = redis.Redis.from_url(redis_server.url)
    [key] = r.keys("ef:run:*:meta")
    meta = json.loads(r.get(key))
    own = 60 / (datetime.fromisoformat(meta["finished_at"]) - datetime.fromisoformat(meta["started_at"])).total_seconds()
    s = Serve(tmp_path / "state", "--broker", redis_server.url)
    try:
        first = s.json("/api/farm")["runs"][0]
        page.goto(s.url + "/farm")
        wait_for(lambda: page.locator("tr.farm-run").count() == 1, 15, "the run's row")
        shown = page.locator("tr.farm-run td").nth(5).inner_text()
        time.sleep(3)
        later = s.json("/api/farm")["runs"][0]
        page.reload()
        wait_for(lambda: page.locator("tr.farm-run").count() == 1, 15, "the run's row again")
        shown_later = page.locator("tr.farm-run td").nth(5).inner_text()
    finally:
        s.stop()
    assert first["state"] == "done" and first["done"] == 60 and not first["running"]
    assert abs(first["rate_per_s"] - own) < 1e-6 * own and later["rate_per_s"] == first["rate_per_s"], (first, later)
    assert shown == shown_later == f"{own:.1f}", (shown, shown_later, own)
    print(f"\nfinished run: {own:.1f} items/s from its own start and finish, shown {shown} and {shown_later} 3 s later")
