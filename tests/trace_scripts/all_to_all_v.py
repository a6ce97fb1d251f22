"""An all-to-all of uneven lists (as MoE token routing does): rank r sends `r + 1` elements to every rank and
receives `j + 1` from rank j. torch's NCCL runs it as one send and receive per pair."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
received = [torch.empty(j + 1) for j in range(world)]
dist.all_to_all(received, [torch.full((rank + 1,), float(rank)) for _ in range(world)])
