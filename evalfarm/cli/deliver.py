"""Delivering a finished (or stopped) run: its report from the backend's store to disk and screen.

The report's bytes stream from the store to the files (and stdout) in chunks. Printing, the
registry and the exit code need only the summary the aggregate stored beside it; the
outcomes are parsed only for what needs them (the gate, baselines, JUnit), so a
100,000-item run stays cheap for the coordinator.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..executors.store import RunStore
from ..runs.archive import list_runs, save_report_stream, write_stream
from ..ci.pipeline import finish_run
from ..core.report.schema import head_problem, report_problem
from ..errors import UsageError
from ..spec.models import Thresholds
from .console import print_summary

FULL_REPORT_OPTIONS = ("gate", "promote", "baseline", "junit", "pr_summary")


def stored_summary(store: RunStore, run_id: str) -> dict[str, Any]:
    """The summary the aggregate stored, checked like a report file: the store is shared, so a
    forged or corrupt summary (another run's id, ``../../x``, a wrong type) stops here (exit 2)
    before any file name is built from it."""
    raw = store.get_blob(run_id, "summary")
    try:
        summary = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        summary = None
    problem = "missing or not JSON" if summary is None else head_problem(summary)
    if problem is None and summary["run_id"] != run_id:
        problem = f"it names run {str(summary['run_id'])[:80]!r}"
    if problem:
        raise UsageError(f"run {run_id}: the run store's summary is not usable ({problem}); nothing was saved")
    return summary


def _stored_report(store: RunStore, run_id: str) -> dict[str, Any]:
    try:
        report = json.loads(b"".join(store.iter_report(run_id)))
    except (ValueError, RecursionError):
        report = None
    problem = "not JSON" if report is None else report_problem(report)
    if problem is None and report["run_id"] != run_id:
        problem = f"it names run {str(report['run_id'])[:80]!r}"
    if problem:
        raise UsageError(f"run {run_id}: the report in the run store is not usable ({problem})")
    return report


def _ledger(store: RunStore, run_id: str, summary: dict[str, Any], state_dir: Path) -> None:
    """One spend-ledger row per agent item (``STATE/cost/ledger.jsonl``, the ledger ``ab`` writes too)."""
    from ..ab.ledger import append_rows
    from ..agents.ledger import run_rows

    rows = run_rows(run_id, summary.get("spec_name"), _stored_report(store, run_id)["outcomes"])
    if rows:
        append_rows(Path(state_dir) / "cost" / "ledger.jsonl", rows)


def finish(store: RunStore, run_id: str, state_dir: Path, no_save: bool, as_json: bool, output: Path | None,
           thresholds: Thresholds | None = None, prompt_info: dict[str, Any] | None = None,
           ci: dict[str, Any] | None = None) -> int:
    """Persist and print a run's report; returns the exit code."""
    ci = ci or {}
    summary = stored_summary(store, run_id)
    markdown = store.get_blob(run_id, "markdown") or b""
    paths: list[str] = []
    json_path = None
    if output is not None:
        write_stream(output, store.iter_report(run_id))
        paths.append(str(output))
    if not no_save:
        existing = [p for p in list_runs(state_dir) if p.stem == run_id]
        if existing:  # already saved by an earlier wait
            json_path = existing[0]
            paths.append(str(json_path))
        else:
            info = prompt_info or {}
            lineage = {"source_run": {"run_id": info["source_run"], "content_hash": info.get("source_hash")}} \
                if info.get("source_run") else None  # a re-scored run: whose outputs it scored
            json_path, md_path = save_report_stream(summary, store.iter_report(run_id), state_dir, markdown, lineage)
            paths += [str(json_path), str(md_path)]
            if summary.get("workspace") and not info.get("source_run"):  # agents ran: their spend in the ledger
                _ledger(store, run_id, summary, state_dir)
    if as_json:
        for chunk in store.iter_report(run_id):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    else:
        print_summary(summary, paths)
    report = summary
    if any(ci.get(k) for k in FULL_REPORT_OPTIONS) and not summary.get("stopped"):
        report = _stored_report(store, run_id)
    return finish_run(report, json_path, state_dir, thresholds, prompt_info, {**ci, "as_json": as_json})
