"""`all_gather x into y` (y holds size × x, member j's x at block j) or `all_gather x into [a, b, ...]`.

In the list form, entry j receives member j's `x`; the entries may differ in size (an all-gather-v), each
the size of its member's `x`: torch's NCCL then runs one broadcast per member (`ProcessGroupNCCL::allgather`
falls back to `_broadcast_oop` in a coalesced group). Gloo requires every entry to have `x`'s shape (C320).
"""

from __future__ import annotations

import numpy as np

from commdsl.collectives import DATA, Instance, Outputs, UnevenList


class AllGather(UnevenList):
    name = "all_gather"
    form = "all_gather {ins} into {outs}"
    in_place = "input-block"
    gloo_copies = True  # gathers into a flat temporary (`newLikeFlat`), then copies it out
    listed_copies = True
    listed_shapes = ("gloo",)  # measured: `invalid tensor size at index j`; PGNCCL compares element counts
    flat_shapes = ("gloo",)  # measured: Gloo chunks the output along dim 0 and compares each chunk with x
    bench = ("tensor x: {t}[n // world] = " + DATA + "\ntensor y: {t}[n // world * world]", "all_gather x into y", "y")
    # as nccl-tests' in-place: this rank's input is its own block of the output
    bench_in_place = ("tensor y: {t}[n // world * world] = " + DATA, "all_gather y.chunk(rank, world) into y", "y")
    coalescable = True  # all_gather_into_tensor
    list_is_output = True
    verb = "gathers into"

    def statement(self, src, dst, group):
        outs, listed = dst
        return {"inputs": (src,), "outputs": outs, "outputs_listed": listed, "group": group}

    def apply(self, inst: Instance) -> Outputs:
        parts = [x[0] for x in inst.inputs]
        return [[p.copy() for p in parts] if listed else [np.concatenate(parts)] for listed in inst.outputs_listed]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        if op.outputs_listed:
            return lambda a: dist.all_gather(outs, ins[0], group=group, async_op=a)
        # torch 2.13 renamed all_gather_into_tensor (now deprecated) to all_gather_single
        single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        out, inp = outs[0], ins[0]  # as declared: Gloo refuses shapes NCCL takes (C321), as torch by hand
        return lambda a: single(out, inp, group=group, async_op=a)

    python_prelude = (  # one line: torch 2.13 renamed all_gather_into_tensor (now deprecated) to all_gather_single
        "all_gather_single = getattr(dist, 'all_gather_single', None) or dist.all_gather_into_tensor"
    )

    def script_call(self, node, ins, outs, red, root, size, splits):
        if node.outputs_listed:
            return "dist.all_gather", [f"[{', '.join(outs)}]", ins[0]]
        return "all_gather_single", [outs[0], ins[0]]

    def busbw_factor(self, world: int) -> float:
        return (world - 1) / world

    def gloo_copy_bytes(self, world: int, size):
        """torch's Gloo all-gather (`ProcessGroupGloo::_allgather_base` → `allgather` → `AsyncAllgatherWork`,
        torch/csrc/distributed/c10d/ProcessGroupGloo.cpp) gathers into a flat temporary (`newLikeFlat` of the
        outputs), which Gloo first primes with this member's input (gloo/allgather.cc: its block, size /
        world bytes, memcpy'd in), and then copies each member's block into the output: the whole output,
        `size` bytes (each copy written and read: 2 × its bytes). The list form runs the same work. A group
        of one copies its input twice (plain torch, 16 MiB: 6.9 ms a call where one copy took 2.9)."""
        return 2.0 * size + 2.0 * size / world

    def gloo_temporaries(self, world: int, size) -> tuple:
        """The flat temporary of `newLikeFlat`: the whole output."""
        return (size,)


KIND = AllGather()
