"""A 2-D device mesh (dp x tp) at world 4: an all-reduce over each tp group, then over each dp group.
With --swap, ranks 0 and 3 (one diagonal) issue them in the other order: 0 waits in dp for 2, 2 in tp
for 3, 3 in dp for 1, 1 in tp for 0, a four-rank cycle over two groups' calls."""

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, dist.get_world_size() // 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
x = torch.ones(8)
if "--swap" in sys.argv and dist.get_rank() in (0, 3):
    dist.all_reduce(x, group=dp)
    dist.all_reduce(x, group=tp)
else:
    dist.all_reduce(x, group=tp)
    dist.all_reduce(x, group=dp)
