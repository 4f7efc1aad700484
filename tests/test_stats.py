"""evalfarm.stats: the sequential test's guarantee under peeking, its power, equivalence with a margin;
the fixed-design paired interval's coverage and its small-sample behaviour; power against simulation.

The simulations (evalfarm.stats.simulate) draw suites whose tasks differ in difficulty; seeds are
fixed, so every figure below is reproducible. Bounds allow two Monte-Carlo standard errors.
"""
from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys

import pytest

from conftest import EXAMPLES, ROOT, env_for

import evalfarm
from evalfarm.stats import (PairedSequentialTest, Variance, assumed_variance, observed_variance, paired_interval,
                            power)
from evalfarm.stats import dist, sequential
from evalfarm.stats.simulate import Scenario, fixed, monte_carlo_error, one_round, peeking, rate
from evalfarm.stats.simulate import sequential as run_sequential

ALPHA = 0.05
EXPERIMENTS = 400
BOUND = ALPHA + 2 * monte_carlo_error(ALPHA, EXPERIMENTS)  # 0.0718


def runs(method, scenario, seed, n=EXPERIMENTS, **kw):
    rng = random.Random(seed)
    return [method(rng, scenario, **kw) for _ in range(n)]


# -- the sequential test: simulations ----------------------------------------------------------------

@pytest.mark.parametrize("scenario", [Scenario(tasks=20), Scenario(tasks=5),
                                      Scenario(tasks=20, low=0.25, high=0.65, spread=0.2)],
                         ids=["20 tasks", "5 tasks", "effects that cancel"])
def test_aa_peeking_every_round_keeps_the_false_winner_rate_at_most_alpha(scenario):
    """A/A (no difference on average), checked after each of 50 rounds, stopped at the first winner.
    "effects that cancel": b is 0.2 better on half the tasks and 0.2 worse on the other half."""
    res = runs(run_sequential, scenario, seed=1, rounds=50)
    assert rate(res, "a_better", "b_better") <= BOUND


def test_the_fixed_interval_rechecked_every_round_inflates_the_false_winner_rate():
    """The same A/A suites, the fixed-design interval: looked at once it keeps about alpha; re-checked
    after every round (stopping at the first 'significant' one) it declares a winner far more often."""
    scenario = Scenario(tasks=20)
    once = runs(fixed, scenario, seed=2, trials=10)
    peek = runs(peeking, scenario, seed=2, rounds=50)
    assert rate(once, "a_better", "b_better") <= BOUND
    assert rate(peek, "a_better", "b_better") >= 0.15  # measured: 0.31 (bench/stats_sim.py)


def test_a_real_difference_of_015_is_found():
    res = runs(run_sequential, Scenario(tasks=20, effect=0.15), seed=3, rounds=50)
    assert rate(res, "b_better") >= 0.90 and rate(res, "a_better") == 0.0
    mirrored = runs(run_sequential, Scenario(tasks=20, effect=-0.15, low=0.2, high=0.8), seed=3, rounds=50)
    assert rate(mirrored, "a_better") >= 0.90


def test_equivalence_is_found_with_a_margin_and_never_for_a_difference_at_the_margin():
    same = runs(run_sequential, Scenario(tasks=20), seed=4, rounds=50, margin=0.15)
    assert rate(same, "equivalent") >= 0.90
    at_margin = runs(run_sequential, Scenario(tasks=20, effect=0.10), seed=4, rounds=50, margin=0.10)
    assert rate(at_margin, "equivalent") <= BOUND
    assert rate(runs(run_sequential, Scenario(tasks=20), seed=4, n=100, rounds=50), "equivalent") == 0.0  # margin 0


def test_pairing_helps():
    """Tasks from very easy to very hard: the paired test decides in fewer rounds than the same test fed
    the same scores with the pairing destroyed (b's scores shuffled across tasks every round)."""
    scenario = Scenario(tasks=20, effect=0.15, low=0.02, high=0.83)

    def unpaired(rng, sc, rounds=50):
        rates = sc.draw(rng)
        test = PairedSequentialTest()
        for r in range(1, rounds + 1):
            a, b = one_round(rng, rates)
            rng.shuffle(b)
            if test.update(a, b).decided:
                return test.current.decision, r
        return "continue", rounds

    paired = statistics.median(r for _, r in runs(run_sequential, scenario, seed=5, n=200))
    shuffled = statistics.median(r for _, r in runs(unpaired, scenario, seed=5, n=200))
    assert paired < shuffled, (paired, shuffled)


