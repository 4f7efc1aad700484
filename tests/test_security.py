"""Issue 10, security: a spec or a file from someone else must not reach further (each failed before)."""
from __future__ import annotations

import json

import redis as redis_lib

from conftest import run_cli


def spec_file(tmp, url: str, prompt: str, key_env: str = "EVAL_API_KEY") -> str:
    (tmp / "s.yaml").write_text(f"name: sec\nadapters:\n  - {{id: m, model: mock, base_url: '{url}', "
                                f"api_key_env: {key_env}}}\nprompts:\n  - {{id: a, text: '{prompt}'}}\n")
    return str(tmp / "s.yaml")


def test_a_key_straddling_the_cut_is_redacted_whole(tmp_path, provider, redis_server, start_worker):
    """A gateway echoes the key 190 characters into a non-JSON body; the message is cut at 200. Cutting
    first left 10 characters of the key for the redaction to miss (in the report, Markdown, JUnit, Redis)."""
    key = "zq7-Hx92kLmQ0pRs4TuVw8YaBc"
    server = provider()
    path = spec_file(tmp_path, server.url, "[[echo-key:190]] hi", key_env="MY_CRED")
    env = {"MY_CRED": key, "EVALFARM_KEY_ENV_ALLOW": "MY_CRED"}
    start_worker(redis_server.url, concurrency=1, **env)
    for broker in (None, redis_server.url):
        state = tmp_path / f"st-{'farm' if broker else 'local'}"
        res = run_cli("run", path, "--state-dir", str(state), "--json", "--junit", str(state / "j.xml"),
                      broker=broker, **env)
        assert res.returncode == 3, res.stderr
        message = json.loads(res.stdout)["outcomes"][0]["error"]["message"]
        assert message.startswith("response is not JSON: xxx") and "***" in message, message
        texts = [f.read_text(errors="replace") for f in state.rglob("*") if f.is_file()] + [res.stdout, res.stderr]
        for part in (key, key[:10], key[-10:]):
            assert not any(part in t for t in texts), part
    r = redis_lib.Redis.from_url(redis_server.url)
    for k in r.scan_iter("ef:*"):
        values = [r.get(k)] if r.type(k) == b"string" else r.hvals(k) if r.type(k) == b"hash" else []
        assert not any(key[:10].encode() in (v or b"") for v in values), k


def test_a_spec_cannot_make_a_worker_send_any_variable(tmp_path, provider, redis_server, start_worker):
    """api_key_env: WORKER_DB_PASSWORD pointing at any URL: the worker refuses, per item, naming the variable
    to allow; nothing is sent (the server saw no request)."""
    password = "db-password-that-must-stay-home"
    server = provider()
    path = spec_file(tmp_path, server.url, "hi", key_env="WORKER_DB_PASSWORD")
    start_worker(redis_server.url, concurrency=1, WORKER_DB_PASSWORD=password)
    for broker in (None, redis_server.url):
        res = run_cli("run", path, "--no-save", "--json", broker=broker, WORKER_DB_PASSWORD=password)
        assert res.returncode == 3, res.stderr
        err = json.loads(res.stdout)["outcomes"][0]["error"]
        assert err["class"] == "KeyRefused" and "add WORKER_DB_PASSWORD to EVALFARM_KEY_ENV_ALLOW" in err["message"]
        assert err["attempts"] == 1
    assert server.stats()["requests"] == 0


def test_keys_go_only_to_allowed_endpoints(tmp_path, provider):
    server = provider()
    path = spec_file(tmp_path, server.url, "hi")
    refused = run_cli("run", path, "--no-save", "--json", EVAL_API_KEY="k-123456789",
                      EVALFARM_ENDPOINT_ALLOW="api.example.com,*.internal")
    err = json.loads(refused.stdout)["outcomes"][0]["error"]
    assert err["class"] == "KeyRefused" and "'127.0.0.1' is not in EVALFARM_ENDPOINT_ALLOW" in err["message"]
    assert server.stats()["requests"] == 0
    allowed = run_cli("run", path, "--no-save", "--json", EVAL_API_KEY="k-123456789",
                      EVALFARM_ENDPOINT_ALLOW="api.example.com,127.0.0.*")
    assert allowed.returncode == 0, allowed.stderr
    assert server.stats_requests()[-1]["authorization"] == "Bearer k-123456789"
