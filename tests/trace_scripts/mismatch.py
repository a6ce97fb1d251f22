"""Rank 0 reduces a buffer of 4 elements, the others one of 8: a size mismatch in all_reduce."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
n = 4 if rank == 0 else 8
grad = torch.ones(n)
dist.all_reduce(grad)
if rank == 0:
    dist.broadcast(grad, src=0)
else:
    dist.barrier()