# -- the sequential test: the interval itself -----------------------------------------------------------

def brute_force_bounds(diffs, alpha):
    """The interval by its definition: every m on a fine grid whose mixture process stays below 2/alpha."""
    xs = [(d + 1) / 2 for d in diffs]
    v, mean, total = 0.0, 0.5, 0.0
    for i, x in enumerate(xs, 1):
        v += (x - mean) ** 2
        total += x
        mean = (0.5 + total) / (i + 1)
    n = len(xs)

    def process(s):
        return sum(math.exp(l * s - (-math.log1p(-l) - l) * v) for l in sequential.BETS) / len(sequential.BETS)

    kept = [m / 20000 for m in range(20001)
            if process(total - n * m / 20000) < 2 / alpha and process(n * m / 20000 - total) < 2 / alpha]
    return 2 * min(kept) - 1, 2 * max(kept) - 1


def test_the_interval_is_the_set_its_definition_says():
    rng = random.Random(6)
    rates = Scenario(tasks=10, effect=0.2).draw(rng)
    test = PairedSequentialTest()
    diffs = []
    for _ in range(8):
        a, b = one_round(rng, rates)
        diffs += [y - x for x, y in zip(a, b)]
        d = test.update(a, b)
    lo, hi = brute_force_bounds(diffs, ALPHA)
    assert abs(d.lo - lo) <= 1e-4 and abs(d.hi - hi) <= 1e-4, (d, lo, hi)
    assert d.estimate == pytest.approx(sum(diffs) / len(diffs))


def test_one_pair_or_one_round_of_few_tasks_never_decides():
    test = PairedSequentialTest()
    assert test.current.decision == "continue" and (test.current.lo, test.current.hi) == (-1.0, 1.0)
    d = test.update([0.0], [1.0])
    assert (d.decision, d.lo, d.hi, d.n, d.rounds) == ("continue", -1.0, 1.0, 1, 1)
    d = test.update([0, 0, 0], [1, 1, 1])  # four pairs, all b
    assert d.decision == "continue" and d.n == 4 and d.estimate == 1.0
    # ... but many unanimous pairs do
    assert PairedSequentialTest().update([0] * 40, [1] * 40).decision == "b_better"
    assert PairedSequentialTest().update([True] * 40, [False] * 40).decision == "a_better"


def test_decisions_replay_bit_for_bit_and_say_where_they_stopped():
    rng = random.Random(7)
    rates = Scenario(tasks=12, effect=0.3).draw(rng)
    rounds = [one_round(rng, rates) for _ in range(30)]
    test = PairedSequentialTest(alpha=0.1, margin=0.05)
    for a, b in rounds:
        test.update(a, b)
    again = PairedSequentialTest.replay(rounds, alpha=0.1, margin=0.05)
    assert again.history == test.history and len(test.history) == 30
    first = test.first_decision
    assert first is not None and first.decision == "b_better" and first.rounds < 30
    assert all(not d.decided for d in test.history[:first.rounds - 1])
    assert test.describe() == {"method": "eb-mixture-cs", "alpha": 0.1, "margin": 0.05}
    assert json.loads(json.dumps(first.as_dict()))["decision"] == "b_better"
    for d in test.history:  # every interval contains its estimate
        assert d.lo <= d.estimate <= d.hi


def test_bad_input_is_a_clear_error_and_changes_nothing():
    test = PairedSequentialTest()
    test.update([1, 0], [1, 1])
    before = (test.n, test.rounds, test.current)
    for a, b, message in [([1, 0], [1], "a has 2 scores and b has 1"), ([], [], "at least one pair"),
                          ([0.5, 1.5], [0, 0], r"a\[1\]: expected a score in \[0, 1\], got 1.5"),
                          ([0.5], [float("nan")], r"b\[0\]"), ("ab", "cd", "got a string"),
                          ([None], [1], "got NoneType")]:
        with pytest.raises(ValueError, match=message):
            test.update(a, b)
    assert (test.n, test.rounds, test.current) == before
    for kwargs, message in [({"alpha": 0}, "alpha"), ({"alpha": 1.0}, "alpha"), ({"alpha": True}, "alpha"),
                            ({"margin": -0.1}, "margin"), ({"margin": 1.0}, "margin")]:
        with pytest.raises(ValueError, match=message):
            PairedSequentialTest(**kwargs)


