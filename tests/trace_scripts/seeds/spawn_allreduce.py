"""../shared/seeds/004, the mp.spawn version: tcp:// init inside each spawned worker."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group(
        backend="nccl",
        init_method="tcp://127.0.0.1:29501",
        rank=rank,
        world_size=world_size,
    )
    torch.cuda.set_device(rank)
    x = torch.tensor([rank], device="cuda", dtype=torch.float32)
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    dist.barrier()
    if rank == 0:
        print(f"world_size = {world_size}")
    print(f"rank {rank}: after all_reduce, x = {x.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 4
    mp.set_start_method("spawn", force=True)
    mp.spawn(
        worker,
        args=(world_size,),
        nprocs=world_size,
        join=True,
    )
