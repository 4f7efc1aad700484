"""The normal and Student t distributions: CDFs and quantiles, standard library only.

``statistics.NormalDist`` gives the normal quantile (imported lazily: ~9 ms of start-up a command
computing no interval should not pay); Student's t is computed here from the regularized
incomplete beta function (Lentz's continued fraction, as in Numerical Recipes 6.4), accurate to
about 1e-12, and inverted by bisection, so the same inputs give the same bits everywhere
(``ab verify`` recomputes intervals and compares them).
"""
from __future__ import annotations

import math
from functools import lru_cache


def normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@lru_cache(maxsize=64)
def normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def _beta_cf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


EXPANSION_FROM = 200  # degrees of freedom from which the Cornish-Fisher expansion is used


def _t_expansion(p: float, df: int) -> float:
    """Cornish-Fisher expansion of the t quantile around the normal one (Abramowitz & Stegun
    26.7.5, four terms): error below 1e-10 from 200 degrees of freedom, where the continued
    fraction would need thousands of steps."""
    z = normal_quantile(p)
    z2 = z * z
    return z + (z2 + 1) * z / (4 * df) + ((5 * z2 + 16) * z2 + 3) * z / (96 * df ** 2) \
        + (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / (384 * df ** 3) \
        + ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / (92160 * df ** 4)


@lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` >= 1 degrees of freedom (p in (0.5, 1))."""
    if df >= EXPANSION_FROM:
        return _t_expansion(p, df)
    hi = 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return hi


def two_sided(confidence: float, df: int | None = None) -> float:
    """q such that a two-sided interval of ``confidence`` is estimate +- q * se: Student's t with
    ``df`` degrees of freedom, or the normal when ``df`` is None."""
    p = 0.5 + confidence / 2.0
    return normal_quantile(p) if df is None else t_quantile(p, df)
