"""Worker-side Prometheus metrics: what a worker process did, for the ops team's alerts.

The engine reports to ``PrometheusObserver`` through ``engine/observe.py``; ``evalfarm worker
--metrics-port N`` installs it and calls ``start_metrics_server(N)``. Everything lives in this module's own
registry, so importing it twice or next to other collectors never clashes. Names follow the
Prometheus conventions: counters end in ``_total``, durations are ``_seconds``, money ``_usd``.

    evalfarm_items_total{adapter,status,failure_mode}   status: passed | failed | errored
    evalfarm_agent_items_total{adapter,failure_class}   agent items by failure class (core/failure.py)
    evalfarm_provider_latency_seconds{adapter}          the answered request's round trip (waits apart)
    evalfarm_requests_in_flight{adapter}                gauge
    evalfarm_rate_limit_pauses_total{endpoint}          429 pauses started by this process
    evalfarm_rate_limit_pause_seconds_total{endpoint}   seconds of pause they asked for
    evalfarm_retries_total{adapter}                     provider retries
    evalfarm_spend_usd_total{adapter,kind}              kind: model | judge
    evalfarm_tokens_total{adapter,kind,direction}       direction: in | out
    evalfarm_queue_depth{pool}                          gauge, set by whoever samples the broker

An adapter's series exist at zero from its first call in the process on (``prepare``), so
``increase()`` counts its first run too.

Label values that come from specs (adapter ids, endpoints) are untrusted and unbounded: each metric
keeps the first ``EVALFARM_METRICS_LABEL_CAP`` (200) values it meets in the process and counts the
rest under `` other`` (a leading space, which no adapter id or host has), so totals stay exact and /metrics stays small (5,000 adapters made a worker's
/metrics 125,025 lines, 9.8 MB, for the worker's life).
"""
from __future__ import annotations

import math
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ...core.taxonomy import MODES
from ...core.verdict import item_passed

REGISTRY = CollectorRegistry(auto_describe=True)
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

ITEMS = Counter("evalfarm_items", "Items finished, by adapter, status (passed, failed, errored) and failure mode",
                ["adapter", "status", "failure_mode"], registry=REGISTRY)
AGENT_ITEMS = Counter("evalfarm_agent_items", "Agent items finished, by adapter and failure class (passed, "
                      "agent_failed, agent_timeout, verifier_failed, infra_failed, budget_stopped)",
                      ["adapter", "failure_class"], registry=REGISTRY)
LATENCY = Histogram("evalfarm_provider_latency_seconds", "Provider latency: the answered request's round trip, "
                    "slot waits, 429 pauses and retries apart (a failed call: its whole duration)", ["adapter"],
                    buckets=LATENCY_BUCKETS, registry=REGISTRY)
IN_FLIGHT = Gauge("evalfarm_requests_in_flight", "Adapter calls in flight in this process", ["adapter"],
                  registry=REGISTRY)
PAUSES = Counter("evalfarm_rate_limit_pauses", "429 pauses this process started (Retry-After honoured fleet-wide)",
                 ["endpoint"], registry=REGISTRY)
PAUSE_SECONDS = Counter("evalfarm_rate_limit_pause_seconds", "Seconds of 429 pause this process asked for",
                        ["endpoint"], registry=REGISTRY)
RETRIES = Counter("evalfarm_retries", "Provider call retries (429, 5xx, dropped connections)", ["adapter"],
                  registry=REGISTRY)
SPEND = Counter("evalfarm_spend_usd", "Spend in USD, models under test and the judge apart", ["adapter", "kind"],
                registry=REGISTRY)
TOKENS = Counter("evalfarm_tokens", "Tokens, by adapter, kind (model, judge) and direction (in, out)",
                 ["adapter", "kind", "direction"], registry=REGISTRY)
QUEUE_DEPTH = Gauge("evalfarm_queue_depth", "Messages waiting in a pool's queue", ["pool"], registry=REGISTRY)


def _label(value: Any, limit: int = 120) -> str:
    return (value if isinstance(value, str) else str(value))[:limit]


# every spec-derived label value past a metric's cap. Unforgeable: it starts with a space, and no adapter
# id (spec validation) or endpoint host can, nor any capped value (``_Capped`` strips them); a bare "other"
# was the label of an adapter named "other" too, merging its figures with the overflow
OTHER = " other"


def label_cap() -> int:
    from ...envvars import env_int

    return env_int("EVALFARM_METRICS_LABEL_CAP", 200, 1, 100000) or 200


class _Capped:
    """The first ``cap`` values of one metric's spec-derived label, then ``other``."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.cap: int | None = None
        self.lock = threading.Lock()

    def __call__(self, value: Any) -> str:
        v = _label(value).strip() or "?"
        if v in self.seen:
            return v
        with self.lock:
            if self.cap is None:
                self.cap = label_cap()
            if len(self.seen) < self.cap:
                self.seen.add(v)
                return v
        return OTHER


_CAPS: dict[str, _Capped] = {}


def capped(metric: str, value: Any) -> str:
    c = _CAPS.get(metric)
    if c is None:
        c = _CAPS.setdefault(metric, _Capped())
    return c(value)


def _money(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0.0
    return float(value)


def _tokens(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def status_of(outcome: dict[str, Any]) -> str:
    """errored (nothing measured), passed or failed: the item's verdict, as the report counts it (an
    agent's timeout is measured and failed; its infrastructure failure is unmeasured: errored)."""
    if outcome.get("failure_class"):
        verdict = item_passed(outcome)
        return "errored" if verdict is None else "passed" if verdict else "failed"
    if outcome.get("error"):
        return "errored"
    return "passed" if item_passed(outcome) else "failed"


