"""The Farm page and /metrics during a real farm run: a real redis-server, a real `evalfarm
worker` subprocess (beating through evalfarm.executors.celery.heartbeat), a real mock provider with
latency and a price, `evalfarm run --broker` in a subprocess, and `evalfarm serve --broker`
watched by Debian's chromium."""
from __future__ import annotations

import asyncio
import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from conftest import EVALFARM, env_for
from dashboard_support import Serve, browser, metric_values, page, shot, wait_until  # noqa: F401 (fixtures)
from providers_fixture import MockProviderProc

PLUGINS = "ef_test_adapters,evalfarm.executors.celery.heartbeat"


def _labels(**kw: str) -> frozenset:
    return frozenset(kw.items())


def test_farm_page_advances_live_and_metrics_match_the_report(tmp_path, redis_server, start_worker, page):
    provider = MockProviderProc("--latency-ms", "250")
    serve = None
    try:
        worker = start_worker(redis_server.url, concurrency=2, EVALFARM_PLUGINS=PLUGINS, EVALFARM_HEARTBEAT_S="1")
        state = tmp_path / "state"
        spec = tmp_path / "farm.yaml"
        spec.write_text(yaml.safe_dump({
            "name": "farm-live", "adapters": [
                {"id": "m1", "model": "m1", "base_url": provider.url, "price": {"input": 1000, "output": 2000}},
                "slow:250"],
            "prompts": [{"id": f"p{i}", "text": f"say {i}", "expected_output_contains": [f"{i}" if i % 4 else "zzz"]}
                        for i in range(36)]}))
        serve = Serve(state, "--broker", redis_server.url)
        page.goto(serve.url + "/farm")
        page.evaluate("window.__sameDocument = 1")
        page.wait_for_selector("tr.farm-worker", timeout=15000)  # the worker's heartbeat key
        worker_row = page.locator("tr.farm-worker").first.inner_text()
        assert "provider" in worker_row and "s ago" in worker_row

        run = subprocess.Popen([*EVALFARM, "run", str(spec), "--broker", redis_server.url, "--batch-size", "2",
                                "--state-dir", str(state)], env=env_for(redis_server.url, EVALFARM_PLUGINS=PLUGINS),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen: list[int] = []
        mid_metrics = None
        deadline = time.time() + 120
        while run.poll() is None and time.time() < deadline:
            cell = page.locator(".farm-done[data-run]")
            if cell.count():
                done, total = int(cell.first.get_attribute("data-done")), int(cell.first.get_attribute("data-total"))
                if not seen or seen[-1] != done:
                    seen.append(done)
                if 0 < done < total and mid_metrics is None:
                    mid_metrics = metric_values(serve.get("/metrics")[2].decode())
                    api = serve.json("/api/farm")["runs"][0]
                    assert api["running"] and api["rate_per_s"] and api["eta_s"] is not None
                    shot(page, "farm-running")
            time.sleep(0.2)
        out, err = run.communicate(timeout=60)
        assert run.returncode in (0, 1), err.decode()
        report = json.loads(next(p for p in (state / "runs").glob("*.json")
                                 if not p.name.endswith(".lineage.json")).read_text())
        rid, total = report["run_id"], len(report["outcomes"])
        assert total == 72
        # the counter advanced on the page while the run went on, without a reload
        live = [v for v in seen if 0 < v < total]
        assert len(live) >= 2 and live == sorted(live), seen
        assert page.evaluate("window.__sameDocument") == 1
        wait_until(lambda: page.locator(f'.farm-done[data-run="{rid}"]').get_attribute("data-done") == str(total),
                   what="the page to show the finished count")
        assert mid_metrics is not None
        mid = mid_metrics[("evalfarm_farm_run_items_done", _labels(run_id=rid, spec="farm-live"))]
        assert 0 < mid < total

        # the case page shows the input the report's prompts section recorded
        case = serve.json(f"/api/runs/{rid}/cases/0")
        assert case["input_source"] == "report"
        assert case["input"] == f"say {case['prompt_id'][1:]}"

        # a 429 pause set by the farm's own limiter shows on the page and in /metrics
        from evalfarm.executors.celery.limits import RedisLimiter
        from evalfarm.providers.limits import Limits

        limiter = RedisLimiter(redis_server.url, "endpoint-under-test", Limits())
        with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
            pool.submit(asyncio.run, limiter.pause(30)).result(10)
        wait_until(lambda: "endpoint-under-test" in page.locator("#farm-pauses").inner_text(), what="the pause row")
        shot(page, "farm")

        m = metric_values(serve.get("/metrics")[2].decode())
        assert m[("evalfarm_farm_run_items_done", _labels(run_id=rid, spec="farm-live"))] == total
        assert m[("evalfarm_farm_run_items_planned", _labels(run_id=rid, spec="farm-live"))] == total
        assert m[("evalfarm_farm_run_errors", _labels(run_id=rid, spec="farm-live"))] == \
            sum(f["errors"] for f in report["per_adapter"].values())
        spend = m[("evalfarm_farm_run_spend_usd", _labels(run_id=rid, spec="farm-live"))]
        assert report["cost"]["total_usd"] > 0 and abs(spend - report["cost"]["total_usd"]) < 1e-9
        for adapter, f in report["per_adapter"].items():
            for status, n in (("passed", f["passed"]), ("failed", f["measured"] - f["passed"]), ("errored", f["errors"])):
                assert m[("evalfarm_last_run_items", _labels(spec="farm-live", adapter=adapter, status=status))] == n
                assert m[("evalfarm_state_items", _labels(adapter=adapter, status=status))] == n
            assert abs(m[("evalfarm_state_spend_usd", _labels(adapter=adapter, kind="model"))] - f["cost_usd"]) < 1e-9
            if f["pass_rate"] is not None:
                assert m[("evalfarm_last_run_pass_rate", _labels(spec="farm-live", adapter=adapter))] == f["pass_rate"]
        assert m[("evalfarm_last_run_passed", _labels(spec="farm-live", result="PASS"))] == 1
        assert m[("evalfarm_farm_up", frozenset())] == 1
        assert m[("evalfarm_workers", frozenset())] == 1
        for pool in ("provider", "judge", "spawn", "aggregate"):
            assert m[("evalfarm_queue_depth", _labels(pool=pool))] == 0
        assert 0 < m[("evalfarm_rate_limit_pause_remaining_seconds", _labels(endpoint="endpoint-under-test"))] <= 30

        # a worker that stops cleanly removes its heartbeat key at once
        worker.stop()
        assert serve.json("/api/farm")["workers"] == []
    finally:
        if serve is not None:
            serve.stop()
        provider.stop()


def test_farm_page_says_so_without_a_broker_or_when_redis_is_down(tmp_path, redis_server, page):
    plain = Serve(tmp_path)
    try:
        page.goto(plain.url + "/farm")
        assert "without --broker" in page.locator("main").inner_text()
        assert plain.json("/api/farm")["configured"] is False
    finally:
        plain.stop()
    s = Serve(tmp_path, "--broker", redis_server.url)
    try:
        redis_server.stop()
        started = time.monotonic()
        snap = s.json("/api/farm")
        assert snap["ok"] is False and "Connection" in snap["error"] and time.monotonic() - started < 10
        page.goto(s.url + "/farm")
        wait_until(lambda: page.locator("#farm-status").inner_text().startswith("error"), what="the error status")
        m = metric_values(s.get("/metrics")[2].decode())
        assert m[("evalfarm_farm_up", frozenset())] == 0
    finally:
        s.stop()
