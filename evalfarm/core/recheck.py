"""A stored report's verdicts, decided again from what it holds rather than from its flags.

Each measured item's output is checked again against the prompt it was sent (the report's
``prompts`` section records every prompt with its expected answers and checks), its stored judge
score is held against the judge's pass score, and the per-adapter figures, threshold failures and
"nothing measured" follow from those verdicts (``core.verdict``, ``core.aggregate``): flipping
``passed``, ``golden_passed`` or ``golden_pass_rate`` in a file changes nothing here.

What cannot be decided again from the file is said, not guessed: the checks an adapter ran itself
(an agent's ``check`` command, in its worktree) and the judge's score are taken as stored (the
report's hash and seal vouch for them: ``runs.trust``); a report without a prompts section (written
before reports recorded it) cannot have its checks run again at all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..spec.models import JudgeSpec, PromptSpec, Thresholds
from .aggregate import Aggregator, nothing_measured, threshold_failures
from .checks import golden_verdict
from .outcome import Outcome
from .verdict import decide

SHOWN = 3  # mismatches named in a message; the rest are counted
_FIGURES = ("golden_passed", "passed", "golden_pass_rate", "pass_rate", "overall", "measured", "errors", "items")


class RecheckError(ValueError):
    """The report cannot be checked again (a prompt it names is missing or not valid)."""


@dataclass
class Rechecked:
    report: dict[str, Any]  # the report with every verdict, figure and threshold decided again
    mismatches: list[str] = field(default_factory=list)  # the first few places the stored report says otherwise
    mismatch_count: int = 0
    rerun: bool = True  # False: no prompts section, the checks could not be run again
    notes: list[str] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        return not self.mismatch_count

    def what(self) -> str:
        """One phrase naming what does not match (for a one-line error)."""
        more = f" (and {self.mismatch_count - len(self.mismatches)} more)" if self.mismatch_count > len(self.mismatches) \
            else ""
        return "; ".join(self.mismatches) + more


def _prompts(report: dict[str, Any]) -> dict[str, PromptSpec] | None:
    raw = report.get("prompts")
    if not raw:
        return None
    out = {}
    for i, p in enumerate(raw):
        prompt = prompt_spec(i, p)
        out[prompt.id] = prompt
    return out


def _check(c: Any) -> dict[str, Any]:
    """A stored check result with the fields the verdict reads, each of its type."""
    c = c if isinstance(c, dict) else {}
    return {"kind": str(c.get("kind") or ""), "passed": c.get("passed") is True, "reason": str(c.get("reason") or ""),
            "format": c.get("format") is True}


def _num(v: Any) -> Any:
    return round(v, 6) if isinstance(v, float) else v


class _Mismatches:
    def __init__(self) -> None:
        self.shown: list[str] = []
        self.count = 0

    def add(self, text: str) -> None:
        self.count += 1
        if len(self.shown) < SHOWN:
            self.shown.append(text)


def prompt_spec(i: int, raw: Any) -> PromptSpec:
    """The ``i``-th prompt of a report's prompts section, validated (RecheckError naming the field)."""
    try:
        return PromptSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise RecheckError(f"prompts[{i}].{where}: {err['msg']}") from None


