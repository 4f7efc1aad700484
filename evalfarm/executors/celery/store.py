"""The run store in Redis: every key of a run lives under ``ef:run:<id>:``.

The same contract as ``MemoryStore`` (``backends.store.RunStore``). Recording a batch of
outcomes is one Lua script (results, counters and the judge backlog move together, so a
duplicated task never double counts); the plan's order is a list beside the items hash;
the report is a head and a body appended in chunks; ``RedisStore`` retries transient
connection errors (a Redis restart) but not a refused password or a bad certificate.
"""
from __future__ import annotations

import inspect
import json
import os
import secrets
import ssl
import threading
import time
from datetime import datetime, timezone
from typing import Any, Iterator

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ...core.report.framing import PROMPTS_OPEN, REPORT_CLOSE
from ..store import RunStore, cost_meta
from .leases import holder_id
from .redis_tls import KEEPALIVE, SOCKET_TIMEOUT_S, split_tls

RUNS_INDEX = "ef:runs"
TALLY_RESTATE_S = 1.0  # a process states its counter records again this often while it works on a run
TALLY_IDLE_S = 120.0  # ... until this long after its last record for the run
TALLY_SETTLE_S = 3 * TALLY_RESTATE_S  # a Redis younger than its run has had every live record stated again after this
PLANNING_TTL_S = 600  # a plan being stored expires this long after its last chunk unless completed
PLAN_PARTS = ("meta", "state", "items", "order", "prompts")
DATA_PARTS = ("items", "order", "prompts", "results", "rmeta", "counts", "spend", "tally", "pending", "starts",
              "report:head", "report:outcomes", "report:prompts", "claim:aggregate", "blob:summary", "blob:markdown",
              "segs", "report:archive")
# every key of a run (claims and blobs by name): expire_run touches these and nothing else
PARTS = ("meta", "state", "items", "order", "prompts", "results", "rmeta", "counts", "spend", "tally", "pending",
         "starts", "report:head", "report:outcomes", "report:prompts", "claim:aggregate", "blob:summary",
         "blob:markdown", "lock:resume", "segs", "report:archive", "aggregating", "batches")


def _k(run_id: str, part: str) -> str:
    return f"ef:run:{run_id}:{part}"


_FORGET_LUA = """
-- KEYS: results, rmeta, counts ; ARGV: pairs of (key, adapter): the items' results go, and their counts
for i = 1, #ARGV, 2 do
  local key, a = ARGV[i], ARGV[i + 1]
  local old = redis.call('HGET', KEYS[2], key)
  if redis.call('HDEL', KEYS[1], key) == 1 then
    redis.call('HINCRBY', KEYS[3], 'done', -1)
    redis.call('HINCRBY', KEYS[3], 'forgotten', 1)  -- asked to run again: not results the store lost
    redis.call('HINCRBY', KEYS[3], 'done:' .. a, -1)
    if old then
      local e, c = string.match(old, "^(%d+)|(-?%d+)$")
      e = tonumber(e); c = tonumber(c)
      if e ~= 0 then
        redis.call('HINCRBY', KEYS[3], 'errors', -e)
        redis.call('HINCRBY', KEYS[3], 'errors:' .. a, -e)
      end
      if c ~= 0 then
        redis.call('HINCRBY', KEYS[3], 'cost_nusd', -c)
        redis.call('HINCRBY', KEYS[3], 'cost_nusd:' .. a, -c)
      end
    end
    redis.call('HDEL', KEYS[2], key)
  end
end
return redis.call('HLEN', KEYS[1])
"""
_TALLY_LUA = """
-- KEYS[6] tally (field holder|x: executions this process recorded; holder|d: the most results it
-- saw stored, forgotten ones included; holder|l: the most it found the store had lost since);
-- ARGV[1..3]: holder, its executions, its high-water.
-- Each field only goes up: a late or repeated statement is harmless, a restore gets it back.
local function tally(level)
  local h = ARGV[1]
  local x = tonumber(ARGV[2])
  local d = math.max(tonumber(ARGV[3]), level)
  local l = tonumber(ARGV[3]) - level
  if x > tonumber(redis.call('HGET', KEYS[6], h .. '|x') or '0') then redis.call('HSET', KEYS[6], h .. '|x', x) end
  if d > tonumber(redis.call('HGET', KEYS[6], h .. '|d') or '0') then redis.call('HSET', KEYS[6], h .. '|d', d) end
  if l > tonumber(redis.call('HGET', KEYS[6], h .. '|l') or '0') then redis.call('HSET', KEYS[6], h .. '|l', l) end
  local ttl = redis.call('PTTL', KEYS[5])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[6], ttl) end
end
local function level()
  return redis.call('HLEN', KEYS[1]) + tonumber(redis.call('HGET', KEYS[3], 'forgotten') or '0')
end
"""
_RESTATE_LUA = _TALLY_LUA + """
-- KEYS: results, rmeta, counts, pending, meta, tally: state this process's records again
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
tally(level())
return 0
"""
_RECORD_LUA = _TALLY_LUA + """
-- KEYS: results, rmeta, counts, pending, meta, tally ; ARGV[4..]: triples of (key, json, adapter|err|cost)
-- a run whose meta is gone (Redis lost its data) records nothing: -1
if redis.call('EXISTS', KEYS[5]) == 0 then return {-1, 0} end
for i = 4, #ARGV, 3 do
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
local now = level()
tally(now)
return {redis.call('HLEN', KEYS[1]), now}
"""

