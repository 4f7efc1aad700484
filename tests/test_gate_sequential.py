"""`evalfarm run --gate --until-decided` against a promoted baseline, through the real CLI: rounds of one
trial per case until the anytime-valid call (drop within the margin ruled out: pass; beyond it shown:
fail), each round a saved run, in this process and on the Redis farm; the flag combinations it refuses."""
from __future__ import annotations

import json

import redis
import yaml

from conftest import run_cli


def spec(tmp_path, name: str, broken: int) -> str:
    """20 cases on the offline echo adapter; the first ``broken`` expect what the echo never says."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": "gsmoke", "adapters": ["mock"], "prompts": [
        {"id": f"c{i}", "text": f"say w{i}", "expected_output_contains": [f"zz{i}" if i < broken else f"w{i}"]}
        for i in range(20)]}, sort_keys=False))
    return str(path)


def test_sequential_gate_passes_or_fails_as_soon_as_it_is_decided(tmp_path, redis_server, start_worker):
    good, bad = spec(tmp_path, "good", 0), spec(tmp_path, "bad", 8)
    state = ("--state-dir", str(tmp_path / "st"))
    assert run_cli("run", good, "--promote", "--baseline", "gb", *state, cwd=tmp_path).returncode == 0
    ok = run_cli("run", good, "--gate", "--baseline", "gb", "--until-decided", "--margin", "0.3", "--json", *state,
                 cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    s = json.loads(ok.stdout)
    assert (s["decision"], s["rounds"], s["stopped_because"], s["items"]) == ("passed", 3, "decided", 60)
    assert s["baseline"]["name"] == "gb" and len(s["runs"]) == 3 and s["history"][-1]["lo"] >= -0.3
    assert [h["decision"] for h in s["history"]] == ["open", "open", "passed"]
    assert s["fixed_trials"] == 1 and s["items_saved"] == -40  # no noise at all: a fixed design needs 1 trial
    assert "PASSED after 3 round(s): a drop of more than 0.3 is ruled out" in ok.stderr
    saved = [json.loads(p.read_text()) for p in (tmp_path / "st" / "runs").glob("*.json")
             if not p.name.endswith(".lineage.json")]
    assert {r["run_id"] for r in saved} >= set(s["runs"])  # every round is a run saved like any other
    assert sorted({o["trial"] for r in saved if r["run_id"] in s["runs"] for o in r["outcomes"]}) == [0, 1, 2]
    # 8 of 20 cases broken (a drop of 0.4): shown beyond the margin 0.1 at round 4; the same on the farm
    start_worker(redis_server.url, concurrency=2)
    for broker in (None, redis_server.url):
        bad_run = run_cli("run", bad, "--gate", "--baseline", "gb", "--until-decided", "--margin", "0.1", *state,
                          broker=broker, cwd=tmp_path)
        assert bad_run.returncode == 1, bad_run.stderr
        assert "FAILED after 4 round(s): a drop of more than 0.1 is shown; run - baseline -0.4000" in bad_run.stdout
        assert bad_run.stderr.count("evalfarm: round ") == 4
    assert len(redis.Redis.from_url(redis_server.url).keys("ef:run:*:counts")) == 4  # one farm run per round
    # undecided at --max-trials: the gate does not pass
    open_ = run_cli("run", bad, "--gate", "--baseline", "gb", "--until-decided", "--margin", "0.1", "--max-trials",
                    "2", *state, cwd=tmp_path)
    assert open_.returncode == 1 and "OPEN after 2 round(s)" in open_.stdout
    # refused before anything is sent: one line, exit 2
    for args, message in ((["--until-decided", "--baseline", "gb"], "--until-decided applies to the gate"),
                          (["--gate", "--until-decided"], "--until-decided decides against a baseline"),
                          (["--gate", "--baseline", "gb", "--until-decided", "--trials", "3"], "--trials and --until"),
                          (["--alpha", "0.1"], "only apply with --gate --until-decided")):
        res = run_cli("run", good, *args, *state, cwd=tmp_path)
        assert res.returncode == 2 and message in res.stderr, res.stderr


def test_a_farm_run_that_finishes_before_its_coordinator_marks_it_running_is_not_an_error(
        tmp_path, redis_server, start_worker):
    """Many small rounds made this race common: the worker runs and aggregates a one-batch run while the
    coordinator is still between its last send and 'running' (the failpoint holds it there)."""
    start_worker(redis_server.url, concurrency=2)
    res = run_cli("run", spec(tmp_path, "tiny", 0), "--no-save", "--json", "--batch-size", "20", broker=redis_server.url,
                  cwd=tmp_path,
                  EVALFARM_FAILPOINT_DISPATCH_DELAY_S="2")
    assert res.returncode == 0, res.stderr
    assert "another coordinator changed it" not in res.stderr
    assert json.loads(res.stdout)["items_done"] == 20
