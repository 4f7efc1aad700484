"""Delivering a finished (or stopped) run: its report from the executor's store to disk, the registry
and the spend ledger. Printing stays with the caller (``cli``).

The report's bytes stream from the store to the files in chunks; the registry and the exit code
need only the summary the aggregate stored beside it, and the ledger reads the outcomes a line at
a time, so a 100,000-item run stays cheap for the coordinator.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.report.framing import iter_outcome_lines
from .archive import list_runs, save_index, save_report_stream, write_stream
from .ledger import append_rows, run_rows
from .registry import Registry
from .state import StateDir
from .submit import stored_summary


@dataclass
class Delivered:
    summary: dict[str, Any]  # the report's head, checked
    paths: list[str] = field(default_factory=list)  # what was written (--output, the saved JSON and Markdown)
    json_path: Path | None = None  # the saved report (None with --no-save)
    markdown: bytes = b""


def deliver(store, run_id: str, state: StateDir, *, save: bool = True, output: Path | None = None,
            prompt_info: dict[str, Any] | None = None) -> Delivered:
    """Write ``--output``, save the run under the state dir (once: a second delivery of the same run
    finds it saved), record it in the registry, and append its agent items' spend rows."""
    summary = stored_summary(store, run_id)
    done = Delivered(summary, markdown=store.get_blob(run_id, "markdown") or b"")
    if output is not None:
        write_stream(output, store.iter_report(run_id))
        done.paths.append(str(output))
    if not save:
        return done
    existing = [p for p in list_runs(state.root) if p.stem == run_id]
    if existing:  # already saved by an earlier wait
        done.json_path = existing[0]
        done.paths.append(str(done.json_path))
        return done
    info = prompt_info or {}
    lineage = {"source_run": {"run_id": info["source_run"], "content_hash": info.get("source_hash")}} \
        if info.get("source_run") else None  # a re-scored run: whose outputs it scored
    done.json_path, md_path = save_report_stream(summary, store.iter_report(run_id), state.root, done.markdown,
                                                 lineage)
    done.paths += [str(done.json_path), str(md_path)]
    index = getattr(store, "report_index", None)  # an archived farm run: its case index, for big-run pages
    chunks = index(run_id) if index is not None else None
    if chunks is not None:
        save_index(done.json_path, chunks)
    Registry(state.root).record(summary, done.json_path, dataset_hash=info.get("dataset_hash"),
                                prompt=info.get("prompt"), models=info.get("models"),
                                source_run=info.get("source_run"))
    if summary.get("workspace") and not info.get("source_run"):  # agents ran: their spend in the ledger
        rows = run_rows(run_id, summary.get("spec_name"), iter_outcome_lines(store.iter_report(run_id)))
        if rows:
            append_rows(state.cost_ledger, rows)
    return done
