"""Re-scoring stored outputs (issue 13), proven at the server: `evalfarm rescore RUN` calls the judge
once per item and the model under test never, in this process and on the farm's judge queue; the
rescored report equals a fresh run's with the same outputs and the same scoring, but for what
legitimately differs (run identity and timing, the spec hash and item keys: the adapters are the
`stored` stand-ins; and the model's cost: nothing was spent on the model). The new run names its
source in the lineage stub and the registry.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

from conftest import EVALFARM, env_for, run_cli

from evalfarm.core.report.model import stable_view


def judged_spec(tmp: Path, url: str, *, name: str = "judged", criteria_b: str | None = None,
                thresholds: str = "{pass_rate_min: 0.5}") -> Path:
    """Three cases, two trials. Case b's output carries [[fail-criterion:polite]]: mock-provider's judge
    fails that criterion (and passes every other one)."""
    crit_b = criteria_b or "[{id: polite, weight: 3, description: it is polite}, {id: short, description: it is short}]"
    path = tmp / f"{name}.yaml"
    path.write_text(f"""name: {name}
adapters:
  - {{id: small, model: m1, base_url: '{url}', price: {{input: 1, output: 2}}}}
judge: {{model: j1, base_url: '{url}', price: {{input: 0.5, output: 0.5}}, weight: 0.5}}
prompts:
  - id: a
    text: hello world
    checks: [{{kind: contains, value: hello}}]
    criteria: [{{id: greets, description: it greets}}]
  - id: b
    text: "bye [[fail-criterion:polite]]"
    criteria: {crit_b}
  - id: c
    text: plain text
    expected_output_contains: [plain]
thresholds: {thresholds}
trials: 2
""")
    return path


def reports(state: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (state / "runs").glob("*.json")
            if not p.name.endswith(".lineage.json")}


def calls(server, since: int = 0) -> tuple[int, int]:
    """(model calls, judge calls) the server saw after the first ``since`` requests."""
    recent = server.stats_requests()[since:]
    judge = sum(1 for r in recent if "EVALFARM-JUDGE" in (r["system"] or ""))
    return len(recent) - judge, judge


def comparable(report: dict) -> dict:
    """The stable view minus what a re-scoring legitimately changes: the spec hash and item keys (its
    adapters are stored stand-ins) and the model's cost (not spent again)."""
    view = stable_view(report)
    view.pop("spec_hash")
    view["cost"] = {k: v for k, v in view["cost"].items() if k not in ("model_usd", "total_usd")}
    view["per_adapter"] = {a: {k: v for k, v in f.items() if k != "cost_usd"} for a, f in view["per_adapter"].items()}
    view["outcomes"] = [{k: v for k, v in o.items() if k not in ("key", "cost_usd")} for o in view["outcomes"]]
    return view


def test_rescore_calls_only_the_judge_and_records_its_source(tmp_path, provider):
    server = provider()
    state = tmp_path / "state"
    first = run_cli("run", str(judged_spec(tmp_path, server.url)), "--state-dir", str(state))
    assert first.returncode == 0, first.stderr
    assert calls(server) == (6, 6)
    [source_id] = reports(state)
    before = len(server.stats_requests())

    res = run_cli("rescore", source_id[:20], "--state-dir", str(state))
    assert res.returncode == 0, res.stderr
    assert calls(server, before) == (0, 6)  # the model under test: never; the judge: once per item
    assert "the model under test was not called" in res.stderr
    runs = reports(state)
    [new_id] = [r for r in runs if r != source_id]
    source, rescored = runs[source_id], runs[new_id]
    assert comparable(rescored) == comparable(source)
    assert rescored["cost"]["model_usd"] == 0 and rescored["cost"]["judge_usd"] == source["cost"]["judge_usd"]
    stub = json.loads((state / "runs" / f"{new_id}.lineage.json").read_text())
    assert stub["source_run"]["run_id"] == source_id
    assert stub["source_run"]["content_hash"] == json.loads(
        (state / "runs" / f"{source_id}.lineage.json").read_text())["content_hash"]
    listed = json.loads(run_cli("ls", "--json", "--state-dir", str(state)).stdout)
    assert {e["run_id"]: e["source_run_id"] for e in listed} == {new_id: source_id, source_id: None}


def test_new_scoring_equals_a_fresh_run_with_it(tmp_path, provider):
    """--spec with other criteria and thresholds: the rescored report is the report a fresh run of that
    spec makes (mock-provider answers the same prompt with the same output)."""
    server = provider()
    state = tmp_path / "state"
    old = judged_spec(tmp_path, server.url, thresholds="{pass_rate_min: 0.9}")
    new = judged_spec(tmp_path, server.url, name="judged-v2", criteria_b="[{id: short, description: it is short}]",
                      thresholds="{pass_rate_min: 0.9, overall_score_min: 0.8}")
    first = run_cli("run", str(old), "--state-dir", str(state))
    assert first.returncode == 1, first.stderr  # case b fails its polite criterion: pass rate 4/6
    [source_id] = reports(state)
    before = len(server.stats_requests())
    res = run_cli("rescore", source_id, "--spec", str(new), "--state-dir", str(state))
    assert res.returncode == 0, res.stderr  # without the polite criterion every item passes
    assert calls(server, before) == (0, 6)
    [rescored] = [r for i, r in reports(state).items() if i != source_id]
    before = len(server.stats_requests())
    fresh_state = tmp_path / "fresh"
    fresh_run = run_cli("run", str(new), "--state-dir", str(fresh_state))
    assert fresh_run.returncode == 0, fresh_run.stderr
    assert calls(server, before) == (6, 6)
    [fresh] = reports(fresh_state).values()
    assert comparable(rescored) == comparable(fresh)
    assert rescored["spec_name"] == "judged-v2" and rescored["per_adapter"]["small"]["pass_rate"] == 1.0


