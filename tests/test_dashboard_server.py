"""`evalfarm serve` over HTTP (no browser): untrusted reports, read-only, guards, the JSON API,
usage errors; and the worker-side metrics and heartbeat modules against real servers."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis
import yaml

from conftest import EXAMPLES, env_for, free_port, run_cli
from dashboard_support import Serve, metric_values, wait_until
from providers_fixture import MockProviderProc


def _saved(state: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((state / "runs").glob("*.json"))
            if not p.name.endswith(".lineage.json")]


@pytest.fixture(scope="module")
def smoke_state(tmp_path_factory):
    """Two real runs of the smoke example (embedded farm), the first promoted to baseline 'smoke'."""
    state = tmp_path_factory.mktemp("srv") / "state"
    for extra in (("--promote",), ()):
        res = run_cli("run", str(EXAMPLES / "smoke.yaml"), "--state-dir", str(state), *extra)
        assert res.returncode == 0, res.stdout + res.stderr
    return state


def _tree(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_bad_reports_become_rows_and_pages_never_500(tmp_path, smoke_state):
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True)
    good = _saved(smoke_state)[0]
    (state / "runs" / f"{good['run_id']}.json").write_text(json.dumps(good, indent=2))
    bad = {
        "20260101T000000000001Z-aaaaaa": "not json {",
        "20260101T000000000002Z-bbbbbb": "[1, 2, 3]",
        "20260101T000000000003Z-cccccc": json.dumps({
            **good, "run_id": "20260101T000000000003Z-cccccc", "per_adapter": {"m": "x", "n": {"overall": "high",
                                                                                             "items": -4}},
            "outcomes": [1, "two", {"adapter": 5, "prompt_id": None, "output": {"html": "<b>x</b>"}, "checks": "nope",
                                    "judge_criteria": [3, {"id": ["x"], "verdict": None}], "latency_ms": "fast",
                                    "failure_mode": ["x"], "error": "boom", "trial": "first"},
                         {"adapter": "n", "prompt_id": "p", "passed": "yes", "latency_ms": float("1e308") * 10}],
            "thresholds_passed": "yes", "cost": "free", "duration_s": "long", "spec_name": {"n": 1}}),
        "20260101T000000000004Z-dddddd": json.dumps({**good, "run_id": "20260101T000000000004Z-dddddd",
                                                      "outcomes": {"not": "a list"}, "schema": "other/9"}),
    }
    for rid, body in bad.items():
        (state / "runs" / f"{rid}.json").write_text(body)
    (state / "runs" / "20260101T000000000005Z-eeeeee.json").write_bytes(b"\xff\xfe\x00garbage")
    for rid, why in (("20260101T000000000006Z-ffffff", "interrupted"), ("20260101T000000000007Z-abcdef", "budget")):
        (state / "runs" / f"{rid}.json").write_text(json.dumps({**good, "run_id": rid, "stopped": why,
                                                                "thresholds_passed": False}))
    (state / "registry.db").write_bytes(b"this is not sqlite")
    s = Serve(state)
    try:
        listing = s.json("/api/runs")
        rows = {r["run_id"]: r for r in listing["runs"]}
        assert len(rows) == 8 and rows[good["run_id"]]["verdict"] == "PASS"
        # a partial run is neither a pass nor a quality failure, as everywhere else (core.verdict)
        assert rows["20260101T000000000006Z-ffffff"]["verdict"] == rows["20260101T000000000007Z-abcdef"]["verdict"] \
            == "PARTIAL"
        assert [r["run_id"] for r in s.json("/api/runs?verdict=PARTIAL")["runs"]] == [
            "20260101T000000000007Z-abcdef", "20260101T000000000006Z-ffffff"]
        assert rows["20260101T000000000001Z-aaaaaa"]["verdict"] == "UNREADABLE"
        assert rows["20260101T000000000002Z-bbbbbb"]["verdict"] == "UNREADABLE"
        assert rows["20260101T000000000005Z-eeeeee"]["verdict"] == "UNREADABLE"
        assert rows["20260101T000000000003Z-cccccc"]["verdict"] == "UNKNOWN"  # thresholds_passed "yes" is no bool
        assert "schema" in " ".join(rows["20260101T000000000004Z-dddddd"]["problems"])
        assert listing["registry_error"] and "registry.db" in listing["registry_error"]
        assert s.get("/runs")[0] == 200
        for rid in list(bad) + ["20260101T000000000005Z-eeeeee"]:
            for path in (f"/runs/{rid}", f"/api/runs/{rid}", f"/api/runs/{rid}/cases", f"/runs/{rid}/cases/2",
                         f"/diff?a={good['run_id']}&b={rid}", f"/api/diff?a={rid}&b={rid}"):
                status = s.get(path)[0]
                assert status in (200, 404, 422), (path, status)
        weird = s.json("/api/runs/20260101T000000000003Z-cccccc/cases/0")  # the first of the two objects
        assert weird["output"] == '{"html": "<b>x</b>"}' and weird["checks"] == [] and weird["latency_ms"] is None
        assert weird["status"] == "errored" and weird["error"]["message"] == "boom"
        assert s.get("/runs/20260101T000000000003Z-cccccc/cases/0")[0] == 200
        assert s.json("/api/runs/20260101T000000000003Z-cccccc")["problems"][-1].startswith("2 outcome(s)")
        assert s.get("/metrics")[0] == 200
        assert "Traceback" not in s.log.read_text()
    finally:
        s.stop()


def test_fast_summary_equals_the_full_parse(tmp_path, smoke_state):
    from evalfarm.dashboard.reports import read_head

    tricky = tmp_path / "t.yaml"  # outputs that contain what the fast reader looks for
    tricky.write_text(yaml.safe_dump({"name": "tricky", "adapters": ["mock"], "prompts": [
        {"id": "a", "text": 'x\n  "outcomes": [\n  "cost": {}\n}'}, {"id": "b", "text": '  "cost": 1'}]}))
    assert run_cli("run", str(tricky), "--state-dir", str(tmp_path / "st")).returncode == 0
    paths = [p for root in (smoke_state, tmp_path / "st") for p in (root / "runs").glob("*.json")
             if not p.name.endswith(".lineage.json")]
    assert len(paths) == 3
    for p in paths:
        full = json.loads(p.read_text())
        fast = read_head(p)
        assert fast == {k: v for k, v in full.items() if k not in ("outcomes", "prompts")}, p


def test_serving_never_writes_the_state_dir(tmp_path, smoke_state):
    state = tmp_path / "state"
    import shutil

    shutil.copytree(smoke_state, state)
    res = run_cli("ab", "--suite", str(EXAMPLES / "ab" / "suite.yaml"), "--arm-a", "balanced", "--arm-b", "terse",
                  cwd=tmp_path, EVALFARM_STATE_DIR=str(state))
    assert res.returncode == 0, res.stderr
    (state / "runs" / "20990101T000000000000Z-000000.json").write_text(  # saved by the Python API: not in registry
        json.dumps({**_saved(smoke_state)[0], "run_id": "20990101T000000000000Z-000000"}, indent=2))
    before = _tree(state)
    s = Serve(state)
    try:
        runs = s.json("/api/runs")["runs"]
        sha = s.json("/api/ab")[0]["sha256"]
        assert s.json(f"/api/ab/{sha}/verify")["ok"] is True
        a, b = runs[-1]["run_id"], runs[0]["run_id"]
        paths = ["/runs", f"/runs/{a}", f"/runs/{a}/cases/0", f"/diff?a=baseline:smoke&b={b}", "/ab", f"/ab/{sha}",
                 "/farm", "/metrics", "/api/runs", f"/api/runs/{a}", f"/api/runs/{a}/cases?filter=failed",
                 f"/api/runs/{a}/cases/1", f"/api/diff?a={a}&b={b}", "/api/baselines", "/api/ab", f"/api/ab/{sha}",
                 "/api/audit", "/api/farm"]
        for path in paths:
            assert s.get(path)[0] == 200, path
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, headers, _ = s.get("/api/runs", method=method)
            assert status == 405 and headers["Allow"] == "GET, HEAD"
    finally:
        s.stop()
    assert _tree(state) == before  # not a byte, not an mtime: the registry was opened read-only


def test_api_pages_filters_and_baselines(smoke_state):
    s = Serve(smoke_state)
    try:
        first, second = _saved(smoke_state)
        assert "bound to 127.0.0.1, loopback only; no token" in s.banner
        listing = s.json("/api/runs?verdict=PASS&per_page=1&page=2")
        assert listing["total"] == 2 and listing["pages"] == 2 and listing["runs"][0]["run_id"] == first["run_id"]
        assert listing["runs"][0]["baselines"] == ["smoke"]
        assert s.json("/api/runs?adapter=nope")["total"] == 0
        assert s.json("/api/baselines")["smoke"]["run_id"] == first["run_id"]
        failed = [o for o in first["outcomes"] if o["passed"] is False]
        page = s.json(f"/api/runs/{first['run_id']}/cases?filter=failed&per_page=3&page=2")
        assert page["total"] == len(failed) and page["pages"] == -(-len(failed) // 3)
        assert [c["index"] for c in page["cases"]] == [first["outcomes"].index(o) for o in failed][3:6]
        d = s.json(f"/api/diff?a=baseline:smoke&b={second['run_id']}")
        assert d["a"]["run_id"] == first["run_id"] and d["counts"]["stable"] > 0
        assert [c["class"] for c in d["classes"]][0] == "regressed"
        assert s.get("/api/diff?a=x&b=y&alpha=2")[0] == 400
        assert s.get("/api/diff?a=baseline:nope&b=x")[0] == 404
        assert s.get("/api/runs/..%2F..%2Fregistry")[0] == 400
        assert s.get("/api/ab/not-a-sha")[0] == 400
        status, headers, _ = s.get("/runs")
        assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["Server-Timing"].startswith("app;dur=")
        # without a token, only loopback Host names are served (DNS rebinding)
        assert s.get("/runs", {"Host": f"evil.example:{s.port}"})[0] == 421
        assert s.get("/runs", {"Host": f"localhost:{s.port}"})[0] == 200
    finally:
        s.stop()


@pytest.mark.parametrize("args, env, message", [
    (("--token", "short"), {}, "--token: at least 16 characters"),
    (("--host", "0.0.0.0"), {}, "--host 0.0.0.0 is not loopback"),
    (("--broker", "http://x"), {}, "serve reads the farm's Redis"),
    (("--broker", "redis://h:6379/abc"), {}, "the database must be a number"),
    (("--state-dir", "file.txt"), {}, "is a file"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, env, message):
    (tmp_path / "file.txt").write_text("x")
    res = run_cli("serve", "--port", "0", *args, cwd=tmp_path, **env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr


def test_port_in_use_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = run_cli("serve", "--state-dir", str(tmp_path), "--port", str(busy.getsockname()[1]))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "cannot listen" in res.stderr, res.stderr


def test_worker_metrics_module_exports_what_a_real_run_did(tmp_path):
    """record_outcome / observe_call over every item of a real priced run, scraped from
    start_metrics_server over HTTP and parsed with prometheus_client's parser."""
    from evalfarm.executors.celery import metrics

    provider = MockProviderProc()
    try:
        spec = tmp_path / "priced.yaml"
        spec.write_text(yaml.safe_dump({"name": "priced", "adapters": [
            {"id": "m1", "model": "m1", "base_url": provider.url, "price": {"input": 3, "output": 15}}],
            "prompts": [{"id": f"p{i}", "text": f"say {i}" + (" [[refuse]]" if i == 3 else ""),
                         "expected_output_contains": [str(i) if i % 3 else "zzz"]} for i in range(8)]}))
        res = run_cli("run", str(spec), "--no-save", "--json")
        assert res.returncode in (0, 1), res.stderr
        report = json.loads(res.stdout)
    finally:
        provider.stop()
    port = free_port()
    server, _ = metrics.start_metrics_server(port, addr="127.0.0.1")
    try:
        def scrape():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return metric_values(r.read().decode())

        before = scrape()
        observer = metrics.PrometheusObserver()
        for o in report["outcomes"]:
            observer.in_flight(o["adapter"], 1)
            mid = scrape()[("evalfarm_requests_in_flight", frozenset({("adapter", "m1")}))]
            observer.in_flight(o["adapter"], -1)
            metrics.observe_call(o["adapter"], o["latency_ms"] / 1000)
            metrics.record_outcome(o)
        metrics.record_retry("m1", 2)
        metrics.record_pause("ep1", 1.5)
        metrics.set_queue_depth("provider", 7)
        after = scrape()
    finally:
        server.shutdown()
    assert mid == 1

    def delta(name, **labels):
        key = (name, frozenset(labels.items()))
        return after.get(key, 0) - before.get(key, 0)

    f = report["per_adapter"]["m1"]
    expected: dict[tuple[str, str], int] = {}
    for o in report["outcomes"]:
        status = "errored" if o["error"] else "passed" if o["passed"] else "failed"
        mode = o["failure_mode"] or "none"
        expected[(status, mode)] = expected.get((status, mode), 0) + 1
    assert expected[("failed", "refusal")] == 1 and expected[("failed", "instruction_miss")] == 2
    for (status, mode), n in expected.items():
        assert delta("evalfarm_items_total", adapter="m1", status=status, failure_mode=mode) == n
    assert sum(n for (s, _), n in expected.items() if s == "passed") == f["passed"]
    assert f["cost_usd"] > 0 and abs(delta("evalfarm_spend_usd_total", adapter="m1", kind="model") - f["cost_usd"]) < 1e-9
    assert delta("evalfarm_tokens_total", adapter="m1", kind="model", direction="in") == f["tokens_in"]
    assert delta("evalfarm_provider_latency_seconds_count", adapter="m1") == len(report["outcomes"])
    assert delta("evalfarm_retries_total", adapter="m1") == 2
    assert delta("evalfarm_rate_limit_pauses_total", endpoint="ep1") == 1
    assert after[("evalfarm_queue_depth", frozenset({("pool", "provider")}))] == 7
    assert after[("evalfarm_requests_in_flight", frozenset({("adapter", "m1")}))] == 0


def test_heartbeat_key_lives_while_the_worker_does(redis_server):
    from evalfarm.executors.celery import heartbeat

    r = redis.Redis.from_url(redis_server.url)
    hb = heartbeat.start(redis_server.url, "w1@host", ["provider"], 4, interval_s=0.2, ttl_s=2)
    beat = json.loads(r.get("ef:worker:w1@host"))
    assert beat["queues"] == ["provider"] and beat["pid"] == os.getpid() and 0 < r.pttl("ef:worker:w1@host") <= 2000
    wait_until(lambda: json.loads(r.get("ef:worker:w1@host"))["ts"] > beat["ts"], 5, "a second beat")
    hb.stop()
    assert r.get("ef:worker:w1@host") is None  # a clean stop removes it at once
    # a SIGKILLed worker cannot clean up: its key expires after the TTL
    code = ("import time; from evalfarm.executors.celery import heartbeat; "
            f"heartbeat.start({redis_server.url!r}, 'w2', interval_s=0.2, ttl_s=1); print('up', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env_for(), stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"up"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert r.exists("ef:worker:w2")
    started = time.monotonic()
    wait_until(lambda: not r.exists("ef:worker:w2"), 5, "the key to expire")
    assert time.monotonic() - started <= 1.5
