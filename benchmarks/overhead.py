"""Per-op overhead of `commdsl run`: `iters` all_reduces of n float32 versus a hand-written torch loop.

Both sides run N ranks on Gloo, started the same way (torch's elastic launcher, fork), and time the
same all_reduces on rank 0, from number `warmup` to the last: the median duration of one op (robust
to the scheduling hiccups of a shared machine) and the mean over the window (end of the last minus
start of the first, divided by their number). commdsl's figures come from its own `--trace` (the op
timings it records anyway); the hand-written loop is the plain

    for _ in range(iters):
        dist.all_reduce(x)

with a clock read on each side of the call.

Each repetition runs hand, commdsl, hand; commdsl's time is divided by the geometric mean of its two
neighbours (which cancels slow drifts in machine load), and hand/hand is reported as the control:
it shows how far two identical runs differ on this machine. On a shared 2-core machine that is tens
of percent, so the script also measures the cost commdsl adds to each op directly: its timed loop
(`worker.run_steps`) around no-op steps versus a bare loop.

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
    durations = [0] * (iters - warmup)
    clock = time.time_ns
    start = clock()
    for i in range(iters - warmup):
        t0 = clock()
        dist.all_reduce(x)
        durations[i] = clock() - t0
    end = clock()
    dist.barrier()
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"mean_us": (end - start) / 1e3 / (iters - warmup),
                       "median_us": statistics.median(durations) / 1e3}, f)
    dist.destroy_process_group()


def run_hand(nproc: int, n: int, iters: int, warmup: int, tmp: str) -> dict:
    out = os.path.join(tmp, "hand.json")
    subprocess.run([sys.executable, __file__, "--hand", str(nproc), str(n), str(iters), str(warmup), out],
                   check=True, capture_output=True)
    with open(out) as f:
        return json.load(f)


def run_commdsl(nproc: int, n: int, iters: int, warmup: int, tmp: str) -> dict:
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
    return {"mean_us": (window[-1]["ts"] + window[-1]["dur"] - window[0]["ts"]) / len(window),
            "median_us": statistics.median(e["dur"] for e in window)}


def interleaved_worker(n: int, block: int, blocks: int, out: str) -> None:
    """Both loops in the same processes, in alternating blocks: commdsl's steps (built by
    `ops.build_steps` from the program and run by `worker.run_steps`) and the bare torch loop.
    Differences between launches cancel; what is left is what commdsl's execution adds per op."""
    import torch
    import torch.distributed as dist

    from commdsl.expand import expand
    from commdsl.resolve import load
    from commdsl.runtime.ops import Context, allocate, build_steps
    from commdsl.runtime.progress import Slot
    from commdsl.runtime.worker import run_steps
    from commdsl.source import SourceFile

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    schedule = expand(load(SourceFile("loop.comm", PROGRAM)), world, {"n": n, "iters": block})
    specs = schedule.tensors[rank]
    ctx = Context(rank=rank, backend="gloo", device=torch.device("cpu"),
                  buffers=allocate(specs, rank, world, torch.device("cpu")),
                  dtypes={k: v.dtype for k, v in specs.items()}, groups=[None], emit=lambda kind, payload: None)
    steps, slot, x = build_steps(schedule.ops[rank], ctx), Slot(), torch.zeros(n, dtype=torch.float32)

    def commdsl_block():
        run_steps(steps, slot, [(0, 0)] * block)

    def bare_block():
        for _ in range(block):
            dist.all_reduce(x)

    clock, pairs = time.perf_counter, []
    for b in range(blocks + 2):  # ABBA order: neither loop always runs first; the first two blocks warm up
        took = {}
        for name, run in (("commdsl", commdsl_block), ("bare", bare_block))[:: 1 if b % 2 == 0 else -1]:
            dist.barrier()
            t0 = clock()
            run()
            took[name] = (clock() - t0) / block * 1e6
        if b >= 2:
            pairs.append((took["commdsl"], took["bare"]))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(pairs, f)
    dist.destroy_process_group()


