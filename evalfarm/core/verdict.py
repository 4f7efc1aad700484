"""Verdicts, decided once: an item's pass/fail, a case's pass^k, a run's verdict, the exit code.

Every reader (the report, the console, the gate, the registry, JUnit, the PR summary, diff)
asks this module, so "passed" and "nothing measured" mean the same thing everywhere. A
runtime error is never a quality verdict: an errored item is *unmeasured* (None), and so is
a case (pass^k over its trials) with an errored trial and no failed one.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOTHING_MEASURED, EXIT_OK
from . import failure
from .outcome import Outcome
from .taxonomy import classify

PASSED, FAILED, NOTHING, INTERRUPTED = "PASSED", "FAILED", "NOTHING MEASURED", "INTERRUPTED"


def decide(out: Outcome, pass_score: float | None) -> Outcome:
    """Set an item's verdict and failure mode once everything about it is known: it passes when
    its golden checks pass and its judge score (if judged) reaches ``pass_score``."""
    if out.error is None:
        judged_ok = out.judge_score is None or pass_score is None or out.judge_score >= pass_score
        out.passed = bool(out.golden_passed) and judged_ok
    data = out.to_dict()
    out.failure_class = failure.classify(data)
    if out.failure_class is not None:  # an agent item: its class decides (core/failure.py)
        out.passed = failure.verdict(out.failure_class)
    out.failure_mode = classify(data)
    return out


def item_passed(outcome: dict[str, Any]) -> bool | None:
    """A stored item's verdict: ``passed`` (older reports: ``golden_passed``); None if it errored.
    An agent item's verdict is its failure class's: an agent timeout fails, infrastructure is unmeasured."""
    cls = outcome.get("failure_class") or (failure.classify(outcome) if "agent" in outcome else None)
    if cls is not None:
        return failure.verdict(cls)
    if outcome.get("error"):
        return None
    verdict = outcome.get("passed")
    if verdict is None:
        verdict = outcome.get("golden_passed")
    return None if verdict is None else bool(verdict)


def case_verdict(trials: Iterable[bool | None]) -> bool | None:
    """pass^k over a case's trials: False when any measured trial failed, None (unmeasured) when
    none failed but one errored, True when every trial passed."""
    errored = seen = False
    for v in trials:
        seen = True
        if v is False:
            return False
        errored = errored or v is None
    return None if errored or not seen else True


def stopped(report: dict[str, Any]) -> str | None:
    """Why a run ended before every item was measured (``interrupted``, ``budget``...), else None."""
    value = report.get("stopped")
    return value if isinstance(value, str) and value else None


def run_verdict(report: dict[str, Any]) -> str:
    if stopped(report):
        return INTERRUPTED if report.get("stopped") == "interrupted" else f"STOPPED ({report['stopped']})"
    if report.get("nothing_measured"):
        return NOTHING
    return PASSED if report.get("thresholds_passed") else FAILED


def exit_code(report: dict[str, Any]) -> int:
    """3 nothing measured, 1 a threshold failed, 0 passed; 130 for an interrupted run (works on a summary)."""
    if report.get("stopped") == "interrupted":
        return EXIT_INTERRUPTED
    if report.get("nothing_measured"):
        return EXIT_NOTHING_MEASURED
    return EXIT_OK if report.get("thresholds_passed") and not stopped(report) else EXIT_FAILED


# -- each case's verdict in a run (the registry keeps them for flake history) ---------------------------
PASS, FAIL, UNMEASURED = "pass", "fail", "unmeasured"


def word(verdict: bool | None) -> str:
    return UNMEASURED if verdict is None else (PASS if verdict else FAIL)


def case_rows(outcomes: Iterable[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    """(adapter, case id, verdict, trials) per case, in first-seen order: a case is (adapter, case id),
    its verdict pass^k over its trials (``pass``, ``fail`` or ``unmeasured``)."""
    trials: dict[tuple[str, str], list[bool | None]] = {}
    for o in outcomes:
        trials.setdefault((str(o["adapter"]), str(o["prompt_id"])), []).append(item_passed(o))
    return [(a, c, word(case_verdict(v)), len(v)) for (a, c), v in trials.items()]


def iter_case_rows(outcomes: Iterable[dict[str, Any]]) -> Iterator[tuple[str, str, str, int]]:
    """``case_rows`` for outcomes in plan order (prompt, adapter, trial: a case's trials are consecutive),
    a case at a time, holding nothing: a case whose trials are not consecutive comes out once per run
    of them (the caller checks, ``runs.registry``)."""
    current: tuple[str, str] | None = None
    verdicts: list[bool | None] = []
    for o in outcomes:
        key = (str(o["adapter"]), str(o["prompt_id"]))
        if key != current:
            if current is not None:
                yield (*current, word(case_verdict(verdicts)), len(verdicts))
            current, verdicts = key, []
        verdicts.append(item_passed(o))
    if current is not None:
        yield (*current, word(case_verdict(verdicts)), len(verdicts))
