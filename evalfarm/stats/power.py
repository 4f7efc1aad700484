"""Power of a fixed design: the smallest difference it detects, and the design a difference needs.

The variance of one task's difference ``d = mean(b) - mean(a)`` over ``K`` trials per arm has two
parts (Miller 2024, section 5): how much the true difference varies from task to task
(``between``), and the noise of single trials around a task's mean, which averaging K trials
divides by K (``within``: one trial of a's variance plus one trial of b's):

    Var(d) = between + within / K

Trials per task shrink only the second part; only more tasks shrink the first. A design of
``tasks`` x ``trials`` detects a difference ``delta`` (the paired interval of ``paired.py``
excludes zero on the right side) with probability

    power = Phi((delta - t_a * se / s) / sqrt(V / n)),   V = Var(d),  n = tasks,

where ``t_a`` is the two-sided quantile of Student's t (n - 1 degrees of freedom) at level
``1 - alpha``, ``se`` the expected standard error of the adjusted interval (``paired.py``: the
n / (n - 1) correction and two pseudo trial pairs, each 1/K of a task) and ``s = n / (n + 2/K)``
the shrinkage of its centre. For many tasks this is the textbook ``(z_a + z_power) * sqrt(V / n)``.
These are normal approximations for planning; tests/test_stats.py checks them by simulation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .dist import normal_cdf, normal_quantile, two_sided
from .paired import pair
from .scores import probability

LIMIT = 10 ** 7  # the largest design the searches below consider


@dataclass(frozen=True)
class Variance:
    """Variance components of a paired difference (see the module docstring).

    ``source``: "assumed" (a planning assumption) or "observed" (estimated from scores);
    ``separated``: False when the scores had one trial per task, so ``between`` could not be told
    apart from ``within`` and all of it was put in ``within`` (trials then look more useful than
    they may be: a trial count computed from it is a lower bound).
    """

    between: float
    within: float
    source: str = "assumed"
    separated: bool = True

    def __post_init__(self) -> None:
        for name in ("between", "within"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}: expected a variance >= 0, got {v!r}")
        if self.between + self.within <= 0:
            raise ValueError("between + within is 0: a design with no noise needs no statistics")

    def per_task(self, trials: int) -> float:
        """Var(d) for one task with ``trials`` trials per arm."""
        return self.between + self.within / trials

    def as_dict(self, digits: int = 10) -> dict[str, Any]:
        return {"between": round(self.between, digits), "within": round(self.within, digits),
                "source": self.source, "separated": self.separated}


def assumed_variance(pass_rate: float = 0.5, pass_rate_b: float | None = None) -> Variance:
    """Pass/fail trials, arms independent, the same difference on every task: ``within`` is
    p_a(1 - p_a) + p_b(1 - p_b) and ``between`` is 0. With the default p = 0.5 this is the largest
    trial variance pass/fail scores can have; task difficulty, which pairing removes, only lowers
    it. It is optimistic only when the difference itself varies a lot from task to task."""
    pa = _rate(pass_rate, "pass_rate")
    pb = pa if pass_rate_b is None else _rate(pass_rate_b, "pass_rate_b")
    return Variance(between=0.0, within=max(pa * (1 - pa) + pb * (1 - pb), 1e-12), source="assumed")


def _rate(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name}: expected a pass rate in [0, 1], got {value!r}")
    return float(value)


def _sample_var(xs: list[float]) -> float:
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def observed_variance(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> Variance:
    """Estimate the components from scores (task -> trial scores per arm, as ``paired_interval``).

    ``within``: the mean over tasks with two or more trials in both arms of a's plus b's sample
    variance; ``between``: the sample variance of the per-task differences minus the part the
    trials explain (method of moments, floored at 0). With one trial per task everywhere the split
    is unknown and everything goes to ``within`` (``separated`` False). With fewer than two paired
    tasks nothing can be estimated: the worst case for pass/fail scores is returned as an
    assumption."""
    p = pair(a, b)
    d, trials = p.d, p.trials
    if len(d) < 2:
        return assumed_variance()
    total = _sample_var(d)
    both = [(sa, sb) for sa, sb in trials if len(sa) >= 2 and len(sb) >= 2]
    if not both:
        return Variance(between=0.0, within=max(total, 1e-12), source="observed", separated=False)
    within = math.fsum(_sample_var(sa) + _sample_var(sb) for sa, sb in both) / len(both)

    def noise(sa: list[float], sb: list[float]) -> float:  # the trial noise in one task's d: s_a^2/K_a + s_b^2/K_b
        if len(sa) >= 2 and len(sb) >= 2:
            return _sample_var(sa) / len(sa) + _sample_var(sb) / len(sb)
        return within / 2 * (1 / len(sa) + 1 / len(sb))

    explained = math.fsum(noise(sa, sb) for sa, sb in trials) / len(trials)
    between = max(0.0, total - explained)
    if between + within <= 0:
        within = 1e-12
    return Variance(between=between, within=within, source="observed")


def _design(n: int, k: int, variance: Variance, confidence: float) -> tuple[float, float, float, float]:
    """(V, expected se of the adjusted interval, its quantile, the shrinkage of its centre) for
    n >= 2 tasks x k trials (``paired.interval_of`` with sum((d - centre)^2) ~ (n - 1) V)."""
    v = variance.per_task(k)
    weight = n + 2.0 / k
    se = math.sqrt(((n - 1) * v + 2.0 / (k * k)) / (weight * weight) * n / (n - 1))
    return v, se, two_sided(confidence, n - 1), n / weight


def half_width(tasks: int, trials: int, variance: Variance, confidence: float = 0.95) -> float:
    """The expected half-width of the paired interval of this design (1.0 with one task)."""
    if tasks < 2:
        return 1.0
    _, se, q, _ = _design(tasks, trials, variance, confidence)
    return q * se


def smallest(ok: Callable[[int], bool], start: int = 1, limit: int = LIMIT) -> int | None:
    """The smallest integer in [start, limit] for which the monotone ``ok`` holds, else None."""
    if ok(start):
        return start
    if not ok(limit):
        return None
    lo, hi = start, limit  # ok(lo) false, ok(hi) true
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class Power:
    """What a design of ``tasks`` x ``trials`` (per arm) can tell.

    ``mdd``: the smallest true difference |b - a| that the paired interval at level ``1 - alpha``
    shows (excludes zero, on the right side) with probability ``power``; ``se``: the standard
    error of the mean difference. The methods answer the other questions of a plan.
    """

    tasks: int
    trials: int
    alpha: float
    power: float
    variance: Variance
    mdd: float
    se: float

    def power_at(self, effect: float) -> float:
        """Probability that the design shows a true difference of ``effect`` (|effect| counts)."""
        return _power(abs(float(effect)), self.tasks, self.trials, self.variance, self.alpha)

    def trials_for(self, effect: float) -> int | None:
        """Trials per task (same tasks) to detect ``effect`` with probability ``power``; None when
        no number of trials can (the variation between tasks alone is too large: add tasks)."""
        effect = _effect(effect)
        return smallest(lambda k: _mdd(self.tasks, k, self.variance, self.alpha, self.power) <= effect)

    def tasks_for(self, effect: float) -> int | None:
        """Tasks (same trials per task) to detect ``effect`` with probability ``power``."""
        effect = _effect(effect)
        return smallest(lambda n: _mdd(n, self.trials, self.variance, self.alpha, self.power) <= effect, start=2)

    def as_dict(self, digits: int = 10) -> dict[str, Any]:
        return {"tasks": self.tasks, "trials": self.trials, "alpha": self.alpha, "power": self.power,
                "mdd": round(self.mdd, digits), "se": round(self.se, digits), "variance": self.variance.as_dict(digits)}


def _effect(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < abs(float(value)) <= 2.0:
        raise ValueError(f"effect: expected a difference in (0, 2], got {value!r}")
    return abs(float(value))


def _power(effect: float, n: int, k: int, variance: Variance, alpha: float) -> float:
    if n < 2:
        return 0.0
    v, se, q, shrink = _design(n, k, variance, 1.0 - alpha)
    return normal_cdf((effect - q * se / shrink) / math.sqrt(v / n))


def _mdd(n: int, k: int, variance: Variance, alpha: float, power: float) -> float:
    if n < 2:
        return math.inf
    v, se, q, shrink = _design(n, k, variance, 1.0 - alpha)
    return normal_quantile(power) * math.sqrt(v / n) + q * se / shrink


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a whole number >= 1, got {value!r}")
    return value


def power(tasks: int, trials: int = 1, *, variance: Variance | None = None, alpha: float = 0.05,
          power: float = 0.80) -> Power:
    """The design ``tasks`` x ``trials`` (trials per task per arm): its minimum detectable
    difference at ``power`` and level ``alpha`` (two-sided), under ``variance`` (default
    ``assumed_variance()``: pass/fail trials at 50%, the worst case; pass
    ``observed_variance(a, b)`` to plan from a previous run of the same suite)."""
    tasks, trials = _count(tasks, "tasks"), _count(trials, "trials")
    if tasks < 2:
        raise ValueError("tasks: a paired interval needs at least 2 tasks (one task says nothing about others)")
    alpha = probability(alpha, "alpha")
    level = probability(power, "power")
    variance = variance if variance is not None else assumed_variance()
    if not isinstance(variance, Variance):
        raise ValueError(f"variance: expected a Variance, got {type(variance).__name__}")
    return Power(tasks=tasks, trials=trials, alpha=alpha, power=level, variance=variance,
                 mdd=_mdd(tasks, trials, variance, alpha, level),
                 se=math.sqrt(variance.per_task(trials) / tasks))
