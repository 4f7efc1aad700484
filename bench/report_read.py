"""Wall time and peak RSS of the commands that read a saved report: gate, diff, rescore, export,
baseline.

Usage: ``python bench/report_read.py N [--dir DIR] [--only gate,diff,...] [--code main=/tmp/main
--code new=. --rounds 3]`` (``--code``: checkouts to compare, run alternately in each round). Makes (or reuses,
in DIR) a saved run of N ``mock`` items (``bench/scale.py``'s dataset: every 7th fails its check), then
runs each command as a child process and reads its peak RSS from ``os.wait4`` (the child's own
rusage). Run it under ``flock /tmp/evalfarm-cpu.lock``. Prints a Markdown table and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.scale import spec  # noqa: E402

EVALFARM = [sys.executable, "-m", "evalfarm.cli"]


def child(argv: list[str], cwd: Path, code: str | None = None) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one command, its output thrown away; ``code``: a checkout
    of evalfarm to run instead of the installed one (PYTHONPATH)."""
    env = dict(os.environ, **({"PYTHONPATH": code} if code else {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1) and b"no agent item with a stored trajectory" not in err:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return wall, usage.ru_maxrss / 1024, proc.returncode


def saved_run(folder: Path, n: int) -> Path:
    state = folder / "state"
    runs = sorted((state / "runs").glob("*.json")) if (state / "runs").is_dir() else []
    runs = [p for p in runs if not p.name.endswith(".lineage.json")]
    if runs:
        return runs[0]
    folder.mkdir(parents=True, exist_ok=True)
    spec(folder, n)
    subprocess.run(EVALFARM + ["run", "scale.yaml", "--state-dir", "state"], cwd=folder, check=True,
                   stdout=subprocess.DEVNULL)
    return saved_run(folder, n)


def commands(run: Path, out: Path) -> dict[str, list[str]]:
    s = ["--state-dir", "state"]
    return {
        "gate": ["gate", str(run), *s],
        "diff": ["diff", str(run), str(run), "--json", *s],
        "rescore": ["rescore", str(run), "--no-save", "-o", str(out / "rescored.json"), *s],
        "export jsonl": ["export", "jsonl", str(run), "-o", str(out / "out.jsonl"), *s],
        "export csv": ["export", "csv", str(run), "-o", str(out / "out.csv"), *s],
        "export inspect": ["export", "inspect", str(run), "-o", str(out / "inspect.json"), *s],
        # the bench's mock run has no agent items: the pass is measured, the command then says so (exit 2)
        "export trajectory": ["export", "trajectory", str(run), "-o", str(out / "atif"), *s],
        "baseline": ["baseline", str(run), "--name", "bench", *s],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--only", default="")
    ap.add_argument("--label", default="")
    ap.add_argument("--code", action="append", default=[],
                    help="LABEL=DIR: also run a checkout (e.g. main=/tmp/main); repeated, alternated per round")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    folder = args.dir or Path(f"/tmp/evalfarm-report-read/n{args.n}")
    run = saved_run(folder, args.n).resolve()
    out = folder / "out"
    out.mkdir(exist_ok=True)
    only = [x for x in args.only.split(",") if x]
    rows = []
    codes = [tuple(c.split("=", 1)) for c in args.code] or [(args.label or "installed", "")]
    print("| command | code | items | wall s | peak RSS MB | exit |")
    print("|---|---|---:|---:|---:|---:|")
    for name, argv in commands(run, out).items():
        if only and name not in only:
            continue
        for _ in range(args.rounds):
            for label, code in codes:
                wall, rss, rc = child(EVALFARM + argv, folder, code or None)
                rows.append({"command": name, "code": label, "items": args.n, "wall_s": round(wall, 2),
                             "peak_rss_mb": round(rss, 1), "exit": rc, "report_bytes": run.stat().st_size})
                print(f"| {name} | {label} | {args.n:,} | {wall:.2f} | {rss:.0f} | {rc} |", flush=True)
    print(json.dumps({"label": args.label, "rows": rows}))


if __name__ == "__main__":
    main()
