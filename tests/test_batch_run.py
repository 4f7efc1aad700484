"""`evalfarm run --batch` in process against mock-provider's batch APIs (real HTTP): split within the stated
limit, every item answered once, the same report as the live run but for latency and price, failed lines
retried live, an expired batch an infrastructure error, a budget stop cancelling the open batches."""
from __future__ import annotations

import json
import os
import time
import urllib.request

import yaml

from conftest import run_cli

FAST = {"EVALFARM_BATCH_POLL_S": "0.1", "EVALFARM_BATCH_POLL_MAX_S": "0.2", "EVALFARM_BATCH_LINGER_S": "0.3",
        "EVAL_API_KEY": "k", "EVAL_JUDGE_API_KEY": "k"}
PRICE = {"input": 2.0, "output": 8.0, "batch_input": 1.0, "batch_output": 4.0}
VARYING = ("latency", "cost", "wait_ms", "_usd", "seconds", "started_at", "finished_at", "run_id", "duration")


def _stats(mock) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{mock.port}/stats?items=1", timeout=10) as r:
        return json.loads(r.read())


def _spec(tmp_path, mock, n: int, *, judge: bool = False, texts=None, provider: str = "openai",
          budget: float | None = None) -> str:
    (tmp_path / "d.jsonl").write_text("\n".join(
        json.dumps({"id": f"p{i}", "text": (texts or {}).get(i, f"question {i}"),
                    "expected_output_contains": [f"{i}"]}) for i in range(n)))
    adapter = {"id": "m", "model": "m1", "base_url": mock.url, "price": PRICE, "params": {"max_tokens": 16}}
    if provider == "anthropic":
        adapter.update(provider="anthropic", api_key_env="EVAL_API_KEY")
    spec = {"name": "batched", "dataset": "d.jsonl", "adapters": [adapter]}
    if judge:
        spec["judge"] = {"model": "j1", "base_url": mock.url, "price": PRICE, "params": {"max_tokens": 16}}
    if budget is not None:
        spec["budget_usd"] = budget
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    return str(tmp_path / "s.yaml")


def _same(report: dict) -> tuple:
    """A report without what may differ between a live and a batched run: latency, price, ids, times."""
    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if not any(w in k for w in VARYING)}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    outs = sorted((clean({k: v for k, v in o.items() if k not in ("attempts",)}) for o in report["outcomes"]),
                  key=lambda o: o["key"])
    return clean(report["per_adapter"]), outs, report.get("passed"), report.get("threshold_failures")


def test_2000_items_in_4_batches_each_answered_once_same_report_as_live(provider, tmp_path):
    mock = provider("--batch-delay", "1.0", "--batch-max-requests", "500")
    spec = _spec(tmp_path, mock, 2000, judge=True)
    batch_out, live_out = tmp_path / "batch.json", tmp_path / "live.json"
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(batch_out), timeout=300,
                  EVALFARM_BATCH_MAX_REQUESTS="500", **FAST)
    assert ran.returncode == 0, ran.stderr
    saved = os.stat(batch_out).st_mtime
    stats = _stats(mock)
    by_label: dict[str, list] = {}
    for b in stats["batches"].values():
        by_label.setdefault(b["metadata"]["evalfarm_batch"].split(":")[0], []).append(b)
    assert sorted(b["requests"] for b in by_label["m"]) == [500, 500, 500, 500]  # the model's calls: 4 batches
    assert sorted(b["requests"] for b in by_label["judge"]) and sum(b["requests"] for b in by_label["judge"]) == 2000
    assert all(b["requests"] <= 500 and b["status"] == "completed" for b in stats["batches"].values())
    assert len(stats["batch_items"]) == 4000 and set(stats["batch_items"].values()) == {1}  # once each
    assert stats["requests"] == 4000  # no live call at all
    last_ready = max(b["ready_at"] for b in stats["batches"].values())
    print(f"\nPROOF seconds from the last batch's completion (ready) to the saved report: {saved - last_ready:.3f}; "
          f"from the provider's answer (ended): {saved - max(b['ended_at'] for b in stats['batches'].values()):.3f}")

    live = run_cli("run", spec, "--no-save", "-o", str(live_out), timeout=300, **FAST)
    assert live.returncode == 0, live.stderr
    batch_report, live_report = json.loads(batch_out.read_text()), json.loads(live_out.read_text())
    assert _same(batch_report) == _same(live_report)
    assert batch_report["spec_hash"] == live_report["spec_hash"]
    # the batch price is half the live price here: the spend says so
    b_cost, l_cost = (sum(f["cost_usd"] + f["judge_cost_usd"] for f in r["per_adapter"].values())
                      for r in (batch_report, live_report))
    assert abs(b_cost / l_cost - 0.5) < 1e-6, (b_cost, l_cost)
    est = [ln for ln in ran.stderr.splitlines() if "estimated cost" in ln][0]
    assert "through batch APIs" in est and "this run batches m, judge" in est
    print(f"PROOF spend live ${l_cost:.6f} batch ${b_cost:.6f}; estimate (batch run): {est}")
    print(f"PROOF estimate (live run): {[ln for ln in live.stderr.splitlines() if 'estimated cost' in ln][0]}")


