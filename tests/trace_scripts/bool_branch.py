"""A branch on a received tensor (`if t[0] > 0`, a bool() read) decides who calls the barrier: the
fake backend's data sends every rank the same way, and the finding says it may depend on data."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.zeros(1)
if dist.get_rank() == 0:
    dist.send(torch.ones(1), dst=1)
else:
    dist.recv(t, src=0)
if t[0] > 0:
    dist.barrier()
dist.all_reduce(torch.ones(2))
