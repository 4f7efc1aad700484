"""Stopping a sealed agent (issue 18: nothing outlives a task). A hostile `command:` agent
(tests/agent_probe.py `tree`) ignores SIGTERM, starts a child that ignores it too, a `setsid` child and
a double-forked `setsid` grandchild, then sleeps. Whether its timeout ends it (class agent_timeout) or
Ctrl-C / SIGTERM reaches `evalfarm run` while it works: every process of the tree is gone (seen from
the host's /proc: the jail's PID namespace is nested in ours), the checkout and the task's relay
socket dir are gone, and what the run left in its state dir is whole."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import EVALFARM, env_for, run_cli, wait_for
from spawn_support import assert_clean, make_repo, report_of, spawn_env
from test_agent_seal import probe_adapter, write


def with_token(token: str) -> list[int]:
    """Live processes whose argv holds ``token``: the jail's (bwrap, its forwarder, the agent's tree)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and \
                    Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def relay_dirs(pids: list[int]) -> set[Path]:
    """The task relays' socket dirs, from bwrap's argv (``--bind DIR /run/evalfarm/relay``)."""
    out = set()
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i, word in enumerate(argv[:-2]):
            if word == b"--bind" and argv[i + 2] == b"/run/evalfarm/relay":
                out.add(Path(argv[i + 1].decode()))
    return out


def new_token() -> str:
    return f"evalfarm-tree-{os.getpid()}-{time.monotonic_ns()}"


def assert_whole(state_dir: Path) -> list[str]:
    """Every file the run left is complete: JSON parses, JSONL parses line by line, no temp file."""
    files = [p for p in state_dir.rglob("*") if p.is_file()] if state_dir.exists() else []
    for p in files:
        assert not re.search(r"\.(tmp|part)$|~$|^\.tmp", p.name), p
        if p.suffix == ".json":
            json.loads(p.read_text())
        elif p.suffix == ".jsonl":
            for line in p.read_text().splitlines():
                json.loads(line)
    return [str(p.relative_to(state_dir)) for p in files]


def test_a_sandboxed_agent_past_its_timeout_is_killed_whole_and_classed_agent_timeout(tmp_path):
    token = new_token()
    repo = make_repo(tmp_path / "repo")
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("tree", token),
                 prompts=[{"id": "t1", "text": "probe", "check": "true", "timeout_s": 3}])
    seen: list[int] = []
    relays: set[Path] = set()
    proc = subprocess.Popen([*EVALFARM, "run", str(spec), "--json", "--no-save"], cwd=tmp_path,
                            env=env_for(**spawn_env(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # the whole tree runs: leader, SIGTERM-proof child, setsid child, double-forked grandchild (+ bwrap, forwarder)
        seen = wait_for(lambda: (p := with_token(token)) and len(p) >= 6 and p, 30, "the agent's tree")
        relays = relay_dirs(seen)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in with_token(token):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 1, err  # a measured failure: the gate's exit code, not an error
    [o] = json.loads(out)["outcomes"]
    assert o["failure_class"] == "agent_timeout" and o["passed"] is False, o
    assert o["error"]["message"] == "command: timed out after 3 s (the task's timeout_s; process group killed)"
    info = o["agent"]
    assert info["isolation"] == "sandbox" and info["timed_out"] is True
    assert info["wall_s"] < 3 + 2 + 5  # the timeout, the SIGTERM grace, slack: not the agent's 300 s
    assert with_token(token) == [], "a process of the agent's tree outlived its timeout"
    assert len(relays) == 1 and not any(d.exists() for d in relays)
    assert_clean(repo, tmp_path / "spawn")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_evalfarm_while_sandboxed_agents_work_leaves_no_process_no_checkout_nothing_half_written(
        tmp_path, sig):
    token = new_token()
    repo = make_repo(tmp_path / "repo")
    state = tmp_path / "state"
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("tree", token),
                 prompts=[{"id": f"t{i}", "text": "probe", "check": "true", "timeout_s": 120} for i in range(3)])
    proc = subprocess.Popen([*EVALFARM, "run", str(spec), "--json", "--state-dir", str(state)], cwd=tmp_path,
                            env=env_for(**spawn_env(tmp_path), EVALFARM_SPAWN_CONCURRENCY="2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    relays: set[Path] = set()
    try:
        def two_trees() -> list[int]:
            pids = with_token(token)
            return len(relay_dirs(pids)) == 2 and len(pids) >= 12 and pids

        seen = wait_for(two_trees, 60, "two sandboxed agents' trees")
        relays = relay_dirs(seen)
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        left = with_token(token)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"{len(left)} processes of the agents' trees outlived the stop"
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"never retrieved" not in err, err
    assert took < 15, took  # not the agents' 120 s timeouts
    report = json.loads(out)
    assert report["stopped"] == "interrupted"
    assert not any(d.exists() for d in relays)
    assert_clean(repo, tmp_path / "spawn")
    print(f"\n{signal.Signals(sig).name}: stopped in {took:.2f} s; state dir holds {assert_whole(state)}")
