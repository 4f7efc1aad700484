"""Suite mode on the Redis farm with a real worker, and the provider executor against a real HTTP server."""
from __future__ import annotations

import hashlib
import json
import subprocess
import time
import socket

import pytest
import redis

from conftest import EVALFARM, EXAMPLES, env_for, free_port, run_cli

SUITE = str(EXAMPLES / "ab" / "suite.yaml")


def test_suite_mode_runs_on_the_redis_farm_and_matches_the_embedded_artifact(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, concurrency=2)
    farm_dir, local_dir = tmp_path / "farm", tmp_path / "local"
    farm_dir.mkdir(), local_dir.mkdir()
    args = ("ab", "--suite", SUITE, "--arm-a", "baseline", "--arm-b", "verbose", "--arms", "3", "--trials", "2",
            "--json")
    farm = run_cli(*args, broker=redis_server.url, cwd=farm_dir)
    assert farm.returncode == 0, farm.stderr
    local = run_cli(*args, cwd=local_dir)
    assert local.returncode == 0, local.stderr
    assert farm.stdout == local.stdout  # the same artifact, byte for byte, wherever the items ran
    digest = hashlib.sha256(farm.stdout.strip().encode()).hexdigest()
    assert (farm_dir / ".evalfarm" / "reports" / "eval_ab" / f"{digest}.json").is_file()
    # the items went through the worker: one run in the store, 3 arms x 12 tasks x 2 trials executed once each
    r = redis.Redis.from_url(redis_server.url)
    [counts_key] = r.keys("ef:run:*:counts")
    counts = r.hgetall(counts_key)
    assert int(counts[b"done"]) == 72 and int(counts[b"executed"]) == 72
    assert run_cli("ab", "verify", f".evalfarm/reports/eval_ab/{digest}.json", cwd=farm_dir).returncode == 0
    # variant mode's echo items run on the worker too
    ex = EXAMPLES / "ab"
    variant = ("ab", "--variant-a", str(ex / "variant_a.yaml"), "--variant-b", str(ex / "variant_b.yaml"),
               "--tasks", str(ex / "tasks.yaml"), "--json")
    on_farm = run_cli(*variant, broker=redis_server.url, cwd=farm_dir)
    assert on_farm.returncode == 0, on_farm.stderr
    assert on_farm.stdout == run_cli(*variant, cwd=local_dir).stdout
    assert len(r.keys("ef:run:*:counts")) == 2


@pytest.fixture
def mock_provider(tmp_path):
    port = free_port()
    log = open(tmp_path / "mock-provider.log", "wb")
    proc = subprocess.Popen([*EVALFARM, "mock-provider", "--port", str(port)], env=env_for(), stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail((tmp_path / "mock-provider.log").read_text())
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(10)


def test_provider_executor_against_an_openai_compatible_server(tmp_path, mock_provider):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: echo\ntasks:\n  - {id: a, input: 'Say Paris', expected: Paris}\n"
                     "  - {id: b, input: 'Say Tokyo', expected: Tokyo}\n"
                     "  - {id: c, input: 'Say nothing', expected: Lima}\n")
    base = ("ab", "--suite", str(suite), "--arm-a", "balanced", "--arm-b", "terse", "--executor", "provider",
            "--model", "mock-1", "--base-url", mock_provider, "--json")
    res = run_cli(*base, "--price", "3,15", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Unclosed" not in res.stderr
    art = json.loads(res.stdout)
    assert art["executor"]["kind"] == "provider" and art["executor"]["model"] == "mock-1"
    assert art["executor"]["price_usd_per_mtok"] == {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
    # real spend goes to the production ledger by default, one row per run, tokens from the responses
    ledger = tmp_path / ".evalfarm" / "cost" / "ledger.jsonl"
    rows = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(rows) == 6 and {r["source"] for r in rows} == {"provider"} and all(r["run_id"] for r in rows)
    for r in rows:
        assert r["input_tokens"] > 0 and r["output_tokens"] > 0
        assert r["cost_usd"] == round((r["input_tokens"] * 3 + r["output_tokens"] * 15) / 1e6, 12)
    # the addendum went out as the system prompt: terse's longer addendum costs more input tokens
    by_arm = {r["arm"]: r["input_tokens"] for r in rows if r["task"] == "a"}
    assert by_arm["terse"] != by_arm["balanced"]
    assert art["arms"]["balanced"]["pass_rate"] == round(2 / 3, 10)  # the echo says Paris and Tokyo, not Lima
    # both arms pass the same 2 of 3 tasks: 3 tasks cannot show a tie (the paired interval is wide), so
    # cost does not decide (before issue 20: a bootstrap interval of [0, 0] and a winner by cost)
    assert art["verdict"]["result"] == "inconclusive", art["verdict"]
    assert "would be needed to show a tie" in art["verdict"]["reason"]
    [path] = (tmp_path / ".evalfarm" / "reports" / "eval_ab").glob("*.json")
    assert run_cli("ab", "verify", str(path), cwd=tmp_path).returncode == 0
    assert not (tmp_path / ".evalfarm" / "ab").exists()  # nothing in the synthetic ledger

    # no price: cost is not measured, so no winner
    res = run_cli(*base, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    v = json.loads(res.stdout)["verdict"]
    assert v["result"] == "incomparable" and {m["reason"] for m in v["not_measured"]} == {"price_unknown"}

    # a provider that fails one task: a runtime error, never a quality failure, and no winner
    suite.write_text(suite.read_text() + "  - {id: d, input: 'Say Rome [[status:400]]', expected: Rome}\n")
    res = run_cli(*base, "--price", "3,15", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    art = json.loads(res.stdout)
    assert art["verdict"]["result"] == "incomparable"
    assert art["arms"]["terse"]["not_measured"]["quality"] == {"reason": "runtime_error", "runs_missing": 1,
                                                               "runs_errored": 1}


def test_unreachable_provider_is_nothing_measured_exit_3(tmp_path):
    res = run_cli("ab", "--suite", SUITE, "--arm-a", "balanced", "--arm-b", "terse", "--executor", "provider",
                  "--model", "m", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--price", "1,2", "--json",
                  cwd=tmp_path, timeout=300)
    assert res.returncode == 3, res.stderr
    assert "nothing measured" in res.stderr
    art = json.loads(res.stdout)
    assert art["verdict"]["result"] == "incomparable"
    assert {m["reason"] for m in art["verdict"]["not_measured"]} == {"runtime_error"}
    rows = (tmp_path / ".evalfarm" / "cost" / "ledger.jsonl").read_text().splitlines()
    assert len(rows) == 24 and all(json.loads(r)["error"] == "TransportError" for r in rows)
