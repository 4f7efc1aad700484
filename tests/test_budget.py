"""Spend budgets (issue 13), proven at the server: the estimate before anything is sent, a run that
does not start over its budget, the spend counter that stops sending (in this process and across a
farm of two workers, with the stop's latency), and a 429 insufficient_quota that stops an endpoint
for the whole fleet instead of being retried.

Every prompt is 99 words of "abc" plus its id: 400 characters, so 100 tokens by the estimate's
characters/4 and 100 tokens by mock-provider's word count, and the echo is 100 tokens at
max_tokens 100. At 1,000 USD per million tokens each item costs exactly $0.20, estimated and spent.
"""
from __future__ import annotations

import json
from pathlib import Path

import redis

from conftest import run_cli

ITEM_USD = 0.2


def priced_spec(tmp: Path, url: str, n: int, *, judge: bool = False, extra: str = "", price: bool = True) -> Path:
    words = " ".join(["abc"] * 99)
    price_s = ", price: {input: 1000, output: 1000}" if price else ""
    lines = ["name: budget", extra, "adapters:",
             f"  - {{id: small, model: m1, base_url: '{url}', params: {{max_tokens: 100}}{price_s}}}"]
    if judge:
        lines.append(f"judge: {{model: j1, base_url: '{url}', price: {{input: 1000, output: 1000}}, "
                     "params: {max_tokens: 50}}")
    lines.append("prompts:")
    for i in range(n):
        crit = ", criteria: [{id: ok, description: fine}]" if judge else ""
        lines.append(f"  - {{id: p{i:03d}, text: '{words} w{i}'{crit}}}")
    path = tmp / "spec.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def saved_report(state: Path) -> dict:
    [path] = [p for p in (state / "runs").glob("*.json") if not p.name.endswith(".lineage.json")]
    return json.loads(path.read_text())


def test_a_run_over_its_budget_does_not_start_and_a_forced_one_stops_at_it(tmp_path, provider):
    server = provider("--latency-ms", "30")
    spec = priced_spec(tmp_path, server.url, 60)
    state = tmp_path / "state"
    estimate = 60 * ITEM_USD  # $12.00, and the estimate says so
    budget = estimate / 3

    refused = run_cli("run", str(spec), "--state-dir", str(state), "--max-cost", f"{budget:g}")
    assert refused.returncode == 2, refused.stderr
    assert "estimated cost ≈ $12.00 (model $12.00, judge $0.0000)" in refused.stderr
    [error] = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert "exceeds the budget $4 (--max-cost)" in error and "--force" in error
    assert server.stats()["requests"] == 0 and not state.exists()  # nothing sent, nothing written

    res = run_cli("run", str(spec), "--state-dir", str(state), "--max-cost", f"{budget:g}", "--force",
                  "--concurrency", "4")
    assert res.returncode == 1, res.stderr
    requests = server.stats()["requests"]
    crossing = round(budget / ITEM_USD)  # the call whose cost reaches the budget: the 20th
    # every request is one the report shows, and none went out after the stop beyond the 3 others in flight
    report = saved_report(state)
    assert report["stopped"] == "budget" and report["items_planned"] == 60
    assert report["items_done"] == requests == len(report["outcomes"])
    assert crossing <= requests <= crossing + 3, (requests, crossing)
    assert report["budget"] == {"limit_usd": budget, "spent_usd": round(requests * ITEM_USD, 8),
                                "items_left": 60 - requests, "unjudged_usd": 0.0, "unjudged_items": 0}  # no judge
    assert report["thresholds_passed"] is False
    assert f"{60 - requests} of 60 items were not measured" in res.stderr and "stopped at the budget" in res.stderr
    print(f"\nin-process: estimate ${estimate:.2f}, budget ${budget:.2f}, requests at the server {requests} "
          f"of 60 items (the budget is reached at item {crossing}; 4 calls in flight)")
    gate = run_cli("gate", report["run_id"], "--state-dir", str(state))
    assert gate.returncode == 2 and "partial (stopped: budget" in gate.stderr, gate.stderr


