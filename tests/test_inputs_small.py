"""Issue 10, item 13: devices and pipes as inputs, CR inside JSONL lines, a closed pipe on stdout,
file modes under umask 000, a rubric spec that names a missing file, a negative --timeout. Real CLI
in subprocesses, real pipes, a real redis-server and mock-provider where they matter."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import EVALFARM, EXAMPLES, env_for, run_cli

SMOKE = str(EXAMPLES / "smoke.yaml")


def one_line_error(res) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-1000:])
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("evalfarm: connecting to ")]
    assert len(lines) == 1 and lines[0].startswith("evalfarm: error: ") and "Traceback" not in res.stderr, lines
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    yield path
    # a reader stuck in open() would hang the test: give it an end
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    os.close(fd)


@pytest.mark.parametrize("what", ["/dev/zero", "fifo"])
def test_devices_and_pipes_are_not_datasets(tmp_path, fifo, what):
    target = str(fifo) if what == "fifo" else what
    kind = "a pipe" if what == "fifo" else "a device"
    (tmp_path / "s.yaml").write_text(f"name: s\nadapters: [mock]\ndataset: {target}\n")
    line = one_line_error(run_cli("run", "s.yaml", "--no-save", cwd=tmp_path, timeout=20))
    assert f"s.yaml:3: dataset: dataset file {target} is {kind}; give a regular file" in line
    line = one_line_error(run_cli("run", "--dataset", target, "--model", "m", "--no-save", cwd=tmp_path, timeout=20))
    assert f"case file {target} is {kind}" in line


def test_a_device_is_not_a_spec(tmp_path):
    line = one_line_error(run_cli("run", "/dev/zero", "--no-save", cwd=tmp_path, timeout=20))
    assert line == "evalfarm: error: /dev/zero: is a device; give a regular file"


def test_a_spec_can_still_come_through_a_pipe(tmp_path, fifo):
    """A FIFO spec (``<(cat spec.yaml)``) is read like a file, within the size limit."""
    spec = b"name: piped\nadapters: [mock]\nprompts:\n  - {id: a, text: hi}\n"

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(spec)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        res = run_cli("run", str(fifo), "--no-save", "--json", timeout=60)
    finally:
        writer.join(10)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["spec_name"] == "piped"


def test_cr_inside_a_jsonl_line_is_whitespace_and_lines_count_newlines_only(tmp_path):
    (tmp_path / "s.yaml").write_text("name: s\nadapters: [mock]\ndataset: p.jsonl\n")
    (tmp_path / "p.jsonl").write_bytes(b'{"id": "a",\r "text": "x\\ry"}\r\n{"id":\r"b", "text": "z"}\n')
    res = run_cli("run", "s.yaml", "--no-save", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert [p["id"] for p in report["prompts"]] == ["a", "b"] and report["prompts"][0]["text"] == "x\ry"
    (tmp_path / "p.jsonl").write_bytes(b'{"id": "a",\r "text": "x"}\n{"id": "b",\r "txt": "z"}\n')
    assert "p.jsonl:2: text: required field is missing" in one_line_error(run_cli("run", "s.yaml", "--no-save",
                                                                                cwd=tmp_path))


def closed_stdout(*args: str, broker: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI with stdout a pipe whose reader is already gone (``| head -1`` that has exited)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*EVALFARM, *args], env=env_for(broker), stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=60, cwd=cwd)
    finally:
        os.close(write)


def test_ls_and_status_into_a_closed_pipe_exit_quietly(tmp_path, redis_server):
    state = tmp_path / "st"
    for _ in range(2):
        assert run_cli("run", SMOKE, "--state-dir", str(state)).returncode == 0
        assert run_cli("run", SMOKE, "--detach", broker=redis_server.url).returncode == 0
    assert len(run_cli("ls", "--state-dir", str(state)).stdout.splitlines()) == 2
    assert len(run_cli("status", broker=redis_server.url).stdout.splitlines()) == 2
    for args, broker in ((["ls", "--state-dir", str(state)], None), (["list", "--baselines", "--state-dir", str(state)], None),
                         (["status"], redis_server.url)):
        res = closed_stdout(*args, broker=broker)
        noise = [x for x in res.stderr.splitlines() if not x.startswith("evalfarm: connecting to ")]
        assert res.returncode == 0 and not noise, (args, res.returncode, res.stderr)
    # and with a real `head -1`
    res = subprocess.run(f"{' '.join(EVALFARM)} ls --state-dir {state} | head -1; exit ${{PIPESTATUS[0]}}",
                         shell=True, executable="/bin/bash", capture_output=True, text=True, env=env_for(), timeout=60)
    assert res.returncode == 0 and res.stderr == "" and len(res.stdout.splitlines()) == 1


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def test_nothing_is_world_writable_under_umask_000(tmp_path):
    env = env_for()

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*EVALFARM, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: os.umask(0))

    assert cli("run", SMOKE, "--output", "out/deep/r.json", "--cache").returncode == 0
    run_id = json.loads((tmp_path / "out" / "deep" / "r.json").read_text())["run_id"]
    assert cli("baseline", run_id, "--name", "main").returncode == 0
    res = cli("ab", "--suite", str(EXAMPLES / "ab" / "suite.yaml"), "--arm-a", "balanced", "--arm-b", "terse")
    assert res.returncode == 0, res.stderr
    modes = {**_modes(tmp_path / ".evalfarm"), **{f"out/{k}": v for k, v in _modes(tmp_path / "out").items()}}
    loose = {k: oct(v) for k, v in modes.items() if v & 0o022}
    assert not loose, loose
    assert modes["."] == 0o755 and modes["runs"] == 0o755 and modes[f"runs/{run_id}.json"] == 0o644
    assert modes["registry.db"] == 0o644 and modes["cache.sqlite"] == 0o644
    assert modes["out/deep"] == 0o755 and modes["out/deep/r.json"] == 0o644
    assert modes["audit"] == 0o700 and all(modes[f"audit/{f}"] == 0o600 for f in ("chain.jsonl", "chain.key", "chain.head"))
    assert modes["reports/eval_ab"] == 0o755 and modes["reports/eval_ab/pair_index.jsonl"] == 0o644
    assert modes["ab/ledger.jsonl"] == 0o644
    assert modes["keys"] == 0o700 and modes["keys/reports.key"] == 0o600  # the reports' seal key (runs.trust)


def test_rubric_spec_naming_a_missing_file_is_an_error_not_a_rubric_about_its_name(tmp_path, provider):
    mock = provider()
    for value in ("nosuchfile.txt", "specs/new-case.md", "/dev/zero"):
        res = run_cli("rubric", "--spec", value, "--model", "m", "--base-url", mock.url, cwd=tmp_path)
        assert f"--spec {value}: " in one_line_error(res)
    assert mock.stats()["requests"] == 0
    (tmp_path / "spec.txt").write_text("Summarise a headline as JSON with summary and materiality.\n")
    res = run_cli("rubric", "--spec", "spec.txt", "--model", "m", "--base-url", mock.url, cwd=tmp_path)
    assert res.returncode == 0 and "criteria:" in res.stdout, res.stderr
    res = run_cli("rubric", "--spec", "Answer in one word.", "--model", "m", "--base-url", mock.url, cwd=tmp_path)
    assert res.returncode == 0 and "criteria:" in res.stdout, res.stderr  # text, not a path
    assert mock.stats()["requests"] >= 2


@pytest.mark.parametrize("args", [["run", SMOKE, "--broker", "redis://127.0.0.1:1/0", "--timeout", "-1"],
                                  ["wait", "20261130T120000123456Z-0a1b2c", "--broker", "redis://127.0.0.1:1/0",
                                   "--timeout", "-1"],
                                  ["run", SMOKE, "--broker", "redis://127.0.0.1:1/0", "--timeout", "0"]])
def test_a_negative_or_zero_timeout_is_refused(args):
    assert "--timeout" in one_line_error(run_cli(*args, timeout=30))


def test_output_to_dev_stdout_through_a_pipe(tmp_path):
    """``--output /dev/stdout | jq``: the link to the pipe is written in place, not replaced by a temp file."""
    res = run_cli("run", SMOKE, "--no-save", "--output", "/dev/stdout", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    start = res.stdout.index("{")
    report, _ = json.JSONDecoder().raw_decode(res.stdout[start:])
    assert report["spec_name"] == "smoke" and "saved /dev/stdout" in res.stdout
