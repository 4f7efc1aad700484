"""The gate: three brakes over a stored report, pure (no model, no network).

1. floor: each adapter's figures at or above the spec's minimums (``threshold_failures``);
2. drop: each adapter's overall score at most ``max_drop`` below the baseline's;
3. regressions: at most ``max_regressions`` cases that passed in the baseline fail now.

A brake without what it needs (no baseline, ``max_drop`` unset, no shared cases) is *skipped*
and says why; only a brake that ran and failed fails the gate. When nothing was measured the
exit code is 3, whatever the brakes say: a configuration problem never reads as a decline.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.aggregate import threshold_failures
from ..core.verdict import EXIT_FAILED, EXIT_NOTHING_MEASURED, EXIT_OK, FAILED, NOTHING, PASSED
from ..spec.models import Thresholds
from .diff import case_pairing, compare_cases

EPS = 1e-9


@dataclass
class Brake:
    name: str
    status: str  # "pass", "fail" or "skipped"
    summary: str
    details: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status == "fail"


@dataclass
class GateResult:
    run_id: str
    passed: bool
    nothing_measured: bool
    exit_code: int
    brakes: list[Brake]
    baseline: dict[str, Any] | None = None  # {"name", "run_id"} when compared
    notes: list[str] = field(default_factory=list)
    cases: dict[str, Any] | None = None  # compare_cases(baseline, run) when there is a baseline

    @property
    def verdict(self) -> str:
        return NOTHING if self.nothing_measured else (PASSED if self.passed else FAILED)

    def to_dict(self, with_cases: bool = False) -> dict[str, Any]:
        out = asdict(self)
        out["verdict"] = self.verdict
        if not with_cases:
            out.pop("cases")
        return out

    def lines(self) -> list[str]:
        against = (f" against baseline {self.baseline['name']!r} (run {self.baseline['run_id']})"
                   if self.baseline else " (no baseline)")
        out = [f"gate: {self.verdict}{against}"]
        for b in self.brakes:
            out.append(f"  {b.name:<12} {b.status.upper():<8} {b.summary}")
            out += [f"  {'':<12} {'':<8} - {d}" for d in b.details]
        out += [f"  note: {n}" for n in self.notes]
        if self.nothing_measured:
            out.append("  nothing was measured: every item errored (runtime errors, not quality); exit 3")
        return out


def _floor(report: dict[str, Any], thresholds: Thresholds) -> Brake:
    limits = {k: v for k, v in thresholds.model_dump().items()
              if k.endswith("_min") and v is not None}
    if not limits:
        return Brake("floor", "skipped", "no minimums set in thresholds")
    failures = threshold_failures(report["per_adapter"], thresholds)
    shown = ", ".join(f"{k} {v:g}" for k, v in limits.items())
    if failures:
        return Brake("floor", "fail", f"{len(failures)} figure(s) below the minimums ({shown})", failures)
    return Brake("floor", "pass", f"every adapter at or above {shown}")


def _drop(report: dict[str, Any], baseline: dict[str, Any] | None, max_drop: float | None) -> Brake:
    if baseline is None:
        return Brake("drop", "skipped", "no baseline to compare with")
    if max_drop is None:
        return Brake("drop", "skipped", "thresholds.max_drop is not set")
    fails, oks, notes = [], [], []
    # the same pairing as the cases: shared adapter ids, or one model against one model
    base_of = {cur: base for base, cur in (case_pairing(baseline, report) or {}).items()}
    for adapter, fig in report["per_adapter"].items():
        base = baseline["per_adapter"].get(base_of.get(adapter, adapter))
        if base is None:
            notes.append(f"{adapter}: not in the baseline, not compared")
            continue
        if base_of.get(adapter, adapter) != adapter:
            notes.append(f"{adapter}: compared with the baseline's {base_of[adapter]}")
        cur, ref = fig.get("overall"), base.get("overall")
        if cur is None or ref is None:
            side = "this run" if cur is None else "the baseline"
            notes.append(f"{adapter}: overall not measured in {side} (every item errored), not compared")
            continue
        drop = ref - cur
        text = f"{adapter}: overall {cur:.4f} vs baseline {ref:.4f} (drop {drop:+.4f}, max_drop {max_drop:g})"
        (fails if drop > max_drop + EPS else oks).append(text)
    if fails:
        return Brake("drop", "fail", f"{len(fails)} adapter(s) dropped more than {max_drop:g}", fails + notes)
    if not oks:
        return Brake("drop", "skipped", "no adapter measured in both runs", notes)
    return Brake("drop", "pass", f"no adapter dropped more than {max_drop:g}", oks + notes)


Flaky = dict[tuple[str, str], dict[str, int]]  # (adapter, case) -> {flips, runs}: ci.flaky.known_flaky


def _regressions(cases: dict[str, Any] | None, max_regressions: int, flaky: Flaky | None = None,
                 strict: bool = False) -> Brake:
    """Known flaky cases (flake history) are reported apart and, unless ``strict``, not counted."""
    if cases is None:
        return Brake("regressions", "skipped", "no baseline to compare with")
    if not cases["measured"]:
        return Brake("regressions", "skipped", cases["note"] or "no case measured in both runs")
    regressed = [(r.get("adapter_b", r["adapter"]), r["case"]) for r in cases["regressed"]]  # this run's names
    known = [c for c in regressed if flaky and c in flaky]
    others = [f"{a}/{c}" for a, c in regressed if not (flaky and (a, c) in flaky)]
    counted = len(regressed) if strict else len(others)
    n = len(others)
    shown = others[:20] + ([f"... and {n - 20} more"] if n > 20 else [])
    shown += [f"{a}/{c}: regressed, flaky in {flaky[(a, c)]['flips']} of the last {flaky[(a, c)]['runs']} runs"
              + (" (counted: --strict)" if strict else " (not counted; --strict counts it)") for a, c in known[:20]]
    summary = (f"{len(regressed)} case(s) passed in the baseline and fail now"
               + (f", {len(known)} of them known flaky" if known else "")
               + f" (max_regressions {max_regressions}{', strict' if strict else ''}); {cases['measured']} shared cases")
    return Brake("regressions", "fail" if counted > max_regressions else "pass", summary, shown)


def evaluate(report: dict[str, Any], thresholds: Thresholds, baseline: dict[str, Any] | None = None,
             baseline_name: str | None = None, flaky: Flaky | None = None, strict: bool = False,
             trials: tuple | None = None) -> GateResult:
    """Apply the three brakes to ``report`` (a stored run) against ``baseline`` (another one).
    ``flaky``: the run's known flaky cases; ``strict`` counts them as regressions too. ``trials``:
    (the baseline's, the run's) ``case_trials`` when both were streamed (then they are heads)."""
    cases = compare_cases(baseline, report, trials=trials) if baseline is not None else None
    brakes = [_floor(report, thresholds), _drop(report, baseline, thresholds.max_drop),
              _regressions(cases, thresholds.max_regressions, flaky, strict)]
    notes = []
    if baseline is not None and baseline.get("nothing_measured"):
        notes.append("the baseline itself measured nothing; it cannot anchor drop or regressions")
    if baseline is not None and baseline.get("run_id") == report.get("run_id"):
        notes.append("the run is its own baseline")
    empty = bool(report.get("nothing_measured"))
    passed = not empty and not any(b.failed for b in brakes)
    code = EXIT_NOTHING_MEASURED if empty else (EXIT_OK if passed else EXIT_FAILED)
    base = {"name": baseline_name, "run_id": baseline.get("run_id")} if baseline is not None else None
    return GateResult(run_id=report.get("run_id", ""), passed=passed, nothing_measured=empty, exit_code=code,
                      brakes=brakes, baseline=base, notes=notes, cases=cases)
