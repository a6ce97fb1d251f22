"""A ring step with isend/irecv in flight while the rank computes. `--write-send` scales the buffer being sent
before its wait, `--read-recv` sums the buffer being received into: each a race with the transport (R503).
`--read-send` reads the buffer being sent, which is safe."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.full((8,), float(rank))
y = torch.zeros(8)
other = torch.ones(8)
s = dist.isend(x, (rank + 1) % world)
r = dist.irecv(y, (rank - 1) % world)
other.mul_(3)
if "--write-send" in sys.argv:
    x.mul_(2)
if "--read-recv" in sys.argv:
    total = y.sum()
if "--read-send" in sys.argv:
    copy = x * 2
s.wait()
r.wait()
x.add_(y)
dist.destroy_process_group()
