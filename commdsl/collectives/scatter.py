"""`scatter x into y from ROOT`: member j's `y` gets block j of the root's `x` (or its j-th listed buffer)."""

from __future__ import annotations

import numpy as np

from commdsl.collectives import (
    DATA,
    Call,
    Instance,
    Kind,
    Outputs,
    Problem,
    chunks,
    even_parts,
    from_root,
    parts_problem,
)


class Scatter(Kind):
    name = "scatter"
    form = "scatter {ins} into {outs} from {root}"
    in_place = "output-block"
    bench = (
        "tensor x: {t}[n // world * world] = " + DATA + "\ntensor y: {t}[n // world]",
        "scatter x into y from {root}",
        "x",
    )
    bench_in_place = (
        "tensor x: {t}[n // world * world] = " + DATA,
        "scatter x into x.chunk(rank, world) from {root}",
        "x",
    )
    rooted = True
    listed_shapes = ("gloo", "nccl")  # Gloo measured (`invalid tensor size`); PGNCCL: `assertTypeAndSizesMatch`
    root_sends = True

    def statement(self, src, dst, root, group):
        ins, listed = src
        return {"inputs": ins, "inputs_listed": listed, "outputs": (dst,), "root": root, "group": group}

    def fit(self, call: Call) -> Problem | None:
        return parts_problem(
            call,
            call.numel(call.rec.outputs),
            call.rec.inputs,
            call.rec.inputs_listed,
            "input",
            "output",
            where=call.is_root,
        )

    def contribution(self, call: Call):
        return call.numel(call.rec.outputs)

    def listed(self, rec):
        return (rec.outputs[0], rec.inputs, False) if rec.inputs_listed else None

    def roles(self, is_root):
        return (True, True, False) if is_root else (False, True, False)

    def released(self, arrived, root):
        return from_root(arrived, root)  # Gloo: the root sends to each member, which waits for its own part

    def needs(self, arrived, root, me):
        return np.flatnonzero(~arrived) if me == root else np.array([root])[~arrived[[root]]]

    def apply(self, inst: Instance) -> Outputs:
        src = inst.inputs[inst.root]
        parts = [p.copy() for p in src] if inst.inputs_listed[inst.root] else even_parts(src[0], inst.size)
        return [[parts[j]] for j in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        parts = (ins if op.inputs_listed else chunks(ins[0], size, outs[0].shape)) if is_root else None
        return lambda a: dist.scatter(outs[0], parts, op.root, group=group, async_op=a)

    def script_call(self, node, ins, outs, red, root, size, splits):
        parts = f"[{', '.join(ins)}]" if node.inputs_listed else f"list({ins[0]}.view({size}, *{outs[0]}.shape))"
        return "dist.scatter", [outs[0], f"{parts} if rank == {root} else None", root]  # only the root sends

    gloo_direct = True  # Gloo: the root sends every other member's part at once (gloo/scatter.cc)

    def busbw_factor(self, world: int) -> float:
        return (world - 1) / world


KIND = Scatter()