# -- the fixed-design interval -----------------------------------------------------------------------

def test_a_single_sample_is_never_a_tie():
    one = paired_interval({"t": [1]}, {"t": [1]})
    assert (one.delta, one.lo, one.hi, one.se, one.tasks) == (0.0, -1.0, 1.0, None, 1)
    assert paired_interval({"t": [1] * 50}, {"t": [1] * 50}).lo == -1.0  # one task says nothing of others
    agree = paired_interval({f"t{i}": [1] for i in range(20)}, {f"t{i}": [1] for i in range(20)})
    assert agree.delta == 0.0 and agree.hi == -agree.lo and 0.12 < agree.hi < 0.15 and not agree.inside(0.05)
    many = paired_interval({f"t{i}": [1] * 10 for i in range(100)}, {f"t{i}": [1] * 10 for i in range(100)})
    assert many.inside(0.05) and many.hi > 0  # enough evidence shows a tie, still not a zero-width one


def test_pairing_clustering_and_unpaired_tasks():
    a = {"x": [1, 1, 0], "y": [0, 0, 0], "only-a": [1]}
    b = {"x": [1, 1, 1], "y": [1, 0, 1], "only-b": [0]}
    iv = paired_interval(a, b)
    assert iv.tasks == 2 and iv.unpaired == 2 and iv.trials == 3
    assert iv.delta == pytest.approx(((1 - 2 / 3) + 2 / 3) / 2) and iv.lo <= iv.delta <= iv.hi
    d = iv.as_dict()
    assert d["method"] == "paired-task-clustered" and d["ci"] == [round(iv.lo, 10), round(iv.hi, 10)]
    with pytest.raises(ValueError, match="no task was scored in both arms"):
        paired_interval({"x": [1]}, {"y": [1]})
    with pytest.raises(ValueError, match=r"b\['x'\]\[1\]: expected a score in \[0, 1\]"):
        paired_interval({"x": [1, 1]}, {"x": [1, 2]})
    with pytest.raises(ValueError, match="no scores"):
        paired_interval({"x": []}, {"x": [1]})


def test_task_difficulty_does_not_widen_the_paired_interval():
    """The same per-task differences on tasks of very different difficulty give the same interval as on
    tasks of one difficulty: pairing takes difficulty out (an unpaired comparison would not)."""
    rng = random.Random(8)
    flips = [rng.random() < 0.3 for _ in range(40)]
    easy_hard = paired_interval({i: [float(i % 2)] for i in range(40)}, {i: [float((i % 2) ^ f)] for i, f in enumerate(flips)})
    level = paired_interval({i: [0.0] for i in range(40)}, {i: [float(f)] for i, f in enumerate(flips)})
    assert easy_hard.se == pytest.approx(level.se, rel=0.5)


@pytest.mark.parametrize("tasks,trials", [(5, 1), (10, 3), (30, 1), (30, 10), (100, 3)])
def test_fixed_interval_coverage(tasks, trials):
    """Tasks drawn from a population (difficulty uniform in 0.1..0.8; b's effect -0.05 or +0.15, mean
    +0.05): the 95% interval covers the population's mean difference in >= 93% of 600 experiments."""
    rng = random.Random(tasks * 100 + trials)
    covered = 0
    for _ in range(600):
        a, b = {}, {}
        for t in range(tasks):
            p, effect = rng.uniform(0.1, 0.8), rng.choice((-0.05, 0.15))
            a[t] = [float(rng.random() < p) for _ in range(trials)]
            b[t] = [float(rng.random() < p + effect) for _ in range(trials)]
        iv = paired_interval(a, b)
        covered += iv.lo <= 0.05 <= iv.hi
    assert covered / 600 >= 0.93


# -- power -------------------------------------------------------------------------------------------

def test_a_design_sized_by_power_detects_its_difference_about_as_often_as_promised():
    scenario = Scenario(tasks=20, effect=0.15)
    plan = power(20, 1, variance=scenario.variance())
    trials = plan.trials_for(0.15)
    assert trials == 9
    sized = power(20, trials, variance=scenario.variance())
    assert sized.mdd <= 0.15 < power(20, trials - 1, variance=scenario.variance()).mdd
    predicted = sized.power_at(0.15)  # the first design reaching 80%: a little above it (0.84)
    assert 0.80 <= predicted <= 0.90
    found = rate(runs(fixed, scenario, seed=9, trials=trials), "b_better")
    assert abs(found - predicted) <= 3 * monte_carlo_error(predicted, EXPERIMENTS), found  # measured 0.8175


