"""DTensor and functional collectives, whose calls never pass through torch.distributed's API: a
sharded tensor made whole (all_gather) and a functional all_reduce. Clean."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
big = distribute_tensor(torch.arange(16.0), mesh, [Shard(0)])
whole = big.redistribute(mesh, [Replicate()]).to_local()
total = funcol.all_reduce(torch.ones(4), "sum", mesh)
print(whole.sum() + total.sum())
