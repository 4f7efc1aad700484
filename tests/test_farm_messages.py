"""The coordinator's task messages (``executors/celery/messages.py``) are the ones the pinned Celery sends,
field by field, and a real worker runs them; a plain farm run's coordinator imports no Celery."""
from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import redis

from conftest import env_for
from evalfarm.executors.celery.app import create_app
from evalfarm.executors.celery.messages import RUN_BATCH, Publisher, task_message
from evalfarm.executors.celery.settings import FarmSettings

PER_MESSAGE = {("headers", "id"), ("headers", "root_id"), ("headers", "origin"), ("properties", "correlation_id"),
               ("properties", "reply_to"), ("properties", "delivery_tag")}  # ids and the sender's name


def _fields(message: dict) -> dict:
    out = {}
    for part in ("headers", "properties"):
        for k, v in message[part].items():
            if (part, k) not in PER_MESSAGE:
                out[(part, k)] = v
    out["body"] = json.loads(base64.b64decode(message["body"]))
    for k in ("content-encoding", "content-type"):
        out[k] = message[k]
    return out


def test_a_published_message_is_the_one_celery_sends(redis_server):
    args = ["20261205T000000000000Z-abcdef", ["k1", "k2"], None]
    app = create_app(FarmSettings(broker_url=redis_server.url))
    with app.producer_or_acquire() as producer:
        app.send_task(RUN_BATCH, args=args, producer=producer, queue="provider")
    r = redis.Redis.from_url(redis_server.url)
    Publisher(r).send_many([(RUN_BATCH, args, "provider")])
    ours, celerys = (json.loads(raw) for raw in r.lrange("provider", 0, -1))  # LPUSH: the newest first
    assert _fields(ours) == _fields(celerys)
    assert set(ours["headers"]) == set(celerys["headers"])
    assert set(ours["properties"]) == set(celerys["properties"])
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    assert ours["headers"]["id"] != celerys["headers"]["id"]


def test_each_message_has_its_own_ids():
    a, b = (json.loads(task_message(RUN_BATCH, ["r", ["k"]], "provider")) for _ in range(2))
    assert a["headers"]["id"] != b["headers"]["id"]
    assert a["properties"]["delivery_tag"] != b["properties"]["delivery_tag"]


def test_a_plain_farm_run_imports_no_celery(redis_server, start_worker, provider, tmp_path):
    """Run for real (a worker, the mock provider): the coordinator process never imported celery or kombu."""
    start_worker(redis_server.url)
    provider = provider()
    (tmp_path / "s.yaml").write_text(f"name: s\nadapters:\n  - {{id: m, model: mock, base_url: '{provider.url}'}}\n"
                                     "prompts:\n" + "".join(f"  - {{id: p{i}, text: 'say {i}', expected_output_contains: "
                                                            f"['{i}']}}\n" for i in range(20)))
    code = ("import sys\nfrom evalfarm.cli import main\ntry:\n    main(['run', 's.yaml', '--no-save', '--broker', "
            f"{redis_server.url!r}], standalone_mode=False)\nfinally:\n"
            "    print('IMPORTED', sorted({m.split('.')[0] for m in sys.modules} & {'celery', 'kombu'}))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env_for(), capture_output=True, text=True,
                          timeout=120)
    assert "IMPORTED []" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"│ m\s+│\s+20 │\s+0 │ 100\.0%", proc.stdout), proc.stdout[-2000:]  # 20 items, 0 errors
