"""A ring step posted with batch_isend_irecv, overlapped with other work before its works are waited. With
--forget, rank 0 never waits them."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.full((4,), float(rank))
y = torch.zeros(4)
other = torch.ones(4)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % world),
                               dist.P2POp(dist.irecv, y, (rank - 1) % world)])
other.mul_(2)
dist.all_reduce(other)
if not ("--forget" in sys.argv and rank == 0):
    for r in reqs:
        r.wait()
x.add_(y)
dist.destroy_process_group()
