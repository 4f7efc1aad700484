"""`evalfarm worker --metrics-port N`: Prometheus metrics of what the worker did, scraped during and after a
real farm run, equal to the run's report."""
from __future__ import annotations

import json
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import free_port, run_cli


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_worker_metrics_match_the_report(tmp_path, provider, redis_server, start_worker):
    server = provider("--latency-ms", "30")
    (tmp_path / "s.yaml").write_text(
        f"name: metered\nadapters:\n  - {{id: m, model: mock, base_url: '{server.url}', "
        "price: {input: 1000, output: 2000}}\nprompts:\n"
        + "".join(f"  - {{id: p{i}, text: 'say {i}', expected_output_contains: ['{i if i % 3 else 'nope'}']}}\n"
                  for i in range(30))
        + "  - {id: boom, text: '[[status:500]] x'}\n")
    port = free_port()
    start_worker(redis_server.url, concurrency=2, extra_args=["--metrics-port", str(port)])
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", "--batch-size", "4",
                  broker=redis_server.url, timeout=180)
    report = json.loads(res.stdout)
    fig = report["per_adapter"]["m"]
    deadline = time.time() + 10
    while True:
        m = scrape(port)
        items = {dict(k)["status"]: v for (name, k), v in m.items() if name == "evalfarm_items_total"
                 and dict(k)["adapter"] == "m"}
        if sum(items.values()) >= fig["items"] or time.time() > deadline:
            break
        time.sleep(0.2)
    assert items == {"passed": fig["passed"], "failed": fig["measured"] - fig["passed"], "errored": fig["errors"]}
    spend = m[("evalfarm_spend_usd_total", (("adapter", "m"), ("kind", "model")))]
    assert abs(spend - fig["cost_usd"]) < 1e-9 and spend > 0
    latency_count = m[("evalfarm_provider_latency_seconds_count", (("adapter", "m"),))]
    assert latency_count == fig["items"]  # every call observed, the failed one too
    assert m[("evalfarm_retries_total", (("adapter", "m"),))] == 3  # the 500 retried 3 times
    assert m[("evalfarm_requests_in_flight", (("adapter", "m"),))] == 0
    assert ("evalfarm_queue_depth", (("pool", "all"),)) in m
