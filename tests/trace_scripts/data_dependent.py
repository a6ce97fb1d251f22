"""A loop whose length comes from received data, then a collective only rank 0 makes: the mismatch
is reported with a note that the verdict may depend on data (the read at line 12)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
flag = torch.tensor([1.0 if rank == 0 else 0.0])
dist.all_reduce(flag)
steps = 2
if flag.item() > 5:
    steps = 3
for _ in range(steps):
    dist.all_reduce(torch.ones(4))
if rank == 0:
    dist.all_reduce(torch.ones(4))
dist.barrier()
