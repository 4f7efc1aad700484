"""`worker --pool all` means all (issue 17): provider, judge, aggregate and spawn; and a run whose tasks
sit on a queue no live worker consumes names the queue and the --pool to start, within the stall
notice. Real redis-server, real workers, real git, the fake agent."""
from __future__ import annotations

import json

from conftest import run_cli
from spawn_support import make_repo, spawn_env, write_spec


def test_pool_all_serves_the_spawn_queue_too(tmp_path, redis_server, start_worker):
    repo = make_repo(tmp_path / "repo")
    env = spawn_env(tmp_path, EVALFARM_SPAWN_BROKER_URL=redis_server.url[:-1] + "1")
    start_worker(redis_server.url, pool="all", concurrency=2, **env)
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "hello", "text": "ok",
                                                      "check": "grep -q 'hello, world' hello.py"}])
    res = run_cli("run", str(spec), "--detach", broker=redis_server.url, cwd=tmp_path, **env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "60", broker=redis_server.url, cwd=tmp_path,
                  timeout=120, **env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["items_done"] == 1
    help_text = " ".join(run_cli("worker", "--help").stdout.split())
    assert "'all' means all: provider, judge" in help_text and "spawn" in help_text


def test_a_queue_no_live_worker_consumes_is_named_with_the_pool_to_start(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, pool="aggregate", concurrency=1)
    (tmp_path / "s.yaml").write_text("name: q\nadapters: [mock]\nprompts:\n  - {id: a, text: hello}\n")
    env = {"EVALFARM_STALL_NOTICE_S": "1"}
    res = run_cli("run", str(tmp_path / "s.yaml"), "--detach", broker=redis_server.url, **env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    res = run_cli("wait", run_id, "--no-save", "--timeout", "4", broker=redis_server.url, timeout=60, **env)
    lines = [x for x in res.stderr.splitlines() if "no live worker consumes it" in x]
    assert len(lines) == 1, res.stderr[-2000:]
    assert "wait on the 'provider' queue" in lines[0] and "'evalfarm worker --pool provider'" in lines[0], lines[0]
