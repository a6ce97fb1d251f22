"""Each rank sends buf[0:8] and receives into buf[4:12] with both requests in flight: the receive
overwrites half of what is being sent (the slices overlap)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
peer = 1 - dist.get_rank()
buf = torch.zeros(16)
s = dist.isend(buf[0:8], peer)
r = dist.irecv(buf[4:12], peer)
s.wait()
r.wait()
