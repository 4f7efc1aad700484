"""kombu's Redis transport, made to survive a Redis that is out of memory.

With ``maxmemory`` and ``noeviction`` a full Redis refuses every write that may grow it, and
any command queued in a MULTI. kombu's Redis QoS records each message it takes (BRPOP) as
unacknowledged with a MULTI of ZADD + HSET, and acknowledges with a MULTI of ZREM + HDEL:
under OOM the first fails after the message left its queue (the message is lost and the
worker exits with "Unrecoverable error: OutOfMemoryError"), and so does the second, although
ZREM and HDEL free memory. Here:

- a message taken while Redis refuses the record is kept in this worker's hands and run (its
  task waits and retries until Redis accepts writes); the record is written as soon as Redis
  takes it again (on the next sweep), so ``resume`` and ``status`` see it from then on;
- acknowledgements use a plain pipeline (ZREM + HDEL are allowed on a full Redis);
- the periodic sweep for unacknowledged messages logs one line and tries again later.

Each OOM condition logs a clear line (at most every 10 s per kind), and the worker stays up.
"""
from __future__ import annotations

import time
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

from ...logs import get_logger
from .room import is_oom

log = get_logger("evalfarm.broker")
FIX = ("Redis is out of memory (maxmemory, policy noeviction): raise maxmemory "
       "(redis-cli CONFIG SET maxmemory ...) or free memory; workers keep their tasks and retry")
LOG_EVERY_S = 10.0


class QoS(kombu_redis.QoS):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unrecorded: dict[str, Any] = {}  # delivery tag -> message taken while Redis was full
        self._logged: dict[str, float] = {}

    def _warn(self, event: str, exc: BaseException, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._logged.get(event, 0.0) >= LOG_EVERY_S:
            self._logged[event] = now
            log.warning(event, error=f"{type(exc).__name__}: {str(exc)[:200]}", what_to_do=FIX, **fields)

    def _record(self, message: Any, delivery_tag: str) -> None:
        """This message is in this worker's hands: the index (by time) and the message itself."""
        info = message.delivery_info
        with self.channel.conn_or_acquire() as client:
            pipe = client.pipeline()
            pipe.zadd(self.unacked_index_key, {delivery_tag: time.time()})
            pipe.hset(self.unacked_key, delivery_tag,
                      dumps([message._raw, info["exchange"], info["routing_key"]]))
            pipe.execute()

    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            self._record(message, delivery_tag)
        except redis.exceptions.RedisError as exc:
            if not is_oom(exc):
                raise
            self._unrecorded[delivery_tag] = message
            self._warn("broker_out_of_memory_task_kept", exc, unrecorded=len(self._unrecorded),
                       effect="a task taken from the queue runs in this worker; it is recorded as in "
                              "this worker's hands once Redis accepts writes")
        virtual.QoS.append(self, message, delivery_tag)

    def _record_kept(self) -> None:
        for tag, message in list(self._unrecorded.items()):
            if tag in self._dirty or tag not in self._delivered:  # acknowledged meanwhile
                self._unrecorded.pop(tag, None)
                continue
            self._record(message, tag)
            self._unrecorded.pop(tag, None)

    def _forget(self, delivery_tag: str) -> None:
        self._unrecorded.pop(delivery_tag, None)
        with self.channel.conn_or_acquire() as client:
            # not a MULTI: a full Redis refuses any queued command, but lets ZREM and HDEL free memory
            self._remove_from_indices(delivery_tag, client.pipeline(transaction=False)).execute()

    def ack(self, delivery_tag: str) -> None:
        self._forget(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            super().reject(delivery_tag, requeue=True)
            return
        self._forget(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)

    def restore_visible(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self._record_kept()
            return super().restore_visible(*args, **kwargs)
        except redis.exceptions.RedisError as exc:
            if not is_oom(exc):
                raise
            self._warn("broker_out_of_memory_sweep_skipped", exc,
                       effect="the sweep for unacknowledged tasks runs again later")
            return None


class Channel(kombu_redis.Channel):
    """kombu makes a new client for every command outside its BRPOP loop (an ack, a message's record,
    each task event published): redis-py 8's client costs ~0.05 ms to build, and building them was
    3% of a worker's GIL time in a 1,000-item run at 0 ms (py-spy). One client per pool serves them all (a client is thread-safe: each command
    takes a connection from the pool)."""

    QoS = QoS
    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:  # the pool is rebuilt after a reconnect
            client = self._sync_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    """``redis://`` and ``rediss://`` brokers: kombu's transport with the OOM-safe QoS above."""

    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
