"""``RedisStore.batch_view`` (one script) answers what the store's separate reads answer: a batch's state,
done keys, keys awaiting the judge and the rest's item JSON, on a real Redis."""
from __future__ import annotations

import json

from evalfarm.executors.celery.store import RedisStore
from evalfarm.executors.store import RunStore


def test_one_script_answers_what_the_separate_reads_answer(redis_server):
    store = RedisStore(redis_server.url)
    run = "20261205T000000000000Z-view01"
    store.create_run(run, {"run_id": run, "total": 6, "state": "running"})
    items = [(f"k{i}", json.dumps({"key": f"k{i}", "n": i})) for i in range(6)]
    store.add_items(run, items)
    store.record(run, [{"key": "k1", "prompt_id": "p1", "adapter": "m", "trial": 1}])
    store.put_pending(run, [{"key": "k3", "prompt_id": "p3", "adapter": "m", "trial": 1}])
    keys = ["k0", "k1", "k2", "k3", "k4", "missing"]

    view = store.batch_view(run, keys)
    assert view == RunStore.batch_view(store, run, keys)  # the base class's reads, one by one
    state, done, pending, raws = view
    assert (state, done, pending) == ("running", {"k1"}, {"k3"})
    assert list(raws) == ["k0", "k2", "k4"] and json.loads(raws["k2"]) == {"key": "k2", "n": 2}

    store.r.delete(f"ef:run:{run}:state")
    assert store.batch_view(run, ["k0"])[0] is None