def run_interleaved(nproc: int, n: int, block: int, blocks: int, tmp: str) -> list[tuple[float, float]]:
    out = os.path.join(tmp, "interleaved.json")
    subprocess.run([sys.executable, __file__, "--interleaved", str(nproc), str(n), str(block), str(blocks), out],
                   check=True, capture_output=True)
    with open(out) as f:
        return json.load(f)


def launch(nproc: int, fn, *args) -> None:
    import uuid

    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                          monitor_interval=0.05, start_method="fork")
    elastic_launch(config, fn)(*args)


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
    ap.add_argument("--repeat", type=int, default=5, help="end-to-end repetitions (0: only the in-process figures)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    iters = [int(s) for s in args.iters.split(",")]
    if len(iters) != len(sizes):
        sys.exit("--iters needs one count per size")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, it in zip(sizes, iters, strict=True) if args.repeat else ():
            warmup = max(1, it // 10)
            runs: dict[str, list[dict]] = {"hand": [], "commdsl": [], "hand again": []}
            for _ in range(args.repeat):  # hand, commdsl, hand: commdsl is compared with both neighbours
                runs["hand"].append(run_hand(args.nproc, n, it, warmup, tmp))
                runs["commdsl"].append(run_commdsl(args.nproc, n, it, warmup, tmp))
                runs["hand again"].append(run_hand(args.nproc, n, it, warmup, tmp))
            row = {"n": n, "iters": it, "runs": runs}
            print(f"n={n} float32, {it} all_reduces, {args.repeat} x (hand, commdsl, hand), world {args.nproc}:",
                  flush=True)
            for stat, label in (("median_us", "median op"), ("mean_us", "mean op (window)")):
                h1, c, h2 = ([r[stat] for r in runs[k]] for k in ("hand", "commdsl", "hand again"))
                ratio = [ci / (a * b) ** 0.5 for a, ci, b in zip(h1, c, h2, strict=True)]
                control = [b / a for a, b in zip(h1, h2, strict=True)]
                row[stat] = {"commdsl": statistics.median(c), "hand": statistics.median(h1 + h2),
                             "ratio": statistics.median(ratio), "ratio_range": [min(ratio), max(ratio)],
                             "control": statistics.median(control), "control_range": [min(control), max(control)]}
                r = row[stat]
                lo, hi = r["ratio_range"]
                clo, chi = r["control_range"]
                print(f"  {label:<17} commdsl {r['commdsl']:9.1f} us  hand-written {r['hand']:9.1f} us  "
                      f"ratio {r['ratio']:.3f} ({lo:.2f}..{hi:.2f})  hand/hand control {r['control']:.3f} "
                      f"({clo:.2f}..{chi:.2f})", flush=True)
            results.append(row)
        for n, it in zip(sizes, iters, strict=True):
            block = max(1, it // 4)
            pairs = run_interleaved(args.nproc, n, block, 12, tmp)
            c, h = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
            ratios = [p[0] / p[1] for p in pairs]
            results.append({"n": n, "interleaved_block": block, "interleaved_pairs_us": pairs,
                            "interleaved_ratio": c / h})
            print(f"n={n}: same processes, 12 blocks of {block} each, ABBA order: commdsl steps {c:.1f} us/op, "
                  f"bare loop {h:.1f} us/op, ratio {c / h:.3f} (block pairs {min(ratios):.2f}..{max(ratios):.2f})",
                  flush=True)
    cost = loop_cost()
    print(f"commdsl's timed loop adds {cost:.2f} us per op (no-op steps, best of 5)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": args.nproc, "results": results, "loop_cost_us": cost}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--hand":
        launch(int(sys.argv[2]), hand_worker, *map(int, sys.argv[3:6]), sys.argv[6])
    elif len(sys.argv) == 7 and sys.argv[1] == "--interleaved":
        launch(int(sys.argv[2]), interleaved_worker, *map(int, sys.argv[3:6]), sys.argv[6])
    else:
        main()
