"""`evalfarm ab` and `evalfarm audit` through the real CLI in subprocesses: exit codes, files, tampering."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli

EX = EXAMPLES / "ab"
SUITE = str(EX / "suite.yaml")


def suite_run(cwd: Path, *extra: str, arms: tuple[str, ...] = ("--arm-a", "baseline", "--arm-b", "terse", "--arms", "3"),
              **env: str) -> subprocess.CompletedProcess:
    return run_cli("ab", "--suite", SUITE, *arms, "--trials", "2", *extra, cwd=cwd, **env)


def artifacts(reports: Path) -> list[Path]:
    return sorted(p for p in reports.glob("*.json"))


def test_variant_mode_table_and_json(tmp_path):
    res = run_cli("ab", "--variant-a", str(EX / "variant_a.yaml"), "--variant-b", str(EX / "variant_b.yaml"),
                  "--tasks", str(EX / "tasks.yaml"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "plain" in res.stdout and "greeting" in res.stdout and "INCONCLUSIVE: pass-rate delta -0.3333" in res.stdout
    res = run_cli("ab", "--variant-a", str(EX / "variant_a.yaml"), "--variant-b", str(EX / "variant_b.yaml"),
                  "--tasks", str(EX / "tasks.yaml"), "--scorer", "none", "--json", "-o", str(tmp_path / "v.json"),
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data == json.loads((tmp_path / "v.json").read_text())
    assert data["scorer"] == "none" and data["verdict"]["result"] == "tie" and data["a"]["mean_score"] is None
    assert not (tmp_path / ".evalfarm").exists()  # variant mode writes no ledger, artifact or audit entry


@pytest.mark.parametrize("args, message", [
    (["--suite", SUITE, "--arm-a", "balanced"], "suite mode needs --suite, --arm-a, --arm-b together (missing --arm-b)"),
    (["--variant-a", str(EX / "variant_a.yaml"), "--tasks", str(EX / "tasks.yaml")], "missing --variant-b"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--variant-a", str(EX / "variant_a.yaml")],
     "choose one mode"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--scorer", "exact"],
     "--scorer only applies to variant mode"),
    (["--variant-a", str(EX / "variant_a.yaml"), "--variant-b", str(EX / "variant_b.yaml"), "--tasks",
      str(EX / "tasks.yaml"), "--arms", "3"], "--arms only applies to suite mode"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terser"], "unknown profile 'terser'; choose one of "
                                                                    "baseline, balanced, terse, verbose"),
    (["--suite", SUITE, "--arm-a", "terse", "--arm-b", "terse"], "both 'terse'"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--arms", "3"], "pass --arm-a baseline"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--executor", "spawn"],
     "--executor spawn is not available yet"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--price", "1,2"],
     "--price only applies with --executor provider"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--executor", "provider"],
     "--executor provider needs --model"),
    (["--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--ledger", ".evalfarm/cost/ledger.jsonl"],
     "never go to the production spend ledger"),
    ([], "nothing to compare"),
])
def test_wrong_flags_and_unknown_profiles_exit_2_with_one_line(tmp_path, args, message):
    res = run_cli("ab", *args, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr
    assert not list(tmp_path.rglob("*.json"))  # nothing emitted


def test_bad_input_files_exit_2_naming_file_line_field(tmp_path):
    b = tmp_path / "b.yaml"
    b.write_text("name: plain\nprompt: x\n")
    res = run_cli("ab", "--variant-a", str(EX / "variant_a.yaml"), "--variant-b", str(b), "--tasks",
                  str(EX / "tasks.yaml"), cwd=tmp_path)
    assert res.returncode == 2 and f"{b}:1: name: both variants are named 'plain'" in res.stderr
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks:\n  - id: a\n    input: x\n    expectd: y\n")
    res = run_cli("ab", "--suite", str(suite), "--arm-a", "balanced", "--arm-b", "terse", cwd=tmp_path)
    assert res.returncode == 2 and f"{suite}:4: tasks[0].expectd: unknown field" in res.stderr
    assert not (tmp_path / ".evalfarm").exists()


def test_suite_mode_artifact_ledger_audit_and_verify(tmp_path):
    res = suite_run(tmp_path, "--json")
    assert res.returncode == 0, res.stderr
    reports, ledger, audit = (tmp_path / ".evalfarm" / "reports" / "eval_ab", tmp_path / ".evalfarm" / "ab" / "ledger.jsonl",
                              tmp_path / ".evalfarm" / "audit")
    [path] = artifacts(reports)
    raw = path.read_bytes()
    assert path.stem == hashlib.sha256(raw).hexdigest() and res.stdout.strip().encode() == raw
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    art = json.loads(raw)
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:", raw.decode())  # no timestamps in the hashed payload
    assert '"ts"' not in raw.decode() and "recorded_at" not in raw.decode()
    assert art["verdict"]["a"] == "control" and art["verdict"]["b"] == "terse"
    assert art["verdict"]["result"] in ("winner", "tie", "inconclusive")
    assert art["parameters"]["noninferiority_margin"] == 0.05
    assert art["comparisons"][1]["label"] == "conflated"
    for arm in art["arms"].values():
        assert {"runs", "tasks", "cost_measured", "quality_measured", "median_tokens", "median_usd",
                "pass_rate", "ledger_rows"} <= set(arm)
    for d in art["comparisons"][0]["deltas"].values():
        assert len(d["ci95"]) == 2 and d["ci95"][0] <= d["delta"] <= d["ci95"][1]
    # the synthetic executor never touches the production ledger
    assert ledger.is_file() and not (tmp_path / ".evalfarm" / "cost").exists()
    assert len(ledger.read_text().splitlines()) == 3 * 12 * 2
    # exactly one audit event for this emission, key 0600
    chain = (audit / "chain.jsonl").read_text().splitlines()
    assert len(chain) == 1 and json.loads(chain[0])["event"] == "eval.ab_comparison"
    assert json.loads(chain[0])["data"]["artifact_sha256"] == path.stem
    assert stat.S_IMODE((audit / "chain.key").stat().st_mode) == 0o600

    ok = run_cli("ab", "verify", str(path), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "VERIFIED" in ok.stdout and "72 rows resolved" in ok.stdout and "entry 1" in ok.stdout
    assert run_cli("audit", "verify", cwd=tmp_path).stdout.startswith("OK: 1 entry verified")

    latest = run_cli("ab", "latest", "terse", "control", cwd=tmp_path)
    assert latest.returncode == 0 and json.loads(latest.stdout)["artifact_sha256"] == path.stem
    assert run_cli("ab", "latest", "verbose", "terse", cwd=tmp_path).returncode == 1

    # a second emission: same bytes (no-op write), same ledger rows, one more audit event
    again = suite_run(tmp_path, "--output", str(tmp_path / "copy.json"))
    assert again.returncode == 0, again.stderr
    assert artifacts(reports) == [path] and path.read_bytes() == raw == (tmp_path / "copy.json").read_bytes()
    assert len(ledger.read_text().splitlines()) == 72
    assert len((audit / "chain.jsonl").read_text().splitlines()) == 2
    assert any(word in again.stdout for word in ("WINNER", "TIE", "INCONCLUSIVE"))


def test_artifacts_are_byte_identical_across_runs_in_different_places(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    a = suite_run(one, "--reports-dir", "out", "--audit-dir", "chain", "--ledger", "spend.jsonl",
                  arms=("--arm-a", "balanced", "--arm-b", "verbose"))
    b = suite_run(two, arms=("--arm-a", "balanced", "--arm-b", "verbose"))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    [pa], [pb] = artifacts(one / "out"), artifacts(two / ".evalfarm" / "reports" / "eval_ab")
    assert pa.name == pb.name and pa.read_bytes() == pb.read_bytes()
    assert (one / "spend.jsonl").read_bytes() == (two / ".evalfarm" / "ab" / "ledger.jsonl").read_bytes()
    assert run_cli("ab", "verify", str(pa), "--ledger", "spend.jsonl", "--audit-dir", "chain", cwd=one).returncode == 0


def test_tampered_ledger_row_and_chain_entry_are_caught(tmp_path):
    assert suite_run(tmp_path).returncode == 0
    [path] = artifacts(tmp_path / ".evalfarm" / "reports" / "eval_ab")
    ledger = tmp_path / ".evalfarm" / "ab" / "ledger.jsonl"
    original = ledger.read_bytes()
    lines = original.decode().splitlines()
    row = json.loads(lines[10])
    row["cost_usd"] = 0.0
    lines[10] = json.dumps(row, sort_keys=True, separators=(",", ":"))
    ledger.write_text("\n".join(lines) + "\n")
    res = run_cli("ab", "verify", str(path), cwd=tmp_path)
    assert res.returncode == 1 and "FAIL ledger rows" in res.stdout and "not found" in res.stdout
    assert "NOT VERIFIED" in res.stdout
    ledger.write_bytes(original)
    assert run_cli("ab", "verify", str(path), cwd=tmp_path).returncode == 0

    # a second entry, then edit the first one's verdict
    assert suite_run(tmp_path, arms=("--arm-a", "balanced", "--arm-b", "terse")).returncode == 0
    chain = tmp_path / ".evalfarm" / "audit" / "chain.jsonl"
    entries = chain.read_text().splitlines()
    first = json.loads(entries[0])
    first["data"]["winner"] = "baseline"
    entries[0] = json.dumps(first, sort_keys=True, separators=(",", ":"))
    chain.write_text("\n".join(entries) + "\n")
    res = run_cli("audit", "verify", cwd=tmp_path)
    assert res.returncode == 1 and "BROKEN: entry 1 (line 1): HMAC mismatch" in res.stdout
    res = run_cli("ab", "verify", str(path), cwd=tmp_path)
    assert res.returncode == 1 and "FAIL audit event" in res.stdout
    # a broken chain is never extended: the next emission fails and leaves no artifact
    before = artifacts(tmp_path / ".evalfarm" / "reports" / "eval_ab")
    res = suite_run(tmp_path, arms=("--arm-a", "balanced", "--arm-b", "verbose"))
    assert res.returncode == 4 and "refusing to extend it" in res.stderr
    assert artifacts(tmp_path / ".evalfarm" / "reports" / "eval_ab") == before

    # an edited artifact no longer matches its name nor its recomputed figures
    art = json.loads(path.read_bytes())
    art["arms"]["terse"]["median_usd"] = 0.0
    path.write_text(json.dumps(art, sort_keys=True, separators=(",", ":")))
    res = run_cli("ab", "verify", str(path), cwd=tmp_path)
    assert res.returncode == 1 and "FAIL content address" in res.stdout and "figures differ" in res.stdout


def _make_readonly(path: Path) -> bool:
    """chmod 555; as root (which ignores mode bits) also the immutable attribute. False: not possible here."""
    path.chmod(0o555)
    if os.geteuid() != 0:
        return True
    # root ignores mode bits; the immutable attribute makes the directory read-only for root too
    return bool(shutil.which("chattr")) and subprocess.run(["chattr", "+i", str(path)],
                                                           capture_output=True).returncode == 0


def test_read_only_audit_dir_exits_nonzero_and_leaves_no_artifact(tmp_path):
    audit = tmp_path / "audit"
    audit.mkdir()
    if not _make_readonly(audit):
        pytest.skip("cannot make a directory read-only here")
    try:
        res = suite_run(tmp_path, "--audit-dir", str(audit), "--output", str(tmp_path / "out.json"), "--json")
        assert res.returncode == 4, res.stderr
        assert "cannot create the audit key" in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert res.stdout == ""
        assert not artifacts(tmp_path / ".evalfarm" / "reports" / "eval_ab")
        assert not (tmp_path / "out.json").exists()
    finally:
        subprocess.run(["chattr", "-i", str(audit)], capture_output=True)
        audit.chmod(0o755)


def test_unscored_suite_is_incomparable_with_structured_missing_axes(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("scorer: none\ntasks:\n  - {id: a, input: 'What is 2+2?', expected: '4'}\n"
                     "  - {id: b, input: 'Capital of Peru?', expected: Lima}\n")
    res = run_cli("ab", "--suite", str(suite), "--arm-a", "balanced", "--arm-b", "terse", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    art = json.loads(res.stdout)
    v = art["verdict"]
    assert v["result"] == "incomparable" and v["winner"] is None
    assert {(m["arm"], m["axis"], m["reason"]) for m in v["not_measured"]} == {
        ("balanced", "quality", "not_scored"), ("terse", "quality", "not_scored")}
    assert art["arms"]["terse"]["cost_measured"] and not art["arms"]["terse"]["quality_measured"]
    assert art["comparisons"][0]["deltas"]["pass_rate"] == {
        "not_measured": {"axis": "quality", "arms": ["balanced", "terse"]}}
    [path] = artifacts(tmp_path / ".evalfarm" / "reports" / "eval_ab")
    assert run_cli("ab", "verify", str(path), cwd=tmp_path).returncode == 0


def test_unwritable_reports_dir_fails_before_the_audit_append(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    if not _make_readonly(reports):
        pytest.skip("cannot make a directory read-only here")
    try:
        res = suite_run(tmp_path, "--reports-dir", str(reports))
        assert res.returncode == 2 and "cannot write the artifact" in res.stderr
        assert not (tmp_path / ".evalfarm" / "audit" / "chain.jsonl").exists()  # nothing anchored
        assert not list(reports.iterdir())
    finally:
        subprocess.run(["chattr", "-i", str(reports)], capture_output=True)
        reports.chmod(0o755)


def test_defaults_follow_evalfarm_state_dir(tmp_path):
    state = tmp_path / "state"
    res = suite_run(tmp_path, arms=("--arm-a", "balanced", "--arm-b", "terse"), EVALFARM_STATE_DIR=str(state))
    assert res.returncode == 0, res.stderr
    [path] = artifacts(state / "reports" / "eval_ab")
    assert (state / "ab" / "ledger.jsonl").is_file() and (state / "audit" / "chain.jsonl").is_file()
    assert not (tmp_path / ".evalfarm").exists()
    assert run_cli("ab", "verify", str(path), cwd=tmp_path, EVALFARM_STATE_DIR=str(state)).returncode == 0
    assert run_cli("audit", "verify", cwd=tmp_path, EVALFARM_STATE_DIR=str(state)).returncode == 0
    assert run_cli("ab", "latest", "balanced", "terse", cwd=tmp_path, EVALFARM_STATE_DIR=str(state)).returncode == 0
