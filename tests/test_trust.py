"""Issue 17 item 4: reports you can trust as inputs. A failed run's JSON edited into a pass (``passed``,
``golden_passed`` and ``golden_pass_rate`` flipped, as the issue did) is refused by gate, baseline,
diff, rescore and export with one line naming the file and what does not match (exit 2): first by its
lineage stub, then, with the stub rewritten too, by the registry's HMAC seal, then, with the seal row
deleted as well, by the verdicts the gate decides again from the outputs. A report recorded nowhere is
accepted where its verdicts are what its outputs earn, and says so. The real CLI in subprocesses."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from conftest import run_cli

FAILING = """name: failing
adapters: [mock]
prompts:
  - {id: a, text: "say hello", expected_output_contains: ["zzz-never"]}
  - {id: b, text: "say world", expected_output_contains: ["zzz-never"]}
  - {id: c, text: "say zzz-never", expected_output_contains: ["zzz-never"]}
thresholds:
  golden_pass_rate_min: 0.9
"""


def flip(path: Path) -> None:
    """What the issue did by hand: every verdict and figure of a failed run turned into a pass."""
    d = json.loads(path.read_text())
    for o in d["outcomes"]:
        o.update(passed=True, golden_passed=True, failure_mode=None)
    for f in d["per_adapter"].values():
        f.update(golden_pass_rate=1.0, pass_rate=1.0, overall=1.0, passed=f["measured"], golden_passed=f["measured"],
                 failure_modes={})
    d.update(threshold_failures=[], thresholds_passed=True)
    path.write_text(json.dumps(d, indent=2))


def one_line(res, code: int = 2) -> str:
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("evalfarm: note:")]
    assert res.returncode == code, (res.returncode, res.stdout[-800:], res.stderr[-1500:])
    assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and "Traceback" not in res.stderr, lines
    return lines[0]


@pytest.fixture
def failed_run(tmp_path) -> tuple[Path, Path, Path]:
    """(state dir, the saved report, a pristine copy of it outside any state dir)."""
    spec = tmp_path / "failing.yaml"
    spec.write_text(FAILING)
    state = tmp_path / "state"
    res = run_cli("run", str(spec), "--state-dir", str(state))
    assert res.returncode == 1, res.stderr  # 1 of 3 passes: below the 0.9 floor
    [path] = [p for p in (state / "runs").glob("*.json") if not p.name.endswith(".lineage.json")]
    pristine = tmp_path / "elsewhere" / "report.json"
    pristine.parent.mkdir()
    pristine.write_bytes(path.read_bytes())
    return state, path, pristine


def every_reader(state: Path, path: Path) -> dict[str, str]:
    """gate, baseline, diff, rescore, export on the report: each one line, exit 2, nothing written."""
    out = state.parent / "exported"
    args = {"gate": ["gate", str(path)], "baseline": ["baseline", str(path), "--name", "edited"],
            "diff": ["diff", str(path), str(path)], "rescore": ["rescore", str(path), "--no-save"],
            "export": ["export", "jsonl", str(path)],
            "export inspect": ["export", "inspect", str(path), "-o", str(out / "inspect.json")],
            "export trajectory": ["export", "trajectory", str(path), "-o", str(out / "atif")]}
    lines = {name: one_line(run_cli(*a, "--state-dir", str(state))) for name, a in args.items()}
    assert not out.exists()
    return lines


def test_a_flipped_report_is_refused_by_its_lineage_then_its_seal_then_its_outputs(failed_run):
    state, path, _ = failed_run
    ok = run_cli("gate", str(path), "--state-dir", str(state))
    assert ok.returncode == 1 and "gate: FAILED" in ok.stdout and "golden_pass_rate 0.3333 < 0.9" in ok.stdout
    assert "note" not in ok.stderr  # a sealed report needs no word

    flip(path)
    for cmd, line in every_reader(state, path).items():
        assert f"{path}: edited after it was saved" in line and "its lineage stub" in line, (cmd, line)

    # the lineage stub rewritten to the edited bytes: the registry's seal still says otherwise
    stub = path.with_name(path.stem + ".lineage.json")
    data = json.loads(stub.read_text())
    data["content_hash"] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    stub.write_text(json.dumps(data))
    for cmd, line in every_reader(state, path).items():
        assert f"run {path.stem} was edited after it was saved" in line and "the registry sealed" in line, (cmd, line)

    # a seal rewritten to the edited hash without the key does not verify
    db = sqlite3.connect(state / "registry.db")
    db.execute("UPDATE report_seals SET content_hash = ?", (data["content_hash"],))
    db.commit()
    line = one_line(run_cli("gate", str(path), "--state-dir", str(state)))
    assert "seal of run" in line and "does not verify" in line, line

    # the seal deleted too: the verdicts decided again from the outputs are not the stored ones
    db.execute("DELETE FROM report_seals")
    db.commit()
    db.close()
    line = one_line(run_cli("gate", str(path), "--state-dir", str(state)))
    assert "its stored verdicts are not what its outputs earn" in line
    assert "outcomes[0] (mock/a trial 0) says golden_passed: true but its output fails" in line
    assert "missing expected substring 'zzz-never'" in line
    base = one_line(run_cli("baseline", str(path), "--name", "x", "--state-dir", str(state)))
    assert "stored verdicts are not what its outputs earn" in base
    assert run_cli("list", "--baselines", "--state-dir", str(state)).stdout == ""  # nothing promoted


def test_a_report_recorded_nowhere_is_accepted_where_its_outputs_earn_its_verdicts(failed_run, tmp_path):
    state, _, pristine = failed_run
    other = tmp_path / "other-state"
    res = run_cli("gate", str(pristine), "--state-dir", str(other))
    assert res.returncode == 1 and "gate: FAILED" in res.stdout, res.stdout + res.stderr
    assert f"{pristine}: not recorded in {other}" in res.stderr and "decided again" in res.stderr
    res = run_cli("diff", str(pristine), str(pristine), "--state-dir", str(other))
    assert res.returncode == 0 and "not recorded" in res.stderr and "decided again" in res.stderr, res.stderr
    res = run_cli("rescore", str(pristine), "--no-save", "--state-dir", str(other))
    assert res.returncode == 1 and "its stored verdicts are not read" in res.stderr, res.stderr

    # the same file flipped: recorded nowhere, so its outputs decide, and they fail
    edited = tmp_path / "elsewhere" / "edited.json"
    edited.write_bytes(pristine.read_bytes())
    flip(edited)
    for args in (["gate", str(edited)], ["diff", str(edited), str(pristine)], ["baseline", str(edited), "--name", "forged"]):
        line = one_line(run_cli(*args, "--state-dir", str(other)))
        assert f"{edited}: its stored verdicts are not what its outputs earn" in line, (args, line)
    assert not (other / "runs").exists()  # nothing imported
    # export converts a file from elsewhere as it is, and says that its verdicts were not checked
    res = run_cli("export", "csv", str(edited), "--state-dir", str(other))
    assert res.returncode == 0 and "its stored verdicts were not checked" in res.stderr, res.stderr

    # a copy of a sealed run is held to its seal wherever it is
    line = one_line(run_cli("gate", str(edited), "--state-dir", str(state)))
    assert "was edited after it was saved" in line and "the registry sealed" in line, line
    same = run_cli("gate", str(pristine), "--state-dir", str(state))
    assert same.returncode == 1 and "note" not in same.stderr, same.stderr


def test_an_imported_baseline_is_sealed_and_the_gate_recomputes_it(failed_run, tmp_path):
    """A report from elsewhere promoted to a baseline: its verdicts checked, its copy sealed; a later
    edit of that copy is refused wherever the baseline is used (``gate --baseline``, ``run --gate``)."""
    _, _, pristine = failed_run
    state = tmp_path / "fresh"
    res = run_cli("baseline", str(pristine), "--name", "imported", "--state-dir", str(state))
    assert res.returncode == 0 and "(new)" in res.stdout and "not recorded" in res.stderr, res.stderr
    rid = json.loads(pristine.read_text())["run_id"]
    row = sqlite3.connect(state / "registry.db").execute("SELECT kind FROM report_seals WHERE run_id = ?",
                                                          (rid,)).fetchone()
    assert row == ("imported",)
    copy = state / "runs" / f"{rid}.json"
    assert copy.read_bytes() == pristine.read_bytes()  # streamed into place, the bytes checked
    assert "## Failed items (2)" in copy.with_suffix(".md").read_text()  # its failed items listed, as a run's
    cases = sqlite3.connect(state / "registry.db").execute("SELECT COUNT(*) FROM case_verdicts WHERE run_id = ?",
                                                           (rid,)).fetchone()
    assert cases == (3,)  # recorded from the copy, its cases streamed
    gated = run_cli("gate", str(pristine), "--baseline", "imported", "--state-dir", str(state))
    assert gated.returncode == 1 and "against baseline 'imported'" in gated.stdout, gated.stdout + gated.stderr
    flip(copy)
    line = one_line(run_cli("gate", str(pristine), "--baseline", "imported", "--state-dir", str(state)))
    assert f"{copy}: edited after it was saved" in line, line


def test_the_gate_decides_on_the_outputs_not_the_flags(tmp_path):
    """core.recheck, direct: the flipped report's verdicts, figures and thresholds come out as the
    outputs earn them, and an untouched report of every check kind has nothing to say."""
    from evalfarm.core.recheck import recheck

    spec = tmp_path / "kinds.yaml"
    spec.write_text("""name: kinds
