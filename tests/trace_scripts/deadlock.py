"""Two ranks that both send first: a deadlock (each blocking send waits for a receive never posted)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
peer = 1 - rank
x = torch.ones(8)
y = torch.zeros(8)
dist.send(x, peer)
dist.recv(y, peer)
dist.destroy_process_group()
