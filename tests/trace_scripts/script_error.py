"""Fails on rank 1 before any communication: the error shows this file's frames only."""

import torch.distributed as dist


def setup():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("bad config on rank 1")


setup()
