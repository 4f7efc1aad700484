"""Checking the numbers handed to the statistics: scores in [0, 1], paired by position or by task.

Every public function of ``evalfarm.stats`` validates its input here first and raises ``ValueError``
with a message that says which value is wrong; nothing is folded into a test before the whole
input is known to be good (an ``update`` that raises leaves the test as it was).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def score(value: Any, where: str) -> float:
    """One score as a float in [0, 1] (``True``/``False`` are 1 and 0: a pass/fail verdict)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a score in [0, 1], got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x) or x < 0.0 or x > 1.0:
        raise ValueError(f"{where}: expected a score in [0, 1], got {value!r}")
    return x


def paired_round(a: Sequence[Any], b: Sequence[Any]) -> list[tuple[float, float]]:
    """One round of pairs: equal lengths, at least one pair."""
    if isinstance(a, (str, bytes)) or isinstance(b, (str, bytes)):
        raise ValueError("a and b: expected sequences of scores, got a string")
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a has {len(a)} scores and b has {len(b)}: a round pairs them by position")
    if not a:
        raise ValueError("a round needs at least one pair of scores")
    return [(score(x, f"a[{i}]"), score(y, f"b[{i}]")) for i, (x, y) in enumerate(zip(a, b))]


def by_task(arm: Mapping[Any, Any], name: str) -> dict[Any, list[float]]:
    """An arm's scores: task -> one score or a sequence of trial scores (at least one)."""
    if not isinstance(arm, Mapping):
        raise ValueError(f"{name}: expected a mapping of task -> scores, got {type(arm).__name__}")
    out: dict[Any, list[float]] = {}
    for task, values in arm.items():
        if isinstance(values, (bool, int, float)):
            values = [values]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"{name}[{task!r}]: expected a score or a sequence of scores")
        if not values:
            raise ValueError(f"{name}[{task!r}]: no scores")
        out[task] = [score(v, f"{name}[{task!r}][{i}]") for i, v in enumerate(values)]
    return out


def probability(value: Any, name: str, *, low: float = 0.0, high: float = 1.0) -> float:
    """A number strictly between ``low`` and ``high`` (alpha, power, confidence)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < float(value) < high:
        raise ValueError(f"{name}: expected a number strictly between {low:g} and {high:g}, got {value!r}")
    return float(value)
