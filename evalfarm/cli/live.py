"""The live progress bar of ``run``, ``wait`` and ``ab``, and what it shows (items/s, errors, spend, ETA).

Rich is imported only when the bar draws (a terminal): piped (CI, scripts, benchmarks) a run starts
without it, and ``warm`` imports the summary's modules (rich among them, ~25 ms) in a thread while the
run waits on its calls, instead of before the first call or after the last one.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading


def stderr_is_terminal() -> bool:
    """What rich's console would say of stderr, without importing rich when it is plainly not a terminal
    (the variables that make rich treat a pipe as a terminal send the question to rich)."""
    if sys.stderr.isatty() or any(v in os.environ for v in ("TTY_COMPATIBLE", "FORCE_COLOR")):
        from .console import err_console

        return err_console.is_terminal
    return False


def warm(*modules: str) -> None:
    """Import ``modules`` in a daemon thread: their import overlaps the run's wait on the network (or on
    the farm's workers) instead of adding to the command's time. Python's import lock makes a later
    ``import`` of the same module wait for this one; an import that fails here fails again, and says
    why, where the module is used."""
    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the real import, later, raises it
                return

    threading.Thread(target=load, name="evalfarm-warm", daemon=True).start()


def warm_later(update, *modules: str):
    """``update`` (a progress callback) that calls ``warm(*modules)`` at its second call: the first comes
    as the run starts, the second a tick later, when the run's first calls are in flight. Started before
    the run, the imports held the GIL while the provider's client was imported and the first requests
    were sent (a 200 ms run's first request went out ~30 ms later)."""
    calls = 0

    def progress(p) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            warm(*modules)
        update(p)

    return progress


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def eta(p) -> str:
    """Time left at the run's own rate; before the first result there is no rate to speak of."""
    if p.done <= 0 or p.elapsed_s <= 0:
        return "ETA after the first results"
    if p.done >= p.total:
        return "ETA 0:00"
    left = (p.total - p.done) * p.elapsed_s / p.done
    m, s = divmod(int(left + 0.5), 60)
    return f"ETA {m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"ETA {m}:{s:02d}"


_ACTIVE: "LiveProgress | None" = None  # the bar on screen, if any (stop_live)


def stop_live() -> None:
    """Stop the progress bar on screen, if one is drawing, before a closing message: a Ctrl-C that
    detaches must leave its `wait`/`cancel` line visible, not under a last redraw of the bar."""
    if _ACTIVE is not None:
        _ACTIVE.stop()


class LiveProgress:
    """A bar for the run and one per adapter: done/total, items/s, errors, spend so far (model and
    judge), ETA. Rates are measured over the run's life, so attaching late reads true."""

    def __init__(self, enabled: bool | None = None, console=None) -> None:
        self.console = console
        self.enabled = stderr_is_terminal() if enabled is None and console is None else \
            (console.is_terminal if enabled is None else enabled)
        self._progress = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> "LiveProgress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            from .console import err_console

            self.console = self.console or err_console

            self._progress = Progress(
                TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>8} it/s"), TextColumn("err {task.fields[errors]}"),
                TextColumn("{task.fields[spend]}"), TextColumn("{task.fields[eta]}"),
                console=self.console, transient=False, refresh_per_second=8)
            self._progress.__enter__()
            global _ACTIVE
            _ACTIVE = self
        return self

    def __exit__(self, *exc) -> None:
        global _ACTIVE
        _ACTIVE = None
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def stop(self) -> None:
        """Stop drawing now: what is printed next stays below the last frame (no redraw over it)."""
        global _ACTIVE
        _ACTIVE = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    @staticmethod
    def rows(p) -> dict[str, tuple[int, int, int, str, str]]:
        """name -> (done, errors, total, items/s, spend); a pure function of a Progress."""
        def rate(done: int) -> str:
            return f"{done / p.elapsed_s:,.1f}" if p.elapsed_s > 0 else "-"

        per_total = p.total // max(len(p.per_adapter), 1)
        out = {"total": (p.done, p.errors, p.total, rate(p.done), f"${p.cost_usd:.4f}")}
        costs = p.cost_per_adapter or {}
        for a, (done, errs) in p.per_adapter.items():
            out[a] = (done, errs, per_total, rate(done), f"${costs.get(a, 0.0):.4f}")
        return out

    def update(self, p) -> None:
        if self._progress is None:
            return
        for name, (done, errs, total, rate, spend) in self.rows(p).items():
            if name not in self._tasks:
                self._tasks[name] = self._progress.add_task(_escape(name), total=total, rate="-", errors=0, spend="",
                                                            eta="")
            self._progress.update(self._tasks[name], completed=done, rate=rate, errors=errs, spend=spend,
                                  eta=eta(p) if name == "total" else "")
