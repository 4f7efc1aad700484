"""The per-task model relay's overhead (issue 18): a stream of chat completions, 64 in flight, against a
real `evalfarm mock-provider --latency-ms 200`, sent directly and through the whole sealed path (a TCP
forwarder, evalfarm/agents/netns_relay.py, into the relay's unix socket, the relay swapping the
per-task token for the real key and counting tokens, the upstream). Target: under 5 % of wall time.

    python bench/relay_overhead.py [--requests 640] [--in-flight 64] [--latency-ms 200] [--rounds 3]
                                   [--client aiohttp|httpcore]

Both paths use the same client, in the same run: httpx over ``httpx_aiohttp.AiohttpTransport`` (the
default; httpx's own pool, httpcore, needs 3-9 s for what takes 2.0 s at 64 in flight, on either path, so
the relay's share drowns in it: ``--client httpcore`` shows that). Rounds alternate direct and relayed
runs; the best round of each is compared (machine noise inflates, it never deflates). Prints one JSON
object: walls, latency percentiles, overhead %, and the relay's token counts next to what the server sent.

The forwarder's child (``sleep``) is in the forwarder's own session and killed with it: left behind, it
held this script's stdout open, so a caller reading that pipe to its end waited an hour after the figures.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx_aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalfarm.agents.jail import FORWARDER  # noqa: E402

RELAY_PROC = """
import json, sys
from pathlib import Path
from evalfarm.agents.model_relay import TaskRelay
relay = TaskRelay(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
print(relay.token, flush=True)
sys.stdin.read()
print(json.dumps(relay.counts.as_dict()), flush=True)
relay.close()
"""
KEY = "sk-bench-real-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited")
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


async def stream(url: str, key: str, n: int, in_flight: int, client_kind: str = "aiohttp",
                 ) -> tuple[float, list[float], int]:
    sem = asyncio.Semaphore(in_flight)
    lat: list[float] = []
    tokens = 0
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    transport = httpx_aiohttp.AiohttpTransport(limits=limits) if client_kind == "aiohttp" else None
    async with httpx.AsyncClient(limits=limits, transport=transport, timeout=60) as client:
        async def one(i: int) -> None:
            nonlocal tokens
            async with sem:
                t = time.perf_counter()
                r = await client.post(f"{url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                      json={"model": "m-1", "messages": [{"role": "user", "content": f"question {i}"}]})
                r.raise_for_status()
                u = r.json()["usage"]
                tokens += u["prompt_tokens"] + u["completion_tokens"]
                lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t0, lat, tokens


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=640)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--latency-ms", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--client", choices=("aiohttp", "httpcore"), default="aiohttp",
                    help="httpx's transport, the same on both paths")
    opts = ap.parse_args()
    mport, fport = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    mock = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "mock-provider", "--port", str(mport),
                             "--latency-ms", str(opts.latency_ms), "--api-key", KEY], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock_dir = Path(tempfile.mkdtemp(prefix="efr-bench-"))
    relay = forwarder = None
    try:
        wait_port(mport, mock)
        upstream = f"http://127.0.0.1:{mport}/v1"
        # the relay in a process of its own, as in a worker (the agent is another process): it does not
        # share this client's GIL. It prints its token, then its counts when its stdin closes.
        relay = subprocess.Popen([sys.executable, "-c", RELAY_PROC, str(sock_dir / "m.sock"), upstream, KEY],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        token = relay.stdout.readline().strip()
        # the in-jail forwarder, here on the host's loopback (its child just waits)
        forwarder = subprocess.Popen(["/usr/bin/python3", "-I", "-S", str(FORWARDER), "--port", str(fport), "--socket",
                                      str(sock_dir / "m.sock"), "--", "sleep", "3600"], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(fport, forwarder)
        relayed_url = f"http://127.0.0.1:{fport}/v1"
        c = opts.client
        asyncio.run(stream(upstream, KEY, opts.in_flight, opts.in_flight, c))  # warm both paths
        warm = asyncio.run(stream(relayed_url, token, opts.in_flight, opts.in_flight, c))[2]
        runs: dict[str, list[tuple[float, list[float], int]]] = {"direct": [], "relay": []}
        for _ in range(opts.rounds):
            runs["direct"].append(asyncio.run(stream(upstream, KEY, opts.requests, opts.in_flight, c)))
            runs["relay"].append(asyncio.run(stream(relayed_url, token, opts.requests, opts.in_flight, c)))
        best = {k: min(v, key=lambda r: r[0]) for k, v in runs.items()}
        out = {"client": c, "requests": opts.requests, "in_flight": opts.in_flight, "latency_ms": opts.latency_ms,
               "rounds": opts.rounds, "ideal_wall_s": round(opts.requests / opts.in_flight * opts.latency_ms / 1000, 3)}
        for k, (wall, lat, _) in best.items():
            out[k] = {"wall_s": round(wall, 3), "all_walls_s": [round(r[0], 3) for r in runs[k]],
                      "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "mean_ms": round(statistics.mean(lat) * 1000, 1)}
        out["overhead_pct"] = round((best["relay"][0] / best["direct"][0] - 1) * 100, 2)
        out["p50_added_ms"] = round(out["relay"]["p50_ms"] - out["direct"]["p50_ms"], 1)
        sent = sum(r[2] for r in runs["relay"])
        relay.stdin.close()
        counts = json.loads(relay.stdout.readline())
        counted = counts["input_tokens"] + counts["output_tokens"] - warm
        out["tokens"] = {"server_reported": sent, "relay_counted": counted, "equal": sent == counted}
        out["relay_requests_refused"] = counts["refused"]
        print(json.dumps(out, indent=1))
        return 0 if out["tokens"]["equal"] else 1
    finally:
        if forwarder is not None:
            os.killpg(forwarder.pid, 9)  # the forwarder and its child
            forwarder.wait()
        if relay is not None:
            relay.kill()
            relay.wait()
        mock.terminate()
        mock.wait(10)


if __name__ == "__main__":
    sys.exit(main())
