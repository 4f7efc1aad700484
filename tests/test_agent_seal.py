"""Issue 18, as an attacker would try it: hostile `command:` agents (tests/agent_probe.py) against a real
HTTP server that logs the Authorization header, a real Redis, real git and real processes. The agent
finds no secret, reaches the model only through the per-task relay (which holds the real key), reaches
no Redis, cannot nsenter/unshare/mount, runs nothing from the repo's git config, plants nothing for
the next task, leaves no `setsid` survivor and cannot see another task; a spawn worker refuses
`isolation: none` without --allow-unsandboxed; without bwrap an agent run is exit 2."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, RedisServer, run_cli, wait_for
from spawn_support import assert_clean, git, make_repo, report_of, spawn_env

PROBE = ROOT / "tests" / "agent_probe.py"
PY = "/usr/bin/python3"
REAL_KEY = "sk-real-key-0123456789abcdef"
BROKER_SECRET = "brokerpass-7f3a9c"


class LoggingModel:
    """A real HTTP server answering OpenAI chat completions (usage 11 in / 5 out) that logs every
    request's Authorization header."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                   "body": body.decode(errors="replace")})
                reply = json.dumps({"id": "c1", "object": "chat.completion", "model": "m-1",
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                 "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}})
                data = reply.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):  # noqa: ANN002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def probe_adapter(mode: str, *args: str, url: str = "http://127.0.0.1:9/v1", **extra) -> dict:
    template = " ".join([PY, str(PROBE), "{usage_file}", mode, "{base_url}", "EVAL_API_KEY", *args])
    return {"id": "probe", "provider": "agent", "agent": "command", "template": template, "model": "m-1",
            "base_url": url, "api_key_env": "EVAL_API_KEY", **extra}


def write(path: Path, repo: Path, adapter: dict, prompts: list[dict] | None = None, **workspace) -> Path:
    spec = {"name": path.stem, "workspace": {"repo": str(repo), "base": "main", **workspace}, "adapters": [adapter],
            "prompts": prompts or [{"id": "t1", "text": "probe", "check": "true"}]}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def found(outcome: dict) -> dict:
    assert outcome["error"] is None, outcome
    return json.loads(base64.b64decode(outcome["output"]))


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """One hostile run (the default isolation) with a real key in the caller's environment, a Redis on
    the host, a worker HOME holding a secret file and another process whose argv carries a broker password."""
    tmp = tmp_path_factory.mktemp("attack")
    redis = RedisServer(tmp)
    redis.start()
    model = LoggingModel()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--broker",
                                  f"redis://:{BROKER_SECRET}@127.0.0.1:{redis.port}/0"])
    home = tmp / "worker-home"
    home.mkdir()
    (home / "secret.txt").write_text("worker-home-secret-42\n")
    repo = make_repo(tmp / "repo")
    spec = write(tmp / "attack.yaml", repo, probe_adapter("attack", str(redis.port), str(home), str(repo),
                                                          url=model.url))
    try:
        res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp, timeout=120, HOME=str(home),
                      EVAL_API_KEY=REAL_KEY, **spawn_env(tmp))
        assert res.returncode == 0, res.stderr + res.stdout[-2000:]
        [out] = report_of(res)["outcomes"]
        yield {"out": out, "found": found(out), "model": model, "repo": repo, "tmp": tmp}
    finally:
        bystander.kill()
        bystander.wait()
        model.stop()
        redis.stop()


def test_the_agent_finds_no_secret_anywhere_it_can_read(attacked):
    seen = attacked["found"]
    text = json.dumps(seen)
    assert REAL_KEY not in text  # not in any environ, not in its own variable
    assert BROKER_SECRET not in text  # no other process's argv
    where = [k for k, v in seen.items() if "worker-home-secret-42" in json.dumps(v)]
    assert where == [] and seen["base_repo"] in ("absent", [".git"]), (where, seen["base_repo"])  # .git: its objects, read-only
    assert seen["pids"] <= 4, seen["cmdline"]  # its own PID namespace: bwrap's init, the forwarder, itself, ps
    assert attacked["out"]["agent"]["isolation"] == "sandbox"


def test_the_model_call_goes_through_the_relay_with_the_real_key(attacked):
    seen, model = attacked["found"], attacked["model"]
    assert seen["model"]["status"] == 200, seen["model"]
    assert [s["authorization"] for s in model.seen] == [f"Bearer {REAL_KEY}"]  # the server saw the real key
    assert seen["key_held"] and seen["key_held"] != REAL_KEY  # the agent held a per-task token
    assert seen["model_url"] == seen["my_env"]["EVALFARM_MODEL_BASE_URL"]
    relay = attacked["out"]["agent"]["relay"]
    assert (relay["input_tokens"], relay["output_tokens"], relay["requests"]) == (11, 5, 1)
    assert (attacked["out"]["input_tokens"], attacked["out"]["output_tokens"]) == (7, 3)  # self-reported, beside


