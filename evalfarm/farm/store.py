"""The run store: plan, per-item results keyed by item key, counters, the report.

Results are written under the item key, so a redelivered or duplicated task
overwrites instead of double counting; counters move only when a key is new
(or its error/cost changed), atomically, in one Lua script per batch.
``MemoryStore`` gives the embedded mode the same semantics in-process.
"""
from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Iterable, Iterator

COST_SCALE = 1_000_000_000  # cost counters are integer nano-dollars: INCRBY is exact, floats are not

RUNS_INDEX = "ef:runs"


def _k(run_id: str, part: str) -> str:
    return f"ef:run:{run_id}:{part}"


def _meta_of(outcome: dict[str, Any]) -> tuple[int, int]:
    """(errored, spend in nano-dollars): spend counts the model and the judge."""
    spend = (outcome.get("cost_usd") or 0.0) + (outcome.get("judge_cost_usd") or 0.0)
    return (1 if outcome.get("error") else 0, int(round(spend * COST_SCALE)))


class RunStore(ABC):
    @abstractmethod
    def create_run(self, run_id: str, meta: dict[str, Any]) -> None: ...

    @abstractmethod
    def add_items(self, run_id: str, items: list[tuple[str, str]]) -> None:
        """``items`` is a list of (key, item JSON)."""

    @abstractmethod
    def get_meta(self, run_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def update_meta(self, run_id: str, **fields: Any) -> None: ...

    def get_state(self, run_id: str) -> str | None:
        """The run's state alone: read per batch (cancel) and per progress poll, so it must not
        cost a parse of the whole meta (which carries the spec)."""
        return (self.get_meta(run_id) or {}).get("state")

    def pending_count(self, run_id: str) -> int:
        return len(self.pending_keys(run_id))

    @abstractmethod
    def get_items(self, run_id: str, keys: list[str]) -> list[str | None]: ...

    @abstractmethod
    def done_keys(self, run_id: str, keys: list[str]) -> set[str]: ...

    @abstractmethod
    def record(self, run_id: str, outcomes: list[dict[str, Any]]) -> int:
        """Store outcomes by key; returns the number of distinct finished items."""

    @abstractmethod
    def counters(self, run_id: str) -> dict[str, int]: ...

    @abstractmethod
    def put_pending(self, run_id: str, outcomes: list[dict[str, Any]]) -> None:
        """Outcomes called but not yet judged (they wait for the judge queue)."""

    @abstractmethod
    def get_pending(self, run_id: str, keys: list[str]) -> list[dict[str, Any] | None]: ...

    @abstractmethod
    def pending_keys(self, run_id: str) -> list[str]: ...

    @abstractmethod
    def iter_item_keys(self, run_id: str) -> Iterator[str]: ...

    @abstractmethod
    def iter_outcomes(self, run_id: str) -> Iterator[dict[str, Any]]: ...

    @abstractmethod
    def claim(self, run_id: str, what: str) -> bool:
        """True exactly once per (run, what): guards enqueueing the aggregate."""

    @abstractmethod
    def release(self, run_id: str, what: str) -> None: ...

    @abstractmethod
    def put_report(self, run_id: str, raw: bytes) -> None: ...

    @abstractmethod
    def get_report(self, run_id: str) -> bytes | None: ...

    @abstractmethod
    def runs(self) -> list[str]: ...

    @abstractmethod
    def put_blob(self, run_id: str, name: str, data: bytes) -> None: ...

    @abstractmethod
    def get_blob(self, run_id: str, name: str) -> bytes | None: ...

    def report_size(self, run_id: str) -> int:
        raw = self.get_report(run_id)
        return len(raw) if raw is not None else 0

    def iter_report(self, run_id: str, chunk: int = 4 << 20) -> Iterator[bytes]:
        """The report's bytes in chunks, so a 100,000-item report never sits whole in memory."""
        raw = self.get_report(run_id) or b""
        for i in range(0, len(raw), chunk):
            yield raw[i:i + chunk]



class MemoryStore(RunStore):
    """In-process store for the embedded farm; same contract as RedisStore."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta: dict[str, dict[str, Any]] = {}
        self._items: dict[str, dict[str, str]] = {}
        self._results: dict[str, dict[str, str]] = {}
        self._rmeta: dict[str, dict[str, tuple[int, int]]] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._claims: set[tuple[str, str]] = set()
        self._reports: dict[str, bytes] = {}
        self._pending: dict[str, dict[str, str]] = {}

    def create_run(self, run_id: str, meta: dict[str, Any]) -> None:
        with self._lock:
            self._meta[run_id] = dict(meta)
            self._items.setdefault(run_id, {})
            self._results.setdefault(run_id, {})
            self._rmeta.setdefault(run_id, {})
            self._counts.setdefault(run_id, {})

    def add_items(self, run_id: str, items: list[tuple[str, str]]) -> None:
        with self._lock:
            self._items[run_id].update(items)

    def get_meta(self, run_id: str) -> dict[str, Any] | None:
        meta = self._meta.get(run_id)
        return dict(meta) if meta is not None else None

    def update_meta(self, run_id: str, **fields: Any) -> None:
        with self._lock:
            self._meta[run_id].update(fields)

    def get_items(self, run_id: str, keys: list[str]) -> list[str | None]:
        items = self._items.get(run_id, {})
        return [items.get(k) for k in keys]

    def done_keys(self, run_id: str, keys: list[str]) -> set[str]:
        results = self._results.get(run_id, {})
        return {k for k in keys if k in results}

    def record(self, run_id: str, outcomes: list[dict[str, Any]]) -> int:
        with self._lock:
            results, rmeta, counts = self._results[run_id], self._rmeta[run_id], self._counts[run_id]
            for o in outcomes:
                err, cost = _meta_of(o)
                old = rmeta.get(o["key"])
                a = o["adapter"]
                counts["executed"] = counts.get("executed", 0) + 1
                if old is None:
                    for f in ("done", f"done:{a}"):
                        counts[f] = counts.get(f, 0) + 1
                    old = (0, 0)
                for f in ("errors", f"errors:{a}"):
                    counts[f] = counts.get(f, 0) + err - old[0]
                counts["cost_nusd"] = counts.get("cost_nusd", 0) + cost - old[1]
                counts[f"cost_nusd:{a}"] = counts.get(f"cost_nusd:{a}", 0) + cost - old[1]
                results[o["key"]] = json.dumps(o)
                rmeta[o["key"]] = (err, cost)
                self._pending.get(run_id, {}).pop(o["key"], None)
            return len(results)

    def counters(self, run_id: str) -> dict[str, int]:
        return dict(self._counts.get(run_id, {}))

    def put_pending(self, run_id: str, outcomes: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pending.setdefault(run_id, {}).update({o["key"]: json.dumps(o) for o in outcomes})

    def get_pending(self, run_id: str, keys: list[str]) -> list[dict[str, Any] | None]:
        pending = self._pending.get(run_id, {})
        return [json.loads(pending[k]) if k in pending else None for k in keys]

    def pending_keys(self, run_id: str) -> list[str]:
        return list(self._pending.get(run_id, {}))

    def iter_item_keys(self, run_id: str) -> Iterator[str]:
        return iter(list(self._items.get(run_id, {})))

    def iter_outcomes(self, run_id: str) -> Iterator[dict[str, Any]]:
        return (json.loads(v) for v in list(self._results.get(run_id, {}).values()))

    def claim(self, run_id: str, what: str) -> bool:
        with self._lock:
            if (run_id, what) in self._claims:
                return False
            self._claims.add((run_id, what))
            return True

    def release(self, run_id: str, what: str) -> None:
        with self._lock:
            self._claims.discard((run_id, what))

    def put_report(self, run_id: str, raw: bytes) -> None:
        self._reports[run_id] = raw

    def get_report(self, run_id: str) -> bytes | None:
        return self._reports.get(run_id)

    def runs(self) -> list[str]:
        return sorted(self._meta, reverse=True)

    def put_blob(self, run_id: str, name: str, data: bytes) -> None:
        self._reports[f"{run_id}:{name}"] = data

    def expire_run(self, run_id: str, ttl_s: int) -> None:
        pass  # the embedded store lives as long as its process

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        return self._reports.get(f"{run_id}:{name}")


_RECORD_LUA = """
-- KEYS: results, rmeta, counts, pending ; ARGV: triples of (key, json, adapter|err|cost)
local done = 0
for i = 1, #ARGV, 3 do
  local key, body = ARGV[i], ARGV[i + 1]
  local a, err, cost = string.match(ARGV[i + 2], "^(.*)|(%d+)|(-?%d+)$")
  err = tonumber(err); cost = tonumber(cost)
  redis.call('HINCRBY', KEYS[3], 'executed', 1)
  local old = redis.call('HGET', KEYS[2], key)
  local old_err, old_cost = 0, 0
  if old then
    local e, c = string.match(old, "^(%d+)|(-?%d+)$")
    old_err = tonumber(e); old_cost = tonumber(c)
  else
    redis.call('HINCRBY', KEYS[3], 'done', 1)
    redis.call('HINCRBY', KEYS[3], 'done:' .. a, 1)
  end
  if err ~= old_err then
    redis.call('HINCRBY', KEYS[3], 'errors', err - old_err)
    redis.call('HINCRBY', KEYS[3], 'errors:' .. a, err - old_err)
  end
  if cost ~= old_cost then
    redis.call('HINCRBY', KEYS[3], 'cost_nusd', cost - old_cost)
    redis.call('HINCRBY', KEYS[3], 'cost_nusd:' .. a, cost - old_cost)
  end
  redis.call('HSET', KEYS[1], key, body)
  redis.call('HSET', KEYS[2], key, err .. '|' .. cost)
  redis.call('HDEL', KEYS[4], key)
end
return redis.call('HLEN', KEYS[1])
"""


def _is_transient(exc: BaseException) -> bool:
    """Waiting does not fix a refused password (AUTH/NOAUTH) or an unverifiable certificate."""
    import ssl

    import redis

    if isinstance(exc, (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)):
        return False
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return False
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" not in str(exc)


def _transient_retry(*args: Any, **kwargs: Any):
    """redis-py's Retry minus the errors retrying cannot fix: a wrong password or a bad certificate
    fails at once (one clear line) instead of after ~30-90 s of retries."""
    import inspect

    from redis.retry import Retry

    if "is_retryable" not in inspect.signature(Retry.call_with_retry).parameters:  # redis-py < 6
        return Retry(*args, **kwargs)

    class TransientRetry(Retry):
        def call_with_retry(self, do, fail, is_retryable=None, *a, **kw):  # type: ignore[override]
            return super().call_with_retry(
                do, fail, lambda e: _is_transient(e) and (is_retryable is None or is_retryable(e)), *a, **kw)

    return TransientRetry(*args, **kwargs)


class RedisStore(RunStore):
    """The run store in Redis; every key of a run lives under ``ef:run:<id>:``."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        import redis

        from .redis_tls import split_tls

        from redis.backoff import ExponentialBackoff

        self.url = url
        plain, tls = split_tls(url)  # rediss://: the same TLS options as the broker
        # ride out a Redis restart (~30 s of retries) instead of failing the task or the coordinator
        retry = _transient_retry(ExponentialBackoff(cap=2.0, base=0.05), retries=20,
                                 supported_errors=(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                                                   redis.exceptions.BusyLoadingError))
        self.r = redis.Redis.from_url(plain, **{"retry": retry, "health_check_interval": 10,
                                                "socket_connect_timeout": 5, **tls, **kwargs})
        self._record = self.r.register_script(_RECORD_LUA)

    def ping(self) -> None:
        self.r.ping()

    def create_run(self, run_id: str, meta: dict[str, Any]) -> None:
        pipe = self.r.pipeline()
        pipe.set(_k(run_id, "meta"), json.dumps(meta))
        pipe.set(_k(run_id, "state"), meta.get("state", ""))
        pipe.zadd(RUNS_INDEX, {run_id: time.time()})
        pipe.execute()

    def add_items(self, run_id: str, items: list[tuple[str, str]]) -> None:
        if items:
            self.r.hset(_k(run_id, "items"), mapping=dict(items))

    def get_meta(self, run_id: str) -> dict[str, Any] | None:
        raw = self.r.get(_k(run_id, "meta"))
        return json.loads(raw) if raw else None

    def update_meta(self, run_id: str, **fields: Any) -> None:
        # read-modify-write under WATCH so concurrent updates never drop a field
        key = _k(run_id, "meta")
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    meta = json.loads(pipe.get(key) or "{}")
                    meta.update(fields)
                    pipe.multi()
                    pipe.set(key, json.dumps(meta))
                    if "state" in fields:
                        pipe.set(_k(run_id, "state"), fields["state"])
                    pipe.execute()
                    return
                except Exception as exc:  # WatchError: someone else wrote; retry
                    if type(exc).__name__ != "WatchError":
                        raise

    def get_items(self, run_id: str, keys: list[str]) -> list[str | None]:
        if not keys:
            return []
        return [v.decode() if v is not None else None for v in self.r.hmget(_k(run_id, "items"), keys)]

    def done_keys(self, run_id: str, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        out: set[str] = set()
        for i in range(0, len(keys), 5000):
            chunk = keys[i:i + 5000]
            pipe = self.r.pipeline(transaction=False)
            for k in chunk:
                pipe.hexists(_k(run_id, "results"), k)
            out.update(k for k, exists in zip(chunk, pipe.execute()) if exists)
        return out

    def record(self, run_id: str, outcomes: list[dict[str, Any]]) -> int:
        if not outcomes:
            return int(self.r.hlen(_k(run_id, "results")))
        args: list[str] = []
        for o in outcomes:
            err, cost = _meta_of(o)
            args += [o["key"], json.dumps(o), f"{o['adapter']}|{err}|{cost}"]
        keys = [_k(run_id, "results"), _k(run_id, "rmeta"), _k(run_id, "counts"), _k(run_id, "pending")]
        return int(self._record(keys=keys, args=args))

    def counters(self, run_id: str) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.r.hgetall(_k(run_id, "counts")).items()}

    def put_pending(self, run_id: str, outcomes: list[dict[str, Any]]) -> None:
        if outcomes:
            self.r.hset(_k(run_id, "pending"), mapping={o["key"]: json.dumps(o) for o in outcomes})

    def get_pending(self, run_id: str, keys: list[str]) -> list[dict[str, Any] | None]:
        if not keys:
            return []
        return [json.loads(v) if v is not None else None for v in self.r.hmget(_k(run_id, "pending"), keys)]

    def pending_keys(self, run_id: str) -> list[str]:
        return [k.decode() for k, _ in self.r.hscan_iter(_k(run_id, "pending"), count=2000)]

    def get_state(self, run_id: str) -> str | None:
        raw = self.r.get(_k(run_id, "state"))
        return raw.decode() if raw else None

    def pending_count(self, run_id: str) -> int:
        return int(self.r.hlen(_k(run_id, "pending")))

    def iter_item_keys(self, run_id: str) -> Iterator[str]:
        for key, _ in self.r.hscan_iter(_k(run_id, "items"), count=2000):  # no_values needs Redis 7.4
            yield key.decode()

    def iter_outcomes(self, run_id: str) -> Iterator[dict[str, Any]]:
        for _, value in self.r.hscan_iter(_k(run_id, "results"), count=2000):
            yield json.loads(value)

    def claim(self, run_id: str, what: str) -> bool:
        return bool(self.r.set(_k(run_id, f"claim:{what}"), "1", nx=True))

    def release(self, run_id: str, what: str) -> None:
        self.r.delete(_k(run_id, f"claim:{what}"))

    def put_report(self, run_id: str, raw: bytes) -> None:
        self.r.set(_k(run_id, "report"), raw)

    def get_report(self, run_id: str) -> bytes | None:
        return self.r.get(_k(run_id, "report"))

    def report_size(self, run_id: str) -> int:
        return int(self.r.strlen(_k(run_id, "report")))

    def iter_report(self, run_id: str, chunk: int = 4 << 20) -> Iterator[bytes]:
        size = self.report_size(run_id)
        for start in range(0, size, chunk):
            yield self.r.getrange(_k(run_id, "report"), start, min(size, start + chunk) - 1)

    def runs(self) -> list[str]:
        return [r.decode() for r in self.r.zrevrange(RUNS_INDEX, 0, -1)]

    def expire_run(self, run_id: str, ttl_s: int) -> None:
        """A finished run's keys expire (its report is on the user's disk by then); the index
        forgets runs older than the TTL, so an overnight farm does not fill Redis."""
        pipe = self.r.pipeline(transaction=False)
        for key in self.r.scan_iter(match=_k(run_id, "*"), count=1000):
            pipe.expire(key, ttl_s)
        pipe.zremrangebyscore(RUNS_INDEX, "-inf", time.time() - ttl_s)
        pipe.execute()

    def put_blob(self, run_id: str, name: str, data: bytes) -> None:
        self.r.set(_k(run_id, f"blob:{name}"), data)

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        return self.r.get(_k(run_id, f"blob:{name}"))


def batched(iterable: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for x in iterable:
        batch.append(x)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
