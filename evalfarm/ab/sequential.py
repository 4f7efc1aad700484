"""A sequential A/B: rounds of one trial per task per arm, stopped when an anytime-valid test decides.

Round r is trial r of every (arm, task): the same items a fixed design of r trials would have
run, so the ledger rows of a sequential artifact look like a fixed design's. Between rounds the
coordinator (``harness.run_sequential``) feeds the honest pair's scores of that round, paired by
task, to ``evalfarm.stats.PairedSequentialTest`` and stops at its first decision, at
``max_trials`` rounds, or when the budget cannot pay for another round.

``block`` is a function of the design (method, alpha, margin, max_trials) and the ledger rows
alone, so ``ab verify`` recomputes the decision, every round's interval and the stopping reason
from the anchored rows. The one thing rows cannot show is why a run stopped undecided before
``max_trials``: the only reason evalfarm records is ``budget``, and anything else fails
verification, as does a run that went on past its first decision.

Adaptive allocation (more trials to tasks whose arms disagree) is not done: the confidence
sequence covers the running mean of all pairs so far, and choosing tasks by their observed
disagreement would change which mean that is from round to round (the guarantee would then be
about a data-dependent mixture of tasks, not the suite). Every round runs every task.
"""
from __future__ import annotations

from typing import Any

from ..stats.power import half_width, observed_variance, power, smallest
from ..stats.sequential import METHOD, PairedSequentialTest
from . import compare

STOPS = ("decided", "max_trials", "budget")
DEFAULT_MAX_TRIALS = 20
POWER = 0.80


def design(alpha: float, margin: float, max_trials: int) -> dict[str, Any]:
    """The sequential design as the artifact's header (and plan id) records it."""
    return {"method": METHOD, "alpha": alpha, "margin": margin, "max_trials": max_trials}


def design_of(block: dict[str, Any]) -> dict[str, Any]:
    """The design and the recorded stopping reason, read back from an artifact's block."""
    return {**{k: block[k] for k in ("method", "alpha", "margin", "max_trials")},
            "stopped_because": block.get("stopped_because")}


def shape_problem(block: Any) -> str | None:
    """What in an (untrusted) artifact's ``sequential`` block ``verify`` cannot work with, else None."""
    if not isinstance(block, dict):
        return "sequential: expected an object"
    if block.get("method") != METHOD:
        return f"sequential.method: unknown method (this evalfarm computes {METHOD!r})"
    alpha, margin, max_trials = block.get("alpha"), block.get("margin"), block.get("max_trials")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        return "sequential.alpha: expected a number in (0, 1)"
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        return "sequential.margin: expected a number in [0, 1)"
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        return "sequential.max_trials: expected a whole number >= 1"
    if not isinstance(block.get("stopped_because"), str):
        return "sequential.stopped_because: expected a string"
    return None


def _score(row: dict[str, Any]) -> float | None:
    return None if row.get("passed") is None else (1.0 if row["passed"] is True else 0.0)


def rounds(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> list[tuple[Any, list[float], list[float]]]:
    """Per round (trial index, ascending): the two arms' scores on the tasks both measured, paired by
    task in a's row order. A run that errored is not a score: its task sits that round out."""
    trials = sorted({r.get("trial") for r in (*rows_a, *rows_b)}, key=lambda t: (not isinstance(t, int), str(t)))
    out = []
    for trial in trials:
        a = {r["task"]: _score(r) for r in rows_a if r.get("trial") == trial}
        b = {r["task"]: _score(r) for r in rows_b if r.get("trial") == trial}
        tasks = [t for t in a if t in b and a[t] is not None and b[t] is not None]
        out.append((trial, [a[t] for t in tasks], [b[t] for t in tasks]))  # type: ignore[misc]
    return out


class Replay:
    """The test fed round by round, with the history the artifact records (rounds without a pair keep
    the interval they had)."""

    def __init__(self, alpha: float, margin: float) -> None:
        self.test = PairedSequentialTest(alpha, margin)
        self.history: list[dict[str, Any]] = []

    def add(self, trial: Any, a: list[float], b: list[float]) -> dict[str, Any]:
        if a:
            self.test.update(a, b)
        d = self.test.current.as_dict()
        entry = {**d, "round": len(self.history) + 1, "trial": trial, "pairs": len(a)}
        self.history.append(entry)
        return entry

    @property
    def first_decision(self) -> dict[str, Any] | None:
        return next((h for h in self.history if h["decision"] != "continue"), None)


def stopped_because(first: dict[str, Any] | None, n_rounds: int, max_trials: int, claimed: Any) -> str:
    """Why the rounds stopped, as far as the rows show it (the recorded reason is trusted only for the
    budget, the one stop the rows cannot show)."""
    if n_rounds > max_trials:
        return "ran_past_max_trials"
    if first is not None:
        return "decided" if first["round"] == n_rounds else "ran_past_decision"
    if n_rounds == max_trials:
        return "max_trials"
    return "budget" if claimed == "budget" else "unexplained"


def fixed_design(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], decision: str, estimate: float,
                 alpha: float, margin: float) -> dict[str, Any] | None:
    """The fixed design (same tasks, trials per task chosen in advance) that would have reached the
    same decision with probability ``POWER``, were the observed difference and variance the truth:
    for a winner, the trials per task whose paired interval detects |estimate|; for "equivalent",
    the trials whose interval would lie inside +-margin. None when undecided or with one task.
    The observed difference of a test stopped early is biased away from zero, so this flatters the
    fixed design; it is a yardstick, not a promise."""
    a_by, b_by = compare.by_task(rows_a), compare.by_task(rows_b)
    tasks = len(set(a_by) & set(b_by))
    if decision not in ("a_better", "b_better", "equivalent") or tasks < 2:
        return None
    variance = observed_variance(a_by, b_by)
    if decision == "equivalent":
        effect = abs(estimate)
        trials = smallest(lambda k: effect * tasks / (tasks + 2.0 / k)
                          + half_width(tasks, k, variance, 1.0 - alpha) <= margin, limit=100_000)
    else:
        effect = abs(estimate)
        trials = power(tasks, 1, variance=variance, alpha=alpha, power=POWER).trials_for(effect) \
            if effect > 0 else None
    return {"trials_per_task": trials, "power": POWER, "effect": compare.rnd(effect), "tasks": tasks,
            "variance": variance.as_dict(compare.DIGITS)}


