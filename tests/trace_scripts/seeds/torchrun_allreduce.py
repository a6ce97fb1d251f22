"""../shared/seeds/004, the torchrun version: env:// init, set_device(LOCAL_RANK), all_reduce, barrier."""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="nccl", init_method="env://")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    x = torch.tensor([rank], device="cuda", dtype=torch.float32)
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    dist.barrier()
    if rank == 0:
        print(f"world_size = {world_size}")
    print(f"rank {rank}: after all_reduce, x = {x.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
