"""What `evalfarm serve` keeps in memory per report: RSS before and after viewing a report with one
300 MB output, and a 10,000-case run (issue 17: 61 MB -> 676 MB on first view of the big output).

    .venv/bin/python bench/dashboard_memory.py [--dir /tmp/evalfarm-dash-mem] [--keep] [--before /work/wt-old]

The reports are made by the real engine (``Runner`` on the mock adapters) and saved with
``save_report``; the big one is a real run whose first output was replaced by 300 MB of text before
it was saved, written in evalfarm's layout by ``core.report.framing``. A real ``evalfarm serve``
subprocess is started (``--before DIR``: also the one of an earlier checkout with its own .venv, on
the same state dir) and its VmRSS read from /proc after each step: start, the runs list, the big
run's page, its case page, the download of its output, then the 10,000-case run's page, a page of
its failed cases, one case and its diff with itself. "peak" is VmHWM, the most the process ever held:
a report parsed whole shows there even when its memory is given back after the request.
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIG_MB = 300


def build(state: Path, n_cases: int) -> tuple[str, str]:
    from evalfarm import Runner, save_report
    from evalfarm.spec.models import EvalSpec

    spec = EvalSpec.model_validate({"name": "big-output", "adapters": ["mock"],
                                    "prompts": [{"id": "huge", "text": "say a lot", "expected_output_contains": ["lot"]},
                                                {"id": "small", "text": "say little"}]})
    report = Runner().run(spec).to_dict()
    line = "all work and no play makes a lot of text; \"quoted\" and tabbed\t and é 😀\n"
    report["outcomes"][0]["output"] = line * (BIG_MB * 1_000_000 // len(line.encode()))
    big, _ = save_report(report, state)
    del report
    print(f"built a report with one {BIG_MB} MB output: {big.stat().st_size >> 20} MiB", flush=True)
    spec = EvalSpec.model_validate({
        "name": "ten-thousand", "adapters": ["mock"], "judge": {"model": "mock-judge", "provider": "mock", "rubric": "r"},
        "prompts": [{"id": f"case-{i:05d}", "text": f"Answer {i} in one line, please; case {i}.",
                     "expected_output_contains": [str(i) if i % 7 else "never"]} for i in range(n_cases)]})
    report = Runner().run(spec)
    many, _ = save_report(report, state)
    print(f"built a {n_cases}-case run: {many.stat().st_size >> 20} MiB", flush=True)
    return big.stem, many.stem


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM: the peak so far) in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out.get("VmRSS", float("nan")), out.get("VmHWM", float("nan"))


def get(url: str) -> tuple[int, int, float]:
    t = time.perf_counter()
    n = 0
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            while chunk := r.read(1 << 20):
                n += len(chunk)
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, n, time.perf_counter() - t


def measure(evalfarm: Path, state: Path, big: str, many: str, label: str) -> list[tuple[str, int, int, float, tuple]]:
    port = free_port()
    log = state.parent / f"serve-{label}.log"
    proc = subprocess.Popen([str(evalfarm), "serve", "--state-dir", str(state), "--port", str(port)],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while b"evalfarm serve: http://" not in log.read_bytes():
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"{label}: serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        rows = [("start", 0, 0, 0.0, rss_mb(proc.pid))]
        for name, path in (("runs list", "/runs"), ("big run page", f"/runs/{big}"),
                           ("big case page", f"/runs/{big}/cases/0"), ("big case JSON", f"/api/runs/{big}/cases/0"),
                           ("big output download", f"/runs/{big}/cases/0/output"),
                           ("10k run page", f"/runs/{many}"), ("10k failed cases", f"/api/runs/{many}/cases?filter=failed"),
                           ("10k case page", f"/runs/{many}/cases/4321"), ("10k diff", f"/diff?a={many}&b={many}")):
            status, n, secs = get(base + path)
            rows.append((name, status, n, secs, rss_mb(proc.pid)))
        text = log.read_text(errors="replace")
        if "Traceback" in text:
            rows.append(("(tracebacks in the log)", text.count("Traceback"), 0, 0.0, rss_mb(proc.pid)))
        return rows
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/tmp/evalfarm-dash-mem"))
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--keep", action="store_true", help="reuse the state dir if it is there")
    ap.add_argument("--before", type=Path, help="an earlier checkout with its own .venv, measured on the same state dir")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    state = args.dir / "state"
    ids = args.dir / "ids.json"
    if not (args.keep and ids.is_file()):
        shutil.rmtree(args.dir, ignore_errors=True)
        state.mkdir(parents=True)
        big, many = build(state, args.cases)
        ids.write_text(json.dumps([big, many]))
    big, many = json.loads(ids.read_text())
    out = {}
    for label, checkout in (("before", args.before), ("after", ROOT)):
        if checkout is None:
            continue
        rows = measure(Path(checkout) / ".venv" / "bin" / "evalfarm", state, big, many, label)
        out[label] = rows
        print(f"\n{label}: {checkout}")
        print(f"{'step':<22} {'HTTP':>4} {'bytes':>11} {'s':>7} {'RSS MB':>8} {'peak MB':>8}")
        for name, status, n, secs, (rss, peak) in rows:
            print(f"{name:<22} {status:>4} {n:>11,} {secs:>7.2f} {rss:>8.1f} {peak:>8.1f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main())
