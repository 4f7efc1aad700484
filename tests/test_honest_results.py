"""Issue 10, honest results: what is reported must be what happened (each test failed before the fix)."""
from __future__ import annotations

import json

from conftest import run_cli


def spec(tmp, url: str, prompts: str, extra: str = "") -> str:
    (tmp / "s.yaml").write_text(f"name: honest\nadapters:\n  - {{id: m, model: mock, base_url: '{url}'"
                                f"{extra}}}\nprompts:\n{prompts}")
    return str(tmp / "s.yaml")


def test_a_truncated_answer_without_checks_fails_as_truncation(tmp_path, provider):
    server = provider()
    path = spec(tmp_path, server.url, "  - {id: cut, text: 'tell me a long story about ducks'}\n"
                                      "  - {id: ok, text: 'tell me a long story', allow_truncation: true}\n",
                ", params: {max_tokens: 3}")
    res = run_cli("run", path, "--no-save", "--json")
    report = json.loads(res.stdout)
    cut, ok = report["outcomes"]
    assert cut["finish_reason"] == "length" and cut["passed"] is False and cut["failure_mode"] == "truncation"
    assert "truncated" in cut["golden_reason"]
    assert ok["finish_reason"] == "length" and ok["passed"] is True  # the case opted out
    assert res.returncode == 0 and report["per_adapter"]["m"]["failure_modes"] == {"truncation": 1}


def test_diff_shows_n_a_for_what_one_run_did_not_measure(tmp_path):
    state = tmp_path / "st"
    (tmp_path / "a.yaml").write_text("name: d\nadapters: [mock, 'mock:gone']\nprompts:\n  - {id: p, text: hi}\n")
    (tmp_path / "b.yaml").write_text("name: d\nadapters: [mock, broken]\nprompts:\n  - {id: p, text: hi}\n")
    for name in ("a", "b"):
        res = run_cli("run", str(tmp_path / f"{name}.yaml"), "--state-dir", str(state),
                      EVALFARM_PLUGINS="ef_test_adapters")
        assert res.returncode in (0, 1), res.stderr
    runs = sorted(p for p in (state / "runs").glob("*.json") if not p.name.endswith(".lineage.json"))
    res = run_cli("diff", str(runs[0]), str(runs[1]), "--state-dir", str(state), "--json")
    rows = json.loads(res.stdout)["per_adapter"]
    assert rows["mock:gone"]["overall_b"] is None and rows["mock:gone"]["winner"] == "only in a"
    assert rows["broken"]["overall_a"] is None and rows["broken"]["winner"] == "only in b"
    text = run_cli("diff", str(runs[0]), str(runs[1]), "--state-dir", str(state)).stdout
    gone = next(line for line in text.splitlines() if "mock:gone" in line)
    assert "n/a" in gone and "0.000" not in gone and "-1.000" not in gone, gone


def test_a_dropped_connection_is_not_called_could_not_connect(tmp_path, provider):
    server = provider()
    path = spec(tmp_path, server.url, "  - {id: before, text: '[[drop]] hi'}\n  - {id: during, text: '[[drop-mid]] hi'}\n")
    report = json.loads(run_cli("run", path, "--no-save", "--json", timeout=120).stdout)
    before, during = (o["error"]["message"] for o in report["outcomes"])
    assert "connection closed by the server" in before and "before it answered" in before, before
    assert "connection closed by the server" in during and "middle of its answer" in during, during
    assert "could not connect" not in before + during


def test_farm_latency_is_the_providers_not_the_queue(tmp_path, provider, redis_server, start_worker):
    """One worker that may have 4 calls in flight, batches of 40 items at 300 ms: items wait their turn,
    and the latency reported is still the server's 300 ms, as in process; the wait is reported apart."""
    server = provider("--latency-ms", "300")
    path = spec(tmp_path, server.url, "".join(f"  - {{id: p{i}, text: t{i}}}\n" for i in range(40)))
    start_worker(redis_server.url, concurrency=2, EVALFARM_MAX_IN_FLIGHT="4")
    farm = json.loads(run_cli("run", path, "--no-save", "--json", "--batch-size", "40", broker=redis_server.url,
                              timeout=120).stdout)
    local = json.loads(run_cli("run", path, "--no-save", "--json", "--concurrency", "4").stdout)
    for report in (farm, local):
        fig = report["per_adapter"]["m"]
        assert 290 <= fig["latency_ms_p50"] <= 450 and fig["latency_ms_p95"] < 600, fig
    assert max(o["wait_ms"] for o in farm["outcomes"]) > 2000  # the batch's last items waited ~9 turns
    assert max(o["wait_ms"] for o in local["outcomes"]) < 200  # in process an item starts when a slot is free


def test_the_terminal_says_why_nothing_was_measured_and_what_to_check(tmp_path, provider):
    server = provider("--api-key", "the-right-key-123")
    path = spec(tmp_path, server.url, "  - {id: a, text: hi}\n  - {id: b, text: ho}\n")
    res = run_cli("run", path, "--no-save")  # EVAL_API_KEY is not set
    assert res.returncode == 3
    assert "m: 2 x AuthError (adapter), e.g. HTTP 401" in res.stdout, res.stdout
    assert "is EVAL_API_KEY set, and valid, where the calls run" in res.stdout and server.url in res.stdout
    refused = run_cli("run", spec(tmp_path, server.url, "  - {id: a, text: hi}\n", extra=", api_key_env: DB_PASSWORD"),
                      "--no-save", DB_PASSWORD="x")
    assert "KeyRefused" in refused.stdout and "EVALFARM_KEY_ENV_ALLOW" in refused.stdout, refused.stdout
