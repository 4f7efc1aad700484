"""The farm as the Farm page and /metrics read it: runs in the run store (done/total, rate, ETA, errors,
spend), queue depths per pool, workers seen (heartbeat keys), 429 pauses in force. Redis is only read
(GET, HGETALL, HLEN, LLEN, SCAN, PTTL), through a client that fails fast so a page never hangs.

A running run's rate is the last 30 s of its progress; a finished run's is its own: items done over
the time from its start to its finish (a run that went at 79/s shows 79/s for as long as it is listed,
not an average that decays with its age).

Right after a Redis restart (or a restore from an older snapshot) the counters of a run that began
before it read low until every live worker has stated its counter records again (``TALLY_SETTLE_S``,
a few seconds; ``status`` waits that long). The page does not wait: such a run is marked ``settling``,
and its done count never drops below what this page already showed.
"""
from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from . import safe
from ..errors import UsageError
from ..redact import redact

FINISHED = ("done", "cancelled", "failed", "interrupted", "budget")
RATE_WINDOW_S = 30.0


def _farm():
    from ..runs.farm import layout

    farm = layout()
    return farm.queues, farm.priority_sep, farm.cost_scale, farm.runs_index, farm.settle_left


def redis_uptime_s(r) -> float | None:
    """Seconds since the Redis started, or None when INFO is renamed or disabled (some managed services)."""
    try:
        return float(r.info("server").get("uptime_in_seconds"))
    except Exception:  # noqa: BLE001 - no INFO: nothing to settle by
        return None


def fold_tally(counts, tally):
    from ..runs.farm import fold_tally as fold

    return fold(counts, tally)


def redis_client(url: str):
    """A redis-py client for the farm's Redis that fails fast, so a page never hangs."""
    from ..runs.farm import redis_client as client

    return client(url)