class Rechecker:
    """``recheck`` one outcome at a time, for a report read as a stream: ``head`` is the report without
    its outcomes (and prompts), ``prompt_of(id)`` the prompt an outcome answers (None: not in the
    prompts section), or None for a report without a prompts section. Holds no outcome."""

    def __init__(self, head: dict[str, Any], prompt_of: Any) -> None:
        self.head, self.prompt_of = head, prompt_of
        judge = None
        if head.get("judge") is not None:
            try:
                judge = JudgeSpec.model_validate(head["judge"])
            except ValidationError as exc:
                err = exc.errors()[0]
                raise RecheckError(f"judge.{'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None
        self.pass_score = judge.pass_score if judge else None
        self.wrong = _Mismatches()
        self.adapter_run = 0
        adapters = list(head.get("adapters") or head.get("per_adapter") or [])
        self.agg = Aggregator(adapters, head.get("trials") or 1, judge.weight if judge else None)

    def add(self, i: int, o: dict[str, Any]) -> dict[str, Any]:
        """The ``i``-th outcome with its verdict decided again (counted in the figures)."""
        new = dict(o, checks=[_check(c) for c in o.get("checks") or []])
        if o.get("error"):
            new["passed"] = None
        elif self.prompt_of is not None:
            prompt = self.prompt_of(o["prompt_id"])
            if prompt is None:
                raise RecheckError(f"outcomes[{i}] answers prompt {o['prompt_id'][:80]!r}, which the report's "
                                   "prompts section does not have")
            own = [c for c in new["checks"] if c["kind"] == "command"]
            self.adapter_run += len(own)
            ran_own = bool(own) or not prompt.check
            stored = [c for c in (o.get("checks") or []) if isinstance(c, dict) and c.get("kind") != "command"]
            figures = {"cost_usd": o.get("cost_usd"), "latency_ms": o.get("latency_ms"),
                       "similarity": {i: c["score"] for i, c in enumerate(stored)
                                      if c.get("kind") == "similar" and isinstance(c.get("score"), (int, float))}}
            golden, reason, checks = golden_verdict(prompt, o.get("output") or "", o.get("finish_reason"),
                                                    own if ran_own else None, figures)
            new.update(golden_passed=golden, golden_reason=reason, checks=checks)
        out = decide(Outcome.from_dict(new), self.pass_score)
        new.update(passed=out.passed, failure_mode=out.failure_mode)
        if not o.get("error"):
            where = f"outcomes[{i}] ({o['adapter'][:40]}/{o['prompt_id'][:40]} trial {o['trial']})"
            for key in ("golden_passed", "passed"):
                if o.get(key) is not None and o.get(key) != new[key]:
                    self.wrong.add(f"{where} says {key}: {str(o.get(key)).lower()} but its output "
                                   f"{'passes' if new[key] else 'fails'} ({new['golden_reason'][:80]})")
                    break
        self.agg.add(new)
        return new

    def finish(self, outcomes: list[dict[str, Any]] | None = None, thresholds: Thresholds | None = None
               ) -> Rechecked:
        """The figures, thresholds and mismatches; ``outcomes``: the rechecked outcomes, when the
        caller kept them (the report's ``outcomes`` then; else the report has none); ``thresholds``
        default to the report's own. May be called again with other thresholds."""
        report, notes = self.head, []
        wrong = _Mismatches()
        wrong.shown, wrong.count = list(self.wrong.shown), self.wrong.count
        own_thresholds = thresholds is None
        if thresholds is None:
            try:
                thresholds = Thresholds.model_validate(report.get("thresholds") or {})
            except ValidationError as exc:
                raise RecheckError(f"thresholds: {exc.errors()[0]['msg']}") from None
        per_adapter = self.agg.figures()
        for adapter, fig in per_adapter.items():
            stored = (report.get("per_adapter") or {}).get(adapter) or {}
            fig["error_examples"] = stored.get("error_examples") or {}
            for key in _FIGURES:
                if key in stored and _num(stored[key]) != _num(fig[key]):
                    wrong.add(f"per_adapter.{adapter[:40]}.{key} is {stored[key]} but its outcomes give "
                              f"{_num(fig[key])}")
        failures = threshold_failures(per_adapter, thresholds)
        empty = nothing_measured(per_adapter)
        passed = not failures and not empty and not report.get("stopped")
        if own_thresholds and bool(report.get("thresholds_passed")) != passed:
            wrong.add(f"thresholds_passed is {str(report.get('thresholds_passed')).lower()} but its figures "
                      f"{'meet' if passed else 'miss'} its thresholds")
        if bool(report.get("nothing_measured")) != empty:
            wrong.add(f"nothing_measured is {str(report.get('nothing_measured')).lower()} but its outcomes say "
                      f"{str(empty).lower()}")
        if self.prompt_of is None:
            notes.append("the report has no prompts section (written before reports recorded the prompts as "
                         "sent): its checks could not be run again; its verdicts follow its stored check results")
        if self.adapter_run:
            notes.append(f"{self.adapter_run} check result(s) the adapter ran itself (agents' check commands) and "
                         "the judge's scores are taken as stored")
        rechecked = {**report, "outcomes": outcomes if outcomes is not None else [], "per_adapter": per_adapter,
                     "threshold_failures": failures, "thresholds_passed": passed, "nothing_measured": empty}
        return Rechecked(rechecked, wrong.shown, wrong.count, self.prompt_of is not None, notes)


def recheck(report: dict[str, Any], thresholds: Thresholds | None = None) -> Rechecked:
    """``report`` (checked by ``core.report.schema``) with each item's verdict decided again and the
    figures and thresholds from those; ``thresholds`` default to the ones stored in the report."""
    prompts = _prompts(report)
    r = Rechecker(report, prompts.get if prompts is not None else None)
    if thresholds is None:  # checked before any outcome, as always
        try:
            Thresholds.model_validate(report.get("thresholds") or {})
        except ValidationError as exc:
            raise RecheckError(f"thresholds: {exc.errors()[0]['msg']}") from None
    outcomes = [r.add(i, o) for i, o in enumerate(report.get("outcomes") or [])]
    return r.finish(outcomes, thresholds)
