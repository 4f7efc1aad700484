"""``run_cli`` forks this test process instead of starting an interpreter (tests/conftest.py): the same
commands run both ways here and must give the same exit code, stdout and stderr, so the suite's
forked calls stand for what a user's shell sees."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, env_for, run_cli

SMOKE = str(EXAMPLES / "smoke.yaml")
# what differs between two runs of one command: run ids, timings (any number: a latency may be 0 or 0.004)
TIMING = re.compile(r"\d{8}T\d{12}Z-[0-9a-f]{6}|\d+(\.\d+)?(e-?\d+)?")
CONSOLE_SCRIPT = Path(sys.executable).parent / "evalfarm"  # what a user's shell runs


def same_text(text: str) -> str:
    """Numbers out, and the padding a number's width moves (a centred title, a table's columns)."""
    return re.sub(r"[ ─━]+", " ", TIMING.sub("#", text))


def same(tmp_path, *args: str, **env: str):
    forked = run_cli(*args, cwd=tmp_path, **env)
    execed = subprocess.run([str(CONSOLE_SCRIPT), *args], env=env_for(**env), cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert forked.returncode == execed.returncode, (forked, execed)
    assert same_text(forked.stdout) == same_text(execed.stdout)
    assert same_text(forked.stderr) == same_text(execed.stderr)
    return forked


@pytest.mark.parametrize("args, code", [
    (["--version"], 0),
    (["runn", SMOKE], 2),  # no such command, with a suggestion
    (["run", "/nonexistent/spec.yaml"], 2),
    (["run", SMOKE, "--no-save", "--broker", "http://127.0.0.1:1/"], 2),
    (["run", SMOKE, "--no-save"], 0),
    (["run", SMOKE, "--no-save", "--output", "/dev/stdout"], 0),  # the pipe is written in place
])
def test_forked_and_execed_commands_agree(tmp_path, args, code):
    res = same(tmp_path, *args)
    assert res.returncode == code, res.stderr
    if code == 2:
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("evalfarm: error: "), res.stderr


def test_a_failed_threshold_is_exit_1_both_ways(tmp_path):
    spec = tmp_path / "strict.yaml"
    spec.write_text("name: strict\nadapters: [mock]\nprompts:\n  - {id: a, text: hello, expected_output_contains: "
                    "[never-said]}\nthresholds: {golden_pass_rate_min: 1.0}\n")
    res = same(tmp_path, "run", str(spec), "--no-save")
    assert res.returncode == 1, res.stderr


def test_the_environment_and_cwd_are_the_childs_own(tmp_path):
    """A variable set for one call reaches that call only; a relative state dir lands in its cwd."""
    res = run_cli("run", SMOKE, "--state-dir", "st", cwd=tmp_path, EVALFARM_PLUGINS="no_such_plugin_mod")
    assert res.returncode == 2 and "no_such_plugin_mod" in res.stderr, res.stderr
    ok = run_cli("run", SMOKE, "--state-dir", "st", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert list((tmp_path / "st" / "runs").glob("*.json"))
