"""Issue 10, item 1 (and 13's names): a run id, baseline name or spec name read from a report file,
from the farm's Redis or from the command line never chooses where files are written, and never
breaks a row of ``ls`` or ``status``. Everything through the real CLI in subprocesses."""
from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
import redis

from conftest import EXAMPLES, run_cli

SMOKE = str(EXAMPLES / "smoke.yaml")


def one_line_error(res) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("evalfarm: connecting to ")]
    assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and "Traceback" not in res.stderr, lines
    return lines[0]


def files_under(root: Path) -> set[Path]:
    """Every path under ``root``; other tests (running beside this one) may remove theirs meanwhile."""
    out: set[Path] = set()
    for top, dirs, files in os.walk(root, onerror=lambda _: None):
        out.update(Path(top) / n for n in (*dirs, *files))
    return out


@pytest.fixture(scope="module")
def good_report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("good") / "good.json"
    res = run_cli("run", SMOKE, "--no-save", "--output", str(out))
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("forged", ["ABS/owned/planted", "../../x", "../../../../../../tmp/ef-planted-{n}",
                                    "20261130T120000123456Z-0a1b2c/../../x", "20261130T120000123456Z-0A1B2C\n"])
def test_a_report_run_id_cannot_choose_where_baseline_writes(tmp_path, good_report, forged):
    work = tmp_path / "work"
    state = work / "a" / "b" / "st"
    state.mkdir(parents=True)
    forged = forged.replace("ABS", str(tmp_path)).replace("{n}", str(time.monotonic_ns()))
    evil = work / "evil.json"
    evil.write_text(json.dumps({**good_report, "run_id": forged}))
    before = files_under(tmp_path) | files_under(Path("/tmp"))
    res = run_cli("baseline", str(evil), "--name", "x", "--state-dir", str(state), cwd=work)
    line = one_line_error(res)
    assert "not an evalfarm run id" in line
    after = files_under(tmp_path) | files_under(Path("/tmp"))
    assert not [p for p in after - before if "planted" in p.name or p.name.startswith("x.")], after - before
    assert not (state / "runs").exists() and not (state / "registry.db").exists()


def test_the_run_id_argument_is_checked_before_the_farm_is_asked(redis_server):
    for cmd in ("wait", "status", "cancel", "resume"):
        res = run_cli(cmd, "../../x", broker=redis_server.url)
        assert "not an evalfarm run id" in one_line_error(res), cmd


