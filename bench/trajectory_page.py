"""The dashboard's case page for a long agent trajectory (issue 19's Proof: a ~200-step trajectory, target
under 300 ms of server time): a real Claude Code task of TURNS scripted model turns (each a Read, then an
Edit and a final message) against `evalfarm mock-provider --agent-script`, run sandboxed and saved; then
`evalfarm serve` on its state dir and the case page requested REPEAT times (wall time of each GET, which
is the server's time plus a loopback round trip).

    python bench/trajectory_page.py [--turns 66] [--repeat 21]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from agents_fixtures import MODELS, AgentServer, git, installed  # noqa: E402
from conftest import run_cli  # noqa: E402
from dashboard_support import Serve  # noqa: E402
from spawn_support import make_repo, report_of, spawn_env, write_spec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=66)
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args()
    installed("claude")
    script = {"steps": [{"read": "hello.py", "usage": {"input_tokens": 1000 + 10 * i, "output_tokens": 5}}
                        for i in range(args.turns)] + [
        {"edit": {"file": "hello.py", "old": 'print("hello")', "new": 'print("hello, world")'},
         "usage": {"input_tokens": 3000, "output_tokens": 60}},
        {"say": "Done.", "usage": {"input_tokens": 3100, "output_tokens": 10}}]}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        server = AgentServer(tmp_path, script)
        try:
            repo = make_repo(tmp_path / "repo")
            git(repo, "commit", "-q", "--allow-empty", "-m", "base")
            adapter = {"id": "claude", "provider": "agent", "agent": "claude", "model": MODELS["claude"],
                       "base_url": server.url}
            spec = write_spec(tmp_path / "c.yaml", repo, [{"id": "greeting", "text": "Change the greeting",
                                                           "check": "grep -q 'hello, world' hello.py"}],
                              adapters=[adapter])
            state = tmp_path / "state"
            env = {**spawn_env(tmp_path), "EVALFARM_BLOB_DIR": str(state / "blobs"),
                   "ANTHROPIC_API_KEY": "sk-bench-anthropic-0123456789"}
            report = report_of(run_cli("run", str(spec), "--json", "--state-dir", str(state), cwd=tmp_path,
                                       timeout=600, **env))
        finally:
            server.stop()
        [out] = report["outcomes"]
        blob = state / "blobs" / f"{out['agent']['trajectory_sha256']}.trajectory.json"
        steps, size = len(json.loads(blob.read_text())["steps"]), blob.stat().st_size
        serve = Serve(state)
        try:
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                status, _, body = serve.get(f"/runs/{report['run_id']}/cases/0")
                times.append((time.perf_counter() - started) * 1000)
                assert status == 200, status
        finally:
            serve.stop()
    print(json.dumps({"turns": args.turns, "failure_class": out["failure_class"], "steps": steps,
                      "trajectory_bytes": size, "page_bytes": len(body), "requests": args.repeat,
                      "page_ms_median": round(statistics.median(times), 1), "page_ms_max": round(max(times), 1),
                      "page_ms_first": round(times[0], 1)}))


if __name__ == "__main__":
    main()
