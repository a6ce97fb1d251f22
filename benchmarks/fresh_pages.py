"""Fresh pages (docs/predict-accuracy.md, "Fresh pages, measured"): what a torch CPU temporary costs when malloc maps
it anew, against the same work into a kept tensor, per size, with glibc's default malloc and with malloc told
to keep its memory in the heap.

    python benchmarks/fresh_pages.py [--sizes 8,16,24,32,64,128] [--repeats 15]
    python benchmarks/fresh_pages.py --faults 32

Each setting runs in its own process (glibc reads MALLOC_* when the process starts), one intra-op thread as
the bench's ranks run. Times are medians in ms; `ratio` is fresh / kept. `--faults MIB` counts instead the
minor page faults (getrusage: every thread of the process) per call of torch's Gloo collectives at 2 ranks
on MIB-sized buffers: the pages of the temporaries torch writes, which the cost model charges
(`Kind.gloo_temporaries`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

KEEP = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296", "MALLOC_TOP_PAD_": "268435456"}
"""The environment that keeps every block in the heap: no block mapped, the heap never given back."""


def measure(sizes: list[int], repeats: int) -> dict:
    """{MiB: {case: (fresh ms, kept ms)}} in this process's malloc setting."""
    import torch

    torch.set_num_threads(1)

    def median(fn) -> float:
        fn()
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[repeats // 2] * 1e3

    def cases(n: int) -> dict:
        a, b, kept = torch.ones(n), torch.ones(n), torch.zeros(n)
        return {
            "fill": (median(lambda: torch.empty(n).fill_(1)), median(lambda: kept.fill_(1))),
            "add": (median(lambda: torch.add(a, b)), median(lambda: torch.add(a, b, out=kept))),
            "clone": (median(lambda: a.clone()), median(lambda: kept.copy_(a))),
        }

    return {mib: cases((mib << 20) // 4) for mib in sizes}


def faults(rank: int, world: int, mib: int, port: int) -> None:
    """One rank of `--faults`: rank 0 prints each collective's minor page faults per call (10 calls after 3)."""
    import resource

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    n = (mib << 20) // 4
    part, whole, out, whole2 = torch.ones(n // world), torch.zeros(n), torch.zeros(n // world), torch.zeros(n)
    cases = {
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(whole, part),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(out, whole),
        "all_reduce": lambda: dist.all_reduce(whole),
        "all_to_all_single": lambda: dist.all_to_all_single(whole2, whole),
        "whole * 2 (a local op)": lambda: whole * 2,
    }
    for name, fn in cases.items():
        for _ in range(3):
            fn()
        dist.barrier()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(10):
            fn()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if rank == 0:
            print(f"| {name} | {mib} | {(after - before) / 10:.0f} | {(mib << 20) // os.sysconf('SC_PAGE_SIZE')} |")
        dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,16,24,32,64,128", help="MiB, comma-separated")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--faults", type=int, metavar="MIB", help="count page faults of Gloo collectives instead")
    ap.add_argument("--port", type=int, default=29533, help="--faults: the rendezvous port on 127.0.0.1")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.faults:
        import torch.multiprocessing as mp

        print("| call | MiB | minor page faults per call | pages in the buffer |")
        print("|---|---:|---:|---:|")
        mp.spawn(faults, args=(2, a.faults, a.port), nprocs=2)
        return 0
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.child:
        print(json.dumps(measure(sizes, a.repeats)))
        return 0
    runs = {}
    for name, extra in (("default malloc", {}), ("malloc keeps its memory", KEEP)):
        cmd = [sys.executable, __file__, "--child", "--sizes", a.sizes, "--repeats", str(a.repeats)]
        got = subprocess.run(cmd, env=dict(os.environ, **extra), check=True, capture_output=True, text=True)
        runs[name] = json.loads(got.stdout)
    print("| malloc | MiB | fill: fresh / kept (ms) | add: new / out= | clone / copy_ | fresh pages (GB/s, fill) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, got in runs.items():
        for mib in sizes:
            r = got[str(mib)]
            cells = [f"{f:.2f} / {k:.2f} ({f / k:.1f}×)" for f, k in (r["fill"], r["add"], r["clone"])]
            extra_ms = r["fill"][0] - r["fill"][1]
            rate = f"{(mib << 20) / extra_ms / 1e6:.2f}" if r["fill"][0] >= 2 * r["fill"][1] else "—"  # not noise
            print(f"| {name} | {mib} | " + " | ".join(cells) + f" | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
