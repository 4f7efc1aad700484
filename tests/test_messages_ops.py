"""The messages a hurried user met (issue 21), each naming the real cause: a misspelt spec key, a broker
URL that is not one, a mistyped command, --version, a --dataset run that gated nothing, Ctrl-C on an
attached farm run (under a real pseudo-terminal), Redis going away while `wait` polls, the budget
stop's exit code in the README. Each runs the real CLI in a subprocess."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from importlib.metadata import version

import yaml

from conftest import EVALFARM, EXAMPLES, ROOT, RedisServer, env_for, run_cli, wait_for

SMOKE = str(EXAMPLES / "smoke.yaml")


def error_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("evalfarm: error:")]


def test_a_misspelt_key_is_named_first(tmp_path):
    spec = tmp_path / "typo.yaml"
    spec.write_text("name: t\nadapter: [mock]\nprompts:\n  - {id: a, text: hi}\n")
    res = run_cli("run", str(spec), "--no-save")
    assert res.returncode == 2 and len(error_lines(res)) == 1, res.stderr
    assert error_lines(res)[0].startswith(
        f"evalfarm: error: {spec}:2: adapter: unknown field (did you mean 'adapters'?); allowed fields are adapters,")
    assert "required field is missing" not in res.stderr


def test_a_broker_url_that_is_not_one_is_about_the_broker(tmp_path):
    for url in ("http://localhost:8080", "localhost:6379"):
        res = run_cli("run", SMOKE, "--no-save", "--broker", url)
        assert res.returncode == 2 and len(error_lines(res)) == 1, res.stderr
        assert error_lines(res)[0].startswith(f"evalfarm: error: --broker {url}: not a broker URL")
        assert "EVALFARM_STORE_URL" not in res.stderr and "redis://HOST:6379/0" in res.stderr
    amqp = run_cli("run", SMOKE, "--no-save", "--broker", "amqp://guest:secret@rabbit:5672//")
    assert amqp.returncode == 2 and "a broker on amqp:// needs a Redis run store beside it" in amqp.stderr
    assert "secret" not in amqp.stderr


def test_a_mistyped_command_gets_a_suggestion_and_version_answers():
    res = run_cli("runn", SMOKE)
    assert res.returncode == 2
    [line] = error_lines(res)
    assert line.startswith("evalfarm: error: no such command 'runn'; did you mean 'run'? (see '"), line
    assert "did you mean 'status'" in run_cli("stauts").stderr
    v = run_cli("--version")
    assert v.returncode == 0 and v.stdout == f"evalfarm {version('evalfarm')}\n"


def test_a_dataset_run_without_thresholds_says_nothing_gated_it(tmp_path, provider):
    server = provider()
    cases = tmp_path / "cases.yaml"
    cases.write_text(yaml.safe_dump([{"id": "a", "input": "say hi", "checks": [{"kind": "contains", "value": "zz"}]},
                                     {"id": "b", "input": "say bye", "checks": [{"kind": "contains", "value": "qq"}]}]))
    res = run_cli("run", "--dataset", str(cases), "--model", "m", "--base-url", server.url, "--no-save")
    assert res.returncode == 0, res.stderr  # `run` without --gate exits 0, as the seed's; but it says why
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("PASSED, NOTHING GATED: 2 of 2 measured items failed, and no threshold is set"), last
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump([{"id": "a", "input": "say hi", "checks": [{"kind": "contains", "value": "hi"}]}]))
    ok = run_cli("run", "--dataset", str(good), "--model", "m", "--base-url", server.url, "--no-save")
    assert ok.returncode == 0 and ok.stdout.strip().splitlines()[-1] == "PASSED", ok.stdout


def read_pty(fd: int, until, timeout: float) -> bytes:
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if until(out):
                break
    return out


def test_ctrl_c_on_an_attached_farm_run_leaves_the_cancel_command_visible(tmp_path, redis_server):
    """Under a real pseudo-terminal (the bar draws only on a terminal): after the detach message, no
    cursor movement or line erase may follow, which is what a last redraw of the bar is made of."""
    detached = run_cli("run", SMOKE, "--no-save", "--detach", broker=redis_server.url)  # no worker: it waits
    assert detached.returncode == 0, detached.stderr
    run_id = detached.stdout.strip()
    master, slave = pty.openpty()
    proc = subprocess.Popen([*EVALFARM, "wait", run_id, "--no-save"], env=env_for(redis_server.url, TERM="xterm",
                            COLUMNS="120", LINES="40"), stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        shown = read_pty(master, lambda b: b"it/s" in b, 30)
        assert b"it/s" in shown, shown[-2000:]
        time.sleep(0.5)  # a few frames of the bar
        os.killpg(proc.pid, signal.SIGINT)
        rest = read_pty(master, lambda b: False, 10)
        assert proc.wait(10) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(master)
    text = shown + rest
    message = f"'evalfarm cancel {run_id}' stops it.".encode()
    assert message in text, text[-2000:]
    after = text[text.index(message) + len(message):]
    assert not re.search(rb"\x1b\[(\d*[ABFJK]|\?25[lh])", after), after  # no cursor up, no erase, no redraw
    print(f"\nFIGURES after the detach line: {after!r}")


def test_redis_going_away_while_waiting_is_said_at_once_and_its_return_too(tmp_path):
    server = RedisServer(tmp_path, appendonly=True)
    server.start()
    proc = None
    try:
        detached = run_cli("run", SMOKE, "--no-save", "--detach", broker=server.url)  # no worker yet
        assert detached.returncode == 0, detached.stderr
        run_id = detached.stdout.strip()
        log = tmp_path / "wait.log"
        proc = subprocess.Popen([*EVALFARM, "wait", run_id, "--no-save", "--json"], env=env_for(server.url),
                                stdout=subprocess.DEVNULL, stderr=open(log, "wb"), start_new_session=True)
        time.sleep(2)
        killed = time.monotonic()
        server.stop(signal.SIGKILL)
        wait_for(lambda: b"is not answering" in log.read_bytes(), 15, "the notice that Redis is gone")
        noticed = time.monotonic() - killed
        line = next(x for x in log.read_text().splitlines() if "is not answering" in x)
        assert f"the run store at {server.url} is not answering (ConnectionError: Error 111" in line, line
        assert f"run {run_id} goes on on the farm" in line
        server.start()  # the same port and dir: appendonly brings the run back
        wait_for(lambda: b"answers again" in log.read_bytes(), 30, "the notice that Redis is back")
        assert proc.poll() is None  # still attached, waiting for the run
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        server.stop()
    print(f"\nFIGURES Redis SIGKILLed; `wait` said so after {noticed:.1f} s: {line}")
    assert noticed < 8


def test_the_readme_lists_the_budget_stop_exit_code():
    """tests/test_budget.py holds the behaviour (a run stopped at its budget exits 1); the README says so."""
    readme = (ROOT / "README.md").read_text()
    codes = readme[readme.index("Exit codes: `0`"):][:900]
    assert re.search(r"`1` a threshold failed, or the run stopped at its budget", codes), codes


def test_celery_app_path_is_documented_and_importable():
    readme = (ROOT / "README.md").read_text()
    assert "celery -A evalfarm.executors.celery.celery_app" in readme
    res = subprocess.run([*EVALFARM[:1], "-c", "from evalfarm.executors.celery.celery_app import app; "
                          "import json; print(json.dumps(sorted(t for t in app.tasks if t.startswith('evalfarm.'))))"],
                         env=env_for(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == ["evalfarm.aggregate", "evalfarm.batch_poll", "evalfarm.batch_submit", "evalfarm.judge_batch",
                                       "evalfarm.run_batch"]
