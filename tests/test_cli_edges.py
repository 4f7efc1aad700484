"""User-facing edges: where files go, what fails before a run spends anything, one-line errors."""
from __future__ import annotations

import json
import os
import socket
import stat
import time

from conftest import EXAMPLES, run_cli

SMOKE = str(EXAMPLES / "smoke.yaml")


def test_output_follows_a_symlink_writes_a_fifo_in_place_and_keeps_the_umask(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    res = run_cli("run", SMOKE, "--no-save", "--output", str(tmp_path / "link.json"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "link.json").is_symlink() and json.loads(target.read_text())["spec_name"] == "smoke"
    res = run_cli("run", SMOKE, "--state-dir", str(tmp_path / "st"), "--output", str(tmp_path / "plain.json"))
    for f in [tmp_path / "plain.json", *(tmp_path / "st" / "runs").iterdir()]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f  # the usual umask, not mkstemp's 0600
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        res = run_cli("run", SMOKE, "--no-save", "--output", str(fifo))
        assert res.returncode == 0, res.stderr
        data = b""
        while chunk := os.read(reader, 1 << 16):
            data += chunk
        assert json.loads(data)["spec_name"] == "smoke" and stat.S_ISFIFO(fifo.stat().st_mode)
    finally:
        os.close(reader)


def test_unwritable_outputs_stop_before_the_run(tmp_path):
    (tmp_path / "afile").write_text("x")
    for args, needle in ((["--output", str(tmp_path / "afile" / "o.json")], "--output"),
                         (["--junit", str(tmp_path / "afile" / "j.xml")], "--junit"),
                         (["--pr-summary", str(tmp_path)], "--pr-summary"),
                         (["--state-dir", str(tmp_path / "afile")], "--state-dir")):
        res = run_cli("run", SMOKE, *args, "--state-dir" if "--state-dir" not in args else "--trials",
                      str(tmp_path / "st") if "--state-dir" not in args else "1")
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "st").exists()  # nothing ran, nothing was saved


def test_wait_resume_and_rubric_check_their_outputs_before_waiting_dispatching_or_calling(tmp_path, provider):
    """`wait` may wait for hours and `resume` spends: a bad --output or --state-dir stops them before they
    even connect (the broker here is unreachable); `rubric -o` before its paid call."""
    (tmp_path / "afile").write_text("x")
    run_id = "20261130T120000123456Z-0a1b2c"
    for cmd in ("wait", "resume"):
        for args, needle in ((["--output", str(tmp_path / "afile" / "o.json")], "--output"),
                             (["--state-dir", str(tmp_path / "afile")], "--state-dir")):
            res = run_cli(cmd, run_id, "--broker", "redis://127.0.0.1:1/0", *args, timeout=30)
            assert res.returncode == 2, (cmd, args, res.stderr)
            assert res.stderr.strip().splitlines() == [f"evalfarm: error: {res.stderr.split('error: ', 1)[1].strip()}"]
            assert needle in res.stderr and "connecting" not in res.stderr, res.stderr
    mock = provider()
    res = run_cli("rubric", "--spec", "Answer in one word.", "--model", "m", "--base-url", mock.url,
                  "-o", str(tmp_path / "afile" / "case.yaml"))
    assert res.returncode == 2 and "--output" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert mock.stats()["requests"] == 0


def test_corrupt_registry_stops_before_the_run(tmp_path):
    st = tmp_path / "st"
    st.mkdir()
    (st / "registry.db").write_text("garbage")
    res = run_cli("run", SMOKE, "--state-dir", str(st))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert not (st / "runs").exists()


def test_garbage_reports_are_refused_by_gate_and_diff(tmp_path):
    (tmp_path / "p1.json").write_text(json.dumps({"per_adapter": {"x": 5}}))
    good = run_cli("run", SMOKE, "--no-save", "--output", str(tmp_path / "good.json"))
    assert good.returncode == 0
    for args in (["gate", str(tmp_path / "p1.json")], ["diff", str(tmp_path / "good.json"), str(tmp_path / "p1.json")]):
        res = run_cli(*args, "--state-dir", str(tmp_path / "st"))
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "not an evalfarm report" in res.stderr and "Traceback" not in res.stderr


def test_click_usage_errors_are_one_line():
    for args in (["run", SMOKE, "--trials", "0"], ["run", SMOKE, "--bogus"], ["diff", "a"], ["nosuchcmd"]):
        res = run_cli(*args)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
        assert res.stderr.startswith("evalfarm: error: ")


def test_bad_environment_settings_are_one_line(tmp_path):
    for env, needle in (({"EVALFARM_MAX_IN_FLIGHT": "0"}, "EVALFARM_MAX_IN_FLIGHT=0"),
                        ({"EVALFARM_BATCH_SIZE": "abc"}, "EVALFARM_BATCH_SIZE='abc'"),
                        # read when the run ends: refused before it starts, not after it was paid for
                        ({"EVALFARM_RUN_TTL_S": "x"}, "EVALFARM_RUN_TTL_S='x'")):
        res = run_cli("run", SMOKE, "--no-save", timeout=30, **env)
        assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    for env, needle in (({"EVALFARM_TASK_TIME_LIMIT": "abc"}, "EVALFARM_TASK_TIME_LIMIT='abc'"),
                        ({"EVALFARM_RUN_TTL_S": "-5"}, "EVALFARM_RUN_TTL_S=-5"),
                        ({"EVALFARM_HEARTBEAT_S": "nan"}, "EVALFARM_HEARTBEAT_S=nan")):
        res = run_cli("worker", "--broker", "redis://127.0.0.1:1/0", timeout=30, **env)  # refused before connecting
        assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = run_cli("status", "--broker", "redis://127.0.0.1:6379/abc")
    assert res.returncode == 2 and "the database must be a number" in res.stderr


def test_mock_provider_on_a_busy_port_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        res = run_cli("mock-provider", "--port", str(s.getsockname()[1]), timeout=20)
    assert res.returncode == 2 and "cannot listen on" in res.stderr and "Traceback" not in res.stderr


def test_detach_refuses_flags_it_cannot_honour(redis_server):
    res = run_cli("run", SMOKE, "--detach", "--gate", "--output", "o.json", broker=redis_server.url)
    assert res.returncode == 2 and "--output, --gate cannot apply" in res.stderr


def test_rich_markup_in_user_strings_is_printed_as_written(tmp_path):
    (tmp_path / "s.yaml").write_text('name: "n [red]x[/red] :b:"\nadapters: ["mock:[/x]", "mock:b"]\ntrials: 2\n'
                                     "prompts:\n  - {id: a, text: hi}\n")
    res = run_cli("run", str(tmp_path / "s.yaml"), "--no-save")
    assert res.returncode == 0, res.stderr
    assert "n [red]x[/red] :b:" in res.stdout and "mock:[/x]: pass^2" in res.stdout and "mock:b: pass^2" in res.stdout


def test_an_unreachable_broker_says_where_at_once_and_fails_within_ten_seconds():
    started = time.monotonic()
    res = run_cli("run", SMOKE, "--no-save", broker="redis://127.0.0.1:1/0", timeout=30)
    took = time.monotonic() - started
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and took < 12, (took, res.stderr)
    assert lines[0] == "evalfarm: connecting to redis://127.0.0.1:1/0 ..." and "cannot reach the run store" in lines[-1]