def test_rescore_on_the_farm_uses_the_judge_queue_only(tmp_path, provider, redis_server, start_worker):
    import redis
    server = provider("--latency-ms", "20")
    state = tmp_path / "state"
    spec = judged_spec(tmp_path, server.url)
    first = run_cli("run", str(spec), "--state-dir", str(state))  # in this process
    assert first.returncode == 0, first.stderr
    [source_id] = reports(state)
    before = len(server.stats_requests())
    # no worker yet: the judge backlog waits on the queue, and the stored plan must not expire meanwhile
    # (a plan being stored expires after 10 minutes unless completed; a long judge stage outlives that)
    proc = subprocess.Popen([*EVALFARM, "rescore", source_id, "--state-dir", str(state), "--timeout", "60"],
                            env=env_for(redis_server.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = redis.Redis.from_url(redis_server.url)
    deadline = time.time() + 30
    while not (running := [k.decode().split(":")[2] for k in r.scan_iter("ef:run:*:state") if r.get(k) == b"running"]):
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    [run_id] = running
    assert {part: r.ttl(f"ef:run:{run_id}:{part}") for part in ("meta", "state", "items", "order")} == \
        {"meta": -1, "state": -1, "items": -1, "order": -1}
    # no provider-pool worker runs: an item sent to the provider queue would never finish
    start_worker(redis_server.url, pool="judge", concurrency=2)
    start_worker(redis_server.url, pool="aggregate", concurrency=1)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert calls(server, before) == (0, 6)
    runs = reports(state)
    [farm] = [r for i, r in runs.items() if i != source_id]
    assert farm["mode"] == "redis"
    here = run_cli("rescore", str(state / "runs" / f"{source_id}.json"), "--state-dir", str(tmp_path / "here"),
                   "--no-save", "--json")
    assert here.returncode == 0, here.stderr
    assert stable_view(farm) == stable_view(json.loads(here.stdout))  # both backends: the same report
    assert comparable(farm) == comparable(runs[source_id])


def test_rescore_refuses_what_it_cannot_score(tmp_path, provider):
    server = provider()
    state = tmp_path / "state"
    run_cli("run", str(judged_spec(tmp_path, server.url)), "--state-dir", str(state))
    [source_id] = reports(state)
    path = state / "runs" / f"{source_id}.json"
    report = json.loads(path.read_text())
    cases = {
        "partial.json": ({**report, "stopped": "budget", "items_done": 3}, "partial (stopped: budget"),
        "old.json": ({k: v for k, v in report.items() if k != "prompts"}, "it has no prompts section"),
        "short.json": ({**report, "outcomes": report["outcomes"][:-1]}, "1 planned item(s) have no stored outcome"),
        "tokens.json": ({**report, "outcomes": [{**report["outcomes"][0], "input_tokens": "many"}]
                         + report["outcomes"][1:]}, "outcomes[0].input_tokens: expected a whole number >= 0 or null"),
    }
    before = len(server.stats_requests())
    for name, (data, message) in cases.items():
        (tmp_path / name).write_text(json.dumps(data))
        # edited copies of a sealed run are refused by its seal in its own state dir (tests/test_trust.py):
        # here they are files from elsewhere, which rescore reads as they are
        res = run_cli("rescore", str(tmp_path / name), "--state-dir", str(tmp_path / "elsewhere"))
        assert res.returncode == 2 and message in res.stderr, (name, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    unknown = run_cli("rescore", "nope", "--state-dir", str(state))
    assert unknown.returncode == 2 and "not found" in unknown.stderr
    assert len(server.stats_requests()) == before and len(reports(state)) == 1


def test_judge_model_swaps_the_judge(tmp_path, provider):
    server = provider()
    state = tmp_path / "state"
    run_cli("run", str(judged_spec(tmp_path, server.url)), "--state-dir", str(state))
    [source_id] = reports(state)
    before = len(server.stats_requests())
    res = run_cli("rescore", source_id, "--judge-model", "j2", "--state-dir", str(state), "--no-save", "--json")
    assert res.returncode == 0, res.stderr
    models = {r["model"] for r in server.stats_requests()[before:]}
    assert models == {"j2"}
    assert json.loads(res.stdout)["judge"]["model"] == "j2"
    db = sqlite3.connect(state / "registry.db")
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1  # --no-save records nothing


def test_a_report_from_elsewhere_with_a_bad_prompts_section_is_one_line_and_leaves_no_spool(tmp_path):
    """The prompts are checked as they are spooled to the re-scoring run's dataset file: a repeated id or
    a prompt that is not one is said in one line (exit 2), and the spool folder is gone."""
    import os
    import tempfile

    state = tmp_path / "state"
    res = run_cli("run", str(Path(__file__).parent.parent / "examples" / "smoke.yaml"), "--state-dir", str(state),
                  "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((state / "runs" / f"{json.loads(res.stdout)['run_id']}.json").read_text())
    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("evalfarm-rescore-")}
    cases = {"dup": ("id", saved["prompts"][0]["id"], "its prompts section lists a prompt id twice"),
             "bad": ("text", 5, "prompts[1].text: Input should be a valid string")}
    for name, (field, value, said) in cases.items():
        report = json.loads(json.dumps(saved))
        report["prompts"][1][field] = value
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report))
        # another state dir: a report from elsewhere, its verdicts checked, not refused as edited
        res = run_cli("rescore", str(path), "--state-dir", str(tmp_path / "other"), "--no-save", cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert res.stderr == f"evalfarm: error: {path}: cannot re-score this report: {said}\n"
    after = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("evalfarm-rescore-")}
    assert after <= before
