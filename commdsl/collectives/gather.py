"""`gather x into y to ROOT`: the root's `y` holds every member's `x` (member j's at block j)."""

from __future__ import annotations

import numpy as np

from commdsl.collectives import DATA, Call, Instance, Kind, Outputs, Problem, chunks, from_root, parts_problem


class Gather(Kind):
    name = "gather"
    form = "gather {ins} into {outs} to {root}"
    in_place = "input-block"
    gloo_copies = True  # measured: an input on another block of the root's output came out right
    bench = (
        "tensor x: {t}[n // world] = " + DATA + "\ntensor y: {t}[n // world * world]",
        "gather x into y to {root}",
        "y",
    )
    bench_in_place = (
        "tensor y: {t}[n // world * world] = " + DATA,
        "gather y.chunk(rank, world) into y to {root}",
        "y",
    )
    rooted = True
    listed_shapes = ("gloo", "nccl")  # Gloo measured (`invalid tensor size`); PGNCCL: `assertTypeAndSizesMatch`

    def statement(self, src, dst, root, group):
        outs, listed = dst
        return {"inputs": (src,), "outputs": outs, "outputs_listed": listed, "root": root, "group": group}

    def fit(self, call: Call) -> Problem | None:
        return parts_problem(
            call,
            call.numel(call.rec.inputs),
            call.rec.outputs,
            call.rec.outputs_listed,
            "output",
            "input",
            where=call.is_root,
        )

    def listed(self, rec):
        return (rec.inputs[0], rec.outputs, True) if rec.outputs_listed else None

    def roles(self, is_root):
        return (True, True, False) if is_root else (True, False, False)

    def released(self, arrived, root):
        return from_root(arrived, root)  # Gloo: each member sends to the root and waits for that send alone

    def needs(self, arrived, root, me):
        return np.flatnonzero(~arrived) if me == root else np.array([root])[~arrived[[root]]]

    def apply(self, inst: Instance) -> Outputs:
        parts = [x[0] for x in inst.inputs]
        out: Outputs = []
        for j, listed in enumerate(inst.outputs_listed):
            if j != inst.root:
                out.append([])
            else:
                out.append([p.copy() for p in parts] if listed else [np.concatenate(parts)])
        return out

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        parts = (outs if op.outputs_listed else chunks(outs[0], size, ins[0].shape)) if is_root else None
        return lambda a: dist.gather(ins[0], parts, op.root, group=group, async_op=a)

    def script_call(self, node, ins, outs, red, root, size, splits):
        parts = f"[{', '.join(outs)}]" if node.outputs_listed else f"list({outs[0]}.view({size}, *{ins[0]}.shape))"
        return "dist.gather", [ins[0], f"{parts} if rank == {root} else None", root]  # only the root receives

    gloo_direct = True  # Gloo: the root receives every other member's part at once (gloo/gather.cc)

    def busbw_factor(self, world: int) -> float:
        return (world - 1) / world

    gloo_root_copies = True

    def gloo_copy_bytes(self, world: int, size):
        """torch's Gloo gather (`AsyncGatherWork`, torch/csrc/distributed/c10d/ProcessGroupGloo.cpp) gathers
        into a flat temporary on the root (`newLikeFlat` of the outputs) and copies each part out of it: the
        whole output, `size` bytes, written and read (2 × size), on the root's critical path."""
        return 2.0 * size

    def gloo_temporaries(self, world: int, size) -> tuple:
        """The root's flat temporary: the whole output."""
        return (size,)


KIND = Gather()
