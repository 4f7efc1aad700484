"""``isolation: sandbox``: every process of a task (setup, agent, check) runs sealed by bubblewrap.

``bwrap`` is started with a clean environment (only what the task's allow-list holds) and gives the task

- new PID, network, IPC, UTS (and, where it can, cgroup) namespaces: the worker's and other tasks'
  processes, their ``/proc/*/environ`` and command lines are not there; the network has only a
  loopback, on which ``netns_relay.py`` (the agent's parent) forwards one port to the task's model
  relay (model_relay.py) through a unix socket: the one address the agent reaches;
- every capability dropped and ``no_new_privs`` (nsenter, unshare, mount fail; setuid does nothing);
- a root built from nothing: the system directories (/usr, /etc and the /bin, /lib links) read-only
  (with /etc's shadow files masked), a fresh /proc, /dev and /tmp; read-write only the task's checkout
  and its private HOME/TMPDIR; read-only the agent's install dir, the repo's object store (the
  checkout's alternates) and files a ``command:`` template names by absolute path. Nothing else of
  the worker's filesystem (no worker HOME, no other task, no state dir, no base repo working tree).
- ``--die-with-parent`` and its own PID 1: when the task ends, times out or is cancelled, the runner
  kills bwrap's process group and every process in the namespace dies with it (``setsid`` and double
  forks included: they are still in the namespace).

Limits (limits.py) wrap the bwrap command. Not root: bwrap makes a user namespace itself, and (bwrap >= 0.8)
``--disable-userns`` forbids the agent a nested one. Without
bwrap on the machine an agent run stops with exit 2 naming the package, unless ``isolation: none``.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .errors import AgentSetupError

FORWARDER = Path(__file__).with_name("netns_relay.py")
INSIDE = Path("/run/evalfarm")  # where the jail sees the forwarder and the relay's socket
PORT = 8080  # the model relay's port inside the jail (its own network namespace: nothing else is there)
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/ssh")
PYTHON = "/usr/bin/python3"  # the forwarder's interpreter: a system one, visible inside


def bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=4)
def disables_userns(exe: str) -> bool:
    """bwrap >= 0.8 can forbid user namespaces inside its own: not root, the jail is a user namespace, and
    without this the agent could make a nested one (``unshare --user --map-root-user``), regaining every
    capability there (not over the host's namespaces: a kernel attack surface, not a way out)."""
    try:
        done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10, env={})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in done.stdout + done.stderr


def available() -> str | None:
    """None when a sandbox can be made here, else why not (one line naming the package)."""
    if bwrap() is None:
        return ("isolation sandbox needs bubblewrap (`bwrap`): install the `bubblewrap` package (apt install "
                "bubblewrap, or `make bubblewrap`), or set the workspace's isolation: none to run unsandboxed")
    if not os.access(PYTHON, os.X_OK):
        return f"isolation sandbox needs {PYTHON} (the model forwarder inside the sandbox): install python3"
    return None


def under_system(path: Path) -> bool:
    return any(str(path) == d or str(path).startswith(d + "/") for d in SYSTEM)


@dataclass
class Jail:
    """What one task's jail binds, and how to wrap an argv in it."""

    writable: list[Path]  # the checkout, HOME, TMPDIR, the agent's private dir
    readonly: list[Path] = field(default_factory=list)  # the agent's install dir, the repo's objects, named files
    relay_dir: Path | None = None  # holds the relay's unix socket (bound at INSIDE/relay)
    hostname: str = "evalfarm-task"

    def argv(self, command: list[str], cwd: Path) -> list[str]:
        exe = bwrap()
        if exe is None:
            raise AgentSetupError(available() or "bwrap not found")
        a = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", self.hostname]
        if os.geteuid() != 0:
            a += ["--unshare-user", *(["--disable-userns"] if disables_userns(exe) else [])]
        for d in SYSTEM:
            p = Path(d)
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), d]
            elif p.is_dir():
                a += ["--ro-bind", d, d]
        for m in MASKED:
            if Path(m).is_file():
                a += ["--ro-bind", "/dev/null", m]
            elif Path(m).is_dir():
                a += ["--tmpfs", m]
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/var",
              "--dir", "/var/tmp"]
        for p in [*self.readonly, *extra_paths()]:
            if p.exists() and not under_system(p):
                a += ["--ro-bind", str(p), str(p)]
        for p in self.writable:
            a += ["--bind", str(p), str(p)]
        a += ["--ro-bind", str(FORWARDER), str(INSIDE / "forwarder.py")]
        if self.relay_dir is not None:
            a += ["--bind", str(self.relay_dir), str(INSIDE / "relay")]
        a += ["--chdir", str(cwd), "--"]
        if self.relay_dir is not None:
            a += [PYTHON, "-I", "-S", str(INSIDE / "forwarder.py"), "--port", str(PORT), "--socket",
                  str(INSIDE / "relay" / "m.sock"), "--"]
        return a + command


def venv_bases(install: Path) -> list[Path]:
    """An agent installed in a Python venv (aider under ``make agents-all``) runs the venv's interpreter, a
    link to the base Python's prefix (``home`` in ``pyvenv.cfg``); outside the system dirs (pyenv under
    /root, say) that prefix must be bound too, or the agent's script fails with a bare ENOENT. Only the
    operator's own install dir is read here, never a suite's path."""
    out: list[Path] = []
    for cfg in (install / "venv" / "pyvenv.cfg", install / "pyvenv.cfg"):
        try:
            lines = cfg.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip().startswith("/"):
                prefix = Path(value.strip()).resolve().parent  # home is the base's bin/
                if prefix.is_dir() and not under_system(prefix) and prefix != Path("/"):
                    out.append(prefix)
    return out


def extra_paths() -> list[Path]:
    """``EVALFARM_SANDBOX_PATHS`` (colon-separated): what the operator lets every jail read (an agent's
    scripts, a toolchain outside /usr)."""
    return [Path(p) for p in os.environ.get("EVALFARM_SANDBOX_PATHS", "").split(":") if p.strip()]


def named_files(words: list[str], anywhere: bool) -> list[Path]:
    """What a ``command:`` template's program and its first argument name by absolute path, when they are
    regular files (the interpreter and its script): bound read-only. On a spawn worker (``anywhere``
    False: it runs other people's suites) only under the system dirs, the agents' install dir or
    EVALFARM_SANDBOX_PATHS, so a suite cannot name a worker's file into its jail."""
    from .detect import agents_dir

    roots = [agents_dir(), *extra_paths()]
    out = []
    for w in words[:2]:
        if not w.startswith("/") or "{" in w:
            continue
        p = Path(w)
        if not p.is_file():
            continue
        real = p.resolve()
        if anywhere or under_system(real) or any(real.is_relative_to(r.resolve()) for r in roots):
            out.append(p)
    return out
