"""An all-gather-v: each rank gathers every rank's uneven shard into a list sized per rank, then reduce-scatters
the list back (torch's NCCL runs both as one broadcast, one reduce, per rank; Gloo refuses the all-gather-v)."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
shard = torch.full((rank + 1,), float(rank))
gathered = [torch.empty(j + 1) for j in range(world)]
dist.all_gather(gathered, shard)
mine = torch.empty(rank + 1)
dist.reduce_scatter(mine, gathered)
