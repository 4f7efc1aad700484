"""Where a one-item `evalfarm run` spends its start-up (issue 24): `python -X importtime` of the whole
command, the ten top-level imports that cost the most (cumulative microseconds, as importtime prints
them), and the whole command's best wall time of five. With ``--before DIR`` (a checkout of an earlier
commit with its own .venv) the same for that code, in the same run.

    python bench/imports.py [--before DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")


def importtime(python: str, root: Path, spec: Path) -> tuple[list[tuple[int, str]], int]:
    """(the top-level imports by cumulative time, the sum of all top-level imports), in microseconds."""
    env = dict(os.environ, PYTHONPATH=str(root))
    res = subprocess.run([python, "-X", "importtime", "-m", "evalfarm.cli", "run", str(spec), "--no-save"],
                         env=env, cwd=spec.parent, capture_output=True, text=True, check=True)
    top = []
    for line in res.stderr.splitlines():
        m = LINE.match(line)
        if m and len(m.group(3)) == 1:  # one space of indent: imported by the program itself
            top.append((int(m.group(2)), m.group(4)))
    return sorted(top, reverse=True), sum(t for t, _ in top)


def best_wall(python: str, root: Path, spec: Path, repeat: int = 5) -> float:
    env = dict(os.environ, PYTHONPATH=str(root))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([python, "-m", "evalfarm.cli", "run", str(spec), "--no-save"], env=env, cwd=spec.parent,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path)
    args = parser.parse_args()
    builds = {"after": (sys.executable, ROOT)}
    if args.before:
        builds = {"before": (str(args.before / ".venv" / "bin" / "python"), args.before), **builds}
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "one.yaml"
        spec.write_text("name: one\nadapters: [mock]\nprompts:\n  - {id: a, text: hello}\n")
        for build, (python, root) in builds.items():
            top, total = importtime(python, root, spec)
            wall = best_wall(python, root, spec)
            print(f"\n== {build}: one-item run {wall:.3f} s wall (best of 5); top-level imports {total / 1e3:.0f} ms ==")
            for us, name in top[:10]:
                print(f"  {us / 1e3:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
