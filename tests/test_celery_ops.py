"""Celery's own tools see the farm: `celery -A evalfarm.executors.celery.celery_app inspect ping`,
`celery events --dump` and Flower's HTTP API, each run for real beside a real worker, a real
redis-server and a real farm run. Plus the worker's one-line refusal of a broker it cannot reach."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import EXAMPLES, env_for, free_port, run_cli, stop_group, wait_for

APP = "evalfarm.executors.celery.celery_app"
CELERY = [sys.executable, "-m", "celery", "-A", APP]
SMOKE = str(EXAMPLES / "smoke.yaml")


def celery(*args: str, broker: str | None = None, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CELERY, *args], env=env_for(broker, **env), capture_output=True, text=True,
                          timeout=timeout)


def background(args: list[str], log, broker: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(args, env=env_for(broker, **env), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


EVENT_LINE = re.compile(r"^\S+ \[[^\]]+\] (task \w+|heartbeat|started|shutdown)\b")
HUMAN = {"heartbeat": "worker-heartbeat", "started": "worker-online", "shutdown": "worker-offline"}


def events_of(dump: str) -> list[str]:
    """The event types in `celery events --dump` lines: "HOST [TS] task received: NAME(ID) args=..."
    and "HOST [TS] heartbeat: ..." (celery/events/dumper.py humanizes the type)."""
    kinds = []
    for line in dump.splitlines():
        m = EVENT_LINE.match(line)
        if m:
            kinds.append(HUMAN.get(m.group(1), m.group(1).replace(" ", "-")))
    return kinds


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_inspect_ping_through_the_documented_app_path(redis_server, start_worker):
    worker = start_worker(redis_server.url, concurrency=2)
    by_flag = celery("-b", redis_server.url, "inspect", "ping", "--timeout", "5")
    assert by_flag.returncode == 0, by_flag.stderr
    assert "all-" in by_flag.stdout and "pong" in by_flag.stdout, by_flag.stdout
    by_env = celery("inspect", "active_queues", "--json", "--timeout", "5", broker=redis_server.url)
    assert by_env.returncode == 0, by_env.stderr
    queues = json.loads(by_env.stdout)
    assert len(queues) == 1
    assert sorted(q["name"] for q in next(iter(queues.values()))) == ["aggregate", "judge", "provider"]
    registered = celery("inspect", "registered", "--json", "--timeout", "5", broker=redis_server.url)
    names = next(iter(json.loads(registered.stdout).values()))
    assert {"evalfarm.run_batch", "evalfarm.judge_batch", "evalfarm.aggregate"} <= set(names)
    # the worker runs the app's configuration: JSON only, task events on
    conf = celery("inspect", "conf", "--json", "--timeout", "5", broker=redis_server.url)
    conf = next(iter(json.loads(conf.stdout).values()))
    assert conf["accept_content"] == ["json"] and conf["worker_send_task_events"] is True
    assert worker.proc.poll() is None


def test_events_dump_and_flower_see_the_worker_and_the_tasks_of_a_real_run(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, concurrency=2)
    dump_log = tmp_path / "events.log"
    dump = background([*CELERY, "events", "--dump"], dump_log, redis_server.url)
    flower = None
    port = free_port()
    has_flower = _importable("flower")
    try:
        if has_flower:
            flower = background([*CELERY, "flower", f"--port={port}", "--address=127.0.0.1"], tmp_path / "flower.log",
                                redis_server.url, FLOWER_UNAUTHENTICATED_API="true")
            wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthcheck"), 30, "flower to answer")
            # answering is not listening: Flower's event receiver starts in a thread of its own; its
            # /metrics marks the worker online only once a worker event reached it (CI saw a run's first
            # tasks go by before that)
            wait_for(lambda: _flower_hears_worker(port), 30, "flower's event receiver to hear the worker")
        # the dump is connected when it sees the worker's heartbeat (every 2 s)
        wait_for(lambda: "worker-heartbeat" in events_of(dump_log.read_text(errors="replace")), 20,
                 "a worker heartbeat in celery events --dump")
        res = run_cli("run", SMOKE, "--no-save", "--json", "--batch-size", "4", broker=redis_server.url)
        assert res.returncode == 0, res.stderr
        run_id = json.loads(res.stdout)["run_id"]
        wait_for(lambda: events_of(dump_log.read_text(errors="replace")).count("task-succeeded") >= 6, 20,
                 "the run's task events")
        text = dump_log.read_text(errors="replace")
        kinds = events_of(text)
        # 20 items in batches of 4: 5 run batches, judge batches, one aggregate; each received, started, succeeded
        assert kinds.count("task-received") >= 7 and kinds.count("task-started") >= 7
        assert "evalfarm.run_batch" in text and "evalfarm.aggregate" in text and run_id in text
        print("\nFIGURES celery events --dump lines:\n" + "\n".join(
            line[:220] for line in text.splitlines() if "] task " in line)[:3000])
        if flower is None:
            pytest.skip("flower is not installed (pip install 'evalfarm[ops]' or the test extras)")
        workers = wait_for(lambda: _worker_listed(port), 30, "flower's /api/workers to list the worker")
        tasks = wait_for(lambda: _tasks_done(port, 7), 30, "flower's /api/tasks to list the run's tasks")
        names = {t["name"] for t in tasks.values()}
        assert {"evalfarm.run_batch", "evalfarm.aggregate"} <= names, names
        assert all(t["state"] == "SUCCESS" for t in tasks.values()), tasks
        assert any(run_id in (t.get("args") or "") for t in tasks.values())
        print("FIGURES flower /api/workers:", json.dumps({w: sorted(v)[:6] for w, v in workers.items()}))
        print("FIGURES flower /api/tasks:", json.dumps(sorted(
            (t["name"], t["state"], t["worker"]) for t in tasks.values()))[:1500])
    finally:
        stop_group(dump)
        if flower is not None:
            stop_group(flower)


def test_no_events_worker_sends_heartbeats_but_no_task_events(tmp_path, redis_server, start_worker):
    start_worker(redis_server.url, concurrency=2, extra_args=["--no-events"])
    dump_log = tmp_path / "events.log"
    dump = background([*CELERY, "events", "--dump"], dump_log, redis_server.url)
    try:
        wait_for(lambda: "worker-heartbeat" in events_of(dump_log.read_text(errors="replace")), 20,
                 "a worker heartbeat")
        res = run_cli("run", SMOKE, "--no-save", "--json", "--batch-size", "4", broker=redis_server.url)
        assert res.returncode == 0, res.stderr
        time.sleep(2.5)  # one more heartbeat period: task events, had there been any, are in the dump
        kinds = events_of(dump_log.read_text(errors="replace"))
        assert "worker-heartbeat" in kinds and not [k for k in kinds if k.startswith("task-")], kinds
    finally:
        stop_group(dump)


@pytest.mark.parametrize("url, says", [
    ("redis://127.0.0.1:{dead}/0", "cannot reach the broker at redis://127.0.0.1:{dead}/0"),
    ("redis://:not-it-xyz@127.0.0.1:{port}/0", "cannot reach the broker at redis://:***@127.0.0.1:{port}/0"),
])
def test_a_worker_with_a_bad_broker_says_so_in_one_line_and_exits_2(tmp_path, url, says):
    from conftest import RedisServer

    server = RedisServer(tmp_path, password="right-password")
    server.start()
    try:
        dead = free_port()
        url, says = url.format(dead=dead, port=server.port), says.format(dead=dead, port=server.port)
        started = time.monotonic()
        res = run_cli("worker", "--pool", "provider", broker=url, timeout=60, EVALFARM_CONNECT_TIMEOUT="2")
        took = time.monotonic() - started
    finally:
        server.stop()
    errors = [line for line in res.stderr.splitlines() if line.startswith("evalfarm: error:")]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    assert says in errors[0] and "not-it-xyz" not in res.stderr, errors[0]
    assert "celery@" not in res.stderr and "Trying again" not in res.stderr  # no banner, no retry loop
    assert took < 20


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except OSError:
        return False


def _worker_listed(port: int):
    workers = get_json(f"http://127.0.0.1:{port}/api/workers?refresh=1")
    return workers if any(name.startswith("all-") for name in workers) else None


def _flower_hears_worker(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return bool(re.search(r'^flower_worker_online\{worker="all-[^"]*"\} 1\.0$', text, re.M))


def _tasks_done(port: int, at_least: int):
    tasks = get_json(f"http://127.0.0.1:{port}/api/tasks")
    done = {k: t for k, t in tasks.items() if t.get("state") == "SUCCESS"}
    return tasks if len(done) >= at_least and len(done) == len(tasks) else None