def _finished_farm_run(redis_server, start_worker, tmp_path) -> str:
    start_worker(redis_server.url)
    res = run_cli("run", SMOKE, "--detach", broker=redis_server.url, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip().splitlines()[-1]
    deadline = time.time() + 60
    while time.time() < deadline:
        st = run_cli("status", run_id, "--json", broker=redis_server.url)
        if st.returncode == 0 and json.loads(st.stdout)["report_ready"]:
            return run_id
        time.sleep(0.3)
    raise AssertionError("the farm run did not finish")


def test_a_forged_summary_in_redis_cannot_choose_where_wait_writes(redis_server, start_worker, tmp_path):
    run_id = _finished_farm_run(redis_server, start_worker, tmp_path)
    r = redis.Redis.from_url(redis_server.url)
    key = f"ef:run:{run_id}:blob:summary"
    genuine = r.get(key)
    assert json.loads(genuine)["run_id"] == run_id  # the key the coordinator reads
    state = tmp_path / "deep" / "er" / "st"
    for forged in (str(tmp_path / "owned" / "planted"), "../../planted", "20261130T120000123456Z-0a1b2c"):
        r.set(key, json.dumps({**json.loads(genuine), "run_id": forged}))
        before = files_under(tmp_path)
        res = run_cli("wait", run_id, "--state-dir", str(state), broker=redis_server.url, cwd=tmp_path)
        line = one_line_error(res)
        assert "summary is not usable" in line, line
        assert not [p for p in files_under(tmp_path) - before if "planted" in str(p)]
        assert not (state / "runs").exists()
    for broken in (b"{not json", json.dumps({**json.loads(genuine), "per_adapter": {"mock": {"items": "many"}}})):
        r.set(key, broken)
        assert "summary is not usable" in one_line_error(
            run_cli("wait", run_id, "--state-dir", str(state), broker=redis_server.url, cwd=tmp_path))
    r.set(key, genuine)  # the real summary: wait saves the run where it belongs
    res = run_cli("wait", run_id, "--state-dir", str(state), broker=redis_server.url, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (state / "runs" / f"{run_id}.json").is_file()


@pytest.mark.parametrize("name", ["a\nb", "a\tb", "a\rb", "a\u2028b", "a/b", "..", " padded", ""])
def test_bad_baseline_names_are_refused(tmp_path, good_report, name):
    state = tmp_path / "st"
    report = tmp_path / "r.json"
    report.write_text(json.dumps(good_report))
    line = one_line_error(run_cli("baseline", str(report), "--name", name, "--state-dir", str(state)))
    assert "--name" in line
    assert not state.exists()
    line = one_line_error(run_cli("run", SMOKE, "--promote", "--baseline", name, "--state-dir", str(state)))
    assert "--baseline" in line and not state.exists()  # refused before the run


@pytest.mark.parametrize("name", ["a\nb", "a\tb", "a\x1bb", "a\u2029b"])
def test_names_with_control_characters_are_refused_where_read(tmp_path, good_report, name):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: {json.dumps(name)}\nadapters: [mock]\nprompts:\n  - {{id: a, text: hi}}\n")
    line = one_line_error(run_cli("run", str(spec), "--state-dir", str(tmp_path / "st")))
    assert line.startswith(f"evalfarm: error: {spec}:1: name: ") and "control character" in line
    tagged = tmp_path / "t.yaml"
    tagged.write_text(f"name: ok\nlineage_tag: {json.dumps(name)}\nadapters: [mock]\nprompts:\n  - {{id: a, text: hi}}\n")
    assert f"{tagged}:2: lineage_tag:" in one_line_error(run_cli("run", str(tagged), "--no-save"))
    report = tmp_path / "r.json"
    report.write_text(json.dumps({**good_report, "spec_name": name}))
    for args in (["baseline", str(report), "--name", "ok"], ["gate", str(report)], ["diff", str(report), str(report)]):
        assert "spec_name" in one_line_error(run_cli(*args, "--state-dir", str(tmp_path / "st"))), args
    assert not (tmp_path / "st").exists()


def test_ls_rows_stay_rows_even_with_an_old_registry(tmp_path):
    state = tmp_path / "st"
    for _ in range(2):
        assert run_cli("run", SMOKE, "--state-dir", str(state)).returncode == 0
    first = run_cli("ls", "--state-dir", str(state)).stdout.splitlines()
    assert run_cli("baseline", first[0].split("\t")[0], "--name", "main", "--state-dir", str(state)).returncode == 0
    # a registry written before names were checked may hold a newline or a tab: each run stays one row
    with sqlite3.connect(state / "registry.db") as db:
        db.execute("UPDATE runs SET spec_name = ?", ("smo\nke\tx",))
        db.execute("UPDATE baselines SET name = ?", ("ma\nin",))
    rows = run_cli("ls", "--state-dir", str(state)).stdout.splitlines()
    assert len(rows) == 2 and all(len(r.split("\t")) == 8 for r in rows), rows
    assert rows[0].split("\t")[2] == "smo\\nke\\tx"
    rows = run_cli("ls", "--baselines", "--state-dir", str(state)).stdout.splitlines()
    assert len(rows) == 1 and len(rows[0].split("\t")) == 6 and rows[0].startswith("ma\\nin\t"), rows


def test_a_run_reference_is_not_a_path_into_the_state_dir(tmp_path, good_report):
    state = tmp_path / "a" / "st"
    (state / "runs").mkdir(parents=True)
    outside = state / "outside.json"
    outside.write_text(json.dumps(good_report))
    # '../outside' would be runs/../outside.json: a reference is a run id, an id prefix or a path
    line = one_line_error(run_cli("gate", "../outside", "--state-dir", str(state), cwd=tmp_path))
    assert "not found" in line
