"""Provider batches on the farm (real Redis, real workers, mock-provider over HTTP): submitted and polled by
short tasks on the aggregate queue, recorded in the run store, shown by status, reconciled on resume, and
cancelled at the provider by `evalfarm cancel`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request

import redis

from conftest import EVALFARM, env_for, run_cli, wait_for
from test_batch_run import FAST, _same, _spec, _stats

FARM = {**FAST, "EVALFARM_MAX_IN_FLIGHT": "4"}


def _run_id(url: str) -> str:
    r = redis.Redis.from_url(url)
    return wait_for(lambda: [x.decode() for x in r.zrange("ef:runs", 0, -1)], what="a run id").pop()


def test_2000_items_on_2_workers_in_4_batches_same_report_as_in_process(provider, tmp_path, redis_server,
                                                                       start_worker):
    mock = provider("--batch-delay", "1.0", "--batch-max-requests", "500")
    start_worker(redis_server.url, concurrency=1, **FARM)
    start_worker(redis_server.url, concurrency=1, **FARM)  # one thread each: a waiting batch holds none
    spec = _spec(tmp_path, mock, 2000)
    out = tmp_path / "farm.json"
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), broker=redis_server.url, timeout=300,
                  EVALFARM_BATCH_MAX_REQUESTS="500", **FARM)
    assert ran.returncode == 0, ran.stderr
    saved = os.stat(out).st_mtime
    stats = _stats(mock)
    assert sorted(b["requests"] for b in stats["batches"].values()) == [500, 500, 500, 500]
    assert len(stats["batch_items"]) == 2000 and set(stats["batch_items"].values()) == {1}
    assert stats["requests"] == 2000  # nothing live
    last_ready = max(b["ready_at"] for b in stats["batches"].values())
    print(f"\nPROOF farm: seconds from the last batch's completion (ready) to the saved report: {saved - last_ready:.3f}"
          f"; from the provider's answer (ended): {saved - max(b['ended_at'] for b in stats['batches'].values()):.3f}")
    local = tmp_path / "local.json"
    ref = run_cli("run", spec, "--batch", "--no-save", "-o", str(local), timeout=300,
                  EVALFARM_BATCH_MAX_REQUESTS="500", **FAST)
    assert ref.returncode == 0, ref.stderr
    assert _same(json.loads(out.read_text())) == _same(json.loads(local.read_text()))
    st = run_cli("status", json.loads(out.read_text())["run_id"], "--json", broker=redis_server.url)
    info = json.loads(st.stdout)
    assert len(info["provider_batches"]) == 4 and info["in_provider_batches"] == 0
    assert all("completed, results taken" in ln and "500 requests" in ln for ln in info["provider_batches"])


def test_coordinator_killed_with_2_batches_open_then_resume_submits_nothing_twice(provider, tmp_path, redis_server,
                                                                                  start_worker):
    mock = provider("--batch-delay", "3.0")
    start_worker(redis_server.url, concurrency=2, **FARM)
    spec = _spec(tmp_path, mock, 400, texts={7: "question 7 [[batch-error]]"})
    env = env_for(redis_server.url, **FARM, EVALFARM_BATCH_MAX_REQUESTS="100",
                  EVALFARM_FAILPOINT_DISPATCH_DELAY_S="1.5")
    proc = subprocess.Popen([*EVALFARM, "run", spec, "--batch", "--no-save", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        run_id = _run_id(redis_server.url)
        wait_for(lambda: len(_stats(mock)["batches"]) >= 2, what="2 batches open at the provider")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    opened = _stats(mock)["batches"]
    assert 2 <= len(opened) < 4 and all(b["status"] == "in_progress" for b in opened.values())
    st = run_cli("status", run_id, broker=redis_server.url)
    assert "provider batches:" in st.stdout and "in_progress" in st.stdout, st.stdout
    res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "120", broker=redis_server.url, **FARM,
                  EVALFARM_BATCH_MAX_REQUESTS="100")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert len(report["outcomes"]) == 400 and all(o["error"] is None for o in report["outcomes"])
    stats = _stats(mock)
    assert stats["batch_creates"] == 4 and sorted(b["requests"] for b in stats["batches"].values()) == [100] * 4
    assert set(stats["batch_items"].values()) == {1} and len(stats["batch_items"]) == 400  # none submitted twice
    asked = stats["asked"]
    assert asked["question 7 [[batch-error]]"] == 2  # its failed line went live, once
    assert all(asked[f"question {i}"] == 1 for i in range(400) if i != 7)
    print(f"\nPROOF requests at the server per item after SIGKILL + resume: "
          f"{ {n: sum(1 for v in asked.values() if v == n) for n in sorted(set(asked.values()))} }")


def test_reconcile_by_metadata_and_cancel_at_the_provider(provider, tmp_path, redis_server, start_worker):
    """A group whose record was lost (a worker died between the provider's answer and the record) is found in
    the provider's batch list by its metadata, not submitted again; `evalfarm cancel` cancels it there."""
    mock = provider("--batch-delay", "600")
    spec = _spec(tmp_path, mock, 30)
    ran = run_cli("run", spec, "--batch", "--no-save", "--detach", broker=redis_server.url, **FARM)
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stdout.strip()
    worker = start_worker(redis_server.url, concurrency=1, **FARM)
    wait_for(lambda: len(_stats(mock)["batches"]) == 1, what="the batch at the provider")
    r = redis.Redis.from_url(redis_server.url)
    key = f"ef:run:{run_id}:batches"
    wait_for(lambda: any(not f.startswith(b"group:") for f in r.hkeys(key)), what="the batch record")
    worker.stop()
    r.delete(key)  # the record is lost: only the provider knows the batch
    res = run_cli("resume", run_id, "--timeout", "0.5", "--no-save", broker=redis_server.url, **FARM)
    start_worker(redis_server.url, concurrency=1, **FARM)
    wait_for(lambda: any(not f.startswith(b"group:") for f in r.hkeys(key)), what="the batch found again")
    assert _stats(mock)["batch_creates"] == 1, res.stderr  # found by metadata, not submitted twice
    cancel = run_cli("cancel", run_id, broker=redis_server.url, **FARM)
    assert cancel.returncode == 0, cancel.stderr
    wait_for(lambda: len(_stats(mock)["batch_cancels"]) == 1, what="the cancel at the provider")
    with urllib.request.urlopen(f"{mock.url}/batches", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["status"] == "cancelled"


def test_farm_failed_lines_live_expired_batch_and_budget_cancel(provider, tmp_path, redis_server, start_worker):
    mock = provider("--batch-delay", "0.3")
    start_worker(redis_server.url, concurrency=2, **FARM)
    texts = {1: "question 1 [[batch-error]]", 2: "question 2 [[batch-error]]",
             3: "question 3 [[batch-error]] [[status:400]]", 25: "question 25 [[batch-expire]]"}
    spec = _spec(tmp_path, mock, 30, texts=texts)
    out = tmp_path / "r.json"
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), broker=redis_server.url, timeout=120,
                  EVALFARM_BATCH_MAX_REQUESTS="10", **FARM)
    assert ran.returncode == 0, ran.stderr
    outcomes = {o["prompt_id"]: o for o in json.loads(out.read_text())["outcomes"]}
    assert outcomes["p1"]["output"] == "question 1" and outcomes["p3"]["error"]["class"] == "ClientError"
    assert {outcomes[f"p{i}"]["error"]["class"] for i in range(20, 30)} == {"BatchExpired"}
    assert all(outcomes[f"p{i}"]["error"] is None for i in range(20) if i != 3)
    stats = _stats(mock)
    assert stats["batch_creates"] == 4  # 3 groups, the expired one once more
    assert sorted(b["status"] for b in stats["batches"].values()) == ["completed", "completed", "expired", "expired"]
    asked = stats["asked"]
    assert asked["question 1 [[batch-error]]"] == 2 and all(asked[f"question {i}"] == 1 for i in range(4, 20))
    assert not any(f"question {i}" in asked for i in range(20, 25))  # an expired batch answered nothing

    # a budget stop: the first group's answers spend it; the second group's open batch is cancelled there
    mock2 = provider("--batch-delay", "0.3")
    texts = {i: f"question {i} [[batch-delay:60000]]" for i in range(10, 20)}
    spec = _spec(tmp_path, mock2, 20, texts=texts, budget=0.00005)
    ran = run_cli("run", spec, "--batch", "--no-save", "--force", "-o", str(out), broker=redis_server.url,
                  timeout=120, EVALFARM_BATCH_MAX_REQUESTS="10", **FARM)
    assert "stopped at the budget" in ran.stderr, ran.stderr
    stats = _stats(mock2)
    assert sorted(b["status"] for b in stats["batches"].values()) == ["cancelled", "completed"]
    assert len(stats["batch_cancels"]) == 1
    report = json.loads(out.read_text())
    assert sorted(o["prompt_id"] for o in report["outcomes"]) == sorted(f"p{i}" for i in range(10))
    assert report["stopped"] == "budget"