adapters: [mock, "mock:shouty"]
trials: 2
judge: {model: mock-judge, provider: mock, rubric: r, weight: 0.4}
prompts:
  - {id: c, text: "say ok", checks: [{kind: contains, value: ok}, {kind: max_chars, value: 200}]}
  - {id: j, text: 'reply {"a": 1}', checks: [{kind: json}]}
  - {id: r, text: "say 42", expected_output_regex: "\\\\b42\\\\b"}
  - {id: n, text: "say bad", checks: [{kind: not_contains, value: bad}]}
thresholds: {golden_pass_rate_min: 0.5, overall_score_min: 0.4}
""")
    res = run_cli("run", str(spec), "--no-save", "--json")
    assert res.returncode in (0, 1), res.stderr
    report = json.loads(res.stdout)
    same = recheck(report)
    assert same.consistent and same.rerun, same.what()
    assert same.report["per_adapter"] == {a: f for a, f in report["per_adapter"].items()}
    assert same.report["thresholds_passed"] == report["thresholds_passed"]
    forged = json.loads(res.stdout)
    for o in forged["outcomes"]:
        o.update(passed=True, golden_passed=True)
    for f in forged["per_adapter"].values():
        f.update(golden_pass_rate=1.0, overall=1.0)
    again = recheck(forged)
    assert not again.consistent and again.report["per_adapter"] == report["per_adapter"]
    assert [o["passed"] for o in again.report["outcomes"]] == [o["passed"] for o in report["outcomes"]]
