"""mp.Process per rank; rank 0 alone calls a collective in a helper module: a mismatch at world 2."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import maybe_extra


def run(rank, size):
    t = torch.ones(4)
    maybe_extra(t, rank)
    dist.barrier()


def init_process(rank, size, fn, backend="gloo"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 2
    processes = []
    mp.set_start_method("spawn")
    for rank in range(size):
        p = mp.Process(target=init_process, args=(rank, size, run))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
