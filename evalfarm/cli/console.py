"""User-facing output with rich: the run summary, why items failed, the diff table, live progress.

User strings (spec names, adapter ids, error messages) are never rich markup or emoji codes:
``escape()`` and ``emoji=False``. On a terminal the summary fits its width (80 columns included):
when the wide table does not fit, adapters become columns and figures rows; piped, nothing is cut.
"""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.markup import escape
from rich.table import Table

from ..core import failure as failure_class
from ..core.verdict import NOTHING, PASSED, run_verdict

# no repr highlighting (every message marks up what it colours): its regexes cost ~11 ms to compile on first use
err_console = Console(stderr=True, emoji=False, highlight=False)
out_console = Console(emoji=False, soft_wrap=False, highlight=False)

FIGURES = (("items", "items"), ("errors", "errors"), ("golden", "golden"), ("judge", "judge"), ("overall", "overall"),
           ("p50 ms", "p50"), ("p95 ms", "p95"), ("tokens in/out", "tokens"), ("cost $", "cost"),
           ("judge $", "judge_cost"))


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def _num(v: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _cells(f: dict[str, Any]) -> dict[str, str]:
    return {"items": str(f["items"]), "errors": str(f["errors"]), "golden": _pct(f["golden_pass_rate"]),
            "judge": _num(f["judge_mean"]), "overall": _num(f["overall"]),
            "p50": _num(f["latency_ms_p50"], "{:.1f}"), "p95": _num(f["latency_ms_p95"], "{:.1f}"),
            "tokens": f"{f.get('tokens_in', 0)}/{f.get('tokens_out', 0)}", "cost": _num(f.get("cost_usd"), "{:.4f}"),
            "judge_cost": _num(f.get("judge_cost_usd"), "{:.4f}")}


def _title(report: dict[str, Any]) -> str:
    return f"{escape(str(report['spec_name']))}  ({report['run_id']}, {report['mode']}, {report['duration_s']} s)"


def summary_table(report: dict[str, Any]) -> Table:
    """One row per adapter, a column per figure."""
    table = Table(title=_title(report))
    table.add_column("adapter", overflow="fold")
    for label, _ in FIGURES:
        table.add_column(label, justify="right", no_wrap=True)
    for adapter, f in report["per_adapter"].items():
        cells = _cells(f)
        table.add_row(escape(adapter), *(cells[key] for _, key in FIGURES))
    return table


def summary_columns(report: dict[str, Any]) -> Table:
    """The narrow layout: a row per figure, a column per adapter (names fold, never '...')."""
    table = Table(title=_title(report))
    table.add_column("", no_wrap=True)
    for adapter in report["per_adapter"]:
        table.add_column(escape(adapter), justify="right", overflow="fold")
    cells = {a: _cells(f) for a, f in report["per_adapter"].items()}
    for label, key in FIGURES:
        table.add_row(label, *(cells[a][key] for a in report["per_adapter"]))
    return table


def print_table(console: Console, table: Table) -> None:
    """Piped, a table gets the width it needs (nothing folded or cut); on a terminal, the terminal's."""
    if not console.is_terminal:
        needed = Measurement.get(console, console.options.update(max_width=100_000), table).maximum
        console.width = max(console.width, needed)
    console.print(table)


def fitted(console: Console, report: dict[str, Any]) -> Table:
    """The wide table when it fits the terminal, else the narrow one; piped output is never cut."""
    wide = summary_table(report)
    needed = Measurement.get(console, console.options.update(max_width=100_000), wide).maximum
    if not console.is_terminal:
        console.width = max(console.width, needed)
        return wide
    return wide if needed <= console.width else summary_columns(report)


def explain_errors(report: dict[str, Any], limit: int = 3) -> list[str]:
    """The top error classes per adapter with one example message and what to check."""
    lines = []
    for adapter, f in report["per_adapter"].items():
        examples = f.get("error_examples") or {}
        for cls, e in list(examples.items())[:limit]:
            lines.append(f"{adapter}: {e['count']} x {cls} ({e.get('stage') or 'adapter'}), e.g. {e['example']}")
            if e.get("hint"):
                lines.append(f"  -> {e['hint']}")
        if len(examples) > limit:
            lines.append(f"{adapter}: ... and {len(examples) - limit} more error classes (see the report)")
    return lines


QUALITY_THRESHOLDS = ("golden_pass_rate_min", "judge_score_min", "overall_score_min", "pass_rate_min")


def ungated(report: dict[str, Any]) -> str | None:
    """Why a PASSED verdict means little: no quality threshold was set (a `--dataset` run has none
    unless it is gated) and items failed. The exit code stays 0, as the seed's `run` without --gate."""
    thresholds = report.get("thresholds") or {}
    if any(thresholds.get(k) is not None for k in QUALITY_THRESHOLDS):
        return None
    figures = (report.get("per_adapter") or {}).values()
    measured = sum(f.get("measured") or 0 for f in figures)
    passed = sum(f.get("passed") or 0 for f in figures)
    if measured == passed:
        return None
    return (f"{measured - passed} of {measured} measured items failed, and no threshold is set, so nothing "
            "failed the run (exit 0); set thresholds (golden_pass_rate_min, pass_rate_min, ...) in a spec, "
            "or run with --gate against a baseline")


def print_summary(report: dict[str, Any], paths: list[str], console: Console | None = None) -> None:
    console = console or out_console
    console.print(fitted(console, report))
    if not console.is_terminal:
        console.soft_wrap = True  # piped: a line is a line, never folded at some width
    headline = failure_class.infra_headline(report["per_adapter"])
    if headline:
        console.print(f"[red]{escape(headline)}[/red]", highlight=False)
    for adapter, f in report["per_adapter"].items():
        if f.get("coverage_line"):
            console.print(f"{escape(adapter)}: {escape(f['coverage_line'])}", highlight=False)
            for u in f.get("unmeasured") or []:
                console.print(f"  unmeasured {escape(u['prompt_id'])} ({u['class']}): {escape(u['reason'])}",
                              highlight=False)
        if f.get("trajectory_mismatches"):
            console.print(f"[yellow]{escape(adapter)}: {f['trajectory_mismatches']} trajectories mismatched (the agent's "
                          "account of its model calls and the model relay's differ)[/yellow]", highlight=False)
            for m in f.get("trajectory_mismatch_examples") or []:
                console.print(f"  mismatched {escape(str(m['prompt_id']))}: {escape(str(m['why']))}", highlight=False)
        if "pass_k" in f:
            pk = f["pass_k"]
            console.print(f"{escape(adapter)}: pass^{pk['k']} {_pct(pk['rate'])}, flaky: "
                          f"{escape(', '.join(pk['flaky'])) or 'none'}", highlight=False)
        if f.get("failure_modes"):
            modes = ", ".join(f"{k} {v}" for k, v in f["failure_modes"].items())
            console.print(f"{escape(adapter)}: failure modes: {modes}", highlight=False)
    cost = report.get("cost") or {}
    if cost:
        console.print(f"spend: models ${cost['model_usd']:.6f}, judge ${cost['judge_usd']:.6f} "
                      f"(total ${cost['total_usd']:.6f})", highlight=False)
    for line in explain_errors(report):
        console.print(escape(line), highlight=False)
    for failure in report["threshold_failures"]:
        console.print(f"[red]threshold failed[/red] {escape(failure)}", highlight=False)
    verdict = run_verdict(report)
    if verdict == NOTHING:
        console.print("[red]NOTHING MEASURED[/red]: every item errored (runtime errors, not quality); "
                      "the errors above say what to check")
    elif report.get("stopped"):
        console.print(f"[yellow]{escape(verdict)}[/yellow]: {report.get('items_done')} of "
                      f"{report.get('items_planned')} items measured; a partial report", highlight=False)
    elif verdict == PASSED and (why := ungated(report)):
        console.print(f"[yellow]PASSED, NOTHING GATED[/yellow]: {escape(why)}", highlight=False)
    elif verdict == PASSED:
        console.print("[green]PASSED[/green]")
    else:
        console.print("[red]FAILED[/red]")
    for p in paths:
        console.print(f"saved {escape(p)}", highlight=False)


def diff_table(d: dict[str, Any]) -> Table:
    table = Table(title=f"diff a={d['a']} b={d['b']} (tolerance {d['tolerance']})")
    for col in ("adapter", "overall a", "overall b", "delta", "golden a", "golden b", "delta", "winner"):
        table.add_column(col, justify="left" if col in ("adapter", "winner") else "right",
                         overflow="fold" if col == "adapter" else "ellipsis")
    for adapter, r in d["per_adapter"].items():
        table.add_row(escape(adapter), _num(r["overall_a"]), _num(r["overall_b"]), _num(r["overall_delta"], "{:+.3f}"),
                      _num(r["golden_rate_a"]), _num(r["golden_rate_b"]), _num(r["golden_rate_delta"], "{:+.3f}"),
                      r["winner"])
    if d.get("compared"):
        table.caption = (f"overall winner: {d['winner']} (mean overall delta {d['overall_delta']:+.4f} over the "
                         f"{d['compared']} adapter(s) measured in both runs)")
    else:
        table.caption = "no adapter was measured in both runs: no winner"
    return table