def test_failed_lines_go_live_an_expired_batch_is_not_a_model_result(provider, tmp_path):
    mock = provider("--batch-delay", "0.3")
    texts = {1: "question 1 [[batch-error]]", 2: "question 2 [[batch-error]]",
             3: "question 3 [[batch-error]] [[status:400]]"}  # fails live too: a runtime error
    spec = _spec(tmp_path, mock, 40, texts=texts)
    out = tmp_path / "r.json"
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), timeout=120, **FAST)
    assert ran.returncode == 0, ran.stderr  # one runtime error among 40: no threshold says otherwise
    outcomes = {o["prompt_id"]: o for o in json.loads(out.read_text())["outcomes"]}
    assert outcomes["p1"]["output"] == "question 1" and outcomes["p1"]["error"] is None
    assert outcomes["p3"]["error"]["class"] == "ClientError"
    assert all(outcomes[f"p{i}"]["error"] is None for i in range(40) if i != 3)
    stats = _stats(mock)
    asked = stats["asked"]
    assert asked["question 1 [[batch-error]]"] == 2 and asked["question 3 [[batch-error]] [[status:400]]"] == 2
    assert all(asked[f"question {i}"] == 1 for i in range(40) if i not in texts)  # exactly 1 for the others
    per_item = {**{t: n for t, n in asked.items()}}
    print(f"\nPROOF requests at the server per item (failed-line run): {sorted(set(per_item.values()))}, "
          f"answered-in-batch items with 1: {sum(1 for i in range(40) if i not in texts and asked[f'question {i}'] == 1)}")

    # an expired batch: its items are submitted once more, then are errors of class BatchExpired, never answers
    mock2 = provider("--batch-delay", "0.2")
    spec = _spec(tmp_path, mock2, 6, texts={0: "question 0 [[batch-expire]]"})
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), timeout=120, **FAST)
    assert ran.returncode == 3, ran.stderr  # nothing was measured
    outcomes = json.loads(out.read_text())["outcomes"]
    assert {o["error"]["class"] for o in outcomes} == {"BatchExpired"} and not any(o.get("output") for o in outcomes)
    stats = _stats(mock2)
    assert stats["batch_creates"] == 2 and stats["requests"] == 0  # resubmitted once; nothing answered
    assert [b["status"] for b in stats["batches"].values()] == ["expired", "expired"]


def test_budget_stop_cancels_the_open_batch(provider, tmp_path):
    mock = provider("--batch-delay", "0.2")
    # 20 items per batch; the second batch waits 60 s at the provider: the budget is spent by the first
    texts = {i: f"question {i} [[batch-delay:60000]]" for i in range(20, 40)}
    spec = _spec(tmp_path, mock, 40, texts=texts, budget=0.0001)
    out = tmp_path / "r.json"
    started = time.monotonic()
    ran = run_cli("run", spec, "--batch", "--no-save", "--force", "-o", str(out), timeout=120,
                  EVALFARM_BATCH_MAX_REQUESTS="20", **FAST)
    assert time.monotonic() - started < 50  # it did not wait for the second batch
    assert "stopped at the budget" in ran.stderr, ran.stderr
    stats = _stats(mock)
    statuses = sorted(b["status"] for b in stats["batches"].values())
    assert statuses == ["cancelled", "completed"] and len(stats["batch_cancels"]) == 1
    report = json.loads(out.read_text())
    outcomes = {o["prompt_id"]: o for o in report["outcomes"]}
    assert sorted(outcomes) == sorted(f"p{i}" for i in range(20))  # the cancelled batch's items: skipped
    assert all(o["output"] for o in outcomes.values())
    assert report["stopped"] == "budget" and report["budget"]["items_left"] == 20, report.get("budget")


def test_anthropic_message_batches_run(provider, tmp_path):
    mock = provider("--batch-delay", "0.2", "--api-key", "k")
    spec = _spec(tmp_path, mock, 30, provider="anthropic", texts={5: "question 5 [[batch-error]]"})
    out = tmp_path / "r.json"
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), timeout=120, **FAST)
    assert ran.returncode == 0, ran.stderr
    outcomes = {o["prompt_id"]: o for o in json.loads(out.read_text())["outcomes"]}
    assert all(outcomes[f"p{i}"]["output"] == f"question {i}" for i in range(30))
    stats = _stats(mock)
    assert stats["batch_creates"] == 1 and len(stats["batch_items"]) == 30
    assert stats["asked"]["question 5 [[batch-error]]"] == 2 and stats["asked"]["question 4"] == 1


def test_batch_flag_and_field_errors_are_one_line(tmp_path):
    (tmp_path / "m.yaml").write_text("name: m\nadapters: [mock]\nprompts: [{id: a, text: hi}]\n")
    ran = run_cli("run", str(tmp_path / "m.yaml"), "--batch", "--no-save")
    assert ran.returncode == 2 and "--batch: no adapter or judge of 'm' has a batch API" in ran.stderr
    assert len([ln for ln in ran.stderr.splitlines() if ln.strip()]) == 1, ran.stderr
    (tmp_path / "g.yaml").write_text("name: g\nadapters: [{id: g, provider: gemini, model: x, "
                                     "base_url: 'http://127.0.0.1:9/v1', batch: true}]\nprompts: [{id: a, text: hi}]\n")
    ran = run_cli("run", str(tmp_path / "g.yaml"), "--no-save")
    assert ran.returncode == 2 and "g.yaml:2" in ran.stderr and "'batch' goes with provider openai or anthropic" \
        in ran.stderr, ran.stderr


def test_batches_stay_within_the_byte_limit(provider, tmp_path):
    mock = provider("--batch-delay", "0.1")
    spec = _spec(tmp_path, mock, 40, texts={i: f"question {i} " + "x" * 150 for i in range(40)})
    out = tmp_path / "r.json"
    ran = run_cli("run", spec, "--batch", "--no-save", "-o", str(out), timeout=120, EVALFARM_BATCH_MAX_BYTES="2048",
                  **FAST)
    assert ran.returncode == 0, ran.stderr
    batches = list(_stats(mock)["batches"].values())
    assert len(batches) >= 4 and all(0 < b["bytes"] <= 2048 for b in batches), batches
    assert sum(b["requests"] for b in batches) == 40
    assert all(o["error"] is None for o in json.loads(out.read_text())["outcomes"])
