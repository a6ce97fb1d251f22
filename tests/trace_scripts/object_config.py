"""Rank 0 broadcasts its config; the others then use it. Object collectives are not executed, so the
other ranks still hold None and fail: the error says what the recording made up."""

import torch.distributed as dist

dist.init_process_group("gloo")
config = [{"lr": 0.1}] if dist.get_rank() == 0 else [None]
dist.broadcast_object_list(config, src=0)
lr = config[0]["lr"]
