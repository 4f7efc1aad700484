"""One pass over a saved report for a command that relies on it (gate, diff, rescore, export): the
file streamed once (``runs.report_stream``), its hash checked against the lineage stub and the seal
as ``runs.trust`` does, each outcome checked for its shape, its verdict decided again when the use
needs it (``core.recheck``), and handed to the command's ``sink`` as it is read. Nothing of the
outcomes is held here; a sink keeps what its command needs (a compact per-case map, at most).

A file not in the streamed layout, or one with a problem (a bad field, a verdict that cannot be
decided again), is read whole instead (``trust.load_trusted``): the same checks, the same one-line
errors, as before streaming.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..core.recheck import RecheckError, Rechecked, Rechecker, prompt_spec
from ..core.report.schema import head_problem, outcome_problem
from ..errors import UsageError
from .report_stream import ChangedWhileRead, NotStreamed, ReportStream
from .state import StateDir
from .trust import AS_IT_IS, Trusted, _registry_rows, _vouch, check_lineage, judged, load_trusted, verdicts

# add(stored outcome, rechecked outcome or None); optional: start(head), prompt(stored prompt),
# with_line = True: add(stored outcome, None, its line's bytes) (a sink that never rechecks), and
# lookup = f(index, stored prompt) (set by start, for a pass that does not recheck): before the first
# add, the sink's prompt_of is set to a function prompt id -> f of that prompt (the prompts section read
# in step with the outcomes), or None when the report has no prompts
Sink = Any
WHOLE = "whole"


class Pass:
    """A report read for a use: ``trusted`` (its head as ``report``: no outcomes), the ``sink`` fed
    every outcome, and ``verdicts(thresholds)``: the verdicts and figures decided again."""

    def __init__(self, trusted: Trusted, sink: Sink, rechecker: Rechecker | None, streamed: bool) -> None:
        self.trusted, self.sink, self._rechecker, self.streamed = trusted, sink, rechecker, streamed

    def verdicts(self, thresholds: Any = None) -> Rechecked:
        """As ``trust.verdicts``: the report's verdicts decided again (with ``thresholds``, or its own);
        its ``report`` holds no outcomes."""
        t = self.trusted
        if self._rechecker is None:
            r = verdicts(t, thresholds)
            r.report = {k: v for k, v in r.report.items() if k not in ("outcomes", "prompts")}
            return r
        try:
            r = self._rechecker.finish(None, thresholds)
        except RecheckError as exc:
            raise UsageError(f"{t.path}: cannot decide its verdicts again ({exc})") from None
        return judged(t, r)


def read_pass(path: Path, state_dir: Path | str | StateDir, use: str, make_sink: Callable[[], Sink],
              recheck: bool = False) -> Pass:
    """``path`` checked for ``use`` (``trust.load_trusted``), each outcome handed to a sink from
    ``make_sink`` in file order: ``add(stored, rechecked)``, ``rechecked`` None unless the verdicts are
    decided again (``recheck``, or the use needs it to trust the report)."""
    path = Path(path)
    state = StateDir.of(state_dir)
    try:
        return _streamed(path, state, use, make_sink(), recheck)
    except NotStreamed:
        return _whole(path, state, use, make_sink(), recheck)


def _streamed(path: Path, state: StateDir, use: str, sink: Sink, recheck: bool) -> Pass:
    try:
        rs = ReportStream(path)
    except OSError:
        raise NotStreamed("unreadable") from None  # read whole: the same one-line error as ever
    with rs:
        head = rs.head
        if head_problem(head):
            raise NotStreamed("head")
        if hasattr(sink, "start"):
            sink.start(head)
        rows = _registry_rows(state, head["run_id"])
        rechecker = None
        if recheck or (rows[0] is None and use not in AS_IT_IS):
            has_prompts = rs.open_lookup(prompt_spec)
            rechecker = Rechecker(head, rs.prompt if has_prompts else None)
        lookup = getattr(sink, "lookup", None)
        if lookup is not None:
            if rechecker is not None:
                raise ValueError("a sink's prompt lookup is for a pass that does not recheck")
            sink.prompt_of = rs.prompt if rs.open_lookup(lookup) else None
        add = sink.add
        with_line = getattr(sink, "with_line", False)  # the sink takes the outcome's JSON text too
        try:
            for i, o in enumerate(rs.outcomes()):
                if outcome_problem(i, o):
                    raise NotStreamed("outcome")
                if with_line:
                    add(o, None, rs.line)
                else:
                    add(o, rechecker.add(i, o) if rechecker is not None else None)
            on_prompt = getattr(sink, "prompt", None) if rechecker is None else None
            if on_prompt is not None:
                for raw in rs.prompts():
                    on_prompt(raw)
            digest = rs.finish()
        except RecheckError:
            raise NotStreamed("recheck") from None
        except ChangedWhileRead as exc:
            raise UsageError(str(exc)) from None
        if rs.prompts_problem:
            raise NotStreamed("prompts")
    check_lineage(path, digest)
    trusted, need = _vouch(path, state, head, digest, use, rows)
    p = Pass(trusted, sink, rechecker, True)
    if need:
        trusted.rechecked = p.verdicts()
    return p


def _whole(path: Path, state: StateDir, use: str, sink: Sink, recheck: bool) -> Pass:
    t = load_trusted(path, state, use)
    if hasattr(sink, "start"):
        sink.start({k: v for k, v in t.report.items() if k not in ("outcomes", "prompts")})
    stored = t.report.get("outcomes") or []
    lookup = getattr(sink, "lookup", None)
    if lookup is not None:  # report_problem checked them: objects with ids (the last of an id stands)
        by_id = {p["id"]: lookup(i, p) for i, p in enumerate(t.report.get("prompts") or [])}
        sink.prompt_of = by_id.get if by_id else None
    if recheck or t.rechecked is not None:
        r = t.rechecked or verdicts(t)
        for o, new in zip(stored, r.report["outcomes"]):
            sink.add(o, new)
    else:
        for o in stored:
            if getattr(sink, "with_line", False):
                sink.add(o, None, b"    " + json.dumps(o).encode())
            else:
                sink.add(o, None)
    if hasattr(sink, "prompt"):
        for raw in t.report.get("prompts") or []:
            sink.prompt(raw)
    return Pass(t, sink, None, False)
