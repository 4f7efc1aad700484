"""Metric labels from untrusted specs are bounded (issue 17): a spec with 5,000 adapters run on a real
worker with --metrics-port; /metrics keeps the first 200 adapters per metric and counts the rest
under `" other"`, and the totals equal the run's. The overflow label is one no adapter can have: an
adapter named `other` keeps its own series."""
from __future__ import annotations

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import free_port, run_cli, wait_for


def test_five_thousand_adapters_keep_metrics_bounded(tmp_path, redis_server, start_worker):
    n = 5000
    (tmp_path / "s.yaml").write_text("name: many\nadapters: [" + ", ".join(f'"mock:a{i}"' for i in range(n))
                                     + "]\nprompts:\n  - {id: p, text: hello}\n")
    port = free_port()
    start_worker(redis_server.url, concurrency=4, extra_args=["--metrics-port", str(port)])
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", broker=redis_server.url, timeout=240)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    assert json.loads(res.stdout)["items_done"] == n

    def scrape() -> tuple[str, dict]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        items = {}
        for family in text_string_to_metric_families(text):
            if family.name == "evalfarm_items":
                for s in family.samples:
                    if s.name == "evalfarm_items_total":
                        items[s.labels["adapter"]] = items.get(s.labels["adapter"], 0) + s.value
        return text, items

    text, items = wait_for(lambda: (lambda t, i: (t, i) if sum(i.values()) >= n else None)(*scrape()), 30,
                           "every item counted in /metrics")
    assert sum(items.values()) == n  # totals unchanged
    assert len(items) == 201 and items[" other"] == n - 200, (len(items), items.get(" other"))
    lines = text.count("\n")
    assert lines < 20000 and len(text) < 2_000_000, (lines, len(text))
    print(f"\n/metrics with {n:,} adapters: {lines:,} lines, {len(text) / 1e6:.2f} MB; 200 adapters + \" other\"")


def scrape_items(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    items: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "evalfarm_items":
            for s in family.samples:
                if s.name == "evalfarm_items_total":
                    items[s.labels["adapter"]] = items.get(s.labels["adapter"], 0) + s.value
    return items


def test_an_adapter_named_other_is_not_merged_with_the_overflow(tmp_path, redis_server, start_worker):
    """With a cap of 2 and three adapters, one of them named `other`: three series (two adapters and the
    overflow), never two (the adapter `other` and the overflow under one label)."""
    (tmp_path / "s.yaml").write_text("name: other\nadapters:\n  - {id: other, provider: mock, model: x}\n"
                                     "  - mock:a\n  - mock:b\nprompts:\n  - {id: p, text: hello}\n"
                                     "  - {id: q, text: world}\n")
    port = free_port()
    start_worker(redis_server.url, concurrency=2, extra_args=["--metrics-port", str(port)],
                 EVALFARM_METRICS_LABEL_CAP="2")
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", broker=redis_server.url, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    items = wait_for(lambda: (lambda i: i if sum(i.values()) >= 6 else None)(scrape_items(port)), 30,
                     "every item counted in /metrics")
    assert sum(items.values()) == 6, items
    assert len(items) == 3 and items[" other"] == 2 and all(v == 2 for v in items.values()), items
