"""The run registry and baselines: recorded fields, ls filters, run references, promotion history."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli
from evalfarm import Runner, load_spec, save_report
from evalfarm.errors import UsageError
from evalfarm.runs.registry import Registry, resolve_ref


def make_run(tmp: Path, state: Path, name: str, tag: str | None = None, save: bool = True) -> dict:
    spec_path = tmp / f"{name}.yaml"
    spec_path.write_text(f"name: {name}\n" + (f"lineage_tag: {tag}\n" if tag else "")
                         + "adapters: [mock, 'mock:b']\nprompts:\n  - {id: p, text: hi, expected_output_contains: [hi]}\n"
                         "judge: {model: judge-x, provider: mock}\n")
    report = Runner().run(load_spec(spec_path)).to_dict()
    if save:
        save_report(report, state)
    return report


def test_run_is_recorded_with_its_identity_and_figures(tmp_path):
    state = tmp_path / "st"
    res = run_cli("run", str(EXAMPLES / "smoke.yaml"), "--state-dir", str(state))
    assert res.returncode == 0, res.stderr
    [entry] = Registry(state).runs()
    report = json.loads(Path(entry["artifact_path"]).read_text())
    assert entry["run_id"] == report["run_id"] and entry["spec_name"] == "smoke"
    assert entry["lineage_tag"] == "smoke-demo" and entry["spec_hash"] == report["spec_hash"]
    assert entry["dataset_hash"].startswith("sha256:") and entry["adapters"] == ["mock", "mock:shouty"]
    assert entry["judge"] == {"model": "mock-judge", "provider": "mock"} and entry["prompt"] is None
    assert entry["finished_at"] == report["finished_at"] and entry["result"] == "PASS"
    assert entry["figures"]["mock"]["overall"] == report["per_adapter"]["mock"]["overall"]
    assert entry["artifact"] == f"runs/{report['run_id']}.json"  # relative: the state dir may move
    # the same dataset gives the same dataset hash on the next run
    assert run_cli("run", str(EXAMPLES / "smoke.yaml"), "--state-dir", str(state)).returncode == 0
    newest, older = Registry(state).runs()
    assert newest["dataset_hash"] == older["dataset_hash"] and newest["run_id"] > older["run_id"]


def test_ls_filters_by_spec_and_tag_and_indexes_api_runs(tmp_path):
    state = tmp_path / "st"
    a = make_run(tmp_path, state, "alpha", tag="nightly")
    b = make_run(tmp_path, state, "beta", tag="nightly")
    c = make_run(tmp_path, state, "alpha", tag="pr")
    # saved through the Python API, never recorded: ls indexes them from their JSON
    lines = run_cli("ls", "--state-dir", str(state)).stdout.strip().splitlines()
    assert [x.split("\t")[0] for x in lines] == [c["run_id"], b["run_id"], a["run_id"]]
    assert lines[0].split("\t")[5] == "mock=1.000 mock:b=1.000"
    alpha = run_cli("ls", "--spec", "alpha", "--state-dir", str(state)).stdout.strip().splitlines()
    assert [x.split("\t")[0] for x in alpha] == [c["run_id"], a["run_id"]]
    nightly = run_cli("list", "--tag", "nightly", "--state-dir", str(state)).stdout.strip().splitlines()
    assert [x.split("\t")[0] for x in nightly] == [b["run_id"], a["run_id"]]
    both = json.loads(run_cli("ls", "--spec", "alpha", "--tag", "pr", "--json", "--state-dir", str(state)).stdout)
    assert [e["run_id"] for e in both] == [c["run_id"]] and both[0]["judge"]["model"] == "judge-x"
    assert run_cli("ls", "--state-dir", str(tmp_path / "empty")).stdout == ""
    assert not (tmp_path / "empty").exists()  # listing an empty state dir creates nothing


def test_references_path_id_prefix_and_baseline_name(tmp_path):
    state = tmp_path / "st"
    r1 = make_run(tmp_path, state, "alpha")
    r2 = make_run(tmp_path, state, "alpha")
    path = state / "runs" / f"{r1['run_id']}.json"
    assert resolve_ref(str(path), state) == path
    assert resolve_ref(r1["run_id"], state) == path
    assert resolve_ref(r1["run_id"][:-2], state) == path  # unique prefix
    with pytest.raises(UsageError, match="ambiguous"):
        resolve_ref(r1["run_id"][:4], state)
    with pytest.raises(UsageError, match="no baseline named 'main'"):
        resolve_ref("baseline:main", state)

    assert run_cli("baseline", r1["run_id"][:-2], "--name", "main", "--state-dir", str(state)).returncode == 0
    assert resolve_ref("baseline:main", state) == path
    res = run_cli("baseline", r2["run_id"], "--name", "main", "--state-dir", str(state))
    assert res.stdout.strip() == f"baseline 'main' -> run {r2['run_id']} (was {r1['run_id']})"
    assert resolve_ref("baseline:main", state).name == f"{r2['run_id']}.json"
    history = list(Registry(state).history("main"))
    assert [(h["run_id"], h["previous_run_id"]) for h in history] == [(r1["run_id"], None), (r2["run_id"], r1["run_id"])]
    # default name: the spec name; a baseline reference is a run reference everywhere
    assert run_cli("baseline", "baseline:main", "--state-dir", str(state)).returncode == 0
    listing = run_cli("ls", "--baselines", "--state-dir", str(state)).stdout.strip().splitlines()
    assert [x.split("\t")[:2] for x in listing] == [["alpha", r2["run_id"]], ["main", r2["run_id"]]]
    runs = run_cli("ls", "--state-dir", str(state)).stdout.strip().splitlines()
    assert runs[0].split("\t")[7] == "alpha,main" and runs[1].split("\t")[7] == "-"
    d = run_cli("diff", "baseline:main", r1["run_id"], "--state-dir", str(state), "--json")
    assert d.returncode == 0 and json.loads(d.stdout)["cases"]["counts"]["stable"] == 2


def test_baseline_from_a_report_outside_the_state_dir_is_copied_in(tmp_path):
    report = make_run(tmp_path, tmp_path / "elsewhere", "gamma")
    outside = tmp_path / "elsewhere" / "runs" / f"{report['run_id']}.json"
    state = tmp_path / "st"
    res = run_cli("baseline", str(outside), "--state-dir", str(state))
    assert res.returncode == 0, res.stderr
    entry = Registry(state).baseline("gamma")
    assert Path(entry["artifact_path"]) == state / "runs" / f"{report['run_id']}.json"
    outside.unlink()
    assert resolve_ref("baseline:gamma", state).is_file()


def test_concurrent_records_are_all_kept(tmp_path):
    state = tmp_path / "st"
    reports = [make_run(tmp_path, state, f"s{i}", save=False) for i in range(20)]
    reg = Registry(state)
    threads = [threading.Thread(target=reg.record, args=(r, state / "runs" / f"{r['run_id']}.json"))
               for r in reports]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e["run_id"] for e in Registry(state).runs()) == sorted(r["run_id"] for r in reports)


def test_unreadable_saved_files_are_listed_as_such(tmp_path):
    state = tmp_path / "st"
    r = make_run(tmp_path, state, "alpha")
    (state / "runs" / "zz-broken.json").write_text("{not json")
    lines = run_cli("ls", "--state-dir", str(state)).stdout.strip().splitlines()
    assert lines[0].split("\t")[0] == r["run_id"] and lines[1].split("\t")[:4] == ["zz-broken", "", "", "UNREADABLE"]
