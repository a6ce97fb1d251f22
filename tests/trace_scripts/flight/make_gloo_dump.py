"""Writes the Gloo flight-recorder dumps under gloo_mismatch/ (run once, by hand; the tests only read them).

Two ranks on real Gloo: an all_reduce and a broadcast that agree, then rank 0 all-reduces 8 floats
while rank 1 all-gathers them (async, so that both ranks reach the dump). Each rank writes what
`torch._C._distributed_c10d._dump_fr_trace()` returns (the pickle torch writes on a timeout).

    python tests/trace_scripts/flight/make_gloo_dump.py tests/trace_scripts/flight/gloo_mismatch
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, out):
    os.environ["TORCH_FR_BUFFER_SIZE"] = "100"
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=world)
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    if rank == 0:
        dist.all_reduce(torch.ones(8), async_op=True)
    else:
        dist.all_gather_into_tensor(torch.ones(8 * world), torch.ones(8), async_op=True)
    time.sleep(1)
    with open(f"{out}/rank_{rank}", "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    os._exit(0)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    mp.spawn(run, args=(2, out), nprocs=2, join=False)
    time.sleep(15)
