"""DDP with the stock all-reduce comm hook, which returns `dist.all_reduce(..., async_op=True).get_future()` for
DDP's reducer to wait on in C++: clean."""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(8, 4))
model.register_comm_hook(state=None, hook=default_hooks.allreduce_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(16, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
