"""`broadcast x from ROOT`: every member ends with the root's `x`."""

from __future__ import annotations


from commdsl.collectives import DATA, Instance, Kind, Outputs


class Broadcast(Kind):
    name = "broadcast"
    form = "broadcast {ins} from {root}"
    bench = ("tensor x: {t}[n] = " + DATA, "broadcast x from {root}", "x")
    rooted = True
    root_sends = True

    def roles(self, is_root):
        return (True, False, False) if is_root else (False, True, False)

    def apply(self, inst: Instance) -> Outputs:
        return [[inst.inputs[inst.root][0].copy()] for _ in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        return lambda a: dist.broadcast(ins[0], op.root, group=group, async_op=a)

    def python_call(self, op, ins, outs, red, is_root, size):
        return "dist.broadcast", [ins[0], str(op.root)]


KIND = Broadcast()
