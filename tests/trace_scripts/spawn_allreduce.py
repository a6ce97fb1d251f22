"""mp.spawn inside the script, a sibling module, .cuda() and set_device without a GPU: clean."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import average


def worker(rank, world):
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    x = torch.ones(16).cuda()
    average(x)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(4,), nprocs=4, join=True)
