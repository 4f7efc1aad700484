"""The farm end to end: a real redis-server, real worker subprocesses, the real CLI."""
from __future__ import annotations

import json
from pathlib import Path

import redis

from conftest import EXAMPLES, run_cli
from evalfarm import Runner, load_spec
from evalfarm.core.report.model import stable_view

SMOKE = str(EXAMPLES / "smoke.yaml")


def report_of(res) -> dict:
    assert res.returncode in (0, 1, 3), res.stderr
    return json.loads(res.stdout)


def test_embedded_redis_and_inprocess_reports_are_identical(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, concurrency=2)
    embedded = report_of(run_cli("run", SMOKE, "--no-save", "--json"))
    farm = report_of(run_cli("run", SMOKE, "--no-save", "--json", "--batch-size", "3", broker=redis_server.url))
    inproc = Runner().run(load_spec(SMOKE)).to_dict()
    assert embedded["mode"] == "embedded" and farm["mode"] == "redis"
    assert stable_view(embedded) == stable_view(farm) == stable_view(inproc)
    assert len(farm["outcomes"]) == 2 * 5 * 2  # adapters x prompts x trials
    # every item ran exactly once on the farm: no duplicate delivery
    counts = redis.Redis.from_url(redis_server.url).hgetall(f"ef:run:{farm['run_id']}:counts")
    assert int(counts[b"done"]) == 20 and int(counts[b"executed"]) == 20


def test_cli_run_list_diff_and_exit_codes(tmp_path):
    state = str(tmp_path / "state")
    (tmp_path / "strict.yaml").write_text(
        "name: strict\nadapters: [mock]\nprompts:\n  - {id: a, text: hi, expected_output_contains: [bye]}\n"
        "  - {id: b, text: bye}\nthresholds:\n  golden_pass_rate_min: 0.9\n")
    passed = run_cli("run", SMOKE, "--state-dir", state)
    assert passed.returncode == 0, passed.stderr
    assert "PASSED" in passed.stdout
    failed = run_cli("run", str(tmp_path / "strict.yaml"), "--state-dir", state, "--output", str(tmp_path / "o.json"))
    assert failed.returncode == 1
    assert "mock: golden_pass_rate 0.5000 < 0.9" in failed.stdout
    assert json.loads((tmp_path / "o.json").read_text())["thresholds_passed"] is False

    listing = run_cli("list", "--state-dir", state).stdout.strip().splitlines()
    assert len(listing) == 2 and listing[0].split("\t")[2] == "strict" and listing[1].split("\t")[2] == "smoke"
    assert run_cli("ls", "--state-dir", state).stdout.strip().splitlines() == listing
    newest, oldest = listing[0].split("\t")[0], listing[1].split("\t")[0]

    d = run_cli("diff", oldest, newest, "--state-dir", state, "--json")
    assert d.returncode == 0, d.stderr
    diff = json.loads(d.stdout)
    assert diff["per_adapter"]["mock"]["overall_delta"] < 0 and diff["per_adapter"]["mock"]["winner"] == "a"
    assert diff["per_adapter"]["mock:shouty"]["overall_b"] is None  # only in a: n/a, not 0
    assert diff["per_adapter"]["mock:shouty"]["winner"] == "only in a"
    table = run_cli("diff", oldest[:20], str(Path(state) / "runs" / f"{newest}.json"), "--state-dir", state)
    assert table.returncode == 0 and "overall winner: a" in table.stdout


def test_nothing_measured_exits_3_on_the_farm(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, EVALFARM_PLUGINS="ef_test_adapters")
    (tmp_path / "s.yaml").write_text("name: b\nadapters: [broken]\nprompts:\n  - {id: a, text: hi}\n"
                                     "thresholds:\n  golden_pass_rate_min: 0.5\n")
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", broker=redis_server.url,
                  EVALFARM_PLUGINS="ef_test_adapters")
    assert res.returncode == 3, res.stderr
    assert "NOTHING MEASURED" in res.stdout
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", EVALFARM_PLUGINS="ef_test_adapters")
    assert res.returncode == 3
    report = json.loads(res.stdout)
    assert report["per_adapter"]["broken"]["error_classes"] == {"ConnectionError": 1}


def test_two_workers_share_a_big_run(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, concurrency=2)
    start_worker(redis_server.url, concurrency=2)
    lines = "\n".join(json.dumps({"id": f"p{i}", "text": f"prompt {i}", "expected_output_contains": [f"{i}"]})
                      for i in range(500))
    (tmp_path / "d.jsonl").write_text(lines)
    (tmp_path / "s.yaml").write_text("name: big\ndataset: d.jsonl\nadapters: [mock, 'mock:b']\ntrials: 3\n")
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save", "--json", broker=redis_server.url)
    report = report_of(res)
    assert res.returncode == 0
    assert [f["items"] for f in report["per_adapter"].values()] == [1500, 1500]
    assert len({o["key"] for o in report["outcomes"]}) == 3000
    counts = redis.Redis.from_url(redis_server.url).hgetall(f"ef:run:{report['run_id']}:counts")
    assert int(counts[b"executed"]) == 3000
