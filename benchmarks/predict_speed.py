"""Issue 17: how long `commdsl predict` takes for the hand-written ring at world 4096 (goal: 8 sizes in ≤ 5 s).

    python benchmarks/predict_speed.py [--repeat 3]

The ring is programs/ring_allreduce.comm with its `world` line widened to `1..` (as benchmarks/lint_speed.py
does). Each row is `commdsl predict` as a user runs it: a subprocess, wall time from fork to exit and the
child's peak RSS, on the dgx-h100 preset.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ROWS = [  # (label, world, sizes)
    ("ring, world 1024, 8 sizes", 1024, "1K:128K"),
    ("ring, world 4096, 1 size", 4096, "128K"),
    ("ring, world 4096, 8 sizes", 4096, "1K:128K"),
]


def run(path: str, world: int, sizes: str) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-m",
        "commdsl",
        "predict",
        path,
        "--world",
        str(world),
        "--topology",
        "dgx-h100",
        "--sizes",
        sizes,
        "--links",
        "0",
    ]
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.execvpe(cmd[0], cmd, env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({status})")
    return wall, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ring = Path(tmp) / "ring.comm"
        ring.write_text((ROOT / "programs" / "ring_allreduce.comm").read_text().replace("world 1..16", "world 1.."))
        print(f"load before: {os.getloadavg()[0]:.2f}")
        print("| row | wall median [min–max] | peak RSS (max) |")
        print("|---|---:|---:|")
        for label, world, sizes in ROWS:
            walls, peaks = [], []
            for _ in range(a.repeat):
                w, m = run(str(ring), world, sizes)
                walls.append(w)
                peaks.append(m)
            print(
                f"| {label} | {statistics.median(walls):.2f} s [{min(walls):.2f}–{max(walls):.2f}] | "
                f"{max(peaks):.0f} MB |",
                flush=True,
            )
        print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
