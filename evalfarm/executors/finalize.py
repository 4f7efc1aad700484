"""The aggregate, done once per run by either backend: stored outcomes -> the report, streamed.

One pass over the plan's keys in plan order, a thousand at a time: each stored outcome
feeds the figures and is appended to the report's body as it is; the head (figures,
thresholds, spend) is written last, so a report in the store is always complete. The
coordinator prints from the summary and streams the bytes to disk: nobody parses a
100,000-item report to finish a run.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

from ..envvars import env_int
from ..logs import get_logger
from ..core.report.builder import ReportBuilder
from ..core.report.framing import PROMPTS_OPEN, REPORT_CLOSE, head_bytes, section_lines
from ..core.report.markdown import render_markdown
from ..spec.models import EvalSpec
from .store import COST_SCALE, SPENT_FIELD, RunStore, batched

log = get_logger("evalfarm.aggregate")
SEP = b",\n    "  # between two lines of a report section (core/report/framing.section_lines)
RUN_TTL_S = 7 * 86400


def run_ttl_s() -> int:
    """How long a finished (or failed) run's keys stay in Redis (EVALFARM_RUN_TTL_S)."""
    return env_int("EVALFARM_RUN_TTL_S", RUN_TTL_S, 1, 366 * 86400)


def spec_of(meta: dict) -> EvalSpec:
    return EvalSpec.model_validate(meta["spec"])


def budget_of(store: RunStore, run_id: str, meta: dict) -> dict:
    """The run's budget and, on the farm, its fleet-wide spend counter (every call of every worker)."""
    budget = (meta.get("options") or {}).get("budget_usd")
    if budget is None:
        return {}
    spent = store.counters(run_id).get(SPENT_FIELD)
    return {"budget_usd": budget, "spent_usd": None if spent is None else spent / COST_SCALE}


def finalize(store: RunStore, run_id: str, stopped: str | None = None) -> bool:
    """Build and store the report; False (and the aggregate claim released) if the run is not
    complete and was not ``stopped`` (then the report is partial and says why)."""
    meta = store.get_meta(run_id)
    if meta is None:
        return False
    done = store.counters(run_id).get("done", 0)
    if stopped is None and done < meta["total"]:
        store.release(run_id, "aggregate")
        log.warning("aggregate_incomplete", run_id=run_id, done=done, total=meta["total"])
        return False
    builder = ReportBuilder(spec_of(meta), meta["trials"])
    store.mark_aggregating(run_id)  # renewed below: a big run's aggregate takes longer than wait's patience
    store.clear_report(run_id)
    if meta.get("archive"):
        return _finalize_archived(store, run_id, meta, builder, stopped)
    first = True
    for n, keys in enumerate(batched(store.iter_item_keys(run_id), 1000)):
        if n % 20 == 19:
            store.mark_aggregating(run_id)
        lines = [line for line in (builder.add(raw) for raw in store.get_results(run_id, keys) if raw is not None)
                 if line is not None]
        if lines:
            store.append_report(run_id, section_lines(lines, first))
            first = False
    first = True
    for prompts in batched(store.iter_prompts(run_id), 1000):
        store.append_report(run_id, section_lines(prompts, first), "prompts")
        first = False
    head = _head(store, run_id, meta, builder, stopped)
    store.put_blob(run_id, "summary", json.dumps(head).encode())
    store.put_blob(run_id, "markdown", render_markdown(head, builder.failed).encode())
    store.put_report_head(run_id, head_bytes(head))
    # any state goes to done once the report exists; the meta keeps the state it replaced
    # (a cancel that came too late shows as previous_state "cancelled")
    store.transition(run_id, stopped or "done", None, finished_at=head["finished_at"])
    store.expire_run(run_id, run_ttl_s())
    return True


def _finalize_archived(store, run_id: str, meta: dict, builder: ReportBuilder, stopped: str | None) -> bool:
    """An archived run (``executors/archive.py``): the report's sections are written to the archive as
    they stream from its segments, in plan order, one segment in memory at a time; the head goes to
    the archive and to Redis last."""
    from ..core.report.index import LINE_INDENT, IndexWriter
    from .archive import RunArchive

    run = RunArchive.of(meta["archive"], run_id)
    segments = int(meta["segments"])

    index = IndexWriter()
    at = {"outcomes": 0, "prompts": 0}  # bytes of each section written so far

    def framed(section: str, lines: list[bytes], on_line) -> bytes:
        """``section_lines`` for bytes, noting where each line ("    {json},") starts in the section."""
        prefix = b"\n    " if at[section] == 0 else b",\n    "
        pos = at[section] + len(prefix)
        for i, line in enumerate(lines):
            on_line(i, pos - LINE_INDENT, LINE_INDENT + len(line) + 1)
            pos += len(line) + len(SEP)
        chunk = prefix + SEP.join(lines)
        at[section] += len(chunk)
        return chunk

    def outcomes():
        for seg in range(segments):
            if seg % 100 == 99:
                store.mark_aggregating(run_id)
            have = run.out(seg)
            lines, parsed = [], []
            for item in run.plan(seg):
                raw = have.get(json.loads(item)["key"])
                line = builder.add(raw) if raw is not None else None
                if line is not None:
                    lines.append(line.encode("utf-8"))
                    parsed.append(builder.last)
            if lines:
                yield framed("outcomes", lines, lambda i, off, n: index.add(off, n, parsed[i]))
        index.last_line_has_no_comma()

    def prompts():
        for seg in range(segments):
            lines = [p.encode("utf-8") for p in run.prompts(seg)]
            if lines:
                ids = [json.loads(p).get("id") for p in lines]
                yield framed("prompts", lines, lambda i, off, n: index.add_prompt(ids[i], off, n))
        index.last_line_has_no_comma("prompts")

    run.put_section("outcomes", outcomes())
    run.put_section("prompts", prompts())
    head = _head(store, run_id, meta, builder, stopped)
    head_b = head_bytes(head)
    # where the sections start in the report file: after the head, and after the outcomes and PROMPTS_OPEN
    run.put_index(index.chunks(len(head_b), len(head_b) + at["outcomes"] + len(PROMPTS_OPEN),
                               {"size": len(head_b) + at["outcomes"] + len(PROMPTS_OPEN) + at["prompts"]
                                + len(REPORT_CLOSE)}))
    run.put_head(head_b)
    store.put_blob(run_id, "summary", json.dumps(head).encode())
    store.put_blob(run_id, "markdown", render_markdown(head, builder.failed).encode())
    store.put_archived_report(run_id, meta["archive"], head_b)
    store.transition(run_id, stopped or "done", None, finished_at=head["finished_at"])
    store.expire_run(run_id, run_ttl_s())
    return True


def _head(store, run_id: str, meta: dict, builder: ReportBuilder, stopped: str | None) -> dict:
    finished = datetime.now(timezone.utc)
    started = datetime.fromisoformat(meta["started_at"])
    return builder.head(run_id=run_id, spec_hash=meta.get("spec_hash") or "", mode=meta["mode"],
                        started_at=meta["started_at"], finished_at=finished.isoformat(timespec="milliseconds"),
                        duration_s=(finished - started).total_seconds(), items_planned=meta["total"],
                        stopped=stopped, **budget_of(store, run_id, meta))