def block(spec: dict[str, Any], rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]],
          n_arms: int) -> dict[str, Any]:
    """The artifact's ``sequential`` block, recomputed from the honest pair's rows and the design."""
    seq = Replay(spec["alpha"], spec["margin"])
    for trial, a, b in rounds(rows_a, rows_b):
        seq.add(trial, a, b)
    n_rounds = len(seq.history)
    first = seq.first_decision
    last = seq.history[-1] if seq.history else seq.test.current.as_dict()
    stop = first or last
    decision = first["decision"] if first else "undecided"
    tasks = len({r["task"] for r in rows_b})
    fixed = fixed_design(rows_a, rows_b, decision, stop["estimate"], spec["alpha"], spec["margin"])
    items = lambda trials: trials * tasks * n_arms  # noqa: E731
    saved = {"vs_max_trials": items(spec["max_trials"] - n_rounds)}
    if fixed is not None and fixed["trials_per_task"] is not None:
        saved["vs_power_sized"] = items(fixed["trials_per_task"] - n_rounds)
    return {**{k: spec[k] for k in ("method", "alpha", "margin", "max_trials")},
            "rounds": n_rounds, "decision": decision, "decision_round": first["round"] if first else None,
            "stopped_because": stopped_because(first, n_rounds, spec["max_trials"], spec.get("stopped_because")),
            "estimate": stop["estimate"], "interval": [stop["lo"], stop["hi"]], "pairs": stop["n"],
            "history": seq.history, "fixed_design": fixed, "items_saved": saved}


def check(recorded: dict[str, Any], recomputed: dict[str, Any]) -> tuple[bool, str]:
    """``ab verify``: the recorded block against the one replayed from the ledger rows."""
    what = lambda s: (f"{s.get('decision')} after {s.get('rounds')} round(s), stopped: "  # noqa: E731
                      f"{s.get('stopped_because')}")
    if recorded == recomputed:
        if recomputed["stopped_because"] not in STOPS:
            return False, f"{what(recomputed)}: not how evalfarm stops"
        return True, f"{what(recomputed)}; every round's interval replayed from the ledger rows"
    fields = sorted(k for k in set(recorded) | set(recomputed) if recorded.get(k) != recomputed.get(k))
    return False, (f"the artifact records {what(recorded)}; the ledger rows give {what(recomputed)} "
                   f"(differs in {', '.join(fields)})")


def verdict(a: str, fa: dict[str, Any], b: str, fb: dict[str, Any], deltas: dict[str, Any],
            seq: dict[str, Any]) -> dict[str, Any]:
    """The verdict of a sequential artifact: the test's decision on quality; cost decides only a
    quality shown equivalent (as in a fixed design); undecided is inconclusive."""
    base = compare.verdict(a, fa, b, fb, deltas)
    if base["result"] == "incomparable":
        return base
    lo, hi = seq["interval"]
    cs = (f"anytime-valid {(1 - seq['alpha']) * 100:.4g}% interval [{lo:+.4f}, {hi:+.4f}] after {seq['rounds']} "
          f"round(s), {seq['pairs']} pairs")
    if seq["decision"] in ("a_better", "b_better"):
        win = b if seq["decision"] == "b_better" else a
        return {"result": "winner", "winner": win, "decided_by": "quality", "not_measured": [],
                "reason": f"sequential test: pass-rate delta {seq['estimate']:+.4f}, {cs}"}
    if seq["decision"] == "equivalent":
        q = {**deltas["pass_rate"], "ci95": [lo, hi], "ci_excludes_zero": False}
        v = compare.verdict(a, fa, b, fb, {**deltas, "pass_rate": q}, margin=seq["margin"])
        return {**v, "reason": f"sequential test: quality equivalent within +-{seq['margin']:g} ({cs}); "
                               + v["reason"]}
    return {"result": "inconclusive", "winner": None, "decided_by": None, "not_measured": [],
            "reason": f"the sequential test did not decide (stopped: {seq['stopped_because']}): pass-rate delta "
                      f"{seq['estimate']:+.4f}, {cs}"}


def summary_line(seq: dict[str, Any], tasks: int, n_arms: int) -> str:
    """One line for the terminal: rounds, decision, the items saved against the fixed designs."""
    saved = seq["items_saved"]
    fixed = seq.get("fixed_design") or {}
    parts = [f"sequential ({seq['method']}, alpha {seq['alpha']:g}, margin {seq['margin']:g}): "
             f"{seq['decision']} after {seq['rounds']} of at most {seq['max_trials']} round(s) "
             f"(stopped: {seq['stopped_because']}); {seq['rounds'] * tasks * n_arms} items run",
             f"{saved['vs_max_trials']} fewer than {seq['max_trials']} trials per task"]
    if "vs_power_sized" in saved:
        k = fixed["trials_per_task"]
        word = "fewer" if saved["vs_power_sized"] >= 0 else "more"
        parts.append(f"{abs(saved['vs_power_sized'])} {word} than a fixed design sized for the observed "
                     f"{fixed['effect']:g} at {fixed['power']:.0%} power ({k} trial(s) per task)")
    return "; ".join(parts)
