"""One engine, two backends (issue 9), proven at the server: --concurrency is calls in flight in either
backend, Ctrl-C stops sending, and a JSONL dataset with a prompt-store version sends the versioned
system prompt on both backends."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from conftest import EVALFARM, env_for, run_cli, wait_for


def suite(tmp: Path, url: str, n: int, *, prompt: str | None = None) -> Path:
    with open(tmp / "cases.jsonl", "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"c{i:04d}", "text": f"say {i}", "expected_output_contains": [str(i)]}) + "\n")
    (tmp / "suite.yaml").write_text(
        f"name: backends\ndataset: cases.jsonl\n{'prompt: ' + prompt + chr(10) if prompt else ''}"
        f"adapters:\n  - {{id: m, model: mock, base_url: '{url}'}}\n")
    return tmp / "suite.yaml"


@pytest.mark.parametrize("n", [1, 4, 16])
def test_concurrency_is_calls_in_flight_in_process(tmp_path, provider, n):
    server = provider("--latency-ms", "60")
    res = run_cli("run", str(suite(tmp_path, server.url, 48)), "--no-save", "--concurrency", str(n))
    assert res.returncode == 0, res.stderr
    stats = server.stats()
    assert stats["requests"] == 48 and stats["max_in_flight"] == n, stats


def test_concurrency_is_calls_in_flight_across_the_farm(tmp_path, provider, redis_server, start_worker):
    server = provider("--latency-ms", "80")
    for _ in range(2):
        start_worker(redis_server.url, concurrency=4)
    res = run_cli("run", str(suite(tmp_path, server.url, 60)), "--no-save", "--concurrency", "3",
                  "--batch-size", "5", broker=redis_server.url)
    assert res.returncode == 0, res.stderr
    stats = server.stats()
    assert stats["requests"] == 60 and stats["max_in_flight"] == 3, stats


def test_ctrl_c_stops_sending_within_a_second_and_saves_a_partial_report(tmp_path, provider):
    server = provider("--latency-ms", "2000")
    state = tmp_path / "state"
    proc = subprocess.Popen([*EVALFARM, "run", str(suite(tmp_path, server.url, 1000)), "--state-dir", str(state),
                             "--concurrency", "64"], env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 30
    while server.stats()["requests"] < 64 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(2.5)  # the first 64 answered, 64 more in flight
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=20)
    exited = time.monotonic() - sent
    at_stop = server.stats()["requests"]
    time.sleep(1.5)
    assert server.stats()["requests"] == at_stop, "requests kept arriving after Ctrl-C"
    assert proc.returncode == 130, err
    assert exited < 3.0, exited
    assert at_stop < 200, at_stop  # nothing beyond what was in flight: 1,000 planned
    [report_path] = [p for p in (state / "runs").glob("*.json") if not p.name.endswith(".lineage.json")]
    report = json.loads(report_path.read_text())
    assert report["stopped"] == "interrupted" and report["items_planned"] == 1000
    assert 64 <= report["items_done"] < 200 and len(report["outcomes"]) == report["items_done"]
    assert "interrupted" in err and "Traceback" not in err and "never retrieved" not in err, err
    for cmd in (["diff", str(report_path), str(report_path)], ["gate", str(report_path)]):
        res = run_cli(*cmd, "--state-dir", str(state))
        assert res.returncode == 2 and "partial (stopped: interrupted" in res.stderr, res.stderr


def test_ctrl_c_on_a_farm_run_says_it_goes_on(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, concurrency=2, EVALFARM_PLUGINS="ef_test_adapters")
    (tmp_path / "s.yaml").write_text("name: slow\nadapters: ['slow:400']\nprompts:\n"
                                     + "".join(f"  - {{id: p{i}, text: t{i}}}\n" for i in range(60)))
    proc = subprocess.Popen([*EVALFARM, "run", str(tmp_path / "s.yaml"), "--no-save", "--batch-size", "2"],
                            env=env_for(redis_server.url, EVALFARM_PLUGINS="ef_test_adapters"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = redis.Redis.from_url(redis_server.url)

    def waiting() -> bool:  # every batch sent: the command is waiting on the farm (a Ctrl-C while it is still
        # dispatching says so instead, and a fixed sleep met that under CI's load)
        return any(r.get(f"ef:run:{rid.decode()}:state") == b"running" for rid in r.zrange("ef:runs", 0, -1))

    wait_for(waiting, 30, "the run dispatched and waited on")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    run_id = err.split("run ", 1)[1].split(" goes on", 1)[0]
    assert f"'evalfarm wait {run_id}'" in err and f"'evalfarm cancel {run_id}'" in err, err
    status = run_cli("status", run_id, "--json", broker=redis_server.url)
    assert json.loads(status.stdout)["state"] in ("running", "done"), status.stdout


@pytest.mark.parametrize("backend", ["in-process", "farm"])
def test_jsonl_dataset_with_a_prompt_store_version_sends_the_versioned_system_prompt(
        tmp_path, provider, redis_server, start_worker, backend):
    server = provider()
    spec = suite(tmp_path, server.url, 30, prompt="triage")
    store = tmp_path / "prompts" / "triage"
    store.mkdir(parents=True)
    (store / "v1.txt").write_text("You are the v1 triage prompt.")
    (store / "v2.yaml").write_text("system: You are the v2 triage prompt.\nuser: 'Q: {input}'\n")
    (store / "current").write_text("v2\n")
    broker = None
    if backend == "farm":
        start_worker(redis_server.url, concurrency=2)
        broker = redis_server.url
    res = run_cli("run", str(spec), "--state-dir", str(tmp_path / "state"), "--json", broker=broker)
    assert res.returncode == 0, res.stderr
    recent = server.stats_requests()
    assert len(recent) == 30
    assert {r["system"] for r in recent} == {"You are the v2 triage prompt."}
    assert all(r["user"].startswith("Q: say ") for r in recent)
    entry = json.loads(run_cli("ls", "--json", "--state-dir", str(tmp_path / "state")).stdout)[0]
    assert entry["prompt"]["version"] == "v2"


def test_reports_of_both_backends_are_byte_identical_but_for_timings(tmp_path, provider, redis_server,
                                                                    start_worker):
    server = provider()
    spec = suite(tmp_path, server.url, 120)
    start_worker(redis_server.url, concurrency=2)
    local = run_cli("run", str(spec), "--no-save", "--json")
    farm = run_cli("run", str(spec), "--no-save", "--json", "--batch-size", "7", broker=redis_server.url)
    assert local.returncode == farm.returncode == 0, (local.stderr, farm.stderr)

    def canonical(text: str) -> str:  # the bytes, with the values of the timing fields blanked
        return re.sub(r'"(run_id|mode|started_at|finished_at|duration_s|latency_ms_p50|latency_ms_p95|latency_ms|wait_ms)": '
                      r'[^,\n}]+', r'"\1": _', text)

    assert canonical(local.stdout) == canonical(farm.stdout)
    assert [json.loads(x.rstrip(","))["prompt_id"] for x in local.stdout.splitlines() if x.startswith('    {"key"')] == \
        [f"c{i:04d}" for i in range(120)]  # one outcome per line, in plan order


def test_an_in_process_run_spooled_to_disk_reports_what_one_held_in_memory(tmp_path, provider):
    """EVALFARM_SPOOL_AFTER_MB=0: every item, result, prompt and report chunk of an in-process run goes to
    its temporary spool file (executors.store.SpoolStore); the report is the one a run held in memory
    makes, timings aside, in plan order."""
    server = provider()
    spec = suite(tmp_path, server.url, 300)
    held = run_cli("run", str(spec), "--no-save", "--json")
    spooled = run_cli("run", str(spec), "--no-save", "--json", EVALFARM_SPOOL_AFTER_MB="0")
    assert held.returncode == spooled.returncode == 0, (held.stderr, spooled.stderr)

    def canonical(text: str) -> str:
        return re.sub(r'"(run_id|started_at|finished_at|duration_s|latency_ms_p50|latency_ms_p95|latency_ms|wait_ms)": '
                      r'[^,\n}]+', r'"\1": _', text)

    assert canonical(held.stdout) == canonical(spooled.stdout)
    report = json.loads(spooled.stdout)
    assert [o["prompt_id"] for o in report["outcomes"]] == [f"c{i:04d}" for i in range(300)]
    assert [p["id"] for p in report["prompts"]] == [f"c{i:04d}" for i in range(300)]
