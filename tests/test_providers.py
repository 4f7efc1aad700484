"""Providers against the real mock-provider server in a subprocess: retries, errors, judge, cost."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from conftest import run_cli


def cases(tmp: Path, *entries: dict) -> Path:
    path = tmp / "cases.yaml"
    path.write_text(yaml.safe_dump(list(entries)))
    return path


def run_cases(tmp: Path, base_url: str, *extra: str, **env: str):
    return run_cli("run", "--dataset", str(tmp / "cases.yaml"), "--model", "m1", "--base-url", base_url,
                   "--no-save", "--json", *extra, cwd=tmp, **env)


def outcomes(res) -> dict[str, dict]:
    return {o["prompt_id"]: o for o in json.loads(res.stdout)["outcomes"]}


def test_429_and_503_retried_honouring_retry_after(tmp_path, provider):
    p = provider()
    cases(tmp_path, {"id": "secs", "input": "[[fail:2:429]] hello"},
          {"id": "date", "input": "[[fail:1:429]] [[retry-after-date]] hi"},
          {"id": "five", "input": "[[fail:3:503]] hey"})
    t0 = time.monotonic()
    res = run_cases(tmp_path, p.url)
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    out = outcomes(res)
    assert out["secs"]["attempts"] == 3 and out["secs"]["output"] == "hello" and out["secs"]["error"] is None
    assert out["date"]["attempts"] == 2 and out["date"]["error"] is None
    assert out["five"]["attempts"] == 4 and out["five"]["error"] is None  # 3 retries, then success
    assert elapsed >= 2.0  # two Retry-After: 1 waits, in sequence, for "secs"
    assert p.stats()["statuses"]["429"] == 3


def test_transient_failure_that_remains_is_runtime_error_and_exit_3(tmp_path, provider):
    p = provider()
    cases(tmp_path, {"id": "a", "input": "[[status:503]] x"}, {"id": "b", "input": "[[status:429]] y"})
    res = run_cases(tmp_path, p.url)
    assert res.returncode == 3, res.stderr
    report = json.loads(res.stdout)
    assert report["nothing_measured"] is True
    o = outcomes(res)
    assert o["a"]["error"]["class"] == "ServerError" and o["a"]["error"]["status"] == 503
    assert o["a"]["error"]["attempts"] == 4 and o["b"]["error"]["class"] == "RateLimited"
    assert o["a"]["failure_mode"] == "runtime_error"
    assert report["per_adapter"]["m1"]["golden_pass_rate"] is None  # not a quality figure


def test_401_is_not_retried(tmp_path, provider):
    p = provider("--api-key", "right-key-123456")
    cases(tmp_path, {"id": "a", "input": "hello"}, {"id": "b", "input": "there"})
    res = run_cases(tmp_path, p.url, EVAL_API_KEY="wrong-key-654321")
    assert res.returncode == 3
    o = outcomes(res)
    assert o["a"]["error"]["class"] == "AuthError" and o["a"]["error"]["attempts"] == 1
    assert p.stats()["requests"] == 2  # one per case, no retries
    ok = run_cases(tmp_path, p.url, EVAL_API_KEY="right-key-123456")
    assert ok.returncode == 0, ok.stderr


def test_400_not_retried_and_dropped_connection_retried(tmp_path, provider):
    p = provider()
    cases(tmp_path, {"id": "bad", "input": "[[status:400]] x"}, {"id": "drop", "input": "[[drop]] y"},
          {"id": "ok", "input": "fine"})
    res = run_cases(tmp_path, p.url)
    o = outcomes(res)
    assert o["bad"]["error"]["class"] == "ClientError" and o["bad"]["error"]["attempts"] == 1
    assert o["drop"]["error"]["class"] == "TransportError" and o["drop"]["error"]["attempts"] == 4
    assert o["ok"]["passed"] is True
    # 2 of 3 items errored: above the default max_error_rate (0.5), the run does not pass
    assert res.returncode == 1
    assert json.loads(res.stdout)["threshold_failures"] == ["m1: error_rate 0.6667 > max 0.5 (2 of 3 items errored)"]


def test_truncation_refusal_format_and_instruction_miss(tmp_path, provider):
    p = provider()
    cases(tmp_path,
          {"id": "trunc", "input": "[[length]] one two three four five six", "checks": [{"kind": "contains", "value": "six"}]},
          {"id": "refuse", "input": "[[refuse]] do the thing", "checks": [{"kind": "contains", "value": "done"}]},
          {"id": "fmt", "input": "not json", "checks": [{"kind": "json"}]},
          {"id": "miss", "input": "apples", "checks": [{"kind": "contains", "value": "oranges"}]},
          {"id": "maxtok", "input": "a b c d e f g h i j k l m n", "checks": [{"kind": "contains", "value": "n"}]})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "tax", "dataset": "cases.yaml", "adapters": [
        {"id": "small", "model": "m", "base_url": p.url, "params": {"max_tokens": 12}}]}))
    res = run_cli("run", str(spec), "--no-save", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    o = outcomes(res)
    assert o["trunc"]["finish_reason"] == "length" and o["trunc"]["failure_mode"] == "truncation"
    assert o["maxtok"]["failure_mode"] == "truncation" and o["maxtok"]["output"] == "a b c d e f g h i j k l"
    assert o["refuse"]["failure_mode"] == "refusal"
    assert o["fmt"]["failure_mode"] == "format_error" and "not a single parseable JSON" in o["fmt"]["golden_reason"]
    assert o["miss"]["failure_mode"] == "instruction_miss"
    modes = json.loads(res.stdout)["per_adapter"]["small"]["failure_modes"]
    assert modes == {"format_error": 1, "instruction_miss": 1, "refusal": 1, "truncation": 2}


def test_judge_criteria_retry_and_cost_separate(tmp_path, provider):
    p = provider()
    cases(tmp_path,
          {"id": "good", "input": "summary ok", "criteria": [{"id": "grounded", "weight": 3, "description": "d"},
                                                             {"id": "terse", "weight": 1, "description": "d"}]},
          {"id": "half", "input": "x [[fail-criterion:grounded]]",
           "criteria": [{"id": "grounded", "weight": 3, "description": "d"}, {"id": "terse", "weight": 1, "description": "d"}]},
          {"id": "once", "input": "y [[judge-garbage-once]]", "criteria": [{"id": "c", "weight": 1, "description": "d"}]},
          {"id": "garbage", "input": "z [[judge-garbage]]", "criteria": [{"id": "c", "weight": 1, "description": "d"}]})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "judged", "dataset": "cases.yaml",
        "adapters": [{"id": "m", "model": "m", "base_url": p.url, "price": {"input": 1.0, "output": 2.0}}],
        "judge": {"model": "j", "base_url": p.url, "price": {"input": 10.0, "output": 10.0}}}))
    res = run_cli("run", str(spec), "--no-save", "--json", cwd=tmp_path)
    report = json.loads(res.stdout)
    o = {x["prompt_id"]: x for x in report["outcomes"]}
    assert o["good"]["judge_score"] == 1.0 and o["good"]["passed"] is True
    assert o["half"]["judge_score"] == 0.25 and o["half"]["passed"] is False  # (3*0 + 1*1) / 4
    assert [c["verdict"] for c in o["half"]["judge_criteria"]] == ["fail", "pass"]
    assert o["once"]["judge_score"] == 1.0 and o["once"]["error"] is None
    assert o["garbage"]["error"]["stage"] == "judge" and o["garbage"]["failure_mode"] == "runtime_error"
    fig = report["per_adapter"]["m"]
    # cost = tokens x price, model and judge apart
    want_model = sum(x["input_tokens"] * 1.0 + x["output_tokens"] * 2.0 for x in o.values()) / 1e6
    assert fig["cost_usd"] == pytest.approx(want_model) and fig["cost_usd"] > 0
    want_judge = sum((x["judge_input_tokens"] + x["judge_output_tokens"]) * 10.0 for x in o.values()) / 1e6
    assert fig["judge_cost_usd"] == pytest.approx(want_judge) and fig["judge_cost_usd"] > fig["cost_usd"]
    assert report["cost"]["judge_usd"] == pytest.approx(want_judge)
    assert o["garbage"]["judge_input_tokens"] > 0  # the failed judging still cost tokens


def test_judge_runs_on_its_own_queue(tmp_path, provider, redis_server, start_worker):
    p = provider()
    start_worker(redis_server.url, pool="provider")
    start_worker(redis_server.url, pool="aggregate")
    cases(tmp_path, {"id": "a", "input": "q [[fail-criterion:c2]]",
                     "criteria": [{"id": "c1", "weight": 1, "description": "d"}, {"id": "c2", "weight": 1, "description": "d"}]})
    # without a judge worker the run cannot finish: the judge really is on its own queue
    stuck = run_cases(tmp_path, p.url, "--timeout", "4", broker=redis_server.url)
    assert stuck.returncode == 2 and "not finished after 4 s" in stuck.stderr
    start_worker(redis_server.url, pool="judge")
    res = run_cases(tmp_path, p.url, broker=redis_server.url)
    assert res.returncode == 0, res.stderr
    assert outcomes(res)["a"]["judge_score"] == 0.5


def test_secrets_never_written(tmp_path, provider, redis_server, start_worker):
    secret = "sk-test-DO-NOT-LEAK-0123456789"
    p = provider("--api-key", secret)
    w = start_worker(redis_server.url, EVAL_API_KEY=secret)
    cases(tmp_path, {"id": "a", "input": "hello"}, {"id": "b", "input": "[[status:500]] boom"})
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--base-url", p.url, "--state-dir", "st",
                  "--output", "out.json", cwd=tmp_path, broker=redis_server.url, EVAL_API_KEY=secret,
                  EVALFARM_LOG_LEVEL="DEBUG")
    assert res.returncode == 0, res.stderr
    written = [f for f in (tmp_path / "st").rglob("*") if f.is_file()] + [tmp_path / "out.json", w.log]
    assert len(written) >= 5
    for f in written:
        assert secret not in f.read_text(errors="replace"), f
    assert secret not in res.stdout + res.stderr
    import redis as redis_lib
    r = redis_lib.Redis.from_url(redis_server.url)
    for key in r.scan_iter("ef:*"):
        if r.type(key) == b"string":
            assert secret.encode() not in r.get(key)
        elif r.type(key) == b"hash":
            assert all(secret.encode() not in v for v in r.hvals(key))


def test_a_key_echoed_in_an_error_is_redacted_whatever_its_variable(tmp_path, provider):
    leaked = "wrong-but-real-looking-key-42"
    p = provider("--api-key", "the-right-key-0000")
    cases(tmp_path, {"id": "a", "input": "hi"})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "leak", "dataset": "cases.yaml", "adapters": [
        {"id": "m", "model": "m", "base_url": p.url, "api_key_env": "LLM_CRED"}]}))
    res = run_cli("run", str(spec), "--state-dir", "st", "--json", cwd=tmp_path, LLM_CRED=leaked,
                  EVALFARM_KEY_ENV_ALLOW="LLM_CRED")
    assert res.returncode == 3
    err = json.loads(res.stdout)["outcomes"][0]["error"]
    assert err["class"] == "AuthError" and "invalid api key: Bearer ***" in err["message"]
    for f in (tmp_path / "st").rglob("*"):
        if f.is_file():
            assert leaked not in f.read_text(errors="replace"), f
    assert leaked not in res.stdout + res.stderr


def test_bad_endpoint_urls_stop_before_the_run(tmp_path):
    cases(tmp_path, {"id": "a", "input": "hi"})
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--base-url", "not-a-url", "--no-save", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == \
        "evalfarm: error: --base-url: 'not-a-url' is not an http:// or https:// URL"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "dataset": "cases.yaml", "adapters": [
        {"id": "m", "model": "m", "base_url": "localhost:8788"}]}))
    res = run_cli("run", str(spec), "--no-save", cwd=tmp_path)
    assert res.returncode == 2 and "spec.yaml:2: adapters[0].base_url: 'localhost:8788' is not an http" in res.stderr


def test_base_url_from_env_and_flag_wins(tmp_path, provider):
    p = provider()
    cases(tmp_path, {"id": "a", "input": "hi"})
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--no-save", cwd=tmp_path, EVAL_BASE_URL=p.url)
    assert res.returncode == 0, res.stderr
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--no-save", "--base-url", p.url, cwd=tmp_path,
                  EVAL_BASE_URL="http://127.0.0.1:9/v1")
    assert res.returncode == 0, res.stderr
    res = run_cli("run", "--dataset", "cases.yaml", "--model", "m", "--no-save", cwd=tmp_path)
    assert res.returncode == 2 and "no base_url" in res.stderr


def test_rubric_drafts_case_yaml(tmp_path, provider):
    p = provider()
    res = run_cli("rubric", "--spec", "Summarise the headline as JSON. It must never invent numbers.",
                  "--model", "judge", "--base-url", p.url, "-o", "case.yaml", "--id", "triage", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    from evalfarm.spec.cases import load_cases
    [(case, _, _)] = load_cases([tmp_path / "case.yaml"])
    assert case.id == "triage" and len(case.criteria) == 2
    assert [c.weight for c in case.criteria] == [1.0, 3.0] and case.checks[0].kind == "json"


def test_selftest_offline(tmp_path):
    res = run_cli("selftest", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ok   truncation detected from finish_reason" in res.stdout
    assert "ok   gate exits 1 on a collapsed run" in res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("SELFTEST PASSED")
    assert not list(tmp_path.iterdir())  # nothing left behind


def test_selftest_fails_on_a_broken_engine(tmp_path):
    res = run_cli("selftest", cwd=tmp_path, EVALFARM_PLUGINS="ef_sabotage")
    assert res.returncode == 1
    assert "FAIL truncation detected from finish_reason" in res.stdout
    assert "FAIL taxonomy has 'truncation'" in res.stdout  # the taxonomy steps check real items, so they fail too
    assert res.stdout.strip().splitlines()[-1] == "SELFTEST FAILED: 2 step(s)"


def test_selftest_refuses_the_network():
    from evalfarm.selftest import NetworkUsed
    import subprocess, sys
    code = ("from evalfarm.selftest import forbid_network; forbid_network(); import socket; "
            "socket.create_connection(('127.0.0.1', 9), timeout=1)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode != 0 and NetworkUsed.__name__ in res.stderr
