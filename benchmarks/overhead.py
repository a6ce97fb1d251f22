"""Per-op overhead of `commdsl run`: `iters` all_reduces of n float32 versus a hand-written torch loop.

Both sides run N ranks on Gloo, started the same way (torch's elastic launcher, fork), and time the
same window: from the start of all_reduce number `warmup` to the end of the last one, on rank 0,
divided by the number of all_reduces in it. commdsl's figure comes from its own `--trace` (the op
timings it records anyway); the hand-written loop is the plain

    for _ in range(iters):
        dist.all_reduce(x)

Runs alternate (commdsl, hand, commdsl, …) so both see the same machine load; the reported ratio
is the median of the ratios of adjacent pairs, which cancels slow drifts in load. On a shared
2-core machine a single pair varies by ±20 %, so the script also measures the cost commdsl adds to
each op directly: its timed loop (`worker.run_steps`) around no-op steps versus a bare loop.

    python benchmarks/overhead.py --nproc 4 --sizes 1,4194304 --iters 2000,60 --repeat 5 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = """\
program allreduce_loop
world 1..
param n = 1
param iters = 100
tensor x: float32[n] = 0
for k in 0 .. iters - 1:
    all_reduce x
"""


def hand_worker(n: int, iters: int, warmup: int, out: str) -> None:
    """One rank of the hand-written loop (run by torch's elastic agent)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    x = torch.zeros(n, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(x)
    start = time.time_ns()
    for _ in range(iters - warmup):
        dist.all_reduce(x)
    end = time.time_ns()
    dist.barrier()
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"per_op_us": (end - start) / 1e3 / (iters - warmup)}, f)
    dist.destroy_process_group()


def run_hand(nproc: int, n: int, iters: int, warmup: int, tmp: str) -> float:
    out = os.path.join(tmp, "hand.json")
    subprocess.run([sys.executable, __file__, "--hand", str(nproc), str(n), str(iters), str(warmup), out],
                   check=True, capture_output=True)
    with open(out) as f:
        return json.load(f)["per_op_us"]


def hand_main(nproc: int, n: int, iters: int, warmup: int, out: str) -> None:
    import uuid

    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                          monitor_interval=0.05, start_method="fork")
    elastic_launch(config, hand_worker)(n, iters, warmup, out)


def run_commdsl(nproc: int, n: int, iters: int, warmup: int, tmp: str) -> float:
    prog, trace = os.path.join(tmp, "loop.comm"), os.path.join(tmp, "trace.json")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    subprocess.run([sys.executable, "-m", "commdsl", "run", prog, "--nproc", str(nproc), "--backend", "gloo",
                    "--set", f"n={n}", "--set", f"iters={iters}", "--trace", trace], check=True, capture_output=True)
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    ops = sorted((e for e in events if e["ph"] == "X" and e["pid"] == 0 and e["cat"] == "collective"),
                 key=lambda e: e["ts"])
    window = ops[warmup:]
    return (window[-1]["ts"] + window[-1]["dur"] - window[0]["ts"]) / len(window)


def loop_cost(count: int = 200_000) -> float:
    """Microseconds commdsl's timed loop adds per op (progress slot + two clock reads + timing record)."""
    from commdsl.runtime.progress import Slot
    from commdsl.runtime.worker import run_steps

    def noop():
        return None

    steps, best = [noop] * count, float("inf")
    for _ in range(5):
        times = [(0, 0)] * count
        t0 = time.perf_counter()
        run_steps(steps, Slot(), times)
        t1 = time.perf_counter()
        for step in steps:
            step()
        t2 = time.perf_counter()
        best = min(best, ((t1 - t0) - (t2 - t1)) / count * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--sizes", default="1,4194304", help="element counts, comma-separated")
    ap.add_argument("--iters", default="2000,60", help="all_reduces per run, one per size")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    iters = [int(s) for s in args.iters.split(",")]
    if len(iters) != len(sizes):
        sys.exit("--iters needs one count per size")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, it in zip(sizes, iters, strict=True):
            warmup = max(1, it // 10)
            commdsl, hand = [], []
            for _ in range(args.repeat):
                commdsl.append(run_commdsl(args.nproc, n, it, warmup, tmp))
                hand.append(run_hand(args.nproc, n, it, warmup, tmp))
            c, h = statistics.median(commdsl), statistics.median(hand)
            pairs = [a / b for a, b in zip(commdsl, hand, strict=True)]
            ratio = statistics.median(pairs)
            results.append({"n": n, "iters": it, "commdsl_us": commdsl, "hand_us": hand, "ratio": ratio})
            print(f"n={n:>8} float32, {it} all_reduces x {args.repeat} pairs, world {args.nproc}: "
                  f"commdsl {c:10.1f} us/op   hand-written {h:10.1f} us/op   ratio {ratio:.3f} "
                  f"(pairs {min(pairs):.2f}..{max(pairs):.2f})", flush=True)
    cost = loop_cost()
    print(f"commdsl's timed loop adds {cost:.2f} us per op (no-op steps, best of 5)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": args.nproc, "results": results, "loop_cost_us": cost}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--hand":
        hand_main(*map(int, sys.argv[2:6]), sys.argv[6])
    else:
        main()