def test_the_judge_counts_against_the_budget(tmp_path, provider):
    server = provider()
    spec = priced_spec(tmp_path, server.url, 40, judge=True)
    state = tmp_path / "state"
    res = run_cli("run", str(spec), "--state-dir", str(state), "--max-cost", "2", "--force", "--concurrency", "1")
    assert res.returncode == 1, res.stderr
    line = next(x for x in res.stderr.splitlines() if "estimated cost" in x)
    assert "judge $0.0000" not in line and "40 judge calls" in line
    report = saved_report(state)
    assert report["stopped"] == "budget" and report["cost"]["judge_usd"] > 0
    spent = report["budget"]["spent_usd"]
    # one call at a time: the spend stops one call past the budget, judge calls included
    assert 2 <= spent < 2 + ITEM_USD, spent
    assert report["items_done"] < 2 / ITEM_USD  # the judge's share means fewer items than the model alone
    # one model and one judge call per item measured; at most one more model call whose judge the stop skipped
    assert server.stats()["requests"] in (2 * report["items_done"], 2 * report["items_done"] + 1)


def test_the_spec_budget_and_the_flag_that_wins(tmp_path, provider):
    server = provider()
    spec = priced_spec(tmp_path, server.url, 10, extra="budget_usd: 1.5")
    res = run_cli("run", str(spec), "--no-save")
    assert res.returncode == 2 and "exceeds the budget $1.5 (budget_usd)" in res.stderr, res.stderr
    ok = run_cli("run", str(spec), "--no-save", "--max-cost", "5")  # the flag wins: $2.00 fits
    assert ok.returncode == 0, ok.stderr
    assert "estimated cost ≈ $2.00" in ok.stderr and "budget $5 (--max-cost)" in ok.stderr
    assert server.stats()["requests"] == 10


def test_a_budget_refuses_an_adapter_without_a_price_unless_forced(tmp_path, provider):
    server = provider()
    spec = priced_spec(tmp_path, server.url, 3, price=False)
    res = run_cli("run", str(spec), "--no-save", "--max-cost", "1")
    assert res.returncode == 2 and server.stats()["requests"] == 0
    [error] = [line for line in res.stderr.splitlines() if "error:" in line]
    assert "cannot limit small: no price" in error
    assert "cost unknown for small (no price)" in res.stderr
    forced = run_cli("run", str(spec), "--no-save", "--max-cost", "1", "--force")
    assert forced.returncode == 0, forced.stderr
    mock = tmp_path / "mock.yaml"
    mock.write_text("name: free\nadapters: [mock]\nprompts:\n  - {id: a, text: hi}\n")
    free = run_cli("run", str(mock), "--no-save", "--max-cost", "0.01")  # the mock adapters are free
    assert free.returncode == 0 and "estimated cost ≈ $0.0000" in free.stderr, free.stderr


def test_an_exhausted_quota_is_not_retried_in_process(tmp_path, provider):
    server = provider("--quota-after", "5", "--latency-ms", "20")
    spec = priced_spec(tmp_path, server.url, 40)
    res = run_cli("run", str(spec), "--no-save", "--json", "--concurrency", "4")
    report = json.loads(res.stdout)
    stats = server.stats()
    assert stats["statuses"].get("200") == 5
    assert stats["statuses"]["429"] <= 4, stats  # only the calls already in flight met the 429
    quota = [o for o in report["outcomes"] if (o["error"] or {}).get("class") == "QuotaExhausted"]
    assert len(quota) == 35 and all(o["error"]["attempts"] == 1 for o in quota)
    [line] = [x for x in res.stderr.splitlines() if x.startswith("evalfarm: quota exhausted")]
    assert "paused for the whole fleet" in line and "35 item(s)" in line


