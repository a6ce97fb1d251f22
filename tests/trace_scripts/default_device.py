"""An NCCL script that places its tensors with `torch.set_default_device("cuda")`, launched by torchrun: clean."""

import os

import torch
import torch.distributed as dist


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.set_default_device("cuda")
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((8,), float(rank))
    dist.all_reduce(x)
    y = torch.zeros(8 * world)
    dist.all_gather_into_tensor(y, x)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