_SEGMENT_LUA = """
-- KEYS: segs (a bit per finished segment), counts, meta ; ARGV: seg, executed, then (field, delta) pairs
-- counted once per segment: the bit flips once, whoever archives the segment again (a redelivery)
if redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
redis.call('HINCRBY', KEYS[2], 'executed', ARGV[2])
if redis.call('SETBIT', KEYS[1], ARGV[1], 1) == 0 then
  for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
end
return tonumber(redis.call('HGET', KEYS[2], 'done') or '0')
"""

_VIEW_LUA = """
-- KEYS: state, results, pending, items ; ARGV: a batch's item keys
-- returns the state, then per key: 1 = done, 2 = awaits the judge, else its item JSON (false: no item)
local out = {redis.call('GET', KEYS[1])}
for i, k in ipairs(ARGV) do
  if redis.call('HEXISTS', KEYS[2], k) == 1 then out[i + 1] = 1
  elseif redis.call('HEXISTS', KEYS[3], k) == 1 then out[i + 1] = 2
  else out[i + 1] = redis.call('HGET', KEYS[4], k) end
end
return out
"""

_REFRESH_LUA = """
-- KEYS: lock ; ARGV: token, ttl ms. Extend our lock, or take it again if it expired; 0 if another holds it
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def fold_tally(c: dict[str, int], tally: dict[bytes, bytes]) -> dict[str, int]:
    """The run's counts with its per-process records folded in: ``executed`` is the sum of the
    records (every execution, re-runs after a restore included), ``done_seen`` the most results
    the store held (forgotten ones left out) and ``lost_seen`` the most results a process found the
    store had lost (it stays after they ran again, so a reader that came late still hears of it)."""
    executed = level = lost = 0
    for field, value in tally.items():
        what = field.rsplit(b"|", 1)[-1]
        try:
            n = int(value)
        except ValueError:
            continue  # an untrusted value: ignored
        if what == b"x":
            executed += n
        elif what == b"d":
            level = max(level, n)
        elif what == b"l":
            lost = max(lost, n)
    if executed > c.get("executed", 0):
        c["executed"] = executed
    if tally or "done" in c:
        c["done_seen"] = max(c.get("done", 0), level - c.get("forgotten", 0))
    if lost > 0:
        c["lost_seen"] = lost  # results a process found gone from the store (a restore): they ran again
    return c


def _is_transient(exc: BaseException) -> bool:
    """Waiting does not fix a refused password (AUTH/NOAUTH) or an unverifiable certificate."""
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
    if "is_retryable" not in inspect.signature(Retry.call_with_retry).parameters:  # redis-py < 6
        return Retry(*args, **kwargs)

    class TransientRetry(Retry):
        def call_with_retry(self, do, fail, is_retryable=None, *a, **kw):  # type: ignore[override]
            return super().call_with_retry(
                do, fail, lambda e: _is_transient(e) and (is_retryable is None or is_retryable(e)), *a, **kw)

    return TransientRetry(*args, **kwargs)


def settle_left(uptime_s: float, run_age_s: float) -> float:
    """Seconds a reader should still wait before it trusts a run's counter records: a Redis up for
    ``uptime_s`` (a restart, a restore from an older snapshot), younger than TALLY_SETTLE_S and than the
    run (``run_age_s``), has not yet heard every live worker state its records again; else 0."""
    if uptime_s >= TALLY_SETTLE_S:
        return 0.0
    return TALLY_SETTLE_S - uptime_s if run_age_s > uptime_s + 1.0 else 0.0  # uptime is whole seconds


class RedisStore(RunStore):
    """The run store in Redis; every key of a run lives under ``ef:run:<id>:``."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        self.url = url
        plain, tls = split_tls(url)  # rediss://: the same TLS options as the broker
        # ride out a Redis restart (~30 s of retries) instead of failing the task or the coordinator
        retry = _transient_retry(ExponentialBackoff(cap=2.0, base=0.05), retries=20,
                                 supported_errors=(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                                                   redis.exceptions.BusyLoadingError))
        self.r = redis.Redis.from_url(plain, **{"retry": retry, "health_check_interval": 10,
                                                "socket_connect_timeout": 5, "socket_timeout": SOCKET_TIMEOUT_S,
                                                "socket_keepalive": True, "socket_keepalive_options": KEEPALIVE,
                                                **tls, **kwargs})
        self._record = self.r.register_script(_RECORD_LUA)
        self._forget = self.r.register_script(_FORGET_LUA)
        self._refresh = self.r.register_script(_REFRESH_LUA)
        self._view = self.r.register_script(_VIEW_LUA)
        self._release = self.r.register_script(_RELEASE_LUA)
        self._restate_lua = self.r.register_script(_RESTATE_LUA)
        self._tally_lock = threading.Lock()
        self._tally_pid: int | None = None
        self._holder = ""
        self._tallies: dict[str, list] = {}
        self._segment = self.r.register_script(_SEGMENT_LUA)

    def ping(self) -> None:
        self.r.ping()

    def create_run(self, run_id: str, meta: dict[str, Any]) -> None:
        pipe = self.r.pipeline()
        pipe.set(_k(run_id, "meta"), json.dumps(meta), ex=PLANNING_TTL_S)
        pipe.set(_k(run_id, "state"), meta.get("state", ""), ex=PLANNING_TTL_S)
        pipe.zadd(RUNS_INDEX, {run_id: time.time()})
        pipe.execute()

    def add_items(self, run_id: str, items: list[tuple[str, str]], prompts: list[str] = ()) -> None:
        """A chunk of the plan; the plan's keys expire unless more chunks (and ``persist_plan``) follow."""
        if items:
            pipe = self.r.pipeline(transaction=False)
            pipe.hset(_k(run_id, "items"), mapping=dict(items))
            pipe.rpush(_k(run_id, "order"), *[k for k, _ in items])
            if prompts:
                pipe.rpush(_k(run_id, "prompts"), *prompts)
            for part in PLAN_PARTS:
                pipe.expire(_k(run_id, part), PLANNING_TTL_S)
            pipe.execute()

    def touch_plan(self, run_id: str) -> None:
        """A plan still being written (to the archive): its meta and state expire later."""
        pipe = self.r.pipeline(transaction=False)
        for part in ("meta", "state"):
            pipe.expire(_k(run_id, part), PLANNING_TTL_S)
        pipe.execute()

    def persist_plan(self, run_id: str) -> None:
        pipe = self.r.pipeline(transaction=False)
        for part in PLAN_PARTS:
            pipe.persist(_k(run_id, part))
        pipe.execute()

    def discard_plan(self, run_id: str) -> int:
        stored = int(self.r.llen(_k(run_id, "order")))
        self.r.delete(*[_k(run_id, part) for part in DATA_PARTS])
        return stored

    def iter_prompts(self, run_id: str) -> Iterator[str]:
        return (p.decode() for p in self._iter_list(_k(run_id, "prompts")))

    def _iter_list(self, key: str, step: int = 2000) -> Iterator[bytes]:
        start = 0
        while True:
            chunk = self.r.lrange(key, start, start + step - 1)
            yield from chunk
            if len(chunk) < step:
                return
            start += step

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
                    pipe.set(key, json.dumps(meta), keepttl=True)
                    if "state" in fields:
                        pipe.set(_k(run_id, "state"), fields["state"])
                    pipe.execute()
                    return
                except Exception as exc:  # WatchError: someone else wrote; retry
                    if type(exc).__name__ != "WatchError":
                        raise

    def transition(self, run_id: str, to: str, allowed_from: tuple[str, ...] | None = None,
                   **fields: Any) -> tuple[bool, str | None]:
        """WATCH the state and the meta: a cancel written between our read and our write makes the
        transaction fail and the check run again against the new state."""
        state_key, meta_key = _k(run_id, "state"), _k(run_id, "meta")
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(state_key, meta_key)
                    raw_meta, raw_state = pipe.get(meta_key), pipe.get(state_key)
                    current = raw_state.decode() if raw_state else None
                    if raw_meta is None or (allowed_from is not None and current not in allowed_from):
                        pipe.unwatch()
                        return False, current
                    meta = json.loads(raw_meta)
                    meta.update(fields, state=to, previous_state=current)
                    pipe.multi()
                    pipe.set(meta_key, json.dumps(meta), keepttl=True)
                    pipe.set(state_key, to, keepttl=True)
                    pipe.execute()
                    return True, current
                except redis.exceptions.WatchError:
                    continue

    def acquire_lock(self, run_id: str, what: str, ttl_s: float) -> str | None:
        token = secrets.token_hex(8)
        return token if self.r.set(_k(run_id, f"lock:{what}"), token, nx=True, px=int(ttl_s * 1000)) else None

    def refresh_lock(self, run_id: str, what: str, token: str, ttl_s: float) -> bool:
        return bool(self._refresh(keys=[_k(run_id, f"lock:{what}")], args=[token, int(ttl_s * 1000)]))

    def release_lock(self, run_id: str, what: str, token: str) -> None:
        self._release(keys=[_k(run_id, f"lock:{what}")], args=[token])

    def get_items(self, run_id: str, keys: list[str]) -> list[str | None]:
        if not keys:
            return []
        return [v.decode() if v is not None else None for v in self.r.hmget(_k(run_id, "items"), keys)]

    def batch_view(self, run_id: str, keys: list[str]) -> tuple[str | None, set[str], set[str], dict[str, str]]:
        """One script instead of four round trips and two pipelines of a command per key (~2.5 ms of a
        worker's CPU per batch of 63, measured)."""
        if not keys:
            return self.get_state(run_id), set(), set(), {}
        reply = self._view(keys=[_k(run_id, "state"), _k(run_id, "results"), _k(run_id, "pending"),
                                 _k(run_id, "items")], args=keys)
        state = reply[0].decode() if isinstance(reply[0], bytes) else None
        done, pending, items = set(), set(), {}
        for key, got in zip(keys, reply[1:]):
            if got == 1:
                done.add(key)
            elif got == 2:
                pending.add(key)
            elif isinstance(got, bytes):
                items[key] = got.decode()
        return state, done, pending, items

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

    def get_results(self, run_id: str, keys: list[str]) -> list[str | None]:
        if not keys:
            return []
        return [v.decode() if v is not None else None for v in self.r.hmget(_k(run_id, "results"), keys)]

    def record(self, run_id: str, outcomes: list[dict[str, Any]]) -> int:
        if not outcomes:
            return int(self.r.hlen(_k(run_id, "results")))
        holder, tally = self._tally(run_id)
        tally[0] += len(outcomes)  # executed, whether or not this write gets through
        args: list[str] = [holder, str(tally[0]), str(tally[1])]
        for o in outcomes:
            err, cost = cost_meta(o)
            args += [o["key"], json.dumps(o), f"{o['adapter']}|{err}|{cost}"]
        finished, level = self._record(keys=self._run_keys(run_id), args=args)
        tally[1] = max(tally[1], int(level))
        return int(finished)

    # -- per-process counter records (they survive a restore of Redis from an older snapshot) ------
    def _run_keys(self, run_id: str) -> list[str]:
        return [_k(run_id, part) for part in ("results", "rmeta", "counts", "pending", "meta", "tally")]

    def _tally(self, run_id: str) -> tuple[str, list]:
        """This process's [executions, high-water of results stored, last used] for the run; a forked
        child starts its own (another holder), and its own re-stating thread."""
        with self._tally_lock:
            if self._tally_pid != os.getpid():
                self._tally_pid, self._holder, self._tallies = os.getpid(), holder_id(), {}
                threading.Thread(target=self._restate, name="evalfarm-tally", daemon=True).start()
            tally = self._tallies.setdefault(run_id, [0, 0, 0.0])
            tally[2] = time.monotonic()
            return self._holder, tally

    def _restate(self) -> None:
        """State every recent run's records again each second: a Redis restored from an older snapshot
        or restarted gets them back even if this process records nothing more for the run."""
        pid = os.getpid()
        while pid == self._tally_pid:
            time.sleep(TALLY_RESTATE_S)
            with self._tally_lock:
                recent = [(run_id, t[0], t[1]) for run_id, t in self._tallies.items()
                          if time.monotonic() - t[2] < TALLY_IDLE_S]
            for run_id, executed, level in recent:
                try:
                    self._restate_lua(keys=self._run_keys(run_id), args=[self._holder, executed, level])
                except redis.exceptions.RedisError:
                    continue  # Redis away: the next round states it

    # -- an archived run (executors/archive.py): a bit per finished segment, its outcomes on the archive --
    def mark_segment(self, run_id: str, seg: int, executed: int, deltas: dict[str, int]) -> int:
        """Segment ``seg`` is archived whole: its bit is set and its counts added (once); returns the
        run's finished items, or -1 when the run is gone from Redis (a flush: nothing recreated)."""
        args: list[Any] = [seg, executed]
        for field, delta in deltas.items():
            args += [field, delta]
        return int(self._segment(keys=[_k(run_id, "segs"), _k(run_id, "counts"), _k(run_id, "meta")], args=args))

    def segment_done(self, run_id: str, seg: int) -> bool:
        return bool(self.r.getbit(_k(run_id, "segs"), seg))

    def segment_bits(self, run_id: str) -> bytes:
        """The run's finished-segment bitmap (bit ``n`` of byte ``n // 8``, most significant first)."""
        return self.r.get(_k(run_id, "segs")) or b""

    def put_archived_report(self, run_id: str, url: str, head: bytes) -> None:
        """The report is on the archive (its sections) and here (its head): from now on it exists."""
        pipe = self.r.pipeline()
        pipe.set(_k(run_id, "report:archive"), url)
        pipe.set(_k(run_id, "report:head"), head)
        pipe.execute()

    def _archived(self, run_id: str):
        from ..archive import RunArchive

        url = self.r.get(_k(run_id, "report:archive"))
        return RunArchive.of(url.decode(), run_id) if url else None

    def mark_aggregating(self, run_id: str, ttl_s: int = 30) -> None:
        self.r.set(_k(run_id, "aggregating"), "1", ex=ttl_s)

    def aggregating(self, run_id: str) -> bool:
        return bool(self.r.exists(_k(run_id, "aggregating")))

    def report_index(self, run_id: str) -> Iterator[bytes] | None:
        """The case index the aggregate wrote beside an archived run's report (None without one)."""
        run = self._archived(run_id)
        return run.index() if run is not None and run.has_index() else None

    def forget(self, run_id: str, items: list[tuple[str, str]]) -> int:
        """Remove these (key, adapter) items' results and their counts (``resume --only``: they run again)."""
        args = [x for pair in items for x in pair]
        if not args:
            return int(self.r.hlen(_k(run_id, "results")))
        left = int(self._forget(keys=[_k(run_id, "results"), _k(run_id, "rmeta"), _k(run_id, "counts")], args=args))
        self.r.hdel(_k(run_id, "starts"), *[k for k, _ in items])  # a re-run starts its retries afresh
        return left

    def counters(self, run_id: str) -> dict[str, int]:
        """The run's counts; ``executed`` is the sum of the per-process records and ``done_seen`` the
        most results the store ever held (their high-water), so neither goes down after a restore."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(_k(run_id, "counts"))
        pipe.hgetall(_k(run_id, "tally"))
        counts, tally = pipe.execute()
        return fold_tally({k.decode(): int(v) for k, v in counts.items()}, tally)

    def records_settle_s(self, started_at: datetime | None) -> float:
        """How long a reader should wait before it trusts the counter records: a Redis that started
        after the run did (a restart, a restore from an older snapshot) less than TALLY_SETTLE_S ago
        has not heard the workers state their records again, so its counts can read lower than a
        user already saw. 0 for a Redis older than that, or as young as the run (a fresh one)."""
        try:
            up = float(self.r.info("server").get("uptime_in_seconds", TALLY_SETTLE_S))
        except (redis.exceptions.ResponseError, TypeError, ValueError):  # INFO renamed or disabled (managed Redis)
            return 0.0
        if started_at is None:
            return 0.0
        return settle_left(up, (datetime.now(timezone.utc) - started_at).total_seconds())

    def note_start(self, run_id: str, key: str) -> int:
        return int(self.r.hincrby(_k(run_id, "starts"), key, 1))

    def unnote_start(self, run_id: str, key: str) -> None:
        self.r.hincrby(_k(run_id, "starts"), key, -1)

    def put_pending(self, run_id: str, outcomes: list[dict[str, Any]]) -> None:
        if outcomes:
            self.r.hset(_k(run_id, "pending"), mapping={o["key"]: json.dumps(o) for o in outcomes})

    def get_pending(self, run_id: str, keys: list[str]) -> list[dict[str, Any] | None]:
        if not keys:
            return []
        return [json.loads(v) if v is not None else None for v in self.r.hmget(_k(run_id, "pending"), keys)]

    def pending_among(self, run_id: str, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        pipe = self.r.pipeline(transaction=False)
        for k in keys:
            pipe.hexists(_k(run_id, "pending"), k)
        return {k for k, exists in zip(keys, pipe.execute()) if exists}

    def pending_keys(self, run_id: str) -> list[str]:
        return [k.decode() for k, _ in self.r.hscan_iter(_k(run_id, "pending"), count=2000)]

    def get_state(self, run_id: str) -> str | None:
        raw = self.r.get(_k(run_id, "state"))
        return raw.decode() if raw else None

    def pending_count(self, run_id: str) -> int:
        return int(self.r.hlen(_k(run_id, "pending")))

    def iter_item_keys(self, run_id: str) -> Iterator[str]:
        return (k.decode() for k in self._iter_list(_k(run_id, "order")))

    def claim(self, run_id: str, what: str) -> bool:
        return bool(self.r.set(_k(run_id, f"claim:{what}"), "1", nx=True))

    def release(self, run_id: str, what: str) -> None:
        self.r.delete(_k(run_id, f"claim:{what}"))

    WAKE_TOKENS, WAKE_TTL_S = 4, 60

    def wake(self, run_id: str) -> None:
        """The report exists: wake the coordinators blocked in ``nap`` (a few tokens, so a ``run`` and a
        ``wait`` attached to the same run both wake; the rest expire)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.rpush(_k(run_id, "wake"), *([1] * self.WAKE_TOKENS))
        pipe.expire(_k(run_id, "wake"), self.WAKE_TTL_S)
        pipe.execute()

    def nap(self, run_id: str, timeout_s: float) -> None:
        """Block up to ``timeout_s``, less if ``wake`` is called meanwhile: the coordinator's poll interval
        without the wait for the next poll once the report is there."""
        self.r.blpop([_k(run_id, "wake")], timeout=timeout_s)

    def clear_report(self, run_id: str) -> None:
        self.r.delete(_k(run_id, "report:head"), _k(run_id, "report:outcomes"), _k(run_id, "report:prompts"),
                      _k(run_id, "report:archive"))

    def append_report(self, run_id: str, data: bytes, section: str = "outcomes") -> None:
        self.r.append(_k(run_id, f"report:{section}"), data)

    def put_report_head(self, run_id: str, head: bytes) -> None:
        self.r.set(_k(run_id, "report:head"), head)

    def report_size(self, run_id: str) -> int:
        pipe = self.r.pipeline(transaction=False)
        for part in ("report:head", "report:outcomes", "report:prompts"):
            pipe.strlen(_k(run_id, part))
        head, outcomes, prompts = pipe.execute()
        if head:
            run = self._archived(run_id)
            if run is not None:
                outcomes, prompts = run.section_size("outcomes"), run.section_size("prompts")
        return int(head) + int(outcomes) + int(prompts) + len(PROMPTS_OPEN) + len(REPORT_CLOSE) if head else 0

    def iter_report(self, run_id: str, chunk: int = 4 << 20) -> Iterator[bytes]:
        head = self.r.get(_k(run_id, "report:head"))
        if head is None:
            return
        yield head
        run = self._archived(run_id)
        yield from run.section("outcomes") if run else self._chunks(_k(run_id, "report:outcomes"), chunk)
        yield PROMPTS_OPEN
        yield from run.section("prompts") if run else self._chunks(_k(run_id, "report:prompts"), chunk)
        yield REPORT_CLOSE

    def _chunks(self, key: str, chunk: int) -> Iterator[bytes]:
        size = int(self.r.strlen(key))
        for start in range(0, size, chunk):
            yield self.r.getrange(key, start, min(size, start + chunk) - 1)

    def runs(self) -> list[str]:
        return [r.decode() for r in self.r.zrevrange(RUNS_INDEX, 0, -1)]

    def expire_run(self, run_id: str, ttl_s: int) -> None:
        """A finished run's keys expire (its report is on the user's disk by then); the index
        forgets runs older than the TTL, so an overnight farm does not fill Redis. The run's keys
        are known by name: nothing scans the keyspace."""
        pipe = self.r.pipeline(transaction=False)
        for part in PARTS:
            pipe.expire(_k(run_id, part), ttl_s)
        pipe.zremrangebyscore(RUNS_INDEX, "-inf", time.time() - ttl_s)
        pipe.execute()

    def put_blob(self, run_id: str, name: str, data: bytes) -> None:
        self.r.set(_k(run_id, f"blob:{name}"), data)

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        return self.r.get(_k(run_id, f"blob:{name}"))


_STORES: dict[str, RedisStore] = {}
_LOCK = threading.Lock()


def store_for(url: str) -> RedisStore:
    """One store client per process and URL."""
    with _LOCK:
        if url not in _STORES:
            _STORES[url] = RedisStore(url)
        return _STORES[url]


def probe(url: str, timeout_s: float = 10.0) -> None:
    """Reach the store once, within ``timeout_s``: the run store's own client rides out a Redis
    restart for ~30 s, which is 30 s of silence for a user who mistyped --broker."""
    plain, tls = split_tls(url)
    client = redis.Redis.from_url(plain, socket_connect_timeout=min(3.0, timeout_s), socket_timeout=timeout_s,
                                  retry=None, **tls)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                client.ping()
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                if not _is_transient(exc) or time.monotonic() + 1.0 > deadline:
                    raise
                time.sleep(1.0)
    finally:
        client.close()
