"""Fresh pages (docs/predict.md, "Fresh pages, measured"): what a torch CPU temporary costs when malloc maps
it anew, against the same work into a kept tensor, per size, with glibc's default malloc and with malloc told
to keep its memory in the heap.

    python benchmarks/fresh_pages.py [--sizes 8,16,24,32,64,128] [--repeats 15]

Each setting runs in its own process (glibc reads MALLOC_* when the process starts), one intra-op thread as
the bench's ranks run. Times are medians in ms; `ratio` is fresh / kept.
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,16,24,32,64,128", help="MiB, comma-separated")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
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
            rate = f"{(mib << 20) / extra_ms / 1e6:.2f}" if extra_ms > 0.1 * r["fill"][1] else "—"
            print(f"| {name} | {mib} | " + " | ".join(cells) + f" | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
