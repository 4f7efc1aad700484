"""`evalfarm ab --until-decided`: rounds of one trial per task per arm until the anytime-valid paired test
decides, through the real CLI: the synthetic executor in this process and on the Redis farm (byte-identical
artifacts), a provider adapter against a real mock-provider (requests counted at the server), the budget
checked between rounds, and `ab verify` replaying the decision from the ledger rows."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import redis

from conftest import EXAMPLES, run_cli
from evalfarm.canonical import canonical_json

SMOKE = str(EXAMPLES / "ab" / "suite.yaml")  # 12 tasks


def big_suite(tmp_path: Path, n: int = 200) -> str:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\nscorer: contains\ntasks:\n" + "".join(
        f"  - {{id: t{i}, input: 'Question {i}', expected: A{i}}}\n" for i in range(n)))
    return str(path)


def artifact_of(cwd: Path, stdout: str) -> Path:
    digest = hashlib.sha256(stdout.strip().encode()).hexdigest()
    return cwd / ".evalfarm" / "reports" / "eval_ab" / f"{digest}.json"


def rewritten(path: Path, edit) -> Path:
    """The artifact edited, re-serialized canonically and named by its new hash (a careful forger)."""
    art = json.loads(path.read_text())
    edit(art)
    data = canonical_json(art).encode("ascii")
    out = path.parent / f"{hashlib.sha256(data).hexdigest()}.json"
    out.write_bytes(data)
    return out


def test_until_decided_stops_at_the_first_decision_and_verify_replays_it(tmp_path):
    suite = big_suite(tmp_path)
    res = run_cli("ab", "--suite", suite, "--arm-a", "terse", "--arm-b", "verbose", "--until-decided",
                  "--max-trials", "15", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    art = json.loads(res.stdout)
    seq = art["sequential"]
    # the synthetic verbose profile misses 6%, terse 14%: b better, found at round 4 of at most 15
    assert (seq["decision"], seq["rounds"], seq["decision_round"], seq["stopped_because"]) == ("b_better", 4, 4, "decided")
    assert (seq["method"], seq["alpha"], seq["margin"], seq["max_trials"]) == ("eb-mixture-cs", 0.05, 0.05, 15)
    assert [h["round"] for h in seq["history"]] == [1, 2, 3, 4] and [h["n"] for h in seq["history"]] == [200, 400, 600, 800]
    assert [h["decision"] for h in seq["history"]] == ["continue"] * 3 + ["b_better"]
    assert seq["interval"][0] > 0 and seq["interval"] == [seq["history"][-1]["lo"], seq["history"][-1]["hi"]]
    widths = [h["hi"] - h["lo"] for h in seq["history"]]
    assert widths == sorted(widths, reverse=True)
    assert seq["items_saved"]["vs_max_trials"] == (15 - 4) * 200 * 2
    assert art["trials"] == 4 and art["verdict"]["result"] == "winner" and art["verdict"]["winner"] == "verbose"
    assert "anytime-valid 95% interval" in art["verdict"]["reason"]
    assert [line for line in res.stderr.splitlines() if line.startswith("evalfarm: round ")][-1].endswith(": b_better")
    # one ledger row per (arm, task, round); round r is trial r, as a fixed design of 4 trials would have it
    rows = [json.loads(x) for x in (tmp_path / ".evalfarm" / "ab" / "ledger.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 200 * 2 and {r["trial"] for r in rows} == {0, 1, 2, 3}
    path = artifact_of(tmp_path, res.stdout)
    ok = run_cli("ab", "verify", str(path), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout
    assert "ok   sequential decision: b_better after 4 round(s), stopped: decided" in ok.stdout
    # an edited sequential block, re-serialized and renamed: the replay from the rows disagrees
    for edit, named in ((lambda a: a["sequential"].update(decision="a_better"), "differs in decision"),
                        (lambda a: a["sequential"]["history"][1].update(lo=-0.01), "differs in history"),
                        (lambda a: a["sequential"].update(stopped_because="budget"), "differs in stopped_because")):
        forged = rewritten(path, edit)
        bad = run_cli("ab", "verify", str(forged), cwd=tmp_path)
        assert bad.returncode == 1 and "FAIL sequential decision" in bad.stdout and named in bad.stdout, bad.stdout
        forged.unlink()
    # the table names the stopping point and the items saved
    table = run_cli("ab", "--suite", suite, "--arm-a", "terse", "--arm-b", "verbose", "--until-decided",
                    "--max-trials", "15", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "b_better after 4 of at most 15 round(s) (stopped: decided); 1600 items run; 4400 fewer than 15" in table.stdout


def test_until_decided_equivalence_budget_and_usage(tmp_path):
    # a margin: the arms shown equivalent within +-0.3, then cost decides as in a fixed design
    res = run_cli("ab", "--suite", SMOKE, "--arm-a", "baseline", "--arm-b", "verbose", "--until-decided",
                  "--margin", "0.3", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    art = json.loads(res.stdout)
    assert (art["sequential"]["decision"], art["sequential"]["rounds"]) == ("equivalent", 5)
    assert art["verdict"]["winner"] == "baseline" and art["verdict"]["decided_by"] == "cost"
    # the budget, checked between rounds: it stops before a round it cannot pay for
    budget = tmp_path / "budget"
    budget.mkdir()
    res = run_cli("ab", "--suite", SMOKE, "--arm-a", "baseline", "--arm-b", "verbose", "--until-decided",
                  "--max-cost", "0.25", "--json", cwd=budget)
    assert res.returncode == 0, res.stderr
    seq = json.loads(res.stdout)["sequential"]
    assert seq["stopped_because"] == "budget" and 2 <= seq["rounds"] < 20 and seq["decision"] == "undecided"
    total = json.loads(res.stdout)["arms"]
    assert sum(a["total_usd"] for a in total.values()) <= 0.25
    assert run_cli("ab", "verify", str(artifact_of(budget, res.stdout)), cwd=budget).returncode == 0
    # usage: one line, exit 2, nothing run
    for args, message in (
            (["--trials", "3", "--until-decided"], "--trials and --until-decided"),
            (["--alpha", "0.1"], "--alpha only applies with --until-decided"),
            (["--until-decided", "--margin", "1.5"], "--margin"),
    ):
        bad = run_cli("ab", "--suite", SMOKE, "--arm-a", "baseline", "--arm-b", "verbose", *args, cwd=tmp_path)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
    ex = EXAMPLES / "ab"
    bad = run_cli("ab", "--variant-a", str(ex / "variant_a.yaml"), "--variant-b", str(ex / "variant_b.yaml"),
                  "--tasks", str(ex / "tasks.yaml"), "--until-decided", cwd=tmp_path)
    assert bad.returncode == 2 and "--until-decided only applies to suite mode" in bad.stderr


def test_until_decided_on_the_farm_and_with_a_provider(tmp_path, redis_server, start_worker, provider):
    start_worker(redis_server.url, concurrency=2)
    farm_dir, local_dir = tmp_path / "farm", tmp_path / "local"
    farm_dir.mkdir(), local_dir.mkdir()
    args = ("ab", "--suite", SMOKE, "--arm-a", "baseline", "--arm-b", "verbose", "--arms", "3", "--until-decided",
            "--margin", "0.3", "--json")
    farm = run_cli(*args, broker=redis_server.url, cwd=farm_dir)
    assert farm.returncode == 0, farm.stderr
    local = run_cli(*args, cwd=local_dir)
    assert local.returncode == 0, local.stderr
    assert farm.stdout == local.stdout  # the same rounds, decision and artifact wherever the items ran
    rounds = json.loads(farm.stdout)["sequential"]["rounds"]
    assert rounds >= 2
    r = redis.Redis.from_url(redis_server.url)
    keys = r.keys("ef:run:*:counts")
    assert len(keys) == rounds  # one farm run (one batch) per round
    assert all(int(r.hget(k, "executed")) == 3 * 12 for k in keys)
    assert run_cli("ab", "verify", str(artifact_of(farm_dir, farm.stdout)), cwd=farm_dir).returncode == 0

    # a provider adapter against a real OpenAI-protocol server: the echo passes the same tasks in both arms
    server = provider()
    suite = tmp_path / "echo.yaml"
    suite.write_text("name: echo\ntasks:\n" + "".join(
        f"  - {{id: t{i}, input: 'Say word{i}', expected: {'word' if i % 3 else 'nope'}{i}}}\n" for i in range(10)))
    for where, broker in (("p-local", None), ("p-farm", redis_server.url)):
        cwd = tmp_path / where
        cwd.mkdir()
        before = server.stats()["requests"]
        res = run_cli("ab", "--suite", str(suite), "--arm-a", "balanced", "--arm-b", "terse", "--executor", "provider",
                      "--model", "mock-1", "--base-url", server.url, "--price", "3,15", "--until-decided", "--margin",
                      "0.3", "--json", broker=broker, cwd=cwd)
        assert res.returncode == 0, res.stderr
        art = json.loads(res.stdout)
        seq = art["sequential"]
        assert seq["decision"] == "equivalent" and seq["stopped_because"] == "decided" and seq["estimate"] == 0
        assert server.stats()["requests"] - before == seq["rounds"] * 10 * 2  # nothing sent after the decision
        rows = [json.loads(x) for x in (cwd / ".evalfarm" / "cost" / "ledger.jsonl").read_text().splitlines()]
        assert len(rows) == seq["rounds"] * 20 and len({x["run_id"] for x in rows}) == seq["rounds"]
        assert run_cli("ab", "verify", str(artifact_of(cwd, res.stdout)), cwd=cwd).returncode == 0


def test_plan_sends_nothing_and_plans_from_the_last_comparison_of_the_suite(tmp_path, provider):
    server = provider()
    suite = tmp_path / "echo.yaml"
    suite.write_text("name: echo\ntasks:\n" + "".join(
        f"  - {{id: t{i}, input: 'Say word{i}', expected: {'word' if i % 3 else 'nope'}{i}}}\n" for i in range(10)))
    base = ("ab", "--suite", str(suite), "--arm-a", "balanced", "--arm-b", "terse", "--executor", "provider",
            "--model", "mock-1", "--base-url", server.url, "--price", "3,15")
    fixed = run_cli(*base, "--trials", "3", "--plan", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert "3 trial(s) per task per arm: 60 items" in fixed.stdout and "estimated cost ≈ $" in fixed.stdout
    assert "detects with 80% power (alpha 0.05, two-sided) is 0.4" in fixed.stdout  # 10 tasks, worst case
    assert "variance assumed: pass/fail at 50%" in fixed.stdout and "nothing was sent (--plan)" in fixed.stdout
    seq = run_cli(*base, "--until-decided", "--max-trials", "8", "--plan", "--json", cwd=tmp_path)
    assert seq.returncode == 0, seq.stderr
    plan = json.loads(seq.stdout)
    assert plan["items_per_round"] == 20 and plan["items_at_most"] == 160 and plan["sequential"]["max_trials"] == 8
    assert plan["estimate_at_most_usd"] == round(plan["estimate_per_round"]["total_usd"] * 8, 8) > 0
    assert 0 < plan["fixed_mdd"] < plan["mdd"] <= 1  # being allowed to stop at any time costs power
    assert server.stats()["requests"] == 0 and not (tmp_path / ".evalfarm").exists()
    # after a comparison of this suite, the plan uses the variance it observed (the echo: no trial noise)
    ran = run_cli(*base, "--trials", "2", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    sent = server.stats()["requests"]
    again = run_cli(*base, "--trials", "3", "--plan", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    observed = json.loads(again.stdout)
    assert observed["variance"]["source"] == "observed" and observed["variance"]["from"].startswith("observed in ")
    assert observed["variance"]["within"] < 1e-9 and observed["fixed_mdd"] < json.loads(seq.stdout)["fixed_mdd"]
    assert server.stats()["requests"] == sent


def test_dashboard_draws_the_confidence_sequence_and_the_stopping_point(tmp_path):
    import re

    from dashboard_support import Serve

    state = tmp_path / "state"
    res = run_cli("ab", "--suite", SMOKE, "--arm-a", "baseline", "--arm-b", "verbose", "--until-decided", "--margin",
                  "0.3", "--json", cwd=tmp_path, EVALFARM_STATE_DIR=str(state))
    assert res.returncode == 0, res.stderr
    seq = json.loads(res.stdout)["sequential"]
    sha = hashlib.sha256(res.stdout.strip().encode()).hexdigest()
    s = Serve(state)
    try:
        status, _, body = s.get(f"/ab/{sha}")
        assert status == 200
        page = body.decode() if isinstance(body, bytes) else body
        [chart] = re.findall(r'<svg class="chart sequence".*?</svg>', page, re.S)
        rounds = re.findall(r'<line class="round( decided)?" data-round="(\d+)" data-lo="([^"]+)" data-hi="([^"]+)"', chart)
        assert [int(r[1]) for r in rounds] == list(range(1, seq["rounds"] + 1))
        assert [(float(r[2]), float(r[3])) for r in rounds] == [(h["lo"], h["hi"]) for h in seq["history"]]
        assert [bool(r[0]) for r in rounds] == [h["decision"] != "continue" for h in seq["history"]]
        assert re.findall(r'<line class="stop" data-round="(\d+)"', chart) == [str(seq["decision_round"])]
        assert len(re.findall(r'<line class="margin"', chart)) == 2
        assert "equivalent</b> at round 5" in page and "ok sequential decision: equivalent after 5 round(s)" in page
        assert s.json(f"/api/ab/{sha}")["sequential"]["decision_round"] == 5
    finally:
        s.stop()


def test_until_decided_with_spawned_agents(tmp_path):
    import yaml

    from spawn_support import assert_clean, fake_adapter, make_repo, spawn_env

    repo = make_repo(tmp_path / "repo")
    suite = tmp_path / "suite.yaml"  # 8 agent tasks: the check passes on half of them, in both arms
    suite.write_text(yaml.safe_dump({"name": "greet", "repo": str(repo), "base": "main", "adapters": [fake_adapter()],
                                     "tasks": [{"id": f"t{i}", "prompt": "ok", "check": "true" if i % 2 else "false"}
                                               for i in range(8)]}, sort_keys=False))
    res = run_cli("ab", "--suite", str(suite), "--arm-a", "balanced", "--arm-b", "terse", "--executor", "spawn",
                  "--price", "3,15", "--until-decided", "--margin", "0.6", "--json", cwd=tmp_path, timeout=300,
                  **spawn_env(tmp_path))
    assert res.returncode == 0, res.stderr
    art = json.loads(res.stdout)
    seq = art["sequential"]
    assert (seq["decision"], seq["rounds"], seq["stopped_because"]) == ("equivalent", 4, "decided")
    assert all(art["arms"][a]["runs"] == 4 * 8 and art["arms"][a]["pass_rate"] == 0.5 for a in ("balanced", "terse"))
    rows = [json.loads(x) for x in (tmp_path / ".evalfarm" / "cost" / "ledger.jsonl").read_text().splitlines()]
    assert len(rows) == 64 and {r["trial"] for r in rows} == {0, 1, 2, 3} and len({r["run_id"] for r in rows}) == 4
    assert run_cli("ab", "verify", str(artifact_of(tmp_path, res.stdout)), cwd=tmp_path).returncode == 0
    assert_clean(repo, tmp_path / "spawn")
