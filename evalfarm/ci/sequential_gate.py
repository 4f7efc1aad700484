"""The gate, sequentially (``evalfarm run --gate --until-decided``): trials are added only while the
regression decision is open.

The baseline is a stored run: per (adapter, case) its pass rate over the trials it measured is a
fixed number. Each round runs one more trial of every case (round r = trial r, one submission);
a pair is (the baseline's rate, this round's pass 0/1) for a case both measured, and
``evalfarm.stats.PairedSequentialTest`` keeps an anytime-valid interval [lo, hi] for the mean of
run - baseline over all pairs so far (conditional on the baseline: its rates are constants, so the
differences are bounded and independent given the past, which is all the sequence needs).

With ``margin`` m (the spec's ``max_drop``, else the flag's): the gate PASSES once lo >= -m (a drop
of more than m is ruled out) and FAILS once hi < -m (a drop of more than m is shown). Either call is
wrong only when the interval misses the true mean, which happens at any round with probability at
most alpha, however many rounds are looked at. Undecided at the last round is OPEN, and the gate
does not pass (exit 1): no regression was ruled out.

``fixed_trials``: the trials per case a fixed design (same cases, trials chosen in advance) would
need to make the same call with 80% power, were the observed mean and variance the truth.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..core.verdict import item_passed
from ..stats.power import observed_variance, power
from ..stats.sequential import METHOD, PairedSequentialTest
from .diff import case_pairing

POWER = 0.80
DECISIONS = ("open", "passed", "regressed")


def pairing(baseline: dict[str, Any], adapter_ids: list[str]) -> dict[str, str]:
    """This run's adapter -> the baseline's (shared ids, or one model against one model)."""
    pairs = case_pairing(baseline, {"per_adapter": {a: {} for a in adapter_ids}}) or {}
    return {cur: base for base, cur in pairs.items()}


def round_pairs(rates: dict[tuple[str, str], float], base_of: dict[str, str],
                outcomes: Iterable[dict[str, Any]]) -> tuple[list[float], list[float], list[tuple[str, str]]]:
    """A round's (baseline rates, this run's scores, (adapter, case) keys), for the cases both measured."""
    a, b, keys = [], [], []
    for o in outcomes:
        base = base_of.get(o["adapter"])
        verdict = item_passed(o)
        if base is None or verdict is None or (base, o["prompt_id"]) not in rates:
            continue
        a.append(rates[(base, o["prompt_id"])])
        b.append(1.0 if verdict else 0.0)
        keys.append((o["adapter"], o["prompt_id"]))
    return a, b, keys


class SequentialGate:
    """The rounds so far and the call they support."""

    method = METHOD

    def __init__(self, alpha: float, margin: float) -> None:
        self.test = PairedSequentialTest(alpha)
        self.alpha, self.margin = alpha, margin
        self.history: list[dict[str, Any]] = []
        self._a: dict[tuple[str, str], list[float]] = {}
        self._b: dict[tuple[str, str], list[float]] = {}

    def decide(self, lo: float, hi: float) -> str:
        if lo >= -self.margin:
            return "passed"
        if hi < -self.margin:
            return "regressed"
        return "open"

    def add(self, a: list[float], b: list[float], keys: list[tuple[str, str]]) -> dict[str, Any]:
        if a:
            self.test.update(a, b)
            for k, x, y in zip(keys, a, b):
                self._a.setdefault(k, [x, x])  # a constant: two equal "trials", no within-case variance
                self._b.setdefault(k, []).append(y)
        d = self.test.current
        state = {"round": len(self.history) + 1, "n": d.n, "pairs": len(a), "estimate": round(d.estimate, 10) + 0.0,
                 "lo": round(d.lo, 10) + 0.0, "hi": round(d.hi, 10) + 0.0,
                 "decision": self.decide(d.lo, d.hi) if d.n else "open"}
        self.history.append(state)
        return state

    @property
    def decision(self) -> str:
        return self.history[-1]["decision"] if self.history else "open"

    def fixed_trials(self) -> int | None:
        """Trials per case for a fixed design to make this call with 80% power (None: undecided, fewer
        than 2 cases, or no number of trials would)."""
        if self.decision == "open" or len(self._b) < 2:
            return None
        effect = abs(self.history[-1]["estimate"] + self.margin)
        if effect <= 0:
            return None
        variance = observed_variance(self._a, self._b)
        return power(len(self._b), 1, variance=variance, alpha=self.alpha, power=POWER).trials_for(min(effect, 2.0))

    def summary(self, cases: int) -> dict[str, Any]:
        rounds = len(self.history)
        fixed = self.fixed_trials()
        return {"method": self.method, "alpha": self.alpha, "margin": self.margin, "rounds": rounds,
                "decision": self.decision, "cases": cases, "items": rounds * cases, "history": self.history,
                "fixed_trials": fixed, "items_saved": None if fixed is None else (fixed - rounds) * cases}

    def lines(self, cases: int, max_trials: int) -> list[str]:
        s = self.summary(cases)
        last = self.history[-1] if self.history else {"estimate": 0.0, "lo": -1.0, "hi": 1.0, "n": 0}
        word = {"passed": "PASSED", "regressed": "FAILED", "open": "OPEN"}[s["decision"]]
        why = {"passed": f"a drop of more than {self.margin:g} is ruled out",
               "regressed": f"a drop of more than {self.margin:g} is shown",
               "open": f"neither shown nor ruled out in {max_trials} round(s): the gate does not pass"}[s["decision"]]
        out = [f"gate (sequential, {self.method}, alpha {self.alpha:g}, margin {self.margin:g}): {word} after "
               f"{s['rounds']} round(s): {why}; run - baseline {last['estimate']:+.4f}, anytime-valid interval "
               f"[{last['lo']:+.4f}, {last['hi']:+.4f}] over {last['n']} pairs; {s['items']} items run"]
        if s["fixed_trials"] is None and s["decision"] != "open" and cases >= 2:
            out.append(f"  no fixed design over these {cases} cases makes this call with {POWER:.0%} power at the observed "
                       "difference, whatever its trials per case (the cases differ more than trials average out)")
        if s["fixed_trials"] is not None:
            saved = s["items_saved"]
            out.append(f"  a fixed design with the same power ({POWER:.0%}) at the observed difference needs "
                       f"{s['fixed_trials']} trial(s) per case ({s['fixed_trials'] * cases} items): "
                       f"{abs(saved)} items {'saved' if saved >= 0 else 'more spent here'}")
        return out
