"""Buffers with the elements torch needs but shapes Gloo refuses (NCCL runs each): the stacked output that
torch's documentation offers for all_gather_into_tensor (pytorch#178798), a reduce_scatter_tensor input of
another shape than the outputs side by side, and list entries shaped [2, 2] for a [4] input. Run on CPU,
each raises; the emitted program's flat views alone would hide it."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
shard = torch.full((4,), float(rank))
stacked = torch.empty(world, 4)
dist.all_gather_into_tensor(stacked, shard)
grads = torch.ones(world * 2, 2)
mine = torch.empty(4)
dist.reduce_scatter_tensor(mine, grads)
parts = [torch.empty(2, 2) for _ in range(world)]
dist.all_gather(parts, shard)
rows = torch.empty(world, 4)
dist.all_gather_into_tensor(rows, shard.view(1, 4))
