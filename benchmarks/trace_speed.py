"""`commdsl trace` speed: trace + check of the 1F1B pipeline script at several world sizes.

End to end: `python -m commdsl trace tests/trace_scripts/pipeline_1f1b.py --world N` as a user runs it,
a subprocess, wall time from start to exit (import of torch included). Phases, in one process that has
imported torch once: recording (fork one child per rank), writing the `.comm` program, checking it;
per-rank cost is the recording time over N. Runs alternate between sizes so each sees the same load;
medians are reported, with the 1-minute load average before and after.

    python benchmarks/trace_speed.py --world 8 --world 64 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "trace_scripts" / "pipeline_1f1b.py"
sys.path.insert(0, str(ROOT))  # this checkout's commdsl, whatever is installed


def end_to_end(world: int) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "commdsl", "trace", str(SCRIPT), "--world", str(world)],
        env=env,
        capture_output=True,
        timeout=600,
    )
    return time.perf_counter() - start, proc.returncode


def phases(world: int) -> tuple[float, float, float, int]:
    from commdsl.trace.check import check_emitted
    from commdsl.trace.record import record
    from commdsl.trace.to_comm import emit

    t0 = time.perf_counter()
    recording = record(str(SCRIPT), [], world)
    t1 = time.perf_counter()
    emitted = emit(recording.traces, "pipeline_1f1b")
    t2 = time.perf_counter()
    diags = check_emitted(emitted, "pipeline_1f1b.comm", {})
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, len(diags)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, action="append")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    worlds = args.world or [8, 64]
    print(f"load before: {os.getloadavg()[0]:.2f}")
    walls: dict[int, list[float]] = {w: [] for w in worlds}
    for _ in range(args.repeat):
        for w in worlds:
            wall, code = end_to_end(w)
            assert code == 0, f"world {w}: exit {code}"
            walls[w].append(wall)
    import torch  # noqa: F401  (the phases run in a parent that imported torch once, as the CLI does)

    rows = {w: [phases(w) for _ in range(args.repeat)] for w in worlds}
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print("| world | end to end, median [min–max] | record | per rank | emit .comm | check | findings |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for w in worlds:
        rec = statistics.median(r[0] for r in rows[w])
        em = statistics.median(r[1] for r in rows[w])
        ch = statistics.median(r[2] for r in rows[w])
        found = rows[w][0][3]
        wl = walls[w]
        print(
            f"| {w} | {statistics.median(wl):.2f} s [{min(wl):.2f}–{max(wl):.2f}] | {rec:.2f} s | "
            f"{1000 * rec / w:.0f} ms | {em * 1000:.0f} ms | {ch * 1000:.0f} ms | {found or 'none'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
