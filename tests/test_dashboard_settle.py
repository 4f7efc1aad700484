"""The Farm page right after a Redis restart (a restore from an older snapshot): a run that began before
the Redis did is marked settling, and its done count does not drop below what the page already showed
(``status`` waits out the same few seconds instead). A real redis-server, killed and started again."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import redis

from conftest import wait_for
from evalfarm.dashboard.farm import FarmView, redis_uptime_s
from evalfarm.executors.celery.store import RUNS_INDEX, TALLY_SETTLE_S

RUN = "20261205T100000000000Z-abc123"


def _write_run(r: redis.Redis, done: int) -> None:
    started = (datetime.now(timezone.utc) - timedelta(minutes=5)).isoformat()
    r.set(f"ef:run:{RUN}:meta", json.dumps({"run_id": RUN, "total": 10, "adapters": ["m"], "started_at": started,
                                             "spec": {"name": "s"}, "mode": "redis"}))
    r.set(f"ef:run:{RUN}:state", "running")
    r.hset(f"ef:run:{RUN}:counts", mapping={"done": done, "done:m": done})
    r.zadd(RUNS_INDEX, {RUN: time.time()})


def _run(view: FarmView) -> dict:
    snap = view.snapshot()
    assert snap["ok"], snap
    return snap["runs"][0]


def test_the_farm_page_marks_a_run_settling_and_keeps_its_count_after_a_restart(redis_server):
    r = redis.Redis.from_url(redis_server.url)
    _write_run(r, 8)
    wait_for(lambda: (redis_uptime_s(r) or 0) >= TALLY_SETTLE_S, 30, "Redis older than the settle time")
    open_page = FarmView(redis_server.url)
    before = _run(open_page)
    assert (before["done"], before["settling"]) == (8, False)

    redis_server.stop()  # no persistence: the restart is a restore from an older state, written below
    redis_server.start()
    r = redis.Redis.from_url(redis_server.url)
    _write_run(r, 3)
    after = _run(open_page)
    assert (after["done"], after["settling"]) == (8, True)  # the page that showed 8 does not show 3
    fresh = _run(FarmView(redis_server.url))
    assert (fresh["done"], fresh["settling"]) == (3, True)  # a page opened now says its count is settling

    wait_for(lambda: (redis_uptime_s(r) or 0) >= TALLY_SETTLE_S, 30, "the settle time to pass")
    settled = _run(FarmView(redis_server.url))
    assert (settled["done"], settled["settling"]) == (3, False)
