#!/usr/bin/env python3
"""A fake coding agent for the runner's fault tests, run as a real process by the `command` driver:

    agent_fake.py MODE USAGE_FILE [ARG]

ok        replace "hello" by "hello, world" in hello.py (cwd), write usage, exit 0
hang      start a child and a grandchild (sleep), write their pids to ARG, then sleep; with
          ARG2 "stubborn" it ignores SIGTERM
exit      print "boom" to stderr and exit 3
leak      print $EVALFARM_FAKE_KEY to stderr and exit 1 (the error must mask it)
garbage   write a usage file that is not JSON
escape    write into $HOME, $XDG_CONFIG_HOME, $TMPDIR and ../ (outside the worktree), dump the
          environment it was given into the usage file's final_message
orphan    start a background child (same process group), write its pid to ARG, exit 0 at once
stdin     read stdin to its end (hangs unless stdin is closed), then exit 0
sleep     sleep ARG seconds, then like ok
trace     append "start <pid> <time>" to the file ARG, sleep ARG2 seconds (with ARG3 "once": only when
          ARG had no start yet, else 0.5 s), then like ok, then append "end <pid> <time>" (counts
          invocations and how many ran at once)
git       [LOG SECONDS] like trace (when given), then edit, `git add -A` and `git commit` in its worktree
          (its own index and HEAD)
prompt    PROMPT: the mode and its arguments are the last line of PROMPT (spawn tests put them in the task)
netprobe  GET ARG (the model endpoint's /models; sandboxed: $EVALFARM_MODEL_BASE_URL/models), connect to 127.0.0.1:ARG2 and to 10.255.255.1:80,
          resolve example.com; what reached what goes into final_message as JSON; then like ok
"""
import json
import os
import signal
import socket
import urllib.request
import subprocess
import sys
import time
from pathlib import Path


def usage(path: str, **extra) -> None:
    data = {"input_tokens": 321, "output_tokens": 54, "cost_usd": 0.0042, "turns": 2, "tool_calls": 1,
            "final_message": "fake done"}
    data.update(extra)
    Path(path).write_text(json.dumps(data))


def edit() -> None:
    p = Path("hello.py")
    p.write_text(p.read_text().replace('"hello"', '"hello, world"'))


def probe(models_url: str, other_port: int) -> dict:
    out = {}
    if os.environ.get("EVALFARM_MODEL_BASE_URL"):  # sandboxed: the task's relay, with the task's token
        models_url = os.environ["EVALFARM_MODEL_BASE_URL"].rstrip("/") + "/models"
    req = urllib.request.Request(models_url, headers={"Authorization": "Bearer " + os.environ.get("EVAL_API_KEY", "")})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            out["model"] = r.status
    except Exception as exc:  # noqa: BLE001
        out["model"] = f"{type(exc).__name__}: {exc}"
    for name, addr in (("other_port", ("127.0.0.1", other_port)), ("outside", ("10.255.255.1", 80))):
        try:
            socket.create_connection(addr, timeout=2).close()
            out[name] = "connected"
        except OSError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    try:
        out["dns"] = socket.gethostbyname("example.com")
    except OSError as exc:
        out["dns"] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> int:
    mode, usage_file = sys.argv[1], sys.argv[2]
    if mode == "prompt":
        words = sys.argv[3].strip().splitlines()[-1].split()
        sys.argv = [sys.argv[0], words[0], usage_file, *words[1:]]
        mode = words[0]
    if mode == "ok":
        edit()
        usage(usage_file)
    elif mode == "hang":
        if sys.argv[4:5] == ["stubborn"]:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > \"$0.grandchild\"; wait", sys.argv[3]])
        Path(sys.argv[3]).write_text(f"{os.getpid()} {child.pid}")
        time.sleep(600)
    elif mode == "exit":
        print("working...", flush=True)
        print("boom: the model refused", file=sys.stderr)
        return 3
    elif mode == "leak":
        print(f"auth failed for key {os.environ.get('EVALFARM_FAKE_KEY')}", file=sys.stderr)
        return 1
    elif mode == "garbage":
        Path(usage_file).write_text("tokens: lots")
    elif mode == "escape":
        Path(os.environ["HOME"], "escaped-home.txt").write_text("x")
        Path(os.path.expanduser("~/.config/agent/settings.json")).parent.mkdir(parents=True, exist_ok=True)
        Path(os.path.expanduser("~/.config/agent/settings.json")).write_text("{}")
        Path(os.environ["XDG_CONFIG_HOME"], "xdg.txt").write_text("x")
        Path(os.environ["TMPDIR"], "tmp.txt").write_text("x")
        Path("..", "escaped-parent.txt").write_text("x")
        usage(usage_file, final_message=json.dumps(dict(os.environ)))
    elif mode == "orphan":
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        Path(sys.argv[3]).write_text(str(child.pid))
        usage(usage_file)
    elif mode == "stdin":
        data = sys.stdin.read()
        usage(usage_file, final_message=f"stdin had {len(data)} bytes")
    elif mode == "sleep":
        time.sleep(float(sys.argv[3]))
        edit()
        usage(usage_file)
    elif mode == "trace":
        first = not os.path.exists(sys.argv[3])
        with open(sys.argv[3], "a") as fh:
            fh.write(f"start {os.getpid()} {time.time():.3f}\n")
        once = sys.argv[5:6] == ["once"]  # sleep only on the first start (a redelivered run is quick)
        time.sleep(float(sys.argv[4]) if first or not once else 0.5)
        edit()
        usage(usage_file)
        with open(sys.argv[3], "a") as fh:
            fh.write(f"end {os.getpid()} {time.time():.3f}\n")
    elif mode == "git":
        if len(sys.argv) > 4:
            with open(sys.argv[3], "a") as fh:
                fh.write(f"start {os.getpid()}\n")
            time.sleep(float(sys.argv[4]))
        edit()
        ident = ["-c", "user.email=fake@agent", "-c", "user.name=fake"]
        subprocess.run(["git", *ident, "add", "-A"], check=True)
        subprocess.run(["git", *ident, "commit", "-qm", "fake agent edit"], check=True)
        usage(usage_file)
    elif mode == "netprobe":
        usage(usage_file, final_message=json.dumps(probe(sys.argv[3], int(sys.argv[4]))))
        edit()
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
