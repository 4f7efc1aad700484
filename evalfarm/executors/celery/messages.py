"""The farm's task messages: queue and task names, and a coordinator's publisher that needs no Celery.

A coordinator only sends tasks. Importing Celery and building its app for that cost ~0.12 s of CPU
on these machines, and ``send_task`` ~3 ms a message (measured: 0.05 s for 16 batches), which a
1,000-item farm run paid before its first batch reached a worker (issue 17). ``Publisher`` writes
the same message Celery writes, in one pipelined round trip: Celery's task protocol 2 (headers,
``[args, kwargs, embed]`` body; docs.celeryq.dev, "Message Protocol") in kombu's Redis transport
envelope (a JSON object with a base64 body, LPUSHed on the queue's list; priority 0 is the list
named after the queue). ``tests/test_farm_messages.py`` checks it field by field against what the
pinned Celery sends, and every farm test's worker runs what it sends. Workers still use Celery
(``app.py``); a non-Redis broker (RabbitMQ) is sent through Celery as before.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from typing import Any, Iterable

QUEUES = ("provider", "judge", "spawn", "aggregate")
RUN_BATCH = "evalfarm.run_batch"
JUDGE_BATCH = "evalfarm.judge_batch"
AGGREGATE = "evalfarm.aggregate"
SPAWN_ITEM = "evalfarm.spawn_item"  # one coding-agent item per task (spawn.py)
BATCH_SUBMIT = "evalfarm.batch_submit"  # provider batch APIs (batches.py): short tasks on the aggregate queue
BATCH_POLL = "evalfarm.batch_poll"

_ORIGIN = f"gen{os.getpid()}@{socket.gethostname()}"


def redis_broker(url: str | None) -> bool:
    """A broker this publisher can write to (kombu's Redis transport)."""
    return bool(url) and str(url).startswith(("redis://", "rediss://", "unix://"))


def task_message(task: str, args: list[Any], queue: str) -> bytes:
    """One task message exactly as Celery 5 (protocol 2) sends it through kombu's Redis transport."""
    task_id = str(uuid.uuid4())
    body = json.dumps([args, {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}])
    return json.dumps({
        "body": base64.b64encode(body.encode("utf-8")).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py", "task": task, "id": task_id, "shadow": None, "eta": None, "expires": None,
            "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
            "parent_id": None, "argsrepr": repr(args)[:1024], "kwargsrepr": "{}", "origin": _ORIGIN,
            "ignore_result": None, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
        },
        "properties": {
            "correlation_id": task_id, "reply_to": str(uuid.uuid4()), "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
            "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
        },
    }).encode("utf-8")


class Publisher:
    """Sends task messages to the farm's Redis broker: a whole dispatch in one pipelined round trip
    (``send_many``), or one message (``send``)."""

    def __init__(self, client) -> None:
        self.r = client

    def send_many(self, messages: Iterable[tuple[str, list[Any], str]]) -> int:
        pipe = self.r.pipeline(transaction=False)
        n = 0
        for task, args, queue in messages:
            pipe.lpush(queue, task_message(task, args, queue))
            n += 1
        if n:
            pipe.execute()
        return n

    def send(self, task: str, args: list[Any], queue: str) -> None:
        self.r.lpush(queue, task_message(task, args, queue))
