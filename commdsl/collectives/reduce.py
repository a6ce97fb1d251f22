"""`reduce x to ROOT op REDOP`: the root ends with the reduction; the others' `x` is left undefined.

Gloo writes partial sums into the non-root buffers (measured: backend-facts.md), so nothing may be
read there afterwards (R504).
"""

from __future__ import annotations

from commdsl.collectives import DATA, Instance, Kind, Outputs, reduce_arrays


class Reduce(Kind):
    name = "reduce"
    form = "reduce {ins} to {root}{redop}"
    bench = ("tensor x: {t}[n] = " + DATA, "reduce x to {root} op {op}", "x")
    rooted = True
    reducing = True

    def statement(self, buf, root, redop, group):
        return {"inputs": (buf,), "outputs": (buf,), "root": root, "redop": redop, "group": group}

    def roles(self, is_root):
        return (True, True, False) if is_root else (True, False, True)

    def apply(self, inst: Instance) -> Outputs:
        total = reduce_arrays([x[0] for x in inst.inputs], inst.redop, inst.scale)
        return [[total] if j == inst.root else [None] for j in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        return lambda a: dist.reduce(ins[0], op.root, red, group=group, async_op=a)

    def script_call(self, node, ins, outs, red, root, size, splits):
        return "dist.reduce", [ins[0], root, red]


KIND = Reduce()
