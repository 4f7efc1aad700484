"""What Celery task events cost at the farm's throughput: the same mock runs on one worker, task events
on (the default) and off (`evalfarm worker --no-events`), alternating, best of N each. Two shapes: the
default batching (up to 100 items per task: 3 event messages per batch) and one item per task (the
worst case: 3 event messages per item). A `celery events` listener is attached in the "on + listener"
rows, as a monitor would be.

    python bench/events_cost.py [--items 10000] [--small 2000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench import Redis, farm_run, mock_spec, start_worker, stop_worker  # noqa: E402


def timed(redis: Redis, spec, env: dict[str, str], events: bool, listener: bool, batch: int | None) -> float:
    redis.flush()
    args = [sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"]
    worker = start_worker(args + ([] if events else ["--no-events"]), dict(env, EVALFARM_BROKER_URL=redis.url))
    dump = None
    if listener:
        dump = subprocess.Popen([sys.executable, "-m", "celery", "-A", "evalfarm.executors.celery.celery_app",
                                 "events", "--dump"], env=dict(env, CELERY_BROKER_URL=redis.url),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(2)
    try:
        if batch:
            os.environ["EVALFARM_BATCH_SIZE"] = str(batch)
        else:
            os.environ.pop("EVALFARM_BATCH_SIZE", None)
        seconds, items = farm_run(spec, redis.url)
        assert items == spec_items(spec), items
        return seconds
    finally:
        stop_worker(worker)
        if dump is not None:
            stop_worker(dump)


def spec_items(spec) -> int:
    return sum(1 for _ in spec.source)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--small", type=int, default=2_000, help="items of the one-item-per-task run")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    env = dict(os.environ)
    env.pop("EVALFARM_BROKER_URL", None)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = Redis(Path(tmp))
        try:
            for items, batch in ((a.items, None), (a.small, 1)):
                d = Path(tmp) / f"s{items}"
                d.mkdir()
                spec = mock_spec(d, items)
                best: dict[str, float] = {}
                for _ in range(a.repeat):
                    for name, events, listener in (("off", False, False), ("on", True, False),
                                                   ("on + listener", True, True)):
                        s = timed(redis, spec, env, events, listener, batch)
                        best[name] = min(best.get(name, s), s)
                for name, s in best.items():
                    row = {"items": items, "batch": batch or "default", "events": name, "best_s": round(s, 3),
                           "items_per_s": round(items / s), "vs_off": round(s / best["off"] - 1, 4)}
                    out.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
