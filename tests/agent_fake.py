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
"""
import json
import os
import signal
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


def main() -> int:
    mode, usage_file = sys.argv[1], sys.argv[2]
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
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
