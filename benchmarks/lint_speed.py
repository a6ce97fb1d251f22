"""How fast `lint` is: ring_allreduce at growing world sizes (cost per op), and all of programs/.

    python benchmarks/lint_speed.py                         # worlds 16 64 256 1024
    python benchmarks/lint_speed.py --worlds 64 256 1024 --precise-max 256

For each world size: `lint` as `check_program` runs it (the vectorised fast path, which proves the
ring clean), the fast path alone split into its expansion and its engine, and the precise pipeline
(`expand` + `analyse_schedule`, what runs when the fast path cannot decide) up to --precise-max,
since it takes minutes at 1024. The ring program declares `world 1..16`; this script checks it at
larger sizes by widening that line in memory (nothing is written). Prints markdown tables for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import glob
import time
from pathlib import Path

import numpy as np

from commdsl.checker import CheckOptions, analyse_schedule, check_program
from commdsl.expand import expand, resolve_params
from commdsl.fast.rounds import Machine
from commdsl.fast.spmd import Spmd
from commdsl.resolve import load
from commdsl.source import SourceFile


def ring(n: int):
    text = Path("programs/ring_allreduce.comm").read_text().replace("world 1..16", "world 1..")
    return load(SourceFile("programs/ring_allreduce.comm", text.replace("param n = 1024", f"param n = {n}")))


def ops_of(spmd: Spmd) -> int:
    """P2P and local ops over all ranks, counting each op of a batch (as the Schedule would)."""
    return sum(sum(s.ranks.size for s in r.subs) if r.kind == "batch" else r.ranks.size for r in spmd.records)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--precise-max", type=int, default=256, help="largest world to time the precise pipeline at")
    args = ap.parse_args()
    program = ring(1024)
    print("| world | ops (P2P + local) | lint s | fast: expand s | fast: engine s | µs per op | precise s | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for world in args.worlds:
        gc.collect()
        t0 = time.perf_counter()
        diags = check_program(program, CheckOptions(worlds=(world,), lints=True))
        lint = time.perf_counter() - t0
        assert not diags, diags
        with np.errstate(all="raise"):
            t0 = time.perf_counter()
            spmd = Spmd(program, world, resolve_params(program, {}), ("gloo",), True)
            t1 = time.perf_counter()
            assert Machine(spmd, True).run()
            t2 = time.perf_counter()
        ops = ops_of(spmd)
        precise = speedup = "—"
        if world <= args.precise_max:
            gc.collect()
            t3 = time.perf_counter()
            found, _ = analyse_schedule(program, expand(program, world), ("gloo",), True, True)
            p = time.perf_counter() - t3
            assert not found, found
            precise, speedup = f"{p:.2f}", f"{p / lint:.0f}×"
        print(f"| {world} | {ops:,} | {lint:.2f} | {t1 - t0:.2f} | {t2 - t1:.2f} | {lint / ops * 1e6:.2f} | "
              f"{precise} | {speedup} |")
    t0 = time.perf_counter()
    count = 0
    for path in sorted(glob.glob("programs/*.comm")):
        program = load(SourceFile.read(path))
        count += len(program.world_sizes())
        assert not [d for d in check_program(program, CheckOptions(lints=True)) if d.severity == "error"]
    print(f"\nall of programs/ ({count} program × world-size expansions, lint with data): "
          f"{time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
