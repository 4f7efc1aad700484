"""While ``wait`` (or an attached ``run``) polls the run store, say at once when Redis stops answering.

The store's client rides out a Redis restart for ~30 s, retrying; meanwhile the progress bar froze on
its last frame (``0.0 it/s``) with no word. A watcher thread notices that no poll has come back for
``after_s``, asks Redis itself with a fail-fast client (so the line names the real error: refused,
timed out, loading, wrong password), and prints one line; when polls come back, one more. The run
itself never depended on this process: it goes on on the farm.
"""
from __future__ import annotations

import sys
import threading
import time

from ...redact import redact


class StoreWatch:
    def __init__(self, url: str, run_id: str, after_s: float = 2.0, every_s: float = 0.5) -> None:
        self.url, self.run_id, self.after_s, self.every_s = url, run_id, after_s, every_s
        self.last_ok = time.monotonic()
        self.lost_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evalfarm-store-watch", daemon=True)

    def __enter__(self) -> "StoreWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def ok(self) -> None:
        """A poll came back: the store answers."""
        self.last_ok = time.monotonic()
        if self.lost_since is not None:
            gone = time.monotonic() - self.lost_since
            self.lost_since = None
            say(f"evalfarm: the run store answers again after {gone:.0f} s; run {self.run_id} goes on")

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            if self.lost_since is None and time.monotonic() - self.last_ok > self.after_s:
                why = self._ask()
                if why is not None and time.monotonic() - self.last_ok > self.after_s:
                    self.lost_since = self.last_ok
                    say(f"evalfarm: the run store at {redact(self.url)} is not answering ({why}); waiting for it "
                        f"(the progress shown is from before); run {self.run_id} goes on on the farm when Redis "
                        "is back")

    def _ask(self) -> str | None:
        """Redis's own answer to a PING, or the error; None when it answers (the poll is merely slow)."""
        from .redis_tls import fail_fast_client

        client = fail_fast_client(self.url)
        try:
            client.ping()
            return None
        except Exception as exc:  # noqa: BLE001 - whatever it is, it is what the user needs to read
            return redact(f"{type(exc).__name__}: {exc}".rstrip("."))[:200]
        finally:
            client.close()


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # above the live bar: rich redirects stderr while it draws
