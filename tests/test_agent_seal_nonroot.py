"""Issue 18's probes again, with `evalfarm run` as an unprivileged user (nobody, uid 65534) instead of
root: the jail is then a user namespace bwrap makes itself, and no cgroup can be made. The same hostile
`command:` agent (tests/agent_probe.py) against a real HTTP server logging the Authorization header, a
real Redis, real git, and a bystander process of nobody's whose environment and argv hold the secrets
(readable to nobody outside the jail: the agent must not reach it).

evalfarm runs under Debian's /usr/bin/python3.11 (the venv's interpreter lives under /root, mode 0700)
with PYTHONPATH = this checkout + the venv's site-packages (pure Python or cp311 wheels). Skipped, with
the reason, where the machine cannot do this: not root (cannot switch to nobody), no setpriv, no system
python of this minor version, this checkout unreadable to nobody, or bwrap refused to unprivileged users."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, RedisServer
from spawn_support import git, make_repo, report_of
from test_agent_seal import (BROKER_SECRET, REAL_KEY, LoggingModel, found, git_dir_bytes, probe_adapter, survivors,
                             write)

UID = GID = 65534
SYS_PY = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
SITE = sysconfig.get_paths()["purelib"]
AS_NOBODY = ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups"]


def base_env(d: Path, **extra: str) -> dict[str, str]:
    """Nothing of root's environment: an explicit one."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(d / "worker-home"), "LANG": "C.UTF-8",
            "PYTHONPATH": f"{ROOT}:{SITE}", "PYTHONDONTWRITEBYTECODE": "1",
            "EVALFARM_SPAWN_DIR": str(d / "spawn"), "EVALFARM_BLOB_DIR": str(d / "blobs"),
            "EVALFARM_SANDBOX_PATHS": str(ROOT / "tests"), **extra}


def why_not() -> str | None:
    """None when this machine can run evalfarm as nobody with a working jail, else the precise reason."""
    if os.geteuid() != 0:
        return "not root: cannot switch to uid 65534 (run these tests as root)"
    if shutil.which("setpriv") is None:
        return "no setpriv (util-linux) to switch to uid 65534"
    if not os.access(SYS_PY, os.X_OK):
        return f"no {SYS_PY}: the venv's interpreter is not usable by nobody and no system python of its ABI is"
    if shutil.which("bwrap") is None:
        return "no bwrap"
    probe = subprocess.run([*AS_NOBODY, SYS_PY, "-c", "import evalfarm.cli, celery, pydantic_core, httpx"],
                           env=base_env(Path("/nonexistent")), capture_output=True, text=True, timeout=60, cwd="/")
    if probe.returncode != 0:
        return f"nobody cannot import evalfarm from {ROOT} + {SITE}: {probe.stderr.strip().splitlines()[-1:]}"
    jail = subprocess.run([*AS_NOBODY, "bwrap", "--unshare-user", "--unshare-pid", "--unshare-net",
                           "--ro-bind", "/", "/", "true"], capture_output=True, text=True, timeout=30, cwd="/",
                          env={"PATH": "/usr/bin:/bin"})
    if jail.returncode != 0:
        return f"bwrap refused to an unprivileged user: {jail.stderr.strip()[:200]}"
    return None


REASON = why_not()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"as nobody: {REASON}")


