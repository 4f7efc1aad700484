"""What a coding agent sends per model request: the context an agent run's cost estimate counts.

    .venv/bin/python bench/agent_context.py [--agents claude,codex]

Each pinned agent CLI that is installed (``make agents``) runs one real task (the three-step edit
of the agent tests: read a file, edit it, say done) against `evalfarm mock-provider --agent-script`,
through a real `evalfarm run`; the server records the size of every request body it got. Printed
per agent: model requests, characters per request (first, mean, last) and, at 4 characters a token
(the estimate's rule), the tokens a request carries. ``engine.budget.AGENT_CONTEXT_TOKENS`` holds
the first request's figure (the agent's system prompt and tool definitions, before any history).
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.5"}
KEYS = {"ANTHROPIC_API_KEY": "sk-test-anthropic-0123456789", "OPENAI_API_KEY": "sk-test-openai-0123456789"}
SCRIPT = {"steps": [
    {"read": "hello.py", "usage": {"input_tokens": 1000, "output_tokens": 20}},
    {"edit": {"file": "hello.py", "old": 'print("hello")', "new": 'print("hello, world")'},
     "usage": {"input_tokens": 1500, "output_tokens": 60}},
    {"say": "Done: greeting updated.", "usage": {"input_tokens": 2000, "output_tokens": 10}}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo), *args],
                   check=True, capture_output=True)


def measure(agent: str, tmp: Path) -> dict:
    evalfarm = str(ROOT / ".venv" / "bin" / "evalfarm")
    (tmp / "script.yaml").write_text(yaml.safe_dump(SCRIPT, sort_keys=False))
    port = free_port()
    server = subprocess.Popen([evalfarm, "mock-provider", "--port", str(port), "--agent-script",
                               str(tmp / "script.yaml")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("mock-provider did not start")
                time.sleep(0.05)
        repo = tmp / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "hello.py").write_text('print("hello")\n')
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "init")
        spec = tmp / "spec.yaml"
        spec.write_text(yaml.safe_dump({
            "name": f"context-{agent}", "workspace": {"repo": str(repo), "base": "main"},
            "adapters": [{"id": agent, "provider": "agent", "agent": agent, "model": MODELS[agent],
                          "base_url": f"http://127.0.0.1:{port}/v1"}],
            "prompts": [{"id": "greeting", "text": "Change the greeting in hello.py to hello, world",
                         "check": "python3 hello.py | grep -qx 'hello, world'"}]}, sort_keys=False))
        import os

        env = {**os.environ, **KEYS}
        res = subprocess.run([evalfarm, "run", str(spec), "--no-save", "--json"], env=env, capture_output=True,
                             text=True, timeout=600)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/agent-log", timeout=5) as r:
            log = json.loads(r.read())
    finally:
        server.terminate()
        server.wait(10)
    calls = [e for e in log if e["protocol"] != "unknown" and e["kind"] != "count_tokens" and e.get("model")]
    chars = [e["body_chars"] for e in calls]
    try:
        passed = json.loads(res.stdout)["outcomes"][0]["passed"]
    except (ValueError, KeyError, IndexError):
        passed = None
    return {"agent": agent, "passed": passed, "requests": len(calls), "chars": chars,
            "first": chars[0] if chars else None, "mean": round(sum(chars) / len(chars)) if chars else None,
            "last": chars[-1] if chars else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="claude,codex")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from evalfarm.agents import detect

    print(f"{'agent':<8} {'version':<10} {'passed':<6} {'requests':>8} {'chars: first':>13} {'mean':>8} {'last':>8} "
          f"{'~tokens: first':>15} {'mean':>7}")
    for agent in args.agents.split(","):
        found = detect(agent)
        if found is None:
            print(f"{agent:<8} not installed (make agents)")
            continue
        version = found[1]
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(agent, Path(tmp))
        if not r["chars"]:
            print(f"{agent:<8} {version:<10} no model request recorded")
            continue
        print(f"{agent:<8} {version:<10} {str(r['passed']):<6} {r['requests']:>8} {r['first']:>13,} "
              f"{r['mean']:>8,} {r['last']:>8,} {r['first'] // 4:>15,} {r['mean'] // 4:>7,}")


if __name__ == "__main__":
    main()
