"""The Celery app: JSON only, late acks, one queue per pool, no result waiting, task events on. (The queue
and task names live in messages.py, which a coordinator imports without Celery.)"""
from __future__ import annotations

from celery import Celery
from kombu import Exchange, Queue

from .messages import AGGREGATE, BATCH_POLL, BATCH_SUBMIT, JUDGE_BATCH, QUEUES, RUN_BATCH, SPAWN_ITEM
from .pools import Pool
from .redis_tls import KEEPALIVE, SOCKET_TIMEOUT_S, split_tls
from .settings import FarmSettings
from .transport import TRANSPORT



def transport_options(visibility_timeout: int) -> dict:
    """Redis transport: redeliver unacked tasks after ``visibility_timeout``, and sweep for them
    often enough (kombu's default sweep runs every ~100 s) that a dead worker's work moves on."""
    return {"visibility_timeout": visibility_timeout,
            "unacked_restore_interval": max(1, min(10, visibility_timeout // 5)),
            "unacked_restore_throttle": 1,
            # the sweep holds a mutex; kombu's default expiry (300 s) means a worker SIGKILLed
            # mid-sweep blocks every other worker's recovery for five minutes
            "unacked_mutex_expire": 10,
            # a partition leaves connections half-open (nothing is reset): without a socket timeout a
            # synchronous command (the sweep, an ack, a publish) blocks the worker's event loop until
            # TCP gives up (~15 min); with it the consumer reconnects once the link is back. kombu's
            # own check drops a BRPOP whose reply is overdue by this interval.
            "socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": 5, "health_check_interval": 10,
            "socket_keepalive": True, "socket_keepalive_options": KEEPALIVE}


def create_app(settings: FarmSettings, pool: Pool | None = None) -> Celery:
    """One app per settings. Senders route tasks by name (``send_task``); only workers register them
    (``tasks.worker_app``)."""
    app = Celery("evalfarm", set_as_current=False)
    conf = dict(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        result_accept_content=["json"], task_ignore_result=True,
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        task_default_queue="provider",
        task_queues=[Queue(q, Exchange(q, type="direct"), routing_key=q) for q in QUEUES],
        task_default_exchange="provider", task_default_routing_key="provider",
        task_routes={RUN_BATCH: {"queue": "provider"}, JUDGE_BATCH: {"queue": "judge"},
                     AGGREGATE: {"queue": "aggregate"}, SPAWN_ITEM: {"queue": "spawn"},
                     BATCH_SUBMIT: {"queue": "aggregate"}, BATCH_POLL: {"queue": "aggregate"}},
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a partitioned worker reconnects whenever the link is back
        broker_transport_options=transport_options(settings.visibility_timeout),
        task_acks_on_failure_or_timeout=True,
        worker_hijack_root_logger=False,
        # Celery's own tools see the farm: task events (received, started, succeeded, failed) for
        # `celery events` and Flower; `evalfarm worker --no-events` turns them off. A task is a batch of
        # up to 100 items, so this is three small messages per batch, not per item (README: The farm).
        worker_send_task_events=True, task_send_sent_event=False,
    )
    if pool is not None:
        conf.update(worker_prefetch_multiplier=pool.prefetch_multiplier, task_soft_time_limit=pool.soft_time_limit,
                    task_time_limit=pool.time_limit,
                    broker_transport_options=transport_options(settings.visibility_timeout
                                                               if settings.visibility_explicit
                                                               else pool.visibility_timeout))
    # rediss://: ssl_* query parameters become broker_use_ssl (certificates verified by default)
    broker_url, broker_ssl = split_tls(settings.broker_url)
    backend_url, backend_ssl = split_tls(settings.result_backend)
    conf.update(broker_url=broker_url, result_backend=backend_url)
    if broker_url and broker_url.startswith(("redis://", "rediss://")):
        conf.update(broker_transport=TRANSPORT)  # kombu's Redis transport, safe on a full Redis
    if broker_ssl:
        conf.update(broker_use_ssl=broker_ssl)
    if backend_ssl:
        conf.update(redis_backend_use_ssl=backend_ssl)
    app.conf.update(conf)
    return app