def test_power_answers_the_planning_questions():
    p = power(15, 3)  # worst-case pass/fail variance
    assert p.variance.source == "assumed" and p.variance.within == 0.5 and 0.3 < p.mdd < 0.35  # 0.325
    assert power(15, 6).mdd < p.mdd and power(30, 3).mdd < p.mdd  # more trials or more tasks help
    assert p.power_at(p.mdd) == pytest.approx(0.8, abs=1e-9)
    assert p.tasks_for(0.1) > 15 and power(p.tasks_for(0.1), 3).mdd <= 0.1
    spread = power(15, 3, variance=Variance(between=0.05, within=0.4))
    assert spread.trials_for(0.1) is None  # tasks disagree among themselves: trials cannot help, tasks can
    assert spread.tasks_for(0.1) is not None
    assert assumed_variance(0.9).within == pytest.approx(0.18)
    for bad, message in [({"tasks": 1}, "at least 2 tasks"), ({"tasks": 0}, "tasks"), ({"tasks": 5, "trials": 0}, "trials"),
                         ({"tasks": 5, "alpha": 1.5}, "alpha"), ({"tasks": 5, "power": 1}, "power"),
                         ({"tasks": 5, "variance": 0.3}, "variance")]:
        with pytest.raises(ValueError, match=message):
            power(**bad)
    with pytest.raises(ValueError, match="variance"):
        Variance(between=-1, within=0.2)


def test_observed_variance_recovers_the_components():
    rng = random.Random(10)
    a, b = {}, {}
    for t in range(300):
        p = rng.uniform(0.2, 0.6)
        effect = 0.3 if t % 2 else -0.1  # between = 0.2^2 = 0.04
        a[t] = [float(rng.random() < p) for _ in range(6)]
        b[t] = [float(rng.random() < p + effect) for _ in range(6)]
    v = observed_variance(a, b)
    truth = Scenario(tasks=2, effect=0.1, low=0.2, high=0.6, spread=0.2).variance()
    assert v.source == "observed" and v.separated
    assert v.within == pytest.approx(truth.within, rel=0.1) and v.between == pytest.approx(0.04, abs=0.015)
    one_trial = observed_variance({t: s[:1] for t, s in a.items()}, {t: s[:1] for t, s in b.items()})
    assert not one_trial.separated and one_trial.between == 0.0
    assert observed_variance({"t": [1]}, {"t": [0]}).source == "assumed"  # one task: nothing to estimate


# -- plumbing ----------------------------------------------------------------------------------------

def test_student_t_quantiles():
    for df, q in {1: 12.7062047361747, 2: 4.30265272974946, 5: 2.57058183563631, 19: 2.09302405440831,
                  100: 1.98397151852355, 1000: 1.96233908082641}.items():
        assert dist.t_quantile(0.975, df) == pytest.approx(q, abs=1e-10)
    assert dist.t_quantile(0.995, 3) == pytest.approx(5.84090930973337, abs=1e-10)


def test_exported_from_the_package_and_not_loaded_by_a_plain_run(tmp_path):
    assert evalfarm.PairedSequentialTest is PairedSequentialTest and evalfarm.power is power
    assert {"PairedSequentialTest", "paired_interval", "power", "Variance"} <= set(evalfarm.__all__)
    code = ("import sys\nfrom evalfarm.cli import main\ncode = 0\n"
            "try:\n    main(['run', sys.argv[1], '--no-save'])\nexcept SystemExit as e:\n    code = e.code\n"
            "print(code, [m for m in sys.modules if m.startswith('evalfarm.stats')])")
    res = subprocess.run([sys.executable, "-c", code, str(EXAMPLES / "smoke.yaml")], cwd=tmp_path, env=env_for(),
                         capture_output=True, text=True, timeout=120)
    assert res.stdout.strip().splitlines()[-1] == "0 []", res.stdout + res.stderr


def test_the_package_uses_the_standard_library_only():
    import ast
    allowed = set(sys.stdlib_module_names) | {"evalfarm"}
    for path in (ROOT / "evalfarm" / "stats").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            assert all(n.split(".")[0] in allowed for n in names), (path, names)
