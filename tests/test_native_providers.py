"""Native wire protocols (providers/anthropic, gemini, responses, azure, http_json) called through a real
`evalfarm mock-provider` over real HTTP, one run with every protocol as an adapter: the request each sends
(path, key header, version header, where the system prompt goes) and what each answer becomes (text,
tokens, cost, truncation)."""
from __future__ import annotations

import json

import httpx
import yaml

from conftest import run_cli

KEY = "sk-native-test-0123"


def test_every_native_protocol_through_the_mock(provider, tmp_path):
    mock = provider("--api-key", KEY)
    root = mock.url.removesuffix("/v1")
    price = {"input": 1.0, "output": 2.0}
    adapters = [
        {"id": "claude", "provider": "anthropic", "model": "claude-x", "base_url": mock.url,
         "api_key_env": "ANTHROPIC_API_KEY", "price": price, "params": {"temperature": 0, "stop": "END"}},
        {"id": "gemini", "provider": "gemini", "model": "gemini-x", "base_url": root + "/v1beta",
         "api_key_env": "GEMINI_API_KEY", "price": price, "params": {"max_tokens": 50}},
        {"id": "vertex", "provider": "vertex", "model": "gemini-v",
         "base_url": root + "/v1/projects/p1/locations/us-central1", "api_key_env": "VERTEX_API_KEY",
         "price": price},
        {"id": "responses", "provider": "openai-responses", "model": "gpt-r", "base_url": mock.url,
         "api_key_env": "OPENAI_API_KEY", "price": price},
        {"id": "azure", "provider": "azure", "model": "dep1", "base_url": root + "/openai/deployments/dep1",
         "api_version": "2024-10-21", "api_key_env": "AZURE_API_KEY", "price": price},
        {"id": "bedrock", "provider": "bedrock", "model": "arn:aws:bedrock:us-east-1:1:inference-profile/us.x-v1:0",
         "base_url": root, "api_key_env": "AWS_BEARER_TOKEN_BEDROCK", "price": price, "params": {"max_tokens": 50}},
        {"id": "http", "provider": "http", "model": "my-app", "base_url": root + "/chat/api",
         "api_key_env": "EVAL_API_KEY",
         "http": {"headers": {"X-Tenant": "t1"}, "body": {"q": {"text": "{{prompt}}"}, "n": 1},
                  "response_path": "json.choices[0].message.content"}},
    ]
    spec = {"name": "native", "adapters": adapters, "prompts": [
        {"id": "hello", "system": "You are terse.", "text": "say hello world", "expected_output_contains": ["hello world"]},
        {"id": "cut", "text": "one two three four five six [[length]]", "allow_truncation": True}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    keys = dict.fromkeys(("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "VERTEX_API_KEY", "OPENAI_API_KEY",
                          "AZURE_API_KEY", "EVAL_API_KEY", "AWS_BEARER_TOKEN_BEDROCK"), KEY)
    ran = run_cli("run", str(path), "-o", str(tmp_path / "r.json"), "--json", "--state-dir", str(tmp_path / "st"),
                  **keys)
    assert ran.returncode == 0, ran.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    got = {(o["adapter"], o["prompt_id"]): o for o in report["outcomes"]}
    assert len(got) == 14 and not [o["error"] for o in got.values() if o["error"]]
    for a in adapters:
        hello = got[(a["id"], "hello")]
        assert hello["golden_passed"] and "say hello world" in hello["output"], (a["id"], hello)
        if a["id"] != "http":  # the JSON endpoint reports no usage
            # the mock counts words: system (3) + user (3) in, the echoed user message (3) out; priced per million
            assert (hello["input_tokens"], hello["output_tokens"]) == (6, 3), a["id"]
            assert abs(hello["cost_usd"] - (6 * 1.0 + 3 * 2.0) / 1e6) < 1e-12
            assert got[(a["id"], "cut")]["finish_reason"] == "length", a["id"]

    seen = {r["protocol"]: r for r in mock.stats_requests() if "hello" in r["user"]}
    assert set(seen) == {"anthropic", "gemini", "vertex", "responses", "azure", "http", "bedrock"}
    assert all(r["key"] == KEY for r in seen.values())  # each in its own header (mock/native.py)
    a = seen["anthropic"]
    assert a["path"] == "/v1/messages" and a["headers"]["anthropic-version"] == "2023-06-01"
    assert a["body"]["system"] == "You are terse." and a["body"]["max_tokens"] == 1024
    assert a["body"]["stop_sequences"] == ["END"] and a["authorization"] is None
    g = seen["gemini"]
    assert g["path"] == "/v1beta/models/gemini-x:generateContent"
    assert g["body"]["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert g["body"]["generationConfig"] == {"maxOutputTokens": 50}
    assert seen["vertex"]["path"] == "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-v:generateContent"
    assert seen["vertex"]["authorization"] == f"Bearer {KEY}"
    r = seen["responses"]
    assert r["path"] == "/v1/responses" and r["body"]["instructions"] == "You are terse."
    assert r["body"]["input"] == [{"role": "user", "content": "say hello world"}]
    z = seen["azure"]
    assert z["path"] == "/openai/deployments/dep1/chat/completions" and z["query"] == {"api-version": "2024-10-21"}
    assert z["authorization"] is None and z["model"] == "dep1"
    b = seen["bedrock"]
    assert b["path"] == "/model/arn:aws:bedrock:us-east-1:1:inference-profile/us.x-v1:0/converse"
    assert b["body"] == {"messages": [{"role": "user", "content": [{"text": "say hello world"}]}],
                         "system": [{"text": "You are terse."}], "inferenceConfig": {"maxTokens": 50}}
    assert b["authorization"] == f"Bearer {KEY}"
    h = seen["http"]
    assert h["path"] == "/chat/api" and h["body"] == {"q": {"text": "You are terse.\n\nsay hello world"}, "n": 1}


def test_bad_native_answers_and_specs_are_one_line_errors(provider, tmp_path):
    mock = provider()
    spec = {"name": "bad", "adapters": [
        {"id": "http", "provider": "http", "model": "m", "base_url": mock.url.removesuffix("/v1") + "/x",
         "http": {"body": {"q": "{{prompt}}"}, "response_path": "json.nothing.here"}}],
        "prompts": [{"id": "p", "text": "hi"}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    ran = run_cli("run", str(path), "-o", str(tmp_path / "r.json"), "--json", "--state-dir", str(tmp_path / "st"))
    assert ran.returncode == 3, ran.stderr  # nothing measured: the one item errored
    outcome = json.loads((tmp_path / "r.json").read_text())["outcomes"][0]
    assert "response_path json.nothing.here not found in the answer" in str(outcome["error"])

    # a mistyped API path is a 404, not the JSON endpoint's catch-all
    assert httpx.post(mock.url + "/chat/completion", json={"q": "hi"}).status_code == 404
    assert httpx.post(mock.url.removesuffix("/v1") + "/my/app", json={"q": "hi"}).json()["output"] == "hi"

    spec["adapters"] = [{"id": "az", "provider": "azure", "model": "d", "base_url": mock.url}]
    path.write_text(yaml.safe_dump(spec))
    ran = run_cli("run", str(path))
    assert ran.returncode == 2 and "provider azure needs api_version" in ran.stderr
    assert len([ln for ln in ran.stderr.splitlines() if ln.strip()]) == 1, ran.stderr


def test_a_judge_on_a_native_protocol(provider, tmp_path):
    mock = provider()
    spec = {"name": "judged", "adapters": [{"id": "m", "model": "m", "base_url": mock.url}],
            "judge": {"provider": "anthropic", "model": "claude-judge", "base_url": mock.url,
                      "api_key_env": "ANTHROPIC_API_KEY", "pass_score": 1.0},
            "prompts": [{"id": "ok", "text": "fine", "criteria": [{"id": "c1", "description": "is fine"}]},
                        {"id": "bad", "text": "not fine [[fail-criterion:c1]]",
                         "criteria": [{"id": "c1", "description": "is fine"}]}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    ran = run_cli("run", str(path), "-o", str(tmp_path / "r.json"), "--json", "--state-dir", str(tmp_path / "st"),
                  ANTHROPIC_API_KEY="k")
    assert ran.returncode == 0, ran.stderr
    outcomes = {o["prompt_id"]: o for o in json.loads((tmp_path / "r.json").read_text())["outcomes"]}
    assert outcomes["ok"]["passed"] and not outcomes["bad"]["passed"]
    assert outcomes["bad"]["judge_criteria"][0]["verdict"] == "fail"
    judged = [r for r in mock.stats_requests() if r["protocol"] == "anthropic"]
    assert len(judged) == 2 and all(r["model"] == "claude-judge" and r["key"] == "k" for r in judged)
