"""User-facing output with rich: run summary, diff table, live progress."""
from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

# user strings (spec names, adapter ids) are never rich markup or emoji codes: escape() and emoji=False
err_console = Console(stderr=True, emoji=False)
out_console = Console(width=None if sys.stdout.isatty() else 140, emoji=False)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def _num(v: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def summary_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"{escape(str(report['spec_name']))}  ({report['run_id']}, {report['mode']}, "
                        f"{report['duration_s']} s)")
    for col in ("adapter", "items", "errors", "golden", "judge", "overall", "p50 ms", "p95 ms",
                "tokens in/out", "cost $", "judge $"):
        table.add_column(col, justify="left" if col == "adapter" else "right")
    for adapter, f in report["per_adapter"].items():
        table.add_row(escape(adapter), str(f["items"]), str(f["errors"]), _pct(f["golden_pass_rate"]),
                      _num(f["judge_mean"]), _num(f["overall"]), _num(f["latency_ms_p50"], "{:.1f}"),
                      _num(f["latency_ms_p95"], "{:.1f}"), f"{f.get('tokens_in', 0)}/{f.get('tokens_out', 0)}",
                      _num(f.get("cost_usd"), "{:.4f}"), _num(f.get("judge_cost_usd"), "{:.4f}"))
    return table


def print_summary(report: dict[str, Any], paths: list[str]) -> None:
    out_console.print(summary_table(report))
    for adapter, f in report["per_adapter"].items():
        if "pass_k" in f:
            pk = f["pass_k"]
            out_console.print(f"{escape(adapter)}: pass^{pk['k']} {_pct(pk['rate'])}, flaky: "
                              f"{escape(', '.join(pk['flaky'])) or 'none'}", highlight=False)
        if f.get("failure_modes"):
            modes = ", ".join(f"{k} {v}" for k, v in f["failure_modes"].items())
            out_console.print(f"{escape(adapter)}: failure modes: {modes}", highlight=False)
    cost = report.get("cost") or {}
    if cost:
        out_console.print(f"spend: models ${cost['model_usd']:.6f}, judge ${cost['judge_usd']:.6f} "
                          f"(total ${cost['total_usd']:.6f})", highlight=False)
    for failure in report["threshold_failures"]:
        out_console.print(f"[red]threshold failed[/red] {escape(failure)}", highlight=False)
    if report["nothing_measured"]:
        out_console.print("[red]NOTHING MEASURED[/red]: every item errored (runtime errors, not quality); "
                          "check the adapters' configuration")
    elif report["thresholds_passed"]:
        out_console.print("[green]PASSED[/green]")
    else:
        out_console.print("[red]FAILED[/red]")
    for p in paths:
        out_console.print(f"saved {escape(p)}", highlight=False)


def diff_table(d: dict[str, Any]) -> Table:
    table = Table(title=f"diff a={d['a']} b={d['b']} (tolerance {d['tolerance']})")
    for col in ("adapter", "overall a", "overall b", "delta", "golden a", "golden b", "delta", "winner"):
        table.add_column(col, justify="left" if col in ("adapter", "winner") else "right")
    for adapter, r in d["per_adapter"].items():
        table.add_row(escape(adapter), f"{r['overall_a']:.3f}", f"{r['overall_b']:.3f}", f"{r['overall_delta']:+.3f}",
                      f"{r['golden_rate_a']:.3f}", f"{r['golden_rate_b']:.3f}", f"{r['golden_rate_delta']:+.3f}",
                      r["winner"])
    table.caption = f"overall winner: {d['winner']} (mean overall delta {d['overall_delta']:+.4f})"
    return table


class LiveProgress:
    """A bar for the run and one per adapter: done/total, items/s, ETA, errors, spend so far
    (model and judge). Items/s is measured over the run's life, so attaching late reads true."""

    def __init__(self, enabled: bool | None = None, console: Console | None = None) -> None:
        self.console = console or err_console
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> "LiveProgress":
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>8} it/s"), TextColumn("err {task.fields[errors]}"),
                TextColumn("{task.fields[spend]}"), TextColumn("ETA"), TimeRemainingColumn(),
                console=self.console, transient=False, refresh_per_second=8)
            self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

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
                self._tasks[name] = self._progress.add_task(escape(name), total=total, rate="-", errors=0, spend="")
            self._progress.update(self._tasks[name], completed=done, rate=rate, errors=errs, spend=spend)
