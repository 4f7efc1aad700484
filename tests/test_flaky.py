"""Flake history (issue 13): the registry keeps every case's verdict per run; `evalfarm flaky` lists the
cases whose verdict changed across the last N comparable runs; the gate reports a regressed case that
is known flaky apart and does not count it against max_regressions unless --strict.

The model is `flipper` (tests/plugins/ef_flaky_adapters.py, loaded with EVALFARM_PLUGINS): it answers
every case right except `wobbly`, which it gets wrong on every other run (the run count is in a file).
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import run_cli

PLUGIN = "ef_flaky_adapters"


def spec(tmp: Path, extra_case: bool = False) -> Path:
    path = tmp / "flips.yaml"
    path.write_text("name: flips\nadapters: [flipper]\nthresholds: {max_regressions: 0}\nprompts:\n"
                    "  - {id: steady, text: say one, expected_output_contains: [one]}\n"
                    "  - {id: wobbly, text: say two, expected_output_contains: [two]}\n"
                    "  - {id: calm, text: say three, expected_output_contains: [three]}\n"
                    + ("  - {id: extra, text: say four, expected_output_contains: [four]}\n" if extra_case else ""))
    return path


def cli(tmp: Path, *args: str):
    return run_cli(*args, "--state-dir", str(tmp / "state"), EVALFARM_PLUGINS=PLUGIN,
                   EF_FLIP_STATE=str(tmp / "flip-count"))


def test_flaky_lists_exactly_the_flipping_case_and_the_gate_counts_it_only_with_strict(tmp_path):
    path = spec(tmp_path)
    first = cli(tmp_path, "run", str(path), "--promote")  # run 0: wobbly passes; the baseline
    assert first.returncode == 0 and "promoted" in first.stderr + first.stdout, first.stderr
    for _ in range(4):  # runs 1-4: wobbly fails, passes, fails, passes
        assert cli(tmp_path, "run", str(path)).returncode == 0
    listed = cli(tmp_path, "flaky", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["adapter"], r["case"], r["flips"], r["history"]) for r in rows] == [("flipper", "wobbly", 4, "PFPFP")]
    text = cli(tmp_path, "flaky", "--last", "3").stdout.splitlines()
    assert len(text) == 2 and text[1].split("\t")[:5] == ["flipper", "wobbly", "2", "3", "PFP"]

    gated = cli(tmp_path, "run", str(path), "--gate")  # run 5: wobbly fails: a regression, known flaky
    assert gated.returncode == 0, gated.stdout + gated.stderr
    out = gated.stdout + gated.stderr
    assert "gate: PASSED" in out and "1 of them known flaky" in out
    assert "flipper/wobbly: regressed, flaky in 4 of the last 5 runs (not counted; --strict counts it)" in out
    runs = sorted(p for p in (tmp_path / "state" / "runs").glob("*.json") if not p.name.endswith(".lineage.json"))
    latest = runs[-1].stem
    assert cli(tmp_path, "gate", latest).returncode == 0
    strict = cli(tmp_path, "gate", latest, "--strict")
    assert strict.returncode == 1 and "regressions  FAIL" in strict.stdout, strict.stdout
    assert "(counted: --strict)" in strict.stdout
    assert cli(tmp_path, "run", str(path), "--gate", "--strict").returncode == 0  # run 6: wobbly passes again


def test_a_real_regression_is_not_excused_and_other_datasets_are_not_comparable(tmp_path):
    path = spec(tmp_path)
    assert cli(tmp_path, "run", str(path), "--promote").returncode == 0  # wobbly passes
    once = cli(tmp_path, "run", str(path), "--gate")  # wobbly fails for the first time: one flip, not flaky
    assert once.returncode == 1, once.stdout + once.stderr
    assert "known flaky" not in once.stdout + once.stderr
    # a different dataset (one more case) starts a history of its own
    assert cli(tmp_path, "run", str(spec(tmp_path, extra_case=True))).returncode == 0
    rows = json.loads(cli(tmp_path, "flaky", "--json").stdout)
    assert [(r["case"], r["history"]) for r in rows] == [("wobbly", "PF")]
    assert json.loads(cli(tmp_path, "flaky", "--json", "--spec", "other").stdout) == []


def test_an_older_registry_is_migrated_and_its_runs_read_back(tmp_path):
    """A registry.db from before flake history: no models/source_run_id/verdicts columns, no case table.
    `flaky` adds them and reads the verdicts from the runs' reports."""
    path = spec(tmp_path)
    for _ in range(3):
        assert cli(tmp_path, "run", str(path)).returncode == 0
    db_path = tmp_path / "state" / "registry.db"
    db = sqlite3.connect(db_path)
    rows = db.execute("SELECT run_id, spec_name, lineage_tag, spec_hash, dataset_hash, adapters, judge, prompt_name, "
                      "prompt_version, prompt_hash, prompt_path, started_at, finished_at, recorded_at, result, "
                      "figures, artifact, gate FROM runs").fetchall()
    db.close()
    db_path.unlink()
    old = sqlite3.connect(db_path)
    old.executescript("""
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY, spec_name TEXT, lineage_tag TEXT, spec_hash TEXT, dataset_hash TEXT,
  adapters TEXT, judge TEXT, prompt_name TEXT, prompt_version TEXT, prompt_hash TEXT, prompt_path TEXT,
  started_at TEXT, finished_at TEXT, recorded_at TEXT, result TEXT, figures TEXT, artifact TEXT, gate TEXT);
CREATE TABLE baselines (name TEXT PRIMARY KEY, run_id TEXT NOT NULL, promoted_at TEXT NOT NULL);
CREATE TABLE promotions (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, run_id TEXT NOT NULL,
  previous_run_id TEXT, promoted_at TEXT NOT NULL);
""")
    old.executemany(f"INSERT INTO runs VALUES ({', '.join('?' * 18)})", rows)
    old.commit()
    old.close()
    res = cli(tmp_path, "flaky", "--json")
    assert res.returncode == 0, res.stderr
    assert [(r["case"], r["history"]) for r in json.loads(res.stdout)] == [("wobbly", "PFP")]
    db = sqlite3.connect(db_path)
    cols = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    assert {"models", "source_run_id", "verdicts"} <= cols
    assert db.execute("SELECT count(*) FROM case_verdicts").fetchone()[0] == 9
    assert cli(tmp_path, "ls").returncode == 0


def test_flaky_errors_are_one_line(tmp_path):
    res = run_cli("flaky", "--state-dir", str(tmp_path / "none"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "no runs recorded" in res.stderr
    bad = run_cli("flaky", "--last", "1", "--state-dir", str(tmp_path))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
