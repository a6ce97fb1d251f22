"""How fast `lint` is: ring_allreduce at growing world sizes (cost per op), and all of programs/.

    python benchmarks/lint_speed.py                 # worlds 16 64 128 256
    python benchmarks/lint_speed.py --worlds 64 256 1024

The ring program declares `world 1..16`; this script checks it at larger sizes by widening that line
in memory (nothing is written). Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import glob
import time

from commdsl.checker import CheckOptions, analyse_schedule, check_program
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.source import SourceFile


def ring(n: int):
    text = open("programs/ring_allreduce.comm").read().replace("world 1..16", "world 1..")
    return load(SourceFile("programs/ring_allreduce.comm", text.replace("param n = 1024", f"param n = {n}")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, nargs="+", default=[16, 64, 128, 256])
    args = ap.parse_args()
    program = ring(1024)
    print("| world | ops (P2P + local) | expand s | analyse s | total s | µs per op |")
    print("|---:|---:|---:|---:|---:|---:|")
    for world in args.worlds:
        gc.collect()
        t0 = time.perf_counter()
        schedule = expand(program, world)
        t1 = time.perf_counter()
        diags, _ = analyse_schedule(program, schedule, ("gloo",), True, False)
        t2 = time.perf_counter()
        ops = sum(len(op.ops) if hasattr(op, "ops") else 1 for rank in schedule.ops for op in rank)
        assert not diags, diags
        print(f"| {world} | {ops} | {t1 - t0:.2f} | {t2 - t1:.2f} | {t2 - t0:.2f} | {(t2 - t0) / ops * 1e6:.1f} |")
    t0 = time.perf_counter()
    count = 0
    for path in sorted(glob.glob("programs/*.comm")):
        program = load(SourceFile.read(path))
        count += len(program.world_sizes())
        assert not [d for d in check_program(program, CheckOptions(lints=True)) if d.severity == "error"]
    print(f"\nall of programs/ ({count} program × world-size expansions, with data): {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
