"""Collectives called through names the script gave them: a local alias, an import `as`, an object's
attribute, and a function's result. Each call's buffers are still the script's own tensors, named as the
script passed them."""

import torch
import torch.distributed as dist
from torch.distributed import all_reduce as total


class Comm:
    def __init__(self):
        self.gather = dist.all_gather_into_tensor


def backend():
    return dist


dist.init_process_group("gloo")
world = dist.get_world_size()
grads = torch.ones(4 * world)
total(grads)
broadcast = dist.broadcast
broadcast(grads, 0)
shard = grads[0:4].clone()
params = torch.empty(4 * world)
comm = Comm()
comm.gather(params, shard)
backend().all_reduce(shard)
dist.destroy_process_group()
