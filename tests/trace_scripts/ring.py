"""A ring exchange with isend/irecv, launched by torchrun: clean."""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((4,), float(rank))
    y = torch.empty(4)
    for step in range(3):
        reqs = [dist.isend(x, (rank + 1) % world), dist.irecv(y, (rank - 1) % world)]
        for r in reqs:
            r.wait()
        x.copy_(y)
    dist.all_reduce(x)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
