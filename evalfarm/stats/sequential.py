"""An anytime-valid paired sequential test: look after every round, stop when it decides.

``PairedSequentialTest(alpha, margin)`` takes rounds of paired scores (``update(a, b)``: arm a's
and arm b's score on the same tasks, by position) and keeps a confidence sequence for the mean
of ``b - a``: intervals that contain the true mean *at every round at once* with probability at
least ``1 - alpha``. Peeking is free: stopping at the first round whose interval excludes zero
(or, with a margin, lies inside it) keeps the false-winner rate at most ``alpha``, however many
rounds are looked at. A fixed-design interval re-checked every round does not (bench/stats_sim.py).

The method: a confidence sequence for bounded means by betting (Waudby-Smith & Ramdas, JRSS-B
2023), in its empirical-Bernstein form (their section 3, after Howard et al., Ann. Stat. 2021),
with the bet spread over a fixed portfolio of constant bet sizes (their "diversified Kelly").
Each pair's difference is mapped to x = (d + 1) / 2 in [0, 1]. For a bet size l in (0, 1), and
the running mean m of the true conditional means of the pairs so far,

    M_l(m) = exp(l * (S - n m) - psi(l) * V),   psi(l) = -log(1 - l) - l,
    S = sum of x,  V = sum of (x_i - xhat_{i-1})^2,  xhat = the running mean before pair i,

is a nonnegative supermartingale (Fan et al.'s inequality), so is the average of the portfolio's
M_l, and by Ville's inequality it exceeds 2/alpha at any time with probability at most alpha/2.
The upper end of the interval is the largest m whose mirrored process stays below 2/alpha, the
lower end the smallest m whose process does: [mean(d) - h, mean(d) + h], h found by Newton's
method on a convex function (exact to 1e-12, deterministic, so ``ab verify`` recomputes it).

Why this form and not the tighter betting process prod(1 + l (x_i - m)) with a predictable bet:
tasks differ. The pairs of one round have different true means (task by task), and only an
exponential process with a bet size fixed in advance covers the *running average* of changing
means exactly; the predictable plug-in bet and the product form cover a weighted or a constant
mean. So the interval is for the mean of b - a over all pairs so far; when every round holds the
same tasks, that is the mean difference over those tasks, at every round. The variance term V
makes it adapt to the data: pairing by task removes task difficulty from V, so pairing helps.

Why not a mixture SPRT on pass/fail: scores are in [0, 1] (judge scores, partial credit), and a
Gaussian mixture needs a variance bound that for bounded scores is the worst case (1 for d).

The guarantee assumes pairs are independent given the past (trials of a round may run at once).
It is conditional on the tasks: it says what holds for this suite's tasks, not for tasks not run
(``paired_interval`` answers that, for a fixed design).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .scores import paired_round, probability

METHOD = "eb-mixture-cs"
# the portfolio of constant bet sizes (fractions of capital), 0.8 down to 0.0088 in steps of sqrt(2):
# tight from a handful of pairs to about a million
BETS = tuple(0.8 * 2.0 ** (-k / 2.0) for k in range(14))
_PSI = tuple(-math.log1p(-bet) - bet for bet in BETS)
DECISIONS = ("continue", "a_better", "b_better", "equivalent")


@dataclass(frozen=True)
class SequentialDecision:
    """The state after a round.

    ``decision``: "a_better" when the whole interval is below 0, "b_better" above 0,
    "equivalent" (only with a margin) when it lies inside [-margin, margin] (checked first: a
    difference smaller than the margin is one the user said does not matter), else "continue".
    ``lo``/``hi``: the anytime-valid interval for the mean of b - a over all pairs so far;
    ``estimate`` that mean as observed; ``n`` pairs and ``rounds`` rounds so far.
    """

    decision: str
    lo: float
    hi: float
    n: int
    rounds: int
    estimate: float

    @property
    def decided(self) -> bool:
        return self.decision != "continue"

    def as_dict(self, digits: int = 10) -> dict[str, Any]:
        r = lambda x: round(x, digits) + 0.0  # noqa: E731
        return {"round": self.rounds, "n": self.n, "decision": self.decision, "estimate": r(self.estimate),
                "lo": r(self.lo), "hi": r(self.hi)}


def _decide(lo: float, hi: float, margin: float) -> str:
    if margin > 0 and -margin <= lo and hi <= margin:
        return "equivalent"
    if lo > 0:
        return "b_better"
    if hi < 0:
        return "a_better"
    return "continue"


class PairedSequentialTest:
    """Two-sided, anytime-valid test of mean(b - a) for paired scores in [0, 1].

    ``alpha`` in (0, 1): the probability that any interval of the sequence misses the true mean
    (so a wrong winner, or a wrong "equivalent", is declared at most that often, whenever the
    caller stops). ``margin`` in [0, 1): differences within +-margin count as equivalent; 0 never
    declares equivalence. Stop at the first decision that is not "continue"; the test may be
    updated further (every later interval is valid too), but the decision to act on is the first.
    """

    method = METHOD

    def __init__(self, alpha: float = 0.05, margin: float = 0.0) -> None:
        self.alpha = probability(alpha, "alpha")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0.0 <= margin < 1.0:
            raise ValueError(f"margin: expected a number in [0, 1), got {margin!r}")
        self.margin = float(margin)
        self._n = 0
        self._sum = 0.0  # of x = (d + 1) / 2
        self._v = 0.0  # of (x - the running mean before it)^2
        self._mean = 0.5  # the running mean of x, started at 1/2 (d = 0) as one pseudo-observation
        self._history: list[SequentialDecision] = []

    @property
    def n(self) -> int:
        return self._n

    @property
    def rounds(self) -> int:
        return len(self._history)

    @property
    def history(self) -> tuple[SequentialDecision, ...]:
        return tuple(self._history)

    @property
    def current(self) -> SequentialDecision:
        """The latest decision ("continue" over [-1, 1] before the first round)."""
        return self._history[-1] if self._history else SequentialDecision("continue", -1.0, 1.0, 0, 0, 0.0)

    @property
    def first_decision(self) -> SequentialDecision | None:
        """The first round that decided, if any: the stopping point of a caller who stops at once."""
        return next((d for d in self._history if d.decided), None)

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "alpha": self.alpha, "margin": self.margin}

    def update(self, a: Sequence[Any], b: Sequence[Any]) -> SequentialDecision:
        """Add one round: ``a[i]`` and ``b[i]`` are the two arms' scores on the same task. Raises
        ValueError (and changes nothing) on unequal lengths, an empty round or a score outside [0, 1]."""
        pairs = paired_round(a, b)
        for x_a, x_b in pairs:
            x = (x_b - x_a + 1.0) / 2.0
            self._v += (x - self._mean) ** 2
            self._n += 1
            self._sum += x
            self._mean = (0.5 + self._sum) / (self._n + 1)
        lo, hi = self._interval()
        decision = SequentialDecision(_decide(lo, hi, self.margin), lo, hi, self._n, len(self._history) + 1,
                                      2.0 * self._sum / self._n - 1.0)
        self._history.append(decision)
        return decision

    def _radius(self) -> float:
        """s > 0 where log(mean over bets of exp(l*s - psi(l)*V)) = log(2/alpha); the interval of the
        mean of x is S/n -+ s/n."""
        target = math.log(2.0 / self.alpha)
        log_k = math.log(len(BETS))
        costs = [p * self._v for p in _PSI]
        # to the right of the root: where one bet alone reaches the target
        s = min((target + log_k + c) / bet for bet, c in zip(BETS, costs))
        for _ in range(200):
            terms = [bet * s - c for bet, c in zip(BETS, costs)]
            top = max(terms)
            weights = [math.exp(t - top) for t in terms]
            total = math.fsum(weights)
            excess = top + math.log(total) - log_k - target
            if excess <= 1e-12:
                break
            slope = math.fsum(bet * w for bet, w in zip(BETS, weights)) / total
            step = excess / slope
            s -= step
            if step <= 1e-15 * s:
                break
        return s

    def _interval(self) -> tuple[float, float]:
        center = 2.0 * self._sum / self._n - 1.0
        half = 2.0 * self._radius() / self._n
        return max(-1.0, center - half), min(1.0, center + half)

    @classmethod
    def expected_half_width(cls, n: int, pair_variance: float, alpha: float = 0.05) -> float:
        """The half-width the interval is expected to have after ``n`` pairs whose difference b - a
        has variance ``pair_variance`` (for planning: V is taken at its expectation, n Var(x))."""
        test = cls(alpha)
        test._n, test._v = n, n * pair_variance / 4.0
        return min(1.0, 2.0 * test._radius() / n)

    @classmethod
    def replay(cls, rounds: Iterable[tuple[Sequence[Any], Sequence[Any]]], alpha: float = 0.05,
               margin: float = 0.0) -> "PairedSequentialTest":
        """A test fed ``rounds`` in order: the same floats as the original (``ab verify``)."""
        test = cls(alpha, margin)
        for a, b in rounds:
            test.update(a, b)
        return test