def test_a_batch_the_provider_refuses_goes_live(provider, tmp_path, redis_server, start_worker):
    mock = provider("--batch-max-requests", "5", "--api-key", "k")  # Anthropic answers 400 to a larger batch
    spec = _spec(tmp_path, mock, 12, provider="anthropic")
    for broker in (None, redis_server.url):  # in process, then on the farm
        if broker:
            start_worker(broker, concurrency=1, **FARM)
        out = tmp_path / "r.json"
        ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), broker=broker, timeout=120, **FARM)
        assert ran.returncode == 0, ran.stderr
        outcomes = json.loads(out.read_text())["outcomes"]
        assert sorted(o["output"] for o in outcomes) == sorted(f"question {i}" for i in range(12))
    stats = _stats(mock)
    assert stats["batch_creates"] == 0 and set(stats["asked"].values()) == {2}  # once live in each run


def test_a_run_waiting_on_open_batches_says_so_instead_of_warning(provider, tmp_path, redis_server, start_worker):
    mock = provider("--batch-delay", "4.0")
    start_worker(redis_server.url, concurrency=1, **FARM)
    spec = _spec(tmp_path, mock, 20)
    ran = run_cli("run", spec, "--batch", "--no-save", "--json", broker=redis_server.url, timeout=120,
                  EVALFARM_IDLE_WARNING_S="1", **FARM)
    assert ran.returncode == 0, ran.stderr
    assert "is a worker consuming" not in ran.stderr and "warning" not in ran.stderr, ran.stderr
    assert "waits on 1 batch open at the provider (" in ran.stderr and "20 requests" in ran.stderr, ran.stderr
    assert len(json.loads(ran.stdout)["outcomes"]) == 20
