"""Statistics for comparing two arms on the same tasks: pure functions and small classes, standard
library only, no farm.

- ``paired_interval(a, b)``: the paired, task-clustered interval of mean(b - a) for a fixed design
  (Miller 2024, with a small-sample adjustment): the default in every A/B comparison and in ``diff``.
- ``power(tasks, trials, variance=...)``: the smallest difference a design detects at a given
  power, and the trials or tasks a difference needs; ``assumed_variance`` / ``observed_variance``.
- ``PairedSequentialTest(alpha, margin)``: an anytime-valid confidence sequence for mean(b - a),
  updated round by round; stop at the first decision, keep the error rate.

``simulate`` (not imported here) is the model of suites with task difficulty the guarantees are
checked on (tests/test_stats.py, bench/stats_sim.py). Nothing here is imported by a plain
``evalfarm run``.
"""
from .paired import PairedInterval, paired_interval
from .power import Power, Variance, assumed_variance, observed_variance, power
from .sequential import PairedSequentialTest, SequentialDecision

__all__ = ["PairedInterval", "PairedSequentialTest", "Power", "SequentialDecision", "Variance", "assumed_variance",
           "observed_variance", "paired_interval", "power"]
