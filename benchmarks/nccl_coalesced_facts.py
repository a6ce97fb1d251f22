"""What torch.distributed._coalescing_manager does on NCCL at world 1 (one GPU): which coalesced calls run, and
what NCCL does with mixed dtypes and mixed kinds in one block. docs/backend-support.md#coalesced states the results
(measured with torch 2.11.0+cu130, NCCL 2.28.9, one H100; world 1 cannot show anything that needs two ranks):

    timeout 120 python benchmarks/nccl_coalesced_facts.py
"""

import os

import torch
import torch.distributed as dist

cm = dist._coalescing_manager


def tr(name, fn):
    try:
        print(name, fn())
    except Exception as e:
        print(name, "RAISED", type(e).__name__, str(e).splitlines()[0][:150])


def ar():
    a, b = torch.arange(4.0), torch.arange(2.0) + 5
    with cm():
        dist.all_reduce(a)
        dist.all_reduce(b)
    return a.tolist(), b.tolist()


def ar_mixed_dtype():
    a, b = torch.arange(4.0), torch.arange(2, dtype=torch.int64)
    with cm():
        dist.all_reduce(a)
        dist.all_reduce(b)
    return a.tolist(), b.tolist()


def agi_mixed_dtype():
    a, b = torch.arange(2.0), torch.arange(3, dtype=torch.int64)
    oa, ob = torch.zeros(2), torch.zeros(3, dtype=torch.int64)
    with cm():
        dist.all_gather_into_tensor(oa, a)
        dist.all_gather_into_tensor(ob, b)
    return oa.tolist(), ob.tolist()


def rsi_avg_max():
    a, b = torch.arange(2.0), torch.arange(3.0)
    oa, ob = torch.zeros(2), torch.zeros(3)
    with cm():
        dist.reduce_scatter_tensor(oa, a, op=dist.ReduceOp.AVG)
        dist.reduce_scatter_tensor(ob, b, op=dist.ReduceOp.MAX)
    return oa.tolist(), ob.tolist()


def mixed_types():
    a, b = torch.arange(2.0), torch.arange(2.0)
    ob = torch.zeros(2)
    with cm():
        dist.all_reduce(a)
        dist.all_gather_into_tensor(ob, b)


def async_block():
    a = torch.arange(2.0)
    with cm(async_ops=True) as h:
        dist.all_reduce(a)
    h.wait()
    return len(h.works), a.tolist()


if __name__ == "__main__":
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.cuda.set_device(0)
    torch.set_default_device("cuda:0")
    dist.init_process_group("nccl", rank=0, world_size=1)
    for name, fn in [
        ("ar", ar),
        ("ar_mixed_dtype", ar_mixed_dtype),
        ("agi_mixed_dtype", agi_mixed_dtype),
        ("rsi_avg_max", rsi_avg_max),
        ("mixed_types", mixed_types),
        ("async", async_block),
    ]:
        tr(name, fn)
    dist.destroy_process_group()
