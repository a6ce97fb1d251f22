"""`barrier`: no member leaves before every member has arrived."""

from __future__ import annotations

from commdsl.collectives import Instance, Kind, Outputs


class Barrier(Kind):
    name = "barrier"
    form = "barrier"

    def statement(self, group):
        return {"group": group}

    def roles(self, is_root):
        return False, False, False

    def apply(self, inst: Instance) -> Outputs:
        return [[] for _ in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        kwargs = {"device_ids": device_ids} if device_ids else {}  # NCCL: the device this rank uses
        return lambda a: dist.barrier(group=group, async_op=a, **kwargs)

    def script_call(self, node, ins, outs, red, root, size, splits):
        return "dist.barrier", []


KIND = Barrier()
