"""Paired, task-clustered intervals for a fixed design (Miller, "Adding Error Bars to Evals", 2024).

Both arms ran the same tasks, each task one or more trials per arm. The unit of evidence is the
task, not the trial: trials of one task share its difficulty, so counting them as independent
samples, or comparing the two arms' pass rates as if unpaired, gets the error wrong. Per task,
``d = mean(b's trial scores) - mean(a's)``; the estimate is the mean of ``d`` over tasks, and its
standard error is Miller's clustered one (section 2.2; the cluster is a task and its trials,
section 3 on resampling; paired differences, section 4): for a balanced design, the standard
error of a mean of the per-task differences.

Small samples, two guards, both standard:

- few tasks: the quantile is Student's t with (tasks - 1) degrees of freedom, and the variance
  carries the n / (n - 1) correction (a cluster-robust interval with few clusters, as Cameron &
  Miller 2015 recommend). One task says nothing about tasks not run: its interval is [-1, 1].
- few trials, or trials that all agree: two pseudo trial pairs, one at d = +1 and one at d = -1,
  join the data, each a cluster of one trial (the adjusted Wald interval for paired proportions
  of Bonett & Price 2012, at the level of trials, with the trials clustered by task as above).
  With one pass/fail trial per task this is exactly Bonett & Price's interval (with t); it never
  has zero width, and with many trials per task it fades away.

So one task x one trial is [-1, 1] ("a tie from a single sample" cannot happen) and twenty tasks
with one trial each that all agree give about +-0.13, not [0, 0].

What it guarantees: approximate (normal-theory) coverage of the mean difference over the
population the tasks were drawn from, checked by simulation in tests/test_stats.py. It is a
*fixed-design* interval: look once, when the design is complete. Re-checking it after every
round and stopping when it excludes zero inflates the false-winner rate (bench/stats_sim.py
measures by how much); for that use ``PairedSequentialTest``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .dist import two_sided
from .scores import by_task, probability

METHOD = "paired-task-clustered"
ADJUSTMENT = "t(tasks-1); two pseudo trial pairs at d=+1 and d=-1 (Bonett-Price)"


@dataclass(frozen=True)
class PairedInterval:
    """The estimate of mean(b - a) over tasks and its interval.

    ``delta``: the plain mean of the per-task differences; ``lo``/``hi``: the adjusted interval
    (it always contains ``delta``; within [-1, 1]); ``se``: its standard error (None with one
    task); ``tasks``: the paired tasks; ``trials``: the fewest trials any paired task had in
    either arm; ``unpaired``: tasks scored in one arm only (left out).
    """

    delta: float
    lo: float
    hi: float
    se: float | None
    tasks: int
    trials: int
    confidence: float
    unpaired: int = 0
    method: str = METHOD

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0.0 or self.hi < 0.0

    def inside(self, margin: float) -> bool:
        """The whole interval within [-margin, margin]: a difference smaller than the margin, shown."""
        return -margin <= self.lo and self.hi <= margin

    def as_dict(self, digits: int = 10) -> dict[str, Any]:
        r = lambda x: round(x, digits) + 0.0  # noqa: E731  (+0.0: never "-0.0")
        return {"method": self.method, "adjustment": ADJUSTMENT, "confidence": self.confidence,
                "delta": r(self.delta), "ci": [r(self.lo), r(self.hi)],
                "se": None if self.se is None else r(self.se), "tasks": self.tasks, "trials": self.trials,
                "unpaired": self.unpaired}


@dataclass(frozen=True)
class Paired:
    """Scores paired by task: per-task differences, trial pairs per task, tasks left out."""

    d: list[float]
    trials: list[tuple[list[float], list[float]]]
    unpaired: int

    @property
    def pairs(self) -> list[int]:
        """Trial pairs per task: the fewer of the two arms' trials."""
        return [min(len(x), len(y)) for x, y in self.trials]


def pair(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> Paired:
    """Pair two arms' scores (task -> trial scores) by task, in a's order. Raises ValueError on bad input."""
    sa, sb = by_task(a, "a"), by_task(b, "b")
    tasks = [t for t in sa if t in sb]
    d = [math.fsum(sb[t]) / len(sb[t]) - math.fsum(sa[t]) / len(sa[t]) for t in tasks]
    return Paired(d, [(sa[t], sb[t]) for t in tasks], len(sa) + len(sb) - 2 * len(tasks))


def interval_of(d: Sequence[float], pairs: list[int], confidence: float = 0.95) -> tuple[float, float, float | None]:
    """The adjusted interval (lo, hi, se) of the mean of per-task differences ``d`` (each in
    [-1, 1]; ``pairs[i]`` trial pairs behind ``d[i]``)."""
    return _interval(d, math.fsum(pairs), confidence)


def _interval(d: Sequence[float], pairs_sum: float, confidence: float) -> tuple[float, float, float | None]:
    n = len(d)
    if n < 2:
        return -1.0, 1.0, None
    k = pairs_sum / n  # a pseudo trial pair weighs 1/k of a task
    weight = n + 2.0 / k
    center = math.fsum(d) / weight  # the pseudo pairs add +1/k and -1/k
    spread = math.fsum((x - center) ** 2 for x in d) + ((1.0 - center) ** 2 + (1.0 + center) ** 2) / (k * k)
    se = math.sqrt(spread / (weight * weight) * n / (n - 1))
    q = two_sided(confidence, n - 1)
    return max(-1.0, center - q * se), min(1.0, center + q * se), se


def paired_interval(a: Mapping[Any, Any], b: Mapping[Any, Any], confidence: float = 0.95) -> PairedInterval:
    """The paired, task-clustered interval of mean(b - a).

    ``a`` and ``b`` map a task (any hashable id) to its trial scores in [0, 1] (a list, or one
    score; ``True``/``False`` count as 1/0). Tasks are paired by id; a task scored by one arm only
    is left out and counted in ``unpaired``. Raises ValueError on a score outside [0, 1], a task
    without scores, or no task scored by both arms.
    """
    confidence = probability(confidence, "confidence")
    p = pair(a, b)
    if not p.d:
        raise ValueError("no task was scored in both arms: nothing to pair")
    pairs = p.pairs
    return interval_of_differences(p.d, math.fsum(pairs), min(pairs), confidence, p.unpaired)


def interval_of_differences(d: Sequence[float], pairs_sum: float, fewest: int, confidence: float = 0.95,
                            unpaired: int = 0) -> PairedInterval:
    """``paired_interval`` from the per-task differences already taken (``d``, at least one), the
    trial pairs behind them summed and their fewest: what a caller that pairs millions of tasks as
    it reads them keeps (``ci.diff``), instead of every task's trial scores."""
    confidence = probability(confidence, "confidence")
    lo, hi, se = _interval(d, pairs_sum, confidence)
    delta = math.fsum(d) / len(d)
    return PairedInterval(delta=delta, lo=min(lo, delta), hi=max(hi, delta), se=se, tasks=len(d),
                          trials=fewest, confidence=confidence, unpaired=unpaired)
