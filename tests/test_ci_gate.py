"""The gate's three brakes, each firing alone, with the real CLI's exit codes; gate makes no network call."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EVALFARM, env_for, run_cli
from evalfarm import Runner, load_spec, save_report
from evalfarm.ci.gate import evaluate
from evalfarm.spec.models import Thresholds


def write_spec(tmp: Path, ids: list[str], thresholds: str = "", name: str = "ci") -> Path:
    prompts = "".join(f"  - {{id: {i}, text: 'case {i}', expected_output_contains: ['yes']}}\n" for i in ids)
    path = tmp / f"{name}-{len(ids)}-{abs(hash(thresholds)) % 10**6}.yaml"
    path.write_text(f"name: {name}\nadapters: [mock]\nprompts:\n{prompts}"
                    + (f"thresholds:\n{thresholds}" if thresholds else ""))
    return path


def stored_run(tmp: Path, state: Path, verdicts: dict[str, bool | None], thresholds: str = "") -> str:
    """A real run (Runner, in-process) whose case i passes, fails, or errors (None), saved under state."""
    spec = load_spec(write_spec(tmp, list(verdicts), thresholds))

    def execute(adapter, prompt):
        v = verdicts[prompt.id]
        if v is None:
            raise ConnectionError("provider unreachable")
        return "yes" if v else "no"

    report = Runner(executor=execute).run(spec).to_dict()
    save_report(report, state)
    return report["run_id"]


FLOOR = "  golden_pass_rate_min: 0.5\n  max_drop: 0.1\n"


def gate(state: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("gate", run_id, "--state-dir", str(state), *extra)


def brake_status(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("floor", "drop", "regressions"):
            rows[parts[0]] = parts[1]
    return rows


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def promote(state: Path, run_id: str, name: str = "main") -> None:
    res = run_cli("baseline", run_id, "--name", name, "--state-dir", str(state))
    assert res.returncode == 0, res.stderr
    assert f"baseline {name!r} -> run {run_id}" in res.stdout


def test_all_brakes_pass_exit_0(tmp_path, state):
    base = stored_run(tmp_path, state, {"a": True, "b": True, "c": False}, FLOOR)
    promote(state, base)
    cur = stored_run(tmp_path, state, {"a": True, "b": True, "c": False}, FLOOR)
    res = gate(state, cur, "--baseline", "main")
    assert res.returncode == 0, res.stdout + res.stderr
    assert brake_status(res.stdout) == {"floor": "PASS", "drop": "PASS", "regressions": "PASS"}
    assert "gate: PASSED against baseline 'main'" in res.stdout


def test_floor_fires_alone(tmp_path, state):
    strict = "  golden_pass_rate_min: 0.9\n  max_drop: 0.1\n"
    base = stored_run(tmp_path, state, {"a": True, "b": True, "c": False}, strict)
    promote(state, base)
    cur = stored_run(tmp_path, state, {"a": True, "b": True, "c": False}, strict)
    res = gate(state, cur, "--baseline", "main")
    assert res.returncode == 1
    assert brake_status(res.stdout) == {"floor": "FAIL", "drop": "PASS", "regressions": "PASS"}
    assert "mock: golden_pass_rate 0.6667 < 0.9" in res.stdout  # named with its figures


def test_drop_fires_alone(tmp_path, state):
    # same cases pass; a new failing case lowers the score: a drop, yet no case regressed
    base = stored_run(tmp_path, state, {"a": True, "b": True, "c": True, "d": True}, FLOOR)
    promote(state, base)
    cur = stored_run(tmp_path, state, {"a": True, "b": True, "c": True, "d": True, "e": False}, FLOOR)
    res = gate(state, cur, "--baseline", "main")
    assert res.returncode == 1
    assert brake_status(res.stdout) == {"floor": "PASS", "drop": "FAIL", "regressions": "PASS"}
    assert "mock: overall 0.8000 vs baseline 1.0000 (drop +0.2000, max_drop 0.1)" in res.stdout


def test_regressions_fire_alone(tmp_path, state):
    # a flips to failing, b to passing: same score (no drop, floor fine), one regression
    base = stored_run(tmp_path, state, {"a": True, "b": False}, FLOOR)
    promote(state, base)
    cur = stored_run(tmp_path, state, {"a": False, "b": True}, FLOOR)
    res = gate(state, cur, "--baseline", "main")
    assert res.returncode == 1
    assert brake_status(res.stdout) == {"floor": "PASS", "drop": "PASS", "regressions": "FAIL"}
    assert "1 case(s) passed in the baseline and fail now (max_regressions 0)" in res.stdout
    assert "- mock/a" in res.stdout
    # the current thresholds decide: a spec allowing one regression passes the same stored run
    lenient = write_spec(tmp_path, ["a", "b"], FLOOR + "  max_regressions: 1\n", name="lenient")
    res = gate(state, cur, "--baseline", "main", "--spec", str(lenient))
    assert res.returncode == 0, res.stdout
    assert f"thresholds from {lenient}" in res.stdout


def test_nothing_measured_exits_3_not_a_decline(tmp_path, state):
    base = stored_run(tmp_path, state, {"a": True, "b": True}, FLOOR)
    promote(state, base)
    cur = stored_run(tmp_path, state, {"a": None, "b": None}, FLOOR)
    res = gate(state, cur, "--baseline", "main", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    result = json.loads(res.stdout)
    assert result["nothing_measured"] and result["verdict"] == "NOTHING MEASURED"
    # errored cases are unmeasured, never regressions
    assert result["cases"]["counts"]["regressed"] == 0 and result["cases"]["counts"]["unmeasured"] == 2


def test_baseline_defaults_to_the_spec_name_and_missing_name_is_usage_error(tmp_path, state):
    base = stored_run(tmp_path, state, {"a": True, "b": False}, FLOOR)
    promote(state, base, name="ci")  # the spec's name
    cur = stored_run(tmp_path, state, {"a": False, "b": False}, FLOOR)
    res = gate(state, cur)
    assert res.returncode == 1 and "against baseline 'ci'" in res.stdout
    res = gate(state, cur, "--baseline", "nope")
    assert res.returncode == 2 and res.stderr.startswith("evalfarm: error: --baseline nope: no baseline")
    assert len(res.stderr.strip().splitlines()) == 1


def test_gate_pure_function_skips_what_it_cannot_check():
    report = {"run_id": "r", "per_adapter": {"m": {"overall": 0.5, "golden_pass_rate": 0.5, "items": 2,
                                                    "errors": 0}},
              "outcomes": [], "nothing_measured": False}
    result = evaluate(report, Thresholds())
    assert result.passed and result.exit_code == 0
    assert [b.status for b in result.brakes] == ["skipped", "skipped", "skipped"]


SITECUSTOMIZE = '''
import os, sys
_LOG = os.environ["EF_NET_LOG"]
def _hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"):
        with open(_LOG, "a") as fh:
            fh.write(f"{event} {args!r}\\n")
        raise PermissionError(f"network access during a no-network test: {event}")
sys.addaudithook(_hook)
'''


def test_gate_makes_no_network_call(tmp_path, state):
    """Run `evalfarm gate` in a process whose audit hook records and refuses every socket connect or
    name lookup; the hook is proven live by a control process that does try to connect."""
    base = stored_run(tmp_path, state, {"a": True, "b": True}, FLOOR)
    promote(state, base)
    cur = stored_run(tmp_path, state, {"a": False, "b": True}, FLOOR)
    hook_dir = tmp_path / "nonet"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "net.log"
    env = env_for(EF_NET_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join([str(hook_dir), env["PYTHONPATH"]])

    # control: the hook is active in a subprocess and catches a real connect attempt
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        ctl = subprocess.run([sys.executable, "-c", f"import socket; socket.socket().connect(('127.0.0.1', {port}))"],
                             env=env, capture_output=True, text=True, timeout=60)
    finally:
        listener.close()
    assert ctl.returncode != 0 and "network access during a no-network test" in ctl.stderr
    assert "socket.connect" in log.read_text()
    log.unlink()

    res = subprocess.run([*EVALFARM, "gate", cur, "--baseline", "main", "--state-dir", str(state),
                          "--junit", str(tmp_path / "g.xml")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr  # it ran to the end: the regression brake fired
    assert brake_status(res.stdout)["regressions"] == "FAIL"
    assert not log.exists(), log.read_text()


def test_a_model_swap_is_gated_against_the_baseline_model():
    """The seed's flow: the baseline ran model X, this run model Y on the same cases."""
    def rep(run_id, adapter, verdicts, overall):
        return {"run_id": run_id, "nothing_measured": False,
                "per_adapter": {adapter: {"overall": overall, "golden_pass_rate": overall, "items": 2, "errors": 0}},
                "outcomes": [{"adapter": adapter, "prompt_id": c, "trial": 0, "passed": v, "error": None}
                             for c, v in verdicts.items()]}
    base = rep("B", "model-x", {"q1": True, "q2": True}, 1.0)
    cur = rep("C", "model-y", {"q1": False, "q2": True}, 0.5)
    result = evaluate(cur, Thresholds(max_drop=0.1), base, "main")
    drop, regressions = result.brakes[1], result.brakes[2]
    assert drop.status == "fail" and "model-y: overall 0.5000 vs baseline 1.0000" in drop.details[0]
    assert "model-y: compared with the baseline's model-x" in drop.details
    assert regressions.status == "fail" and regressions.details == ["model-y/q1"]
    assert result.exit_code == 1
