"""`all_reduce x op REDOP`: every member ends with the reduction of every member's `x`."""

from __future__ import annotations

import math

import numpy as np

from commdsl.collectives import DATA, Instance, Kind, Outputs, reduce_arrays


class AllReduce(Kind):
    name = "all_reduce"
    form = "all_reduce {ins}{redop}"
    bench = ("tensor x: {t}[n] = " + DATA, "all_reduce x op {op}", "x")
    reducing = True
    coalescable = True

    def statement(self, buf, redop, group):
        return {"inputs": (buf,), "outputs": (buf,), "redop": redop, "group": group}

    def apply(self, inst: Instance) -> Outputs:
        total = reduce_arrays([x[0] for x in inst.inputs], inst.redop, inst.scale)
        return [[total.copy()] for _ in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        return lambda a: dist.all_reduce(ins[0], red, group=group, async_op=a)

    def script_call(self, node, ins, outs, red, root, size, splits):
        return "dist.all_reduce", [ins[0], red]

    def busbw_factor(self, world: int) -> float:
        return 2 * (world - 1) / world  # a ring moves 2(n-1)/n of the buffer over each link

    def latency_steps(self, world: int) -> int:
        return 2 * (world - 1)  # reduce-scatter then all-gather around the ring

    def gloo_reduce_bytes(self, world: int, size):
        """Gloo's ring (gloo/allreduce.cc, torch's default for CPU tensors) sums, in each of its p - 1
        reduce-scatter steps, the block it received into its own: (p - 1)/p of the buffer reduced a member.
        Left out until 2026-11-29: the built-in all_reduce at 32 and 64 MiB was predicted 9.2 % fast on average
        over five campaigns of the 2-core machine, +0.4 % with it (docs/predict-accuracy.md, "Gloo's reductions")."""
        return 2.0 * (world - 1) / world * np.asarray(size, dtype=np.float64)

    def cost(self, world: int, size, alpha: float, beta: float, tree: bool = False, backend: str = "nccl"):
        """The ring, or with `tree` (NCCL) the faster of it and a pipelined tree: up the tree and down
        again in 2⌈log2 p⌉ hops, the whole buffer over each link both ways (NCCL's double binary tree)."""
        ring = super().cost(world, size, alpha, beta)
        if not tree or world < 2:
            return ring
        return np.minimum(ring, 2 * math.ceil(math.log2(world)) * alpha + 2 * np.asarray(size) / beta)


KIND = AllReduce()
