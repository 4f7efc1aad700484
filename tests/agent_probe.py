#!/usr/bin/env python3
"""A hostile `command:` agent for the sandbox tests (issue 18), run by /usr/bin/python3 (stdlib only):

    agent_probe.py USAGE_FILE MODE BASE_URL KEY_VAR [ARGS...]

attack REDIS_PORT WORKER_HOME BASE_REPO   everything an attacker tries: every visible process's
        environ and cmdline, the worker's HOME and base repo, Redis on the host, nsenter into every
        visible network namespace, unshare, mount, its capabilities, one model call with the key it
        holds; edits hello.py
git-plant MARKER   writes core.fsmonitor / a filter / a hook into the git dir its worktree uses
calls N            N model calls; their statuses
setsid TOKEN       starts `setsid sh -c 'sleep 300'` and a double-forked setsid one (TOKEN in their argv),
        exits at once
tree TOKEN         ignores SIGTERM and starts the same plus a child ignoring SIGTERM, then sleeps for ever
        (TOKEN in every argv): a timeout or a stop must kill the whole tree
peek SECONDS       lists every sandbox dir next to its own and its worktree, after SECONDS
hog "MB FILE_MB"    allocates MB MiB, then writes FILE_MB MiB into a file; reports what failed and its envelope

What it found goes into the usage file's final_message as base64 JSON (so the report's secret
masking cannot hide a leak from the test).
"""
import base64
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def sh(*argv: str, timeout: float = 5) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return f"rc={done.returncode} {(done.stdout + done.stderr).strip()[:300]}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"failed: {type(exc).__name__}: {exc}"


def read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def redis_ping(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).decode(errors="replace").strip()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def model_call(base_url: str, key: str) -> dict:
    body = json.dumps({"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return {"status": r.status, "body": json.loads(r.read())}
    except Exception as exc:  # noqa: BLE001
        return {"status": f"{type(exc).__name__}: {exc}"}


def attack(base_url: str, key_var: str, redis_port: int, worker_home: str, base_repo: str) -> dict:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    out = {"pids": len(pids), "environ": "\n".join(read(f"/proc/{p}/environ") for p in pids),
           "cmdline": "\n".join(read(f"/proc/{p}/cmdline").replace("\0", " ") for p in pids),
           "my_env": dict(os.environ), "key_held": os.environ.get(key_var, ""),
           "caps": [ln for ln in read("/proc/self/status").splitlines() if ln.startswith(("Cap", "NoNewPrivs"))],
           "worker_home": {p: read(p) for p in glob.glob(worker_home + "/*")} or read(worker_home),
           "base_repo": sorted(os.listdir(base_repo)) if os.path.isdir(base_repo) else "absent",
           "redis": redis_ping(redis_port)}
    out["nsenter"] = {p: sh("nsenter", f"--net=/proc/{p}/ns/net", "--", "python3", "-c",
                            f"import socket; s=socket.create_connection(('127.0.0.1',{redis_port}),2); "
                            "s.sendall(b'PING\\r\\n'); print(s.recv(64))") for p in pids[:20]}
    out["unshare"] = sh("unshare", "--net", "--", "true")
    out["unshare_user"] = sh("unshare", "--user", "--map-root-user", "--", "true")
    out["mount"] = sh("mount", "-t", "tmpfs", "none", "/tmp")  # /tmp exists in the jail: only privilege stops it
    url = os.environ.get("EVALFARM_MODEL_BASE_URL") or base_url
    out["model_url"] = url
    out["model"] = model_call(url, os.environ.get(key_var, ""))
    return out


def git_plant(marker: str) -> dict:
    git_dir = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True).stdout.strip()
    done = {"git_dir": git_dir}
    for args in (["config", "core.fsmonitor", f"touch {marker}.fsmonitor; false"],
                 ["config", "filter.plant.clean", f"touch {marker}.clean; cat"],
                 ["config", "filter.plant.smudge", f"touch {marker}.smudge; cat"],
                 ["config", "core.hooksPath", ".git/hooks"]):
        done[args[1]] = sh("git", *args)
    try:
        hooks = Path(git_dir) / "hooks"
        hooks.mkdir(exist_ok=True)
        for hook in ("post-checkout", "pre-commit"):
            (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}.hook\n")
            (hooks / hook).chmod(0o755)
        with open(Path(git_dir) / "info" / "attributes", "a") as f:
            f.write("* filter=plant\n")
        done["hooks"] = "written"
    except OSError as exc:
        done["hooks"] = f"{type(exc).__name__}: {exc}"
    Path(".gitattributes").write_text("* filter=plant\n")
    return done


def hog(mb: int, file_mb: int) -> dict:
    out = {}
    try:
        block = bytearray(mb * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        out["alloc"] = "ok"
    except MemoryError:
        out["alloc"] = "MemoryError"
    try:
        with open("big.bin", "wb") as f:
            for _ in range(file_mb):
                f.write(b"\0" * 2**20)
        out["write"] = "ok"
    except OSError as exc:
        out["write"] = f"{type(exc).__name__}: {exc}"
    os.remove("big.bin") if os.path.exists("big.bin") else None
    out["env"] = {k: os.environ.get(k) for k in ("TZ", "LANG", "LC_ALL", "PYTHONHASHSEED", "SUITE_SEED")}
    return out


def escape(token: str) -> None:
    """A setsid child and a double-forked setsid grandchild (reparented at once), TOKEN in their argv
    (``sh -c 'sleep N; :' TOKEN``: the shell stays, as sleep would refuse TOKEN as an interval)."""
    subprocess.Popen(["setsid", "sh", "-c", "sleep 300; :", token], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    subprocess.Popen(["sh", "-c", f"(setsid sh -c 'sleep 301; :' {token} &) ; exit 0"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait()


def main() -> int:
    usage_file, mode, base_url, key_var, *args = sys.argv[1:]
    found: dict = {}
    if mode == "attack":
        found = attack(base_url, key_var, int(args[0]), args[1], args[2])
    elif mode == "git-plant":
        found = git_plant(args[0])
    elif mode in ("setsid", "tree"):
        escape(args[0])
        if mode == "tree":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN); time.sleep(300)", args[0]], stdin=subprocess.DEVNULL)
            time.sleep(300)
    elif mode == "peek":
        time.sleep(float(args[0]))
        here = Path.cwd()
        found = {"me": str(here), "siblings": sorted(glob.glob(str(here.parent.parent) + "/evalfarm-spawn-*")),
                 "worktrees": sorted(glob.glob(str(here.parent.parent) + "/evalfarm-spawn-*/wt-*"))}
    elif mode == "calls":
        url = os.environ.get("EVALFARM_MODEL_BASE_URL") or base_url
        found = {"statuses": [model_call(url, os.environ.get(key_var, ""))["status"] for _ in range(int(args[0]))]}
    elif mode == "hog":
        mb, file_mb = (args[0].split() if len(args) == 1 else args)[:2]
        found = hog(int(mb), int(file_mb))
    p = Path("hello.py")
    p.write_text(p.read_text().replace('"hello"', '"hello, world"'))
    Path(usage_file).write_text(json.dumps({
        "input_tokens": 7, "output_tokens": 3, "turns": 1,
        "final_message": base64.b64encode(json.dumps(found).encode()).decode()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
