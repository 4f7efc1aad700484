"""Observers of the engine's work (metrics): called on every call, retry, 429 pause and finished item.

The engine and the providers report to whatever observers are installed and import no metrics
library: ``evalfarm worker --metrics-port N`` installs the Prometheus one
(``dashboard/metrics.py``). With none installed each hook is a loop over an empty tuple.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Protocol


class Observer(Protocol):
    def outcome(self, outcome: dict[str, Any]) -> None: ...

    def call(self, adapter: str, seconds: float) -> None: ...

    def in_flight(self, adapter: str, delta: int) -> None: ...

    def retry(self, adapter: str) -> None: ...

    def pause(self, endpoint: str, seconds: float) -> None: ...


OBSERVERS: tuple[Observer, ...] = ()


def active() -> bool:
    return bool(OBSERVERS)


def install(observer: Observer) -> None:
    global OBSERVERS
    OBSERVERS = (*OBSERVERS, observer)


def outcome(o: dict[str, Any]) -> None:
    for obs in OBSERVERS:
        obs.outcome(o)


def retry(adapter: str) -> None:
    for obs in OBSERVERS:
        obs.retry(adapter)


def pause(endpoint: str, seconds: float) -> None:
    for obs in OBSERVERS:
        obs.pause(endpoint, seconds)


@contextlib.contextmanager
def calling(adapter: str, clock) -> Iterator[dict[str, Any]]:
    """Around one adapter call: in flight while it runs, its latency when it ends. The caller puts
    the answered request's own round trip in the yielded dict (``seconds``: slot waits, 429 pauses
    and retries apart, the figure the report's latency is) or ``cached`` (no call was made); else
    the whole call's duration counts (a failed call)."""
    box: dict[str, Any] = {}
    if not OBSERVERS:
        yield box
        return
    for obs in OBSERVERS:
        obs.in_flight(adapter, 1)
    started = clock()
    try:
        yield box
    finally:
        seconds = box.get("seconds") or clock() - started
        for obs in OBSERVERS:
            obs.in_flight(adapter, -1)
            if not box.get("cached"):
                obs.call(adapter, seconds)
