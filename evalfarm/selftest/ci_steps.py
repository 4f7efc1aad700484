"""The selftest's gate, baseline and diff steps: the real code paths on scripted runs,
persisted in a temporary state dir (files and SQLite only, no sockets)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from ..runs.archive import save_report
from ..ci.diff import compare_cases
from ..ci.gate import evaluate
from ..runs.registry import Registry, baseline_report
from ..spec.models import Thresholds


def expect(ok: Any, detail: Any = "") -> None:
    """A selftest check that holds under ``python -O`` too (an ``assert`` would vanish there)."""
    if not ok:
        raise AssertionError(detail)


Step = tuple[str, Callable[[], None]]


def steps(collapsed_run: Callable[[], dict], good_run: Callable[[], dict]) -> list[Step]:
    state: dict[str, Any] = {}

    def good() -> dict:
        if "good" not in state:
            state["good"] = good_run()
        return state["good"]

    def bad() -> dict:
        if "bad" not in state:
            state["bad"] = collapsed_run()
        return state["bad"]

    def gate_passes_a_good_run() -> None:
        result = evaluate(good(), Thresholds(golden_pass_rate_min=0.75))
        expect(result.exit_code == 0, result.lines())

    def gate_fails_a_collapsed_run() -> None:
        result = evaluate(bad(), Thresholds(golden_pass_rate_min=0.75))
        expect(result.exit_code == 1 and [b.name for b in result.brakes if b.failed] == ["floor"], result.lines())

    def baseline_round_trip() -> None:
        with tempfile.TemporaryDirectory(prefix="evalfarm-selftest-state-") as d:
            json_path, _ = save_report(good(), state_dir=Path(d))
            reg = Registry(d)
            reg.record(good(), json_path)
            reg.promote("main", good(), json_path)
            found = baseline_report("main", d)
            expect(found is not None and found[1]["run_id"] == good()["run_id"], found)

    def regressions_brake_against_baseline() -> None:
        result = evaluate(bad(), Thresholds(max_regressions=0), baseline=good(), baseline_name="main")
        regressions = next(b for b in result.brakes if b.name == "regressions")
        expect(regressions.failed and result.exit_code == 1, result.lines())

    def diff_classifies_cases() -> None:
        cases = compare_cases(good(), bad())
        expect(cases["counts"]["regressed"] == 4 and cases["counts"]["unmeasured"] == 1, cases["counts"])
        expect(cases["mcnemar"]["p_value"] is not None)

    def nothing_measured_gate_exits_3() -> None:
        run = dict(bad(), nothing_measured=True)
        expect(evaluate(run, Thresholds()).exit_code == 3)

    return [("gate passes a good run", gate_passes_a_good_run),
            ("gate exits 1 on a collapsed run", gate_fails_a_collapsed_run),
            ("baseline promoted and read back from the registry", baseline_round_trip),
            ("regressions brake fires against the baseline", regressions_brake_against_baseline),
            ("diff classifies regressed cases, with McNemar's p-value", diff_classifies_cases),
            ("gate exits 3 when nothing was measured", nothing_measured_gate_exits_3)]
