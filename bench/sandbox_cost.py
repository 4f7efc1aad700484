"""What the sandbox costs a real agent task (issue 18): Claude Code and Codex, each making the scripted edit
of the agent tests against a real `evalfarm mock-provider --agent-script`, N tasks with `isolation: none`
and N with `isolation: sandbox`, alternating; per agent the median task wall time (checkout, setup, agent,
diff, check, removal) and the agent's own wall, each way; and the tokens the agent reported against the
tokens the relay counted on the wire. Target: the sandbox adds under 50 ms per task.

    python bench/sandbox_cost.py [--tasks 5] [--agents command,claude,codex,gemini,opencode,aider]

``command`` makes the same edit with sed (no agent runtime, no model call): the sandbox's own cost per
task (jail, relay, private .git, limits) without an agent's own run-to-run noise, which on these machines
is larger than the target.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from agents_fixtures import EDIT_SCRIPT, MODELS  # noqa: E402
from evalfarm.agents.adapter import AgentAdapter  # noqa: E402
from evalfarm.spec.models import AdapterSpec, PromptSpec, Workspace  # noqa: E402

KEYS = {"ANTHROPIC_API_KEY": "sk-bench-anthropic-0123456789", "OPENAI_API_KEY": "sk-bench-openai-0123456789",
        "GEMINI_API_KEY": "sk-bench-gemini-0123456789"}  # every agent's key variable (spec.models.AGENT_KEY_ENVS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5)
    ap.add_argument("--agents", default="claude,codex")
    opts = ap.parse_args()
    os.environ.update(KEYS)
    tmp = Path(tempfile.mkdtemp(prefix="evalfarm-sandbox-cost-"))
    os.environ["EVALFARM_SPAWN_DIR"] = str(tmp / "spawn")
    repo = tmp / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(repo)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "hello.py").write_text('print("hello")\n')
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    script = tmp / "script.yaml"
    script.write_text(yaml.safe_dump(EDIT_SCRIPT, sort_keys=False))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "mock-provider", "--port", str(port),
                               "--agent-script", str(script)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict = {}
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/v1"
        prompt = PromptSpec(id="greeting", text="Change the greeting in hello.py to hello, world",
                            check="python3 hello.py | grep -qx 'hello, world'")
        for agent in opts.agents.split(","):
            if agent == "command":  # the jail's own cost: the same edit by sed, no agent runtime, no model call
                entry = AdapterSpec.model_validate({
                    "id": agent, "provider": "agent", "agent": "command", "model": "none", "base_url": url,
                    "api_key_env": "OPENAI_API_KEY",
                    "template": "/bin/sed -i 's/hello/hello, world/' hello.py"})
            else:
                entry = AdapterSpec.model_validate({"id": agent, "provider": "agent", "agent": agent,
                                                    "model": MODELS[agent], "base_url": url})
            rows: dict[str, list] = {"none": [], "sandbox": []}
            for i in range(opts.tasks + 1):  # the first pair warms caches and is dropped
                for isolation in ("none", "sandbox"):
                    adapter = AgentAdapter(entry)
                    adapter.use_blob_dir(tmp / "blobs")
                    adapter.use_workspace(Workspace(repo=str(repo), base="main", isolation=isolation))
                    t0 = time.perf_counter()
                    done = adapter.run_task(prompt, 0)
                    wall = time.perf_counter() - t0
                    info = done.meta["agent"]
                    assert done.meta["checks"][0]["passed"], info
                    if i:
                        rows[isolation].append((wall, info["wall_s"], done.input_tokens, done.output_tokens,
                                                info.get("relay")))
            med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
            relay = rows["sandbox"][-1][4] or {}
            out[agent] = {
                "tasks_each": opts.tasks,
                "task_wall_ms": {k: round(v[0] * 1000, 1) for k, v in med.items()},
                "agent_wall_ms": {k: round(v[1] * 1000, 1) for k, v in med.items()},
                "sandbox_cost_ms_per_task": round((med["sandbox"][0] - med["none"][0]) * 1000, 1),
                "tokens_self_reported": [rows["sandbox"][-1][2], rows["sandbox"][-1][3]],
                "tokens_relay_counted": [relay.get("input_tokens"), relay.get("output_tokens")],
            }
            print(agent, json.dumps(out[agent]), file=sys.stderr, flush=True)  # a later agent's failure keeps this
    finally:
        server.terminate()
        server.wait(10)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
