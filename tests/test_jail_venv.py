"""An agent installed in its own Python venv (aider, by `make agents-all`) runs inside the bubblewrap jail:
the venv's interpreter is a link into the base Python's prefix, which the jail must bind too."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalfarm.agents import jail

pytestmark = pytest.mark.skipif(jail.bwrap() is None, reason="bubblewrap (bwrap) is not installed")


def _venv(root: Path) -> Path:
    install = root / "agents" / "fake"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(install / "venv")], check=True, timeout=120)
    return install


def _run(install: Path, readonly: list[Path], work: Path) -> subprocess.CompletedProcess:
    argv = jail.Jail([work], readonly).argv([str(install / "venv" / "bin" / "python"), "-c", "print('inside')"], work)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


def test_a_venv_agents_interpreter_runs_in_the_jail(tmp_path):
    install = _venv(tmp_path)
    base = Path(sys.base_prefix).resolve()
    bases = jail.venv_bases(install)
    if jail.under_system(base):
        assert bases == []  # /usr's Python is in the jail already
    else:
        assert bases == [base]
        alone = _run(install, [install], tmp_path)  # what the jail did before: the venv without its base
        assert alone.returncode != 0
    done = _run(install, [install, *bases], tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "inside"), done.stderr


def test_only_an_absolute_home_outside_the_system_dirs_is_bound(tmp_path):
    install = tmp_path / "agent"
    (install / "venv").mkdir(parents=True)
    cfg = install / "venv" / "pyvenv.cfg"
    cfg.write_text("home = /usr/bin\nversion = 3.11\n")
    assert jail.venv_bases(install) == []
    cfg.write_text("home = relative/bin\n")
    assert jail.venv_bases(install) == []
    (tmp_path / "py" / "bin").mkdir(parents=True)
    cfg.write_text(f"home = {tmp_path / 'py' / 'bin'}\n")
    assert jail.venv_bases(install) == [(tmp_path / "py").resolve()]
