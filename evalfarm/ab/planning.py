"""``evalfarm ab --plan``: the design, its estimated cost and its power, before any model is called.

The smallest pass-rate difference a design detects at 80% power comes from ``evalfarm.stats.power``
under a variance: the one observed in the latest comparison of the same suite (same content hash,
found through the pair index, its rows resolved in the ledger), else the worst case for pass/fail
scores (50%, no task difficulty: ``assumed_variance``). For a sequential design it is approximate:
the anytime-valid interval expected after ``max_trials`` rounds, plus the noise of the estimate at
80% power; the test stops sooner when the true difference is larger. Nothing here sends, writes or
spends anything.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..runs import ledger as ledger_mod
from ..runs.budget import estimate_of
from ..stats.dist import normal_quantile
from ..stats.power import Variance, assumed_variance, observed_variance, power
from ..stats.sequential import PairedSequentialTest
from . import artifact as artifact_mod
from . import compare, pair_index

POWER = 0.80


def previous_variance(reports_dir: Path, ledger: Path, suite_sha256: str) -> tuple[Variance, str] | None:
    """The variance observed in the newest comparison of this suite whose rows the ledger still
    holds, with where it came from; None when there is none."""
    seen: set[str] = set()
    for entry in reversed(pair_index.entries(reports_dir)):
        name = entry.get("artifact")
        if entry.get("suite_sha256") != suite_sha256 or name in seen or not isinstance(name, str) \
                or "/" in name or not name.endswith(".json"):
            continue
        seen.add(name)
        try:
            _, art = artifact_mod.load(Path(reports_dir) / name)
            index = ledger_mod.load(ledger)
        except Exception:  # an unreadable or foreign artifact or ledger: try the next one
            continue
        honest = next((p for p in art["pairs"] if p.get("honest")), None)
        if honest is None:
            continue
        rows = {}
        for arm in (honest["a"], honest["b"]):
            got = [index.get(ref) for ref in art["arms"][arm]["ledger_rows"]]
            if not got or any(r is None or r.data is None or artifact_mod.row_problem(r.data) for r in got):
                break
            rows[arm] = [r.data for r in got]  # type: ignore[union-attr]
        else:
            if any(r.get("passed") is None for rs in rows.values() for r in rs):
                continue
            a, b = compare.by_task(rows[honest["a"]]), compare.by_task(rows[honest["b"]])
            return observed_variance(a, b), f"observed in {name[:16]} ({art['suite']['name']}, {art['trials']} trial(s))"
    return None


def sequential_mdd(tasks: int, max_trials: int, variance: Variance, alpha: float) -> float:
    """About the smallest difference a sequential test finds by ``max_trials`` rounds with 80% power:
    its interval's expected half-width after every pair, plus the estimate's noise at that power."""
    n = tasks * max_trials
    pair_var = variance.per_task(1)
    half = PairedSequentialTest.expected_half_width(n, pair_var, alpha)
    return min(1.0, half + normal_quantile(POWER) * math.sqrt(pair_var / n))


def plan(prepared: Any, design: dict[str, Any] | None, prices: dict[str, Any] | None) -> dict[str, Any]:
    """The plan as data: design, items, cost estimate, power."""
    header = prepared.header
    tasks, n_arms = header["suite"]["tasks"], len(header["arm_order"])
    found = previous_variance(prepared.reports_dir, prepared.ledger, header["suite"]["sha256"])
    variance, source = found or (assumed_variance(), "assumed: pass/fail at 50%, the worst case")
    alpha = design["alpha"] if design else 0.05
    out: dict[str, Any] = {"suite": header["suite"], "executor": header["executor"]["kind"],
                           "arms": header["arm_order"], "variance": {**variance.as_dict(), "from": source},
                           "power": POWER, "alpha": alpha}
    if design:
        per_round = estimate_of(prepared.spec, prepared.spec.prompts, 1, prices)
        out.update(sequential=design, items_per_round=tasks * n_arms, items_at_most=tasks * n_arms * design["max_trials"],
                   estimate_per_round=per_round.to_dict(), estimate_line=per_round.line(),
                   estimate_at_most_usd=None if per_round.unpriced else round(per_round.total_usd * design["max_trials"], 8))
        trials = design["max_trials"]
        if tasks >= 1:
            out["mdd"] = compare.rnd(sequential_mdd(tasks, trials, variance, alpha))
    else:
        trials = prepared.trials
        est = estimate_of(prepared.spec, prepared.spec.prompts, trials, prices)
        out.update(trials=trials, items=tasks * n_arms * trials, estimate=est.to_dict(), estimate_line=est.line())
    out["fixed_mdd"] = compare.rnd(power(tasks, trials, variance=variance, alpha=alpha, power=POWER).mdd) \
        if tasks >= 2 else None
    return out


def lines(p: dict[str, Any]) -> list[str]:
    """The plan in words."""
    s = p["suite"]
    head = f"plan: suite {s['name']} ({s['tasks']} tasks, scorer {s['scorer']}), executor {p['executor']}, " \
           f"arms {', '.join(p['arms'])}"
    out = []
    fixed = "n/a (one task says nothing about others)" if p["fixed_mdd"] is None else f"{p['fixed_mdd']:.4f}"
    var = p["variance"]
    var_text = f"variance {var['from']}: between tasks {var['between']:.4g}, within {var['within']:.4g}"
    if "sequential" in p:
        d = p["sequential"]
        out.append(f"{head}; sequential ({d['method']}, alpha {d['alpha']:g}, margin {d['margin']:g}): rounds of "
                   f"{p['items_per_round']} items (one trial per task per arm) until decided, at most {d['max_trials']} "
                   f"rounds ({p['items_at_most']} items)")
        most = "cost unknown (no price)" if p["estimate_at_most_usd"] is None else f"≈ ${p['estimate_at_most_usd']:.4f}"
        out.append(f"per round: {p['estimate_line']}; at most {d['max_trials']} rounds {most}")
        out.append(f"power: by round {d['max_trials']} the sequential test finds a pass-rate difference of about "
                   f"{p['mdd']:.4f} with {p['power']:.0%} power (a fixed design of {d['max_trials']} trials per task: "
                   f"{fixed}); larger differences stop it sooner; {var_text}")
    else:
        out.append(f"{head}; {p['trials']} trial(s) per task per arm: {p['items']} items")
        out.append(p["estimate_line"])
        out.append(f"power: the smallest pass-rate difference this design detects with {p['power']:.0%} power "
                   f"(alpha {p['alpha']:g}, two-sided) is {fixed}; {var_text}")
    out.append("nothing was sent (--plan)")
    return out


def to_json(p: dict[str, Any]) -> str:
    return json.dumps(p, indent=2, sort_keys=True)