def nobody_dir() -> Path:
    """A scratch dir under /tmp owned by nobody (pytest's tmp_path is root's, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="evalfarm-nobody-", dir="/tmp"))
    d.chmod(0o755)
    return d


def give_to_nobody(d: Path) -> None:
    for root, dirs, files in os.walk(d):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), UID, GID)
    os.chown(d, UID, GID)


def run_as_nobody(d: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AS_NOBODY, SYS_PY, "-m", "evalfarm.cli", *args], env=base_env(d, **env), cwd=d,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def scratch():
    d = nobody_dir()
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def attacked():
    """One hostile run as nobody: the real key in evalfarm's environment, a Redis on the host, nobody's
    HOME holding a secret file, and a bystander of nobody's with the key in its environment and a broker
    password in its argv."""
    d = nobody_dir()
    redis = RedisServer(d)
    redis.start()
    model = LoggingModel()
    bystander = subprocess.Popen([*AS_NOBODY, "/usr/bin/python3", "-c", "import time; time.sleep(300)", "--broker",
                                  f"redis://:{BROKER_SECRET}@127.0.0.1:{redis.port}/0"],
                                 env={"PATH": "/usr/bin:/bin", "EVAL_API_KEY": REAL_KEY})
    try:
        home = d / "worker-home"
        home.mkdir()
        (home / "secret.txt").write_text("worker-home-secret-42\n")
        repo = make_repo(d / "repo")
        spec = write(d / "attack.yaml", repo, probe_adapter("attack", str(redis.port), str(home), str(repo),
                                                             url=model.url))
        give_to_nobody(d)
        res = run_as_nobody(d, "run", str(spec), "--json", "--no-save", EVAL_API_KEY=REAL_KEY)
        assert res.returncode == 0, res.stderr + res.stdout[-2000:]
        [out] = report_of(res)["outcomes"]
        yield {"out": out, "found": found(out), "model": model, "bystander": bystander.pid}
    finally:
        bystander.kill()
        bystander.wait()
        model.stop()
        redis.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_as_nobody_the_agent_finds_no_secret_not_even_in_its_own_users_processes(attacked):
    seen = attacked["found"]
    text = json.dumps(seen)
    assert REAL_KEY not in text and BROKER_SECRET not in text  # the bystander is nobody's too: outside, readable
    assert [k for k, v in seen.items() if "worker-home-secret-42" in json.dumps(v)] == []
    assert seen["base_repo"] in ("absent", [".git"]), seen["base_repo"]
    assert seen["pids"] <= 4, seen["cmdline"]
    assert attacked["out"]["agent"]["isolation"] == "sandbox"


def test_as_nobody_the_model_call_goes_through_the_relay_with_the_real_key(attacked):
    seen, model = attacked["found"], attacked["model"]
    assert seen["model"]["status"] == 200, seen["model"]
    assert [s["authorization"] for s in model.seen] == [f"Bearer {REAL_KEY}"]
    assert seen["key_held"] and seen["key_held"] != REAL_KEY
    relay = attacked["out"]["agent"]["relay"]
    assert (relay["input_tokens"], relay["output_tokens"], relay["requests"]) == (11, 5, 1)


def test_as_nobody_no_redis_no_nsenter_no_nested_user_namespace_no_capabilities(attacked):
    seen = attacked["found"]
    assert "PONG" not in seen["redis"]
    assert all("PONG" not in r for r in seen["nsenter"].values()), seen["nsenter"]
    assert not seen["unshare"].startswith("rc=0")
    # the jail is a user namespace here: without bwrap's --disable-userns the agent makes a nested one
    assert not seen["unshare_user"].startswith("rc=0"), seen["unshare_user"]
    assert not seen["mount"].startswith("rc=0")
    assert "CapEff:\t0000000000000000" in seen["caps"] and "NoNewPrivs:\t1" in seen["caps"], seen["caps"]
    print("\nas nobody:", {k: seen[k] for k in ("redis", "unshare", "unshare_user", "mount")},
          sorted(set(seen["nsenter"].values())))


def test_as_nobody_repo_defined_git_drivers_never_run(scratch):
    marker = scratch / "ran"
    repo = make_repo(scratch / "repo")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f'[filter "evil"]\n\tsmudge = "touch {marker}.smudge; cat"\n\tclean = "touch {marker}.clean; cat"\n'
                f'[diff "evil"]\n\ttextconv = "touch {marker}.textconv; cat"\n'
                f'[core]\n\tfsmonitor = "touch {marker}.fsmonitor; false"\n')
    spec = write(scratch / "s.yaml", repo, probe_adapter("none"))
    give_to_nobody(scratch)
    res = run_as_nobody(scratch, "run", str(spec), "--json", "--no-save")
    ran = sorted(p.name for p in scratch.glob("ran.*"))
    assert res.returncode == 0, res.stderr
    [out] = report_of(res)["outcomes"]
    assert out["error"] is None and out["agent"]["diff"]["files"] == 1, out
    assert ran == []


def test_as_nobody_task_one_cannot_plant_anything_for_task_two(scratch):
    marker = scratch / "planted"  # in a dir nobody may write: only the sandbox keeps the agent's git from it
    repo = make_repo(scratch / "repo")
    before = git_dir_bytes(repo)
    spec = write(scratch / "s.yaml", repo, probe_adapter("git-plant", str(marker)),
                 prompts=[{"id": t, "text": "plant", "check": "true"} for t in ("t1", "t2")])
    give_to_nobody(scratch)
    res = run_as_nobody(scratch, "run", str(spec), "--json", "--no-save", "--concurrency", "1",
                        EVALFARM_SPAWN_CONCURRENCY="1")
    assert res.returncode == 0, res.stderr
    outs = report_of(res)["outcomes"]
    assert len(outs) == 2 and all(o["error"] is None for o in outs), outs
    assert git_dir_bytes(repo) == before
    assert sorted(p.name for p in scratch.glob("planted.*")) == []
    assert [p.name for p in (scratch / "spawn").glob("evalfarm-spawn-*")] == []


def test_as_nobody_no_setsid_child_outlives_the_task(scratch):
    token = f"evalfarm-survivor-nobody-{os.getpid()}-{time.monotonic_ns()}"
    repo = make_repo(scratch / "repo")
    spec = write(scratch / "s.yaml", repo, probe_adapter("setsid", token))
    give_to_nobody(scratch)
    try:
        res = run_as_nobody(scratch, "run", str(spec), "--json", "--no-save")
        assert res.returncode == 0, res.stderr
        assert report_of(res)["outcomes"][0]["error"] is None
        assert survivors(token) == []
    finally:
        for pid in survivors(token):
            os.kill(pid, 9)


def test_as_nobody_limits_say_what_enforced_them(scratch):
    """No cgroup is writable by nobody here: file_mb and cpu_s hold (rlimits), and the outcome says that
    memory_mb and pids were not enforced rather than claiming them."""
    repo = make_repo(scratch / "repo")
    limits = {"memory_mb": 96, "pids": 64, "cpu_s": 60, "file_mb": 2}
    spec = write(scratch / "s.yaml", repo, probe_adapter("hog", "{prompt}"), limits=limits,
                 prompts=[{"id": "fits", "text": "16 4", "check": "true"}])
    give_to_nobody(scratch)
    res = run_as_nobody(scratch, "run", str(spec), "--json", "--no-save")
    assert res.returncode == 0, res.stderr
    [fits] = report_of(res)["outcomes"]
    seen, info = found(fits), fits["agent"]
    assert seen["write"].startswith("OSError: [Errno 27] File too large"), seen
    enforced = info["limits"]["enforced_by"]
    print(f"\nas nobody, limits enforced by: {enforced}; used {info['used']}")
    assert enforced.startswith("cgroup") or "memory_mb and pids not enforced" in enforced, enforced


def test_as_nobody_two_tasks_at_once_cannot_see_each_others_worktrees(scratch):
    repo = make_repo(scratch / "repo")
    spec = write(scratch / "s.yaml", repo, probe_adapter("peek", "1.0"),
                 prompts=[{"id": "a", "text": "peek", "check": "true"}, {"id": "b", "text": "peek", "check": "true"}])
    give_to_nobody(scratch)
    res = run_as_nobody(scratch, "run", str(spec), "--json", "--no-save", EVALFARM_SPAWN_CONCURRENCY="2")
    assert res.returncode == 0, res.stderr
    seen = [found(o) for o in report_of(res)["outcomes"]]
    assert seen[0]["me"] != seen[1]["me"]
    for s in seen:
        assert len(s["siblings"]) == 1 and len(s["worktrees"]) == 1, s