def test_no_redis_no_nsenter_no_unshare_no_capabilities(attacked):
    seen = attacked["found"]
    assert "PONG" not in seen["redis"]
    assert all("PONG" not in r for r in seen["nsenter"].values()), seen["nsenter"]
    assert not seen["unshare"].startswith("rc=0") and not seen["unshare_user"].startswith("rc=0")
    assert not seen["mount"].startswith("rc=0")
    assert "CapEff:\t0000000000000000" in seen["caps"] and "NoNewPrivs:\t1" in seen["caps"], seen["caps"]
    print("\nas root:", {k: seen[k] for k in ("redis", "unshare", "unshare_user", "mount")},
          sorted(set(seen["nsenter"].values())))


def evil_repo(path: Path, marker: Path) -> Path:
    repo = make_repo(path)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f'[filter "evil"]\n\tsmudge = "touch {marker}.smudge; cat"\n\tclean = "touch {marker}.clean; cat"\n'
                f'[diff "evil"]\n\ttextconv = "touch {marker}.textconv; cat"\n'
                f'[core]\n\tfsmonitor = "touch {marker}.fsmonitor; false"\n')
    return repo


def test_repo_defined_git_drivers_never_run(tmp_path):
    marker = tmp_path / "ran"
    repo = evil_repo(tmp_path / "repo", marker)
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("none"))
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, **spawn_env(tmp_path))
    ran = sorted(p.name for p in tmp_path.glob("ran.*"))  # before any git of ours in the repo
    assert res.returncode == 0, res.stderr
    [out] = report_of(res)["outcomes"]
    assert out["error"] is None and out["agent"]["diff"]["files"] == 1, out
    assert ran == []


@pytest.mark.parametrize("transport", ["ssh", "file"])
def test_a_partial_clone_repo_cannot_make_the_harness_run_its_fetch_program(tmp_path, transport):
    """A repo that says it is a partial clone, whose base names a missing commit: reading it makes git
    fetch through the repo's own program (``core.sshCommand``, ``remote.origin.uploadpack``)."""
    marker = tmp_path / "fetched"
    repo = make_repo(tmp_path / "repo")
    evil = f"sh -c 'env > {marker}; exit 1' --"
    for key, value in [("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
                       ("remote.origin.promisor", "true"),
                       *([("remote.origin.url", "ssh://evalfarm.invalid/x"), ("core.sshCommand", evil)]
                         if transport == "ssh" else
                         [("remote.origin.url", str(tmp_path / "elsewhere")), ("remote.origin.uploadpack", evil)])]:
        git(repo, "config", key, value)
    (repo / ".git" / "refs" / "heads" / "gone").write_text("12" * 20 + "\n")  # a commit the repo lacks
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("none"))
    spec.write_text(spec.read_text().replace("base: main", "base: gone"))
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, EVAL_API_KEY=REAL_KEY,
                  **spawn_env(tmp_path))
    assert not marker.exists(), f"the repo's fetch program ran, with {len(marker.read_text())} bytes of environment"
    assert res.returncode == 2 and "base 'gone'" in res.stderr and len(res.stderr.strip().splitlines()) == 1, \
        res.stderr


def git_dir_bytes(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((repo / ".git").rglob("*")) if p.is_file() and p.parent.name in ("hooks", ".git", "info")
            and p.name in ("config", "attributes") or p.parent.name == "hooks"}


def test_task_one_cannot_plant_anything_for_task_two(tmp_path):
    marker = tmp_path / "planted"
    repo = make_repo(tmp_path / "repo")
    before = git_dir_bytes(repo)
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("git-plant", str(marker)),
                 prompts=[{"id": "t1", "text": "plant", "check": "true"}, {"id": "t2", "text": "plant", "check": "true"}])
    res = run_cli("run", str(spec), "--json", "--no-save", "--concurrency", "1", cwd=tmp_path, timeout=120,
                  EVALFARM_SPAWN_CONCURRENCY="1", **spawn_env(tmp_path))
    assert res.returncode == 0, res.stderr
    planted = sorted(p.name for p in tmp_path.glob("planted.*"))
    outs = report_of(res)["outcomes"]
    assert len(outs) == 2 and all(o["error"] is None for o in outs), outs
    assert git_dir_bytes(repo) == before  # the base repo's .git/config, info/attributes and hooks: byte-identical
    assert planted == []
    assert_clean(repo, tmp_path / "spawn")


def survivors(token: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def test_no_setsid_child_outlives_the_task(tmp_path):
    token = f"evalfarm-survivor-{os.getpid()}-{time.monotonic_ns()}"
    repo = make_repo(tmp_path / "repo")
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("setsid", token))
    try:
        res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, **spawn_env(tmp_path))
        assert res.returncode == 0, res.stderr
        assert report_of(res)["outcomes"][0]["error"] is None
        assert survivors(token) == []
    finally:
        for pid in survivors(token):
            os.kill(pid, 9)


