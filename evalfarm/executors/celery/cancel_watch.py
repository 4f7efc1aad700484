"""Stop a worker's running agent batches when their run is cancelled.

A batch checks the run's state before it starts; an agent task then runs for minutes. One thread per
worker process reads the state of the runs whose stoppable batches it holds, every ``POLL_S`` (one GET
per run, none while no such batch runs), and calls each batch's ``stop`` when its run is cancelled or
failed. ``stop`` is called from this thread: it must only hand over to the batch's event loop.
"""
from __future__ import annotations

import itertools
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from ...logs import get_logger
from ...redact import redact
from ..store import RunStore

log = get_logger("evalfarm.cancel_watch")
POLL_S = 0.5
STOPPED_STATES = ("cancelled", "failed")


class CancelWatch:
    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self._entries: dict[int, tuple[RunStore, str, Callable[[], None]]] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._pid: int | None = None

    @contextmanager
    def watching(self, store: RunStore, run_id: str, stop: Callable[[], None]) -> Iterator[None]:
        """Call ``stop`` (once) if ``run_id`` is cancelled while the block runs."""
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: a thread of its own
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="evalfarm-cancel-watch", daemon=True).start()
            entry = next(self._ids)
            self._entries[entry] = (store, run_id, stop)
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._entries.pop(entry, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._entries:
                    self._cond.wait()
                self._cond.wait(self.poll_s)
                entries = list(self._entries.items())
            states: dict[tuple[int, str], str | None] = {}
            for entry, (store, run_id, stop) in entries:
                where = (id(store), run_id)
                if where not in states:
                    try:
                        states[where] = store.get_state(run_id)
                    except Exception as exc:  # noqa: BLE001  Redis away: the next poll asks again
                        log.warning("cancel_watch_unreadable", run_id=run_id, error=redact(str(exc))[:200])
                        states[where] = None
                if states[where] in STOPPED_STATES:
                    with self._cond:
                        if self._entries.pop(entry, None) is None:
                            continue  # the batch ended meanwhile
                    try:
                        stop()
                    except Exception as exc:  # noqa: BLE001  a loop already closed: nothing left to stop
                        log.warning("cancel_watch_stop_failed", run_id=run_id, error=redact(str(exc))[:200])


CANCEL_WATCH = CancelWatch()
