"""Where the DSL ring's time goes: commdsl's ring against hand-written torch rings and the built-in all_reduce.

`commdsl bench programs/ring_allreduce.comm --compare builtin` times the DSL ring and Gloo's own
all_reduce and, per source line, what the slowest rank spent in each op (`lines` in its JSON). This
script adds the hand-written rings that separate commdsl's costs from Gloo's: the same schedule
(N-1 reduce-scatter steps, N-1 all-gather steps, each one `batch_isend_irecv` of a chunk to the
right and from the left) written directly in torch,

* `ring_add_`: the reduction as `chunk.add_(tmp)`, one pass over the chunk, no allocation — what
  commdsl's runtime does for `x.chunk(k, world) += tmp[…]` since commit e5eca37;
* `ring_copy_add_copy`: the reduction as the runtime did it before (copy the right-hand view,
  `torch.add` into a new tensor, `copy_` back);

and the built-in `all_reduce`, all in the same processes, interleaved round by round so that all
see the same machine load. Each figure is the mean per all-reduce of the slowest rank; the phases are
that rank's time inside the reduce-scatter exchanges, the reductions and the all-gather exchanges.

    python benchmarks/ring_profile.py --nproc 4 --size 16M --iters 10 --rounds 3 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from commdsl.bench.sizes import parse_size  # noqa: E402

VARIANTS = ("builtin", "ring_add_", "ring_copy_add_copy")


def worker(count: int, iters: int, rounds: int, out: str) -> None:
    """One rank: every variant `iters` times per round, `rounds` rounds, phases timed with perf_counter."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((count,), float(rank + 1))
    part = count // world
    tmp = torch.zeros(part)
    right, left = (rank + 1) % world, (rank - 1) % world

    def chunk(k):
        return x[k * part : (k + 1) * part]

    def add_(dst, src):
        dst.add_(src)

    def copy_add_copy(dst, src):
        dst.copy_(torch.add(dst, src.clone()))

    def ring(reduce, phases):
        for s in range(world - 1):
            t0 = time.perf_counter()
            ops = [dist.P2POp(dist.isend, chunk((rank - s) % world), right), dist.P2POp(dist.irecv, tmp, left)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            t1 = time.perf_counter()
            reduce(chunk((rank - s - 1) % world), tmp)
            t2 = time.perf_counter()
            phases["reduce-scatter exchanges"] += t1 - t0
            phases["reductions"] += t2 - t1
        for s in range(world - 1):
            t0 = time.perf_counter()
            ops = [dist.P2POp(dist.isend, chunk((rank - s + 1) % world), right),
                   dist.P2POp(dist.irecv, chunk((rank - s) % world), left)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            phases["all-gather exchanges"] += time.perf_counter() - t0

    def run(name, phases):
        if name == "builtin":
            dist.all_reduce(x)
        else:
            ring(add_ if name == "ring_add_" else copy_add_copy, phases)

    results = {name: {"seconds": 0.0, "phases": dict.fromkeys(("reduce-scatter exchanges", "reductions",
                                                                "all-gather exchanges"), 0.0)}
               for name in VARIANTS}
    for name in VARIANTS:  # warm-up
        run(name, dict(results[name]["phases"]))
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for name in order:
            x.fill_(rank + 1)  # the ring grows x by a factor world per all-reduce: keep values finite
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                run(name, results[name]["phases"])
            results[name]["seconds"] += time.perf_counter() - t0
    with open(f"{out}.{rank}", "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--size", default="16M", help="bytes of the float32 buffer (default 16M)")
    ap.add_argument("--iters", type=int, default=10, help="all-reduces per variant per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    size = parse_size(args.size)
    count = size // 4 // args.nproc * args.nproc

    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ring")
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=args.nproc, run_id=uuid.uuid4().hex,
                              rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                              monitor_interval=0.05, start_method="fork")
        elastic_launch(config, worker)(count, args.iters, args.rounds, out)
        ranks = []
        for r in range(args.nproc):
            with open(f"{out}.{r}") as f:
                ranks.append(json.load(f))
    n = args.iters * args.rounds
    factor = 2 * (args.nproc - 1) / args.nproc
    report = {"nproc": args.nproc, "size_bytes": count * 4, "iters": n, "variants": {}}
    print(f"all-reduce of {count * 4} B float32 on {args.nproc} ranks (gloo), {n} per variant, "
          f"{args.rounds} interleaved rounds; the slowest rank's mean per all-reduce")
    base = None
    for name in VARIANTS:
        slowest = max(ranks, key=lambda res: res[name]["seconds"])[name]
        ms = slowest["seconds"] / n * 1e3
        busbw = count * 4 / (ms / 1e3) / 1e9 * factor
        base = base or busbw
        phases = {k: v / n * 1e3 for k, v in slowest["phases"].items()}
        report["variants"][name] = {"ms": ms, "busbw_gbps": busbw, "phases_ms": phases if name != "builtin" else {}}
        detail = "" if name == "builtin" else "   (" + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()) + " ms)"
        print(f"  {name:<18} {ms:8.1f} ms  busbw {busbw:6.3f} GB/s  {busbw / base:5.2f}x built-in{detail}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
