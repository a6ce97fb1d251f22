"""Object collectives, and a receive from any source that the two workers' sends race for (P211)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
config = [{"lr": 0.1}] if rank == 0 else [None]
dist.broadcast_object_list(config, src=0)
names = [None] * world
dist.all_gather_object(names, f"worker{rank}")
t = torch.zeros(2)
if rank == 0:
    for _ in range(world - 1):
        dist.recv(t)
else:
    dist.send(torch.ones(2), dst=0)
dist.barrier()