def record_outcome(outcome: dict[str, Any]) -> None:
    """Count one finished item (an ``Outcome.to_dict()``): its status, failure mode, spend, tokens.
    Call it once per item, where the item is recorded in the run store."""
    raw = outcome.get("adapter", "?")
    status = status_of(outcome)
    mode = outcome.get("failure_mode") or ("none" if status == "passed" else "unclassified")
    ITEMS.labels(capped("items", raw), status, _label(mode, 40)).inc()
    if outcome.get("failure_class"):
        AGENT_ITEMS.labels(capped("agent_items", raw), _label(outcome["failure_class"], 40)).inc()
    for kind, cost, t_in, t_out in (("model", "cost_usd", "input_tokens", "output_tokens"),
                                    ("judge", "judge_cost_usd", "judge_input_tokens", "judge_output_tokens")):
        usd = _money(outcome.get(cost))
        if usd:
            SPEND.labels(capped("spend", raw), kind).inc(usd)
        for direction, field in (("in", t_in), ("out", t_out)):
            n = _tokens(outcome.get(field))
            if n:
                TOKENS.labels(capped("tokens", raw), kind, direction).inc(n)


def observe_call(adapter: str, seconds: float) -> None:
    """One adapter call's latency (engine.observe.calling says which figure)."""
    if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0:
        LATENCY.labels(capped("latency", adapter)).observe(seconds)


def record_pause(endpoint: str, seconds: float) -> None:
    """A 429 made this process pause ``endpoint`` (fleet-wide) for ``seconds``."""
    PAUSES.labels(capped("pauses", endpoint)).inc()
    if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
        PAUSE_SECONDS.labels(capped("pause_seconds", endpoint)).inc(seconds)


def record_retry(adapter: str, n: int = 1) -> None:
    if n > 0:
        RETRIES.labels(capped("retries", adapter)).inc(n)


def set_queue_depth(pool: str, depth: int) -> None:
    QUEUE_DEPTH.labels(_label(pool, 40)).set(max(0, int(depth)))


def prepare(adapter: str) -> None:
    """Create an adapter's series at zero, the first time this process meets the adapter (its first
    call starting, before any of its items can finish). A labelled counter otherwise appears only at
    its first increment, with that value, and ``increase()`` cannot count an increment it never saw
    from zero: an hourly-spend query missed the first run of every series. The label sets are the
    ones known in advance: statuses with their failure modes (core.taxonomy), spend and token kinds."""
    a = _label(adapter)
    if a in _PREPARED:
        return
    if len(_PREPARED) < label_cap() + 1:  # the capped values and ``other``
        _PREPARED.add(a)
    i = capped("items", a)
    ITEMS.labels(i, "passed", "none")
    ITEMS.labels(i, "errored", "runtime_error")
    for mode in MODES:
        if mode != "runtime_error":
            ITEMS.labels(i, "failed", mode)
    for kind in ("model", "judge"):
        SPEND.labels(capped("spend", a), kind)
        for direction in ("in", "out"):
            TOKENS.labels(capped("tokens", a), kind, direction)
    RETRIES.labels(capped("retries", a))
    LATENCY.labels(capped("latency", a))
    IN_FLIGHT.labels(capped("in_flight", a))


_PREPARED: set[str] = set()


def start_metrics_server(port: int, addr: str = "0.0.0.0"):
    """Serve /metrics on ``addr:port`` in a daemon thread (``evalfarm worker --metrics-port N``), in the
    one exposition format evalfarm uses (evalfarm/exposition.py). All interfaces by default:
    Prometheus scrapes a pod by its IP. Returns (server, thread)."""
    from ...exposition import serve

    return serve(port, REGISTRY, addr)


class PrometheusObserver:
    """The engine's observer (``evalfarm.engine.observe``) feeding this module's metrics."""

    def outcome(self, outcome: dict[str, Any]) -> None:
        record_outcome(outcome)

    def call(self, adapter: str, seconds: float) -> None:
        observe_call(adapter, seconds)

    def in_flight(self, adapter: str, delta: int) -> None:
        if delta > 0:
            prepare(adapter)
        IN_FLIGHT.labels(capped("in_flight", adapter)).inc(delta)

    def retry(self, adapter: str) -> None:
        record_retry(adapter)

    def pause(self, endpoint: str, seconds: float) -> None:
        record_pause(endpoint, seconds)


def sample_queues(redis_url: str, pools: dict[str, tuple[str, ...]], interval_s: float = 5.0):
    """A daemon thread setting evalfarm_queue_depth{pool} from the broker's lists every ``interval_s``."""
    import threading
    import time

    from .redis_tls import fail_fast_client as redis_client

    client = redis_client(redis_url)

    def loop() -> None:
        while True:
            try:
                for pool, queues in pools.items():
                    set_queue_depth(pool, sum(int(client.llen(q)) for q in queues))
            except Exception:  # noqa: BLE001 - the broker away for a moment: the next sample retries
                pass
            time.sleep(interval_s)

    thread = threading.Thread(target=loop, name="evalfarm-queue-depth", daemon=True)
    thread.start()
    return thread
