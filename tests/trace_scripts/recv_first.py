"""Both ranks receive first (in different branches): a deadlock whose two parties are two lines."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x, y = torch.ones(4), torch.zeros(4)
if dist.get_rank() == 0:
    dist.recv(y, src=1)
    dist.send(x, dst=1)
else:
    dist.recv(y, src=0)
    dist.send(x, dst=0)
