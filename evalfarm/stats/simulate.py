"""Simulated A/B experiments with task difficulty: the model the guarantees are checked on.

Used by tests/test_stats.py and bench/stats_sim.py (and by anyone who wants to see what a design
or a stopping rule does before paying for it). A ``Scenario`` draws a suite: each task has its own
pass rate for arm a (uniform in [low, high]: tasks differ in difficulty), and arm b's rate is a's
plus ``effect``, plus or minus ``spread`` on alternate tasks (the effect varies by task; its mean
stays ``effect``). A round is one pass/fail trial per task per arm, all independent.

Three ways to decide, each returning (decision, rounds used):

- ``sequential``: ``PairedSequentialTest`` updated every round, stopped at its first decision;
- ``peeking``: the fixed-design interval (``paired_interval``) re-checked after every round,
  stopped the first time it excludes zero: what a user re-running "a few more trials" does;
- ``fixed``: the fixed-design interval, looked at once after ``trials`` rounds (and, with
  ``reruns``, the whole design run again when it was inconclusive, as users do).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .paired import interval_of
from .power import Variance
from .sequential import PairedSequentialTest


@dataclass(frozen=True)
class Scenario:
    tasks: int = 20
    effect: float = 0.0
    low: float = 0.05
    high: float = 0.65
    spread: float = 0.0

    def __post_init__(self) -> None:
        if self.tasks < 1 or not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError("tasks >= 1 and 0 <= low <= high <= 1")
        lo_b, hi_b = self.low + self.effect - self.spread, self.high + self.effect + self.spread
        if lo_b < 0.0 or hi_b > 1.0:
            raise ValueError(f"arm b's pass rates would leave [0, 1] ({lo_b:g}..{hi_b:g}): narrow low..high")

    def draw(self, rng: random.Random) -> list[tuple[float, float]]:
        """One suite: (pass rate of a, pass rate of b) per task."""
        out = []
        for i in range(self.tasks):
            p = rng.uniform(self.low, self.high)
            out.append((p, p + self.effect + (self.spread if i % 2 else -self.spread)))
        return out

    def variance(self) -> Variance:
        """The true variance components of the model (for sizing a fixed design at its best)."""
        def mean_pq(lo: float, hi: float) -> float:  # E[p(1 - p)] for p uniform in [lo, hi]
            if hi == lo:
                return lo * (1 - lo)
            return (hi ** 2 - lo ** 2) / (2 * (hi - lo)) - (hi ** 3 - lo ** 3) / (3 * (hi - lo))
        shifts = [self.effect + (self.spread if i % 2 else -self.spread) for i in range(self.tasks)]
        within = mean_pq(self.low, self.high) + sum(mean_pq(self.low + s, self.high + s) for s in shifts) / len(shifts)
        return Variance(between=self.spread ** 2, within=within, source="assumed")


def one_round(rng: random.Random, rates: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    a = [1.0 if rng.random() < pa else 0.0 for pa, _ in rates]
    b = [1.0 if rng.random() < pb else 0.0 for _, pb in rates]
    return a, b


def _sign(lo: float, hi: float, margin: float = 0.0) -> str:
    if margin > 0 and -margin <= lo and hi <= margin:
        return "equivalent"
    return "b_better" if lo > 0 else "a_better" if hi < 0 else "continue"


def sequential(rng: random.Random, scenario: Scenario, rounds: int = 50, alpha: float = 0.05,
               margin: float = 0.0) -> tuple[str, int]:
    rates = scenario.draw(rng)
    test = PairedSequentialTest(alpha=alpha, margin=margin)
    for r in range(1, rounds + 1):
        d = test.update(*one_round(rng, rates))
        if d.decided:
            return d.decision, r
    return "continue", rounds


class _Running:
    """Per-task running sums, so re-checking the fixed interval costs O(tasks) a round."""

    def __init__(self, tasks: int) -> None:
        self.diff = [0.0] * tasks
        self.rounds = 0

    def add(self, a: list[float], b: list[float]) -> None:
        for i, (x, y) in enumerate(zip(a, b)):
            self.diff[i] += y - x
        self.rounds += 1

    def interval(self, alpha: float) -> tuple[float, float]:
        lo, hi, _ = interval_of([s / self.rounds for s in self.diff], [self.rounds] * len(self.diff), 1.0 - alpha)
        return lo, hi


def peeking(rng: random.Random, scenario: Scenario, rounds: int = 50, alpha: float = 0.05,
            margin: float = 0.0) -> tuple[str, int]:
    rates = scenario.draw(rng)
    run = _Running(scenario.tasks)
    for r in range(1, rounds + 1):
        run.add(*one_round(rng, rates))
        decision = _sign(*run.interval(alpha), margin)
        if decision != "continue":
            return decision, r
    return "continue", rounds


def fixed(rng: random.Random, scenario: Scenario, trials: int, alpha: float = 0.05,
          margin: float = 0.0, reruns: int = 0) -> tuple[str, int]:
    """``reruns``: after an inconclusive look, run the same tasks again from scratch (fresh trials,
    the earlier ones set aside) up to this many times; the rounds returned count every run."""
    rates = scenario.draw(rng)
    for attempt in range(reruns + 1):
        run = _Running(scenario.tasks)
        for _ in range(trials):
            run.add(*one_round(rng, rates))
        decision = _sign(*run.interval(alpha), margin)
        if decision != "continue":
            break
    return decision, trials * (attempt + 1)


def rate(results: list[tuple[str, int]], *decisions: str) -> float:
    return sum(1 for d, _ in results if d in decisions) / len(results)


def monte_carlo_error(p: float, n: int) -> float:
    """One standard error of a rate p estimated from n experiments."""
    return math.sqrt(max(p * (1 - p), 1e-12) / n)
