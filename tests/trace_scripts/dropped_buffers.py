"""Receives posted into buffers the script keeps only through their requests, then waited: clean
(each buffer in flight keeps its own name until its wait)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
reqs = []
for peer in range(world):
    if peer != rank:
        reqs.append(dist.irecv(torch.empty(4), src=peer))
        reqs.append(dist.isend(torch.full((4,), float(rank)), dst=peer))
for r in reqs:
    r.wait()