def test_the_budget_stops_the_farm_within_a_second(tmp_path, provider, redis_server, start_worker):
    server = provider("--latency-ms", "40")
    for _ in range(2):
        start_worker(redis_server.url, concurrency=4)
    spec = priced_spec(tmp_path, server.url, 200)
    state = tmp_path / "state"
    budget = 200 * ITEM_USD / 3
    res = run_cli("run", str(spec), "--state-dir", str(state), "--max-cost", f"{budget:.4f}", "--force",
                  "--batch-size", "4", broker=redis_server.url, timeout=180)
    assert res.returncode == 1, res.stderr
    report = saved_report(state)
    recent = server.stats_requests()
    counts = redis.Redis.from_url(redis_server.url).hgetall(f"ef:run:{report['run_id']}:counts")
    crossed = int(counts[b"budget_crossed_us"]) / 1e6
    after = [r["t"] - crossed for r in recent if r["t"] > crossed]
    latency = max(after, default=0.0)
    requests = len(recent)
    crossing = -(-budget // ITEM_USD)
    assert report["stopped"] == "budget" and report["items_done"] == requests
    assert report["budget"]["items_left"] == 200 - requests
    assert int(counts[b"spent_nusd"]) == round(requests * ITEM_USD * 1e9)  # every call, counted once
    # beyond the budget: only what was in flight (2 workers x 4 task threads x a batch of 4 calls each)
    assert crossing <= requests <= crossing + 2 * 4 * 4, (requests, crossing)
    assert latency < 1.0, latency
    print(f"\nfarm, 2 workers x 4 threads, batches of 4: budget ${budget:.2f} (a third of the $40.00 estimate) "
          f"reached at item {crossing:.0f}; requests at the server {requests} of 200 items; {len(after)} request(s) "
          f"arrived after the counter crossed the budget, the last {latency * 1000:.1f} ms after")


def test_an_exhausted_quota_pauses_the_endpoint_for_the_whole_fleet(tmp_path, provider, redis_server, start_worker):
    server = provider("--quota-after", "10", "--latency-ms", "20")
    for _ in range(2):
        start_worker(redis_server.url, concurrency=4)
    spec = priced_spec(tmp_path, server.url, 120)
    res = run_cli("run", str(spec), "--no-save", "--json", "--concurrency", "4", "--batch-size", "4",
                  broker=redis_server.url, timeout=180)
    report = json.loads(res.stdout)
    stats = server.stats()
    quota = sum(1 for o in report["outcomes"] if (o["error"] or {}).get("class") == "QuotaExhausted")
    assert stats["statuses"].get("200") == 10 and quota == 110
    # at most the calls in flight in each worker met a 429; the other 100+ items sent nothing
    assert stats["statuses"]["429"] <= 8, stats
    assert redis.Redis.from_url(redis_server.url).keys("ef:lim:*:quota")
    assert any(x.startswith("evalfarm: quota exhausted") for x in res.stderr.splitlines())
    print(f"\nfarm quota: 120 items, 2 workers; the server answered 10, then {stats['statuses']['429']} x 429 "
          f"insufficient_quota; {stats['requests']} requests in all")


def test_ab_has_the_same_budget(tmp_path):
    """`ab --max-cost`: the estimate (the synthetic executor's price) refuses a budget it exceeds; forced,
    the arms stop at the budget and no comparison is made from a partial run."""
    from conftest import EXAMPLES

    args = ["ab", "--suite", str(EXAMPLES / "ab" / "suite.yaml"), "--arm-a", "balanced", "--arm-b", "terse",
            "--trials", "2"]
    refused = run_cli(*args, "--max-cost", "0.05", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    [error] = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert "exceeds the budget $0.05 (--max-cost)" in error and not (tmp_path / ".evalfarm").exists()
    stopped = run_cli(*args, "--max-cost", "0.0005", "--force", cwd=tmp_path)
    assert stopped.returncode == 1, stopped.stderr
    [error] = [line for line in stopped.stderr.splitlines() if "error:" in line]
    assert "stopped at the budget" in error and "no comparison was made" in error
    assert not list((tmp_path / ".evalfarm").rglob("*.json"))  # no artifact
    ok = run_cli(*args, "--max-cost", "5", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
