"""The farm's Celery app for Celery's own tools: ``celery -A evalfarm.executors.celery.celery_app ...``.

    celery -A evalfarm.executors.celery.celery_app -b redis://HOST:6379/0 inspect ping
    celery -A evalfarm.executors.celery.celery_app events --dump
    celery -A evalfarm.executors.celery.celery_app flower          # pip install 'evalfarm[ops]'

The broker is ``-b URL`` (Celery puts it in ``CELERY_BROKER_URL``), else ``EVALFARM_BROKER_URL``,
else ``redis://localhost:6379/0``. The app is the one ``evalfarm worker --pool all`` runs: the same
settings (``FarmSettings.from_env``: JSON only, late acks, the four queues, the transport options)
and the same registered tasks, so ``celery inspect registered`` and ``celery call`` name real tasks
and a ``celery -A ... worker -Q provider,judge,aggregate -P threads`` would do the same work.
``evalfarm worker`` stays the way to start workers: it adds the pool's settings, the heartbeat key,
the blob dir, the spawn broker and a one-line error for a bad broker.
"""
from __future__ import annotations

import os

from .pools import POOLS
from .settings import FarmSettings
from .tasks import worker_app

DEFAULT_BROKER = "redis://localhost:6379/0"


def broker_url() -> str:
    return os.environ.get("CELERY_BROKER_URL") or os.environ.get("EVALFARM_BROKER_URL") or DEFAULT_BROKER


app = worker_app(FarmSettings.from_env(broker_url=broker_url()), pool=POOLS["all"])
celery = app  # `celery -A evalfarm.executors.celery.celery_app` finds either name
