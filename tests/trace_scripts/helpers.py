"""A sibling module the traced scripts import."""

import torch.distributed as dist
from torch.distributed import all_reduce


def average(t):
    all_reduce(t)
    t /= dist.get_world_size()
    return t


def maybe_extra(t, rank):
    if rank == 0:
        dist.all_reduce(t)
