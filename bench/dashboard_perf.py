"""How fast `evalfarm serve` answers on a big state dir: 1,000 runs and runs of 10,000 cases.

    .venv/bin/python bench/dashboard_perf.py [--dir /tmp/dash-perf] [--keep]

Every report is made by the real engine (``Runner`` on the mock adapters, saved with
``save_report`` and recorded in the registry like ``evalfarm run`` does), then a real
``evalfarm serve`` subprocess is timed: the ``Server-Timing`` header it sends (server time,
from the request reaching the app to the response being ready) and the client's wall time.
"cold" is the first request after start (nothing cached), "warm" the median of 5 repeats.
"""
from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(state: Path, n_runs: int, n_cases: int) -> tuple[str, str]:
    from evalfarm import Runner, load_spec, save_report
    from evalfarm.runs.registry import Registry
    from evalfarm.spec.models import EvalSpec

    smoke = load_spec(ROOT / "examples" / "smoke.yaml")
    reg = Registry(state)
    t = time.perf_counter()
    for i in range(n_runs):
        report = Runner().run(smoke)
        path, _ = save_report(report, state)
        reg.record(report.to_dict(), path)
        if i == 0:
            reg.promote("smoke", report.to_dict(), path)
    print(f"built {n_runs} smoke runs in {time.perf_counter() - t:.1f} s", flush=True)
    big_ids = []
    for variant in (0, 1):
        spec = EvalSpec.model_validate({
            "name": "big", "adapters": ["mock"], "judge": {"model": "mock-judge", "provider": "mock", "rubric": "r"},
            "prompts": [{"id": f"case-{i:05d}", "text": f"Answer {i} in one line, please; case {i}.",
                         "expected_output_contains": [str(i) if (i + variant) % 7 else "never"]}
                        for i in range(n_cases)]})
        t = time.perf_counter()
        report = Runner().run(spec)
        path, _ = save_report(report, state)
        reg.record(report.to_dict(), path)
        big_ids.append(report.run_id)
        print(f"built a {n_cases}-case run in {time.perf_counter() - t:.1f} s ({path.stat().st_size >> 20} MiB)",
              flush=True)
    return big_ids[0], big_ids[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(url: str) -> tuple[float, float, int]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
        server = float(r.headers["Server-Timing"].split("dur=")[1])
    return server, (time.perf_counter() - t) * 1000, len(body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/tmp/evalfarm-dashboard-perf"))
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--keep", action="store_true", help="reuse the state dir if it is there")
    args = ap.parse_args()
    state = args.dir / "state"
    if not (args.keep and state.is_dir()):
        shutil.rmtree(args.dir, ignore_errors=True)
        big, big2 = build(state, args.runs, args.cases)
    else:
        from evalfarm.runs.archive import list_runs
        bigs = sorted(p.stem for p in list_runs(state) if p.stat().st_size > 1 << 20)
        big, big2 = bigs[0], bigs[1]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "serve", "--state-dir", str(state),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        proc.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        pages = [("runs page (1,000+ runs, first 100 rows)", "/runs"),
                 ("runs page 10", "/runs?page=10"),
                 ("runs filtered by spec", "/runs?spec=big"),
                 (f"run page ({args.cases:,} cases, page 1 of the case list)", f"/runs/{big}"),
                 ("run page, cases filtered (failed)", f"/runs/{big}?filter=failed"),
                 ("case list API, page 150", f"/api/runs/{big}/cases?page=150"),
                 ("case detail, last case", f"/runs/{big}/cases/{args.cases - 1}"),
                 (f"diff of two {args.cases:,}-case runs", f"/diff?a={big}&b={big2}"),
                 ("/metrics (all runs)", "/metrics")]
        print(f"\n{'page':<52} {'cold srv ms':>11} {'cold wall':>10} {'warm srv ms':>11} {'warm wall':>10} {'KiB':>7}")
        for label, path in pages:
            cold = timed(base + path)
            warm = [timed(base + path) for _ in range(5)]
            print(f"{label:<52} {cold[0]:>11.1f} {cold[1]:>10.1f} {statistics.median(w[0] for w in warm):>11.1f} "
                  f"{statistics.median(w[1] for w in warm):>10.1f} {cold[2] >> 10:>7}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