def check_broker(url: str | None) -> str | None:
    """``--broker``: a Redis URL whose database is a number, or None."""
    from ..runs.farm import check_redis_url

    if url is None:
        return None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise UsageError(f"--broker {redact(url)}: serve reads the farm's Redis; give redis://HOST:6379/0")
    return check_redis_url(url, "--broker")


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _ts(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(value).timestamp() if isinstance(value, str) else None
    except ValueError:
        return None


class FarmView:
    def __init__(self, broker: str | None) -> None:
        self.broker = broker
        self._redis = None
        self._static: dict[str, dict[str, Any]] = {}
        self._finished: dict[str, float | None] = {}  # run -> its finish time, read once it finished
        self._samples: dict[str, list[tuple[float, int]]] = {}

    def redis(self):
        if self._redis is None:
            self._redis = redis_client(self.broker)
        return self._redis

    def item_input(self, rid: str, key: str, limit: int) -> str | None:
        """The prompt text of a run's item from the run store (a report without a prompts section)."""
        try:
            raw = self.redis().hget(f"ef:run:{rid}:items", key)
            if raw is not None and len(raw) > 8 << 20:
                return None
            item = json.loads(raw) if raw else None
        except Exception:  # noqa: BLE001 - the input is a nicety: no store, no input
            return None
        prompt = safe.mapping(safe.mapping(item).get("prompt"))
        return safe.opt_text(prompt.get("text"), limit)

    def snapshot(self, max_runs: int = 50) -> dict[str, Any]:
        """Errors become ``{"ok": false, "error": ...}``."""
        if not self.broker:
            return {"ok": False, "configured": False, "error": "no --broker given: serve shows the farm "
                                                               "only with --broker redis://..."}
        try:
            return {"ok": True, "configured": True, "at": time.time(), **self._read(max_runs)}
        except Exception as exc:  # noqa: BLE001 - Redis down or refusing: say so on the page
            return {"ok": False, "configured": True, "at": time.time(),
                    "error": safe.text(redact(f"{type(exc).__name__}: {exc}"), 500)}

    def _read(self, max_runs: int) -> dict[str, Any]:
        queues, prio_sep, cost_scale, runs_index, settle_left = _farm()
        r = self.redis()
        up = redis_uptime_s(r)
        run_ids = [x.decode("utf-8", "replace") for x in r.zrevrange(runs_index, 0, max_runs - 1)]
        run_ids = [x for x in run_ids if safe.is_run_id(x)]
        pipe = r.pipeline(transaction=False)
        for rid in run_ids:
            pipe.get(f"ef:run:{rid}:state")
            pipe.hgetall(f"ef:run:{rid}:counts")
            pipe.hlen(f"ef:run:{rid}:pending")
            pipe.hgetall(f"ef:run:{rid}:tally")
        raw = pipe.execute()
        now = time.time()
        runs = []
        for i, rid in enumerate(run_ids):
            state = (raw[4 * i] or b"").decode("utf-8", "replace")
            counts = {k.decode("utf-8", "replace"): safe.count(_int(v)) for k, v in (raw[4 * i + 1] or {}).items()}
            counts = fold_tally(counts, raw[4 * i + 3] or {})
            static = self._static_meta(r, rid)
            if static is None:
                continue
            finished_at = self._finished_at(r, rid) if state in FINISHED else None
            started = _ts(static["started_at"])
            settling = up is not None and started is not None and settle_left(up, time.time() - started) > 0
            runs.append(self._progress(rid, state, counts, safe.count(raw[4 * i + 2]), static, now, finished_at,
                                       cost_scale, settling))
        pipe = r.pipeline(transaction=False)
        for q in queues:
            for key in [q] + [f"{q}{prio_sep}{p}" for p in range(1, 10)]:
                pipe.llen(key)
        lens = pipe.execute()
        depth = {q: sum(safe.count(n) for n in lens[qi * 10:(qi + 1) * 10]) for qi, q in enumerate(queues)}
        unacked = {q: 0 for q in queues}
        for v in r.hvals("unacked"):
            try:
                routing = json.loads(v)[2]
            except (ValueError, IndexError, TypeError, KeyError):
                continue
            if routing in unacked:
                unacked[routing] += 1
        return {"runs": runs, "queues": [{"pool": q, "queued": depth[q], "unacked": unacked[q]} for q in queues],
                "workers": self._workers(r, now), "pauses": self._pauses(r)}

    def _meta(self, r, rid: str) -> dict[str, Any] | None:
        try:
            meta = json.loads(r.get(f"ef:run:{rid}:meta") or b"null")
        except ValueError:
            return None
        return meta if isinstance(meta, dict) else None

    def _static_meta(self, r, rid: str) -> dict[str, Any] | None:
        """Total, spec name, adapters and start of a run: read once (the meta carries the spec)."""
        hit = self._static.get(rid)
        if hit is not None:
            return hit
        meta = self._meta(r, rid)
        if meta is None:
            return None
        spec = safe.mapping(meta.get("spec"))
        static = {"total": safe.count(meta.get("total")), "spec_name": safe.text(spec.get("name"), 300),
                  "adapters": safe.str_list(meta.get("adapters")), "mode": safe.text(meta.get("mode"), 20),
                  "started_at": safe.text(meta.get("started_at"), 64)}
        if static["total"]:
            self._static[rid] = static
        return static

    def _finished_at(self, r, rid: str) -> float | None:
        """When a finished run finished (its meta's ``finished_at``), read once."""
        if rid not in self._finished:
            self._finished[rid] = _ts((self._meta(r, rid) or {}).get("finished_at"))
        return self._finished[rid]

    def _progress(self, rid: str, state: str, c: dict[str, int], pending: int, static: dict[str, Any],
                  now: float, finished_at: float | None, cost_scale: int, settling: bool = False) -> dict[str, Any]:
        done, total = max(c.get("done", 0), c.get("done_seen", 0)), static["total"]
        seen = self._samples.get(rid)
        if settling and seen:  # not every counter record is back yet: never below what this page showed
            done = max(done, seen[-1][1])
        started = _ts(static["started_at"])
        finished = state in FINISHED
        if finished:  # its own duration, or none known (a cancelled run has no finish time)
            elapsed = None if started is None or finished_at is None else max(0.0, finished_at - started)
        else:
            elapsed = None if started is None else max(0.0, now - started)
        samples = self._samples.setdefault(rid, [])
        rate = None
        if finished:
            if elapsed:  # its own rate: items over its own start to finish, whenever it is viewed
                rate = done / elapsed if done else None
            elif len(samples) >= 2 and samples[-1][0] > samples[0][0]:  # no finish time: the last rate seen
                rate = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
        else:
            if not samples or samples[-1][1] != done or now - samples[-1][0] > 1:
                samples.append((now, done))
            while len(samples) > 2 and now - samples[0][0] > RATE_WINDOW_S:
                samples.pop(0)
            if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
                rate = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
            if (rate is None or rate <= 0) and elapsed:
                rate = done / elapsed if done else None
        eta = None if finished or not rate or rate <= 0 else max(0.0, (total - done) / rate)
        return {"run_id": rid, "spec_name": static["spec_name"], "state": state, "done": done, "total": total,
                "errors": c.get("errors", 0), "executed": c.get("executed", 0), "pending_judge": pending,
                "spend_usd": c.get("cost_nusd", 0) / cost_scale, "elapsed_s": elapsed, "rate_per_s": rate,
                "eta_s": eta, "running": not finished, "settling": settling,
                "per_adapter": [{"adapter": a, "done": c.get(f"done:{a}", 0), "errors": c.get(f"errors:{a}", 0),
                                 "spend_usd": c.get(f"cost_nusd:{a}", 0) / cost_scale}
                                for a in static["adapters"]]}

    def _workers(self, r, now: float) -> list[dict[str, Any]]:
        from ..runs.farm import layout

        KEY_PREFIX = layout().heartbeat_prefix
        keys = sorted(r.scan_iter(match=f"{KEY_PREFIX}*", count=500))[:500]
        if not keys:
            return []
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.get(k)
            pipe.pttl(k)
        raw = pipe.execute()
        out = []
        for i, k in enumerate(keys):
            try:
                beat = json.loads(raw[2 * i] or b"null")
            except ValueError:
                beat = None
            beat = safe.mapping(beat)
            ts = safe.num(beat.get("ts"))
            out.append({"name": safe.text(k.decode("utf-8", "replace")[len(KEY_PREFIX):], 200),
                        "host": safe.text(beat.get("host"), 200), "pid": safe.count(beat.get("pid")),
                        "queues": safe.str_list(beat.get("queues")), "concurrency": safe.count(beat.get("concurrency")),
                        "last_heartbeat": ts, "age_s": None if ts is None else max(0.0, now - ts),
                        "ttl_ms": _int(raw[2 * i + 1])})
        return out

    def _pauses(self, r) -> list[dict[str, Any]]:
        keys = sorted(r.scan_iter(match="ef:lim:*:pause", count=500))[:500]
        if not keys:
            return []
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.pttl(k)
        out = []
        for k, ms in zip(keys, pipe.execute()):
            ms = _int(ms)
            if ms is not None and ms > 0:
                eid = k.decode("utf-8", "replace")[len("ef:lim:"):-len(":pause")]
                out.append({"endpoint": safe.text(eid, 200), "remaining_ms": ms})
        return out
