"""deploy/prometheus/alerts.yml checked by the real promtool (Debian's `prometheus` package; `make test`
installs it): `promtool check rules`, and `promtool test rules` unit tests that make every alert fire.
Plus the one exposition format of the worker's and serve's /metrics, checked by `promtool check metrics`,
and an adapter's series at zero before its first item ends."""
from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
import yaml

from conftest import EVALFARM, ROOT, env_for, free_port, stop_group, wait_for

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
# what Prometheus 2.42 sends when it scrapes
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def promtool() -> str:
    return shutil.which("promtool") or pytest.fail("promtool is not installed: `make promtool` (apt install prometheus)")


def test_promtool_checks_the_rules_and_every_alert_fires_in_its_unit_tests():
    check = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in check.stdout
    assert {"EvalfarmNoWorkers", "EvalfarmRunStalled", "EvalfarmSpendRateHigh", "EvalfarmErrorRateHigh"} <= set(alerts)
    fired = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    assert fired == set(alerts)  # each alert has a test in which it fires
    run = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                         timeout=120, cwd=RULE_TESTS.parent)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr
    print("\nFIGURES promtool test rules:", run.stdout.strip().replace("\n", " | "))


def test_the_old_readme_alert_without_on_never_fires(tmp_path):
    """The README's `evalfarm_queue_depth{pool="provider"} > 0 and evalfarm_workers == 0` matched on all
    labels, and only one side has `pool`: it cannot fire. The shipped rule (`and on()`) does, on the same series."""
    old = "evalfarm_queue_depth{pool=\"provider\"} > 0 and evalfarm_workers == 0"
    new = yaml.safe_load(RULES.read_text())["groups"][0]["rules"][0]["expr"]
    results = {}
    for name, expr in (("old", old), ("shipped", new)):
        (tmp_path / f"{name}.yml").write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
            {"alert": "NoWorkers", "expr": expr, "for": "5m"}]}]}))
        (tmp_path / f"{name}_test.yml").write_text(yaml.safe_dump({
            "rule_files": [f"{name}.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": [
                {"series": 'evalfarm_queue_depth{pool="provider", job="serve", instance="s:8787"}', "values": "40x10"},
                {"series": 'evalfarm_workers{job="serve", instance="s:8787"}', "values": "0x10"}],
                "alert_rule_test": [{"eval_time": "6m", "alertname": "NoWorkers",
                                     "exp_alerts": [{"exp_labels": {}}]}]}]}))
        results[name] = subprocess.run([promtool(), "test", "rules", f"{name}_test.yml"], capture_output=True,
                                       text=True, timeout=60, cwd=tmp_path)
    said = {k: (r.stdout + r.stderr).replace(" ", "").replace("\n", "") for k, r in results.items()}
    assert results["old"].returncode != 0 and "got:[]" in said["old"], said["old"]
    # the shipped rule fires (its labels carry the pool, so the bare expectation above differs: not "got:[]")
    assert "got:[]" not in said["shipped"] and 'pool="provider"' in said["shipped"], said["shipped"]


def test_worker_and_serve_answer_one_exposition_format_that_promtool_accepts(tmp_path):
    from evalfarm.executors.celery import metrics

    port = free_port()
    server, _ = metrics.start_metrics_server(port, addr="127.0.0.1")
    try:
        metrics.PrometheusObserver().in_flight("fresh-adapter", 1)  # its first call starts: series at zero
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
        with urllib.request.urlopen(req, timeout=10) as r:
            worker_type, worker_body = r.headers["Content-Type"], r.read().decode()
    finally:
        server.shutdown()
        metrics.PrometheusObserver().in_flight("fresh-adapter", -1)
    for line in ('evalfarm_spend_usd_total{adapter="fresh-adapter",kind="model"} 0.0',
                 'evalfarm_items_total{adapter="fresh-adapter",failure_mode="none",status="passed"} 0.0',
                 'evalfarm_items_total{adapter="fresh-adapter",failure_mode="runtime_error",status="errored"} 0.0',
                 'evalfarm_items_total{adapter="fresh-adapter",failure_mode="instruction_miss",status="failed"} 0.0'):
        assert line in worker_body, line

    serve_port = free_port()
    proc = subprocess.Popen([*EVALFARM, "serve", "--state-dir", str(tmp_path / "state"),
                             "--port", str(serve_port)], env=env_for(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def scrape():
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{serve_port}/metrics",
                                             headers={"Accept": PROMETHEUS_ACCEPT})
                with urllib.request.urlopen(req, timeout=5) as r:
                    return r.headers["Content-Type"], r.read().decode()
            except OSError:
                return None
        serve_type, serve_body = wait_for(scrape, 30, "serve's /metrics")
    finally:
        stop_group(proc)
    assert worker_type == serve_type == "text/plain; version=0.0.4; charset=utf-8"
    for body in (worker_body, serve_body):
        checked = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True, text=True,
                                 timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
