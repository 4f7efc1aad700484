"""The broker scanner (real Redis, real Celery messages) counts a provider batch's ``batch_poll`` messages apart
from aggregate messages: a run waiting on open provider batches has no aggregate queued."""
from __future__ import annotations

import redis

from evalfarm.executors.celery.app import AGGREGATE, BATCH_POLL, BATCH_SUBMIT, RUN_BATCH, create_app
from evalfarm.executors.celery.broker_scan import broker_keys, broker_segments, scan
from evalfarm.executors.celery.settings import FarmSettings


def test_batch_polls_are_not_aggregates(redis_server):
    app = create_app(FarmSettings.from_env(redis_server.url))
    app.send_task(BATCH_POLL, args=["run1", "batch_abc", 0], queue="aggregate")
    app.send_task(BATCH_POLL, args=["run1", "batch_def", 3], queue="aggregate")
    app.send_task(BATCH_POLL, args=["other", "batch_x", 0], queue="aggregate")
    app.send_task(BATCH_SUBMIT, args=["run1", ["k1", "k2"], "a", 0], queue="aggregate")
    app.send_task(RUN_BATCH, args=["run1", ["k3"]], queue="provider")
    app.send_task(AGGREGATE, args=["run1"], queue="aggregate")
    r = redis.Redis.from_url(redis_server.url)
    queued, unacked, aggregates, polls = scan(r, "run1")
    assert (queued, unacked, aggregates, polls) == ({"k1", "k2", "k3"}, set(), 1, 2)
    assert broker_keys(r, "run1")[2] == 1  # the one aggregate message, not 3
    assert broker_segments(r, "run1") == (set(), set())  # a poll's attempt (0, 3) is no archived segment