def test_two_tasks_at_once_cannot_see_each_others_worktrees(tmp_path):
    repo = make_repo(tmp_path / "repo")
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("peek", "1.0"),
                 prompts=[{"id": "a", "text": "peek", "check": "true"}, {"id": "b", "text": "peek", "check": "true"}])
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, EVALFARM_SPAWN_CONCURRENCY="2",
                  **spawn_env(tmp_path))
    assert res.returncode == 0, res.stderr
    outs = report_of(res)["outcomes"]
    seen = [found(o) for o in outs]
    assert seen[0]["me"] != seen[1]["me"]
    for s in seen:
        assert len(s["siblings"]) == 1 and len(s["worktrees"]) == 1, s  # its own, no other


def test_a_spawn_worker_refuses_isolation_none_without_the_flag(tmp_path, redis_server, start_worker):
    repo = make_repo(tmp_path / "repo")
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("none"), isolation="none")
    env = spawn_env(tmp_path)
    start_worker(redis_server.url, pool="aggregate", concurrency=1, **env)
    start_worker(redis_server.url, pool="spawn", concurrency=1, **env)
    res = run_cli("run", str(spec), "--json", "--no-save", broker=redis_server.url, cwd=tmp_path, timeout=120, **env)
    [out] = report_of(res)["outcomes"]
    assert out["error"] and "--allow-unsandboxed" in out["error"]["message"] and "\n" not in out["error"]["message"], out
    # in process, `none` is the caller's explicit choice: it runs, and the outcome says so
    local = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, **env)
    [out] = report_of(local)["outcomes"]
    assert out["error"] is None and out["agent"]["isolation"] == "none", out


def test_without_bwrap_an_agent_run_is_exit_2_naming_the_package(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    repo = make_repo(tmp_path / "repo")
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("none"))
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=60, PATH=str(bin_dir),
                  **spawn_env(tmp_path))
    assert res.returncode == 2, res.stderr + res.stdout[-500:]
    assert "bubblewrap" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_limits_hold_and_the_outcome_records_them_with_use_and_the_envelope(tmp_path):
    """file_mb stops a write past it; memory_mb kills an agent that allocates past it (where a cgroup can be
    made: as root here); the outcome records the limits, what was used, and the deterministic envelope."""
    repo = make_repo(tmp_path / "repo")
    limits = {"memory_mb": 96, "pids": 64, "cpu_s": 60, "file_mb": 2}
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("hog", "{prompt}"), limits=limits, seeds={"SUITE_SEED": 7},
                 prompts=[{"id": "fits", "text": "16 4", "check": "true"}, {"id": "over", "text": "400 0", "check": "true"}])
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, **spawn_env(tmp_path))
    by = {o["prompt_id"]: o for o in report_of(res)["outcomes"]}
    fits = by["fits"]
    seen = found(fits)
    info = fits["agent"]
    assert seen["alloc"] == "ok" and seen["write"].startswith("OSError: [Errno 27] File too large"), seen
    assert seen["env"] == {"TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "SUITE_SEED": "7"}
    assert info["envelope"] == seen["env"]
    assert {k: info["limits"][k] for k in limits} == limits
    used = info["used"]
    assert used["cpu_s"] >= 0.02 and used["wall_s"] > 0 and used["peak_memory_mb"] >= 16, used
    print(f"\nlimits enforced by: {info['limits']['enforced_by']}; used {used}")
    if info["limits"]["enforced_by"].startswith("cgroup"):
        over = by["over"]
        assert over["failure_mode"] == "runtime_error" and over["error"]["message"].startswith("command: exit code"), over


def test_max_tokens_per_task_is_enforced_at_the_relay(tmp_path):
    """16 tokens a call, a cap of 20: the second call still goes (16 < 20), the third is refused at the relay
    and never reaches the server; the item is a runtime error naming the cap."""
    model = LoggingModel()
    try:
        repo = make_repo(tmp_path / "repo")
        spec = write(tmp_path / "s.yaml", repo, probe_adapter("calls", "3", url=model.url), max_tokens_per_task=20)
        res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, EVAL_API_KEY=REAL_KEY,
                      **spawn_env(tmp_path))
        [out] = report_of(res)["outcomes"]
    finally:
        model.stop()
    assert len(model.seen) == 2
    assert out["failure_mode"] == "runtime_error" and "max_tokens_per_task (20)" in out["error"]["message"], out
    relay = out["agent"]["relay"]
    assert (relay["requests"], relay["capped"], relay["input_tokens"], relay["output_tokens"]) == (3, 1, 22, 10)
