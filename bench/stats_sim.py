"""`make bench-stats`: the simulation table of issue 20 (decide with the fewest trials).

Suites of TASKS tasks whose difficulty differs (arm a's pass rate uniform in 0.05..0.65 per task),
one pass/fail trial per task per arm per round, alpha 0.05, at most 50 rounds. For each way of
deciding: the false-winner rate in A/A experiments (no difference; every round is looked at by
the methods that peek), and at true effects of 0.15 and 0.30 the share of experiments that find
b better and the rounds they spend (median and mean; an undecided experiment spends all 50).

Where the saving comes from, honestly: the fixed design is sized for 0.15 with the model's true
variance (the best a fixed design can do). At the effect it was sized for, the sequential test
pays for being allowed to stop at any time (more rounds than the fixed design); it saves rounds
when the true effect is larger than the one the fixed design had to be sized for in advance
(0.30), and against a user who reruns an inconclusive fixed design.

    python bench/stats_sim.py [--experiments N] [--tasks T] [--seed S] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalfarm.stats import PairedSequentialTest, power  # noqa: E402
from evalfarm.stats.simulate import Scenario, fixed, monte_carlo_error, one_round, peeking, rate, sequential  # noqa: E402

ROUNDS = 50
ALPHA = 0.05


def experiments(method, scenario, n, seed, **kw):
    rng = random.Random(seed)
    return [method(rng, scenario, **kw) for _ in range(n)]


def summary(results):
    spent = [r for _, r in results]
    return {"b_better": rate(results, "b_better"), "a_better": rate(results, "a_better"),
            "equivalent": rate(results, "equivalent"), "undecided": rate(results, "continue"),
            "median_rounds": statistics.median(spent), "mean_rounds": statistics.fmean(spent)}


def update_cost(tasks: int, rounds: int = 2000) -> float:
    """Microseconds per update() of a round of ``tasks`` pairs (the interval included)."""
    rng = random.Random(0)
    rates = Scenario(tasks=tasks).draw(rng)
    data = [one_round(rng, rates) for _ in range(rounds)]
    test = PairedSequentialTest()
    start = time.perf_counter()
    for a, b in data:
        test.update(a, b)
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    n, t, seed = args.experiments, args.tasks, args.seed
    started = time.perf_counter()
    aa, small, large = Scenario(tasks=t), Scenario(tasks=t, effect=0.15), Scenario(tasks=t, effect=0.30)
    k = power(t, 1, variance=small.variance()).trials_for(0.15)
    planned = power(t, k, variance=small.variance())
    methods = {
        "sequential test, looked at every round": (sequential, {"rounds": ROUNDS}),
        "fixed interval re-checked every round": (peeking, {"rounds": ROUNDS}),
        f"fixed design sized for 0.15 ({k} rounds), one look": (fixed, {"trials": k}),
        f"fixed design, rerun once if inconclusive": (fixed, {"trials": k, "reruns": 1}),
    }
    rows = {}
    for i, (name, (method, kw)) in enumerate(methods.items()):
        rows[name] = {"aa": summary(experiments(method, aa, n, seed + i, **kw)),
                      "0.15": summary(experiments(method, small, n, seed + 100 + i, **kw)),
                      "0.30": summary(experiments(method, large, n, seed + 200 + i, **kw))}
    cancel = summary(experiments(sequential, Scenario(tasks=t, low=0.25, high=0.65, spread=0.2), n, seed + 7,
                                 rounds=ROUNDS))
    equivalent = summary(experiments(sequential, aa, n, seed + 8, rounds=ROUNDS, margin=0.15))
    at_margin = summary(experiments(sequential, Scenario(tasks=t, effect=0.10), n, seed + 9, rounds=ROUNDS, margin=0.10))
    cost = {size: update_cost(size) for size in (1, 20, 200)}
    elapsed = time.perf_counter() - started

    err = monte_carlo_error(ALPHA, n)
    print(f"{n} experiments per cell; {t} tasks (difficulty: pass rate 0.05..0.65), one pass/fail trial per task "
          f"per arm per round; alpha {ALPHA}; at most {ROUNDS} rounds; Monte-Carlo standard error of a 5% rate "
          f"{err:.4f}")
    print(f"fixed design sized with power(): {t} tasks x {k} rounds detects {planned.mdd:.3f} at 80% power "
          f"(predicted power at 0.15: {planned.power_at(0.15):.3f})")
    print()
    head = (f"{'method':<52} {'false winner':>12} | {'found 0.15':>10} {'median':>6} {'mean':>5} | "
            f"{'found 0.30':>10} {'median':>6} {'mean':>5}")
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        aa_r, s, l = r["aa"], r["0.15"], r["0.30"]
        print(f"{name:<52} {aa_r['a_better'] + aa_r['b_better']:>12.4f} | {s['b_better']:>10.3f} "
              f"{s['median_rounds']:>6g} {s['mean_rounds']:>5.1f} | {l['b_better']:>10.3f} "
              f"{l['median_rounds']:>6g} {l['mean_rounds']:>5.1f}")
    seq = rows["sequential test, looked at every round"]
    print()
    print(f"sequential test vs the fixed design sized for 0.15 ({k} rounds), median rounds: "
          f"{seq['0.15']['median_rounds'] / k:.2f}x at 0.15 (the price of stopping at any time), "
          f"{seq['0.30']['median_rounds'] / k:.2f}x at 0.30 (the effect was larger than planned for)")
    rerun = rows["fixed design, rerun once if inconclusive"]
    print(f"fixed design rerun once when inconclusive: mean {rerun['0.15']['mean_rounds']:.1f} rounds at 0.15 for "
          f"{rerun['0.15']['b_better']:.3f} found, false-winner rate {rerun['aa']['a_better'] + rerun['aa']['b_better']:.4f}"
          f" (two looks, no correction)")
    print(f"sequential, A/A with effects that cancel (+-0.2 by task): false-winner rate "
          f"{cancel['a_better'] + cancel['b_better']:.4f}")
    print(f"sequential with margin 0.15, A/A: equivalent in {equivalent['equivalent']:.3f} "
          f"(median {equivalent['median_rounds']:g} rounds); true effect 0.10 with margin 0.10: equivalent in "
          f"{at_margin['equivalent']:.4f}, b better in {at_margin['b_better']:.3f}")
    print(f"update() cost per round: " + ", ".join(f"{size} pairs {us:.0f} us" for size, us in cost.items()))
    print(f"(ran in {elapsed:.1f} s)")
    if args.json:
        args.json.write_text(json.dumps({"experiments": n, "tasks": t, "seed": seed, "fixed_rounds": k,
                                         "rows": rows, "aa_cancelling": cancel, "equivalence_margin_015": equivalent,
                                         "effect_at_margin_010": at_margin, "update_us": cost}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
