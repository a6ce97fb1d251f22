"""What torch.distributed._coalescing_manager does on Gloo: one scenario per run, every rank prints its outcome.

The facts docs/backend-support.md#coalesced states were measured with this script (torch 2.13.0+cpu, ranks on
127.0.0.1, process-group timeout 8 s); rerun a scenario after a torch upgrade to see whether one still holds:

    timeout 60 python benchmarks/gloo_coalesced_facts.py SCENARIO [WORLD]

Scenarios (each rank's tensors start at arange(n) + rank + 1, or + 10 * (rank + 1) for the second one):
ar_sum, ar_ops, ar_mixed_ops, ar_mixed_dtype, agi, agi_mixed_dtype, rsi, rsi_mixed_ops, rsi_ops, mixed_types,
len_mismatch, size_same_total, size_diff_total, ranks_mixed_ops, async, async_op_inside, broadcast_inside,
agi_vs_ar, coalesced_vs_plain, subgroup, empty, order_swap, int_sum, same_tensor_twice.
"""

import datetime
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


R = dist.ReduceOp


def t(rank, n, base=1.0, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float64) + base * (rank + 1)).to(dtype)


def scen(name, rank, world):  # noqa: C901 - one flat branch per scenario, read side by side
    cm = dist._coalescing_manager
    if name == "ar_sum":
        a, b = t(rank, 4), t(rank, 3, 10)
        with cm():
            dist.all_reduce(a)
            dist.all_reduce(b)
        return a, b
    if name == "ar_ops":  # each op alone in a block
        out = []
        for op in [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND]:
            x = t(rank, 2) if op != R.BAND else t(rank, 2, dtype=torch.int32)
            try:
                with cm():
                    dist.all_reduce(x, op=op)
                out.append((str(op), x.tolist()))
            except Exception as e:
                out.append((str(op), type(e).__name__ + ": " + str(e).splitlines()[0][:120]))
        return out
    if name == "ar_mixed_ops":
        a, b = t(rank, 2), t(rank, 2)
        with cm():
            dist.all_reduce(a, op=R.SUM)
            dist.all_reduce(b, op=R.MAX)
        return a, b
    if name == "ar_mixed_dtype":
        a, b = t(rank, 2), t(rank, 2, dtype=torch.int64)
        with cm():
            dist.all_reduce(a)
            dist.all_reduce(b)
        return a, b
    if name == "agi":
        a, b = t(rank, 2), t(rank, 3, 10)
        oa, ob = torch.zeros(2 * world), torch.zeros(3 * world)
        with cm():
            dist.all_gather_into_tensor(oa, a)
            dist.all_gather_into_tensor(ob, b)
        return oa, ob
    if name == "agi_mixed_dtype":
        a, b = t(rank, 2), t(rank, 2, dtype=torch.int64)
        oa, ob = torch.zeros(2 * world), torch.zeros(2 * world, dtype=torch.int64)
        with cm():
            dist.all_gather_into_tensor(oa, a)
            dist.all_gather_into_tensor(ob, b)
        return oa, ob
    if name == "rsi":
        a, b = t(rank, 2 * world), t(rank, 3 * world, 10)
        oa, ob = torch.zeros(2), torch.zeros(3)
        with cm():
            dist.reduce_scatter_tensor(oa, a)
            dist.reduce_scatter_tensor(ob, b)
        return oa, ob
    if name == "rsi_mixed_ops":
        a, b = t(rank, 2 * world), t(rank, 2 * world)
        oa, ob = torch.zeros(2), torch.zeros(2)
        with cm():
            dist.reduce_scatter_tensor(oa, a, op=R.SUM)
            dist.reduce_scatter_tensor(ob, b, op=R.MAX)
        return oa, ob
    if name == "rsi_ops":
        out = []
        for op in [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]:
            a, oa = t(rank, 2 * world), torch.zeros(2)
            try:
                with cm():
                    dist.reduce_scatter_tensor(oa, a, op=op)
                out.append((str(op), oa.tolist()))
            except Exception as e:
                out.append((str(op), type(e).__name__ + ": " + str(e).splitlines()[0][:120]))
        return out
    if name == "mixed_types":
        a, b = t(rank, 2), t(rank, 2)
        ob = torch.zeros(2 * world)
        with cm():
            dist.all_reduce(a)
            dist.all_gather_into_tensor(ob, b)
        return a, ob
    if name == "len_mismatch":
        a, b = t(rank, 2), t(rank, 2, 10)
        with cm():
            dist.all_reduce(a)
            if rank == 0:
                dist.all_reduce(b)
        return a, b
    if name == "size_same_total":  # rank 0: [2],[4]; others [4],[2]
        n1, n2 = (2, 4) if rank == 0 else (4, 2)
        a, b = t(rank, n1), t(rank, n2, 10)
        with cm():
            dist.all_reduce(a)
            dist.all_reduce(b)
        return a, b
    if name == "size_diff_total":
        n2 = 4 if rank == 0 else 2
        a, b = t(rank, 2), t(rank, n2, 10)
        with cm():
            dist.all_reduce(a)
            dist.all_reduce(b)
        return a, b
    if name == "ranks_mixed_ops":  # rank 0 SUM, others MAX
        a = t(rank, 2)
        with cm():
            dist.all_reduce(a, op=R.SUM if rank == 0 else R.MAX)
        return a
    if name == "async":
        a, b = t(rank, 2), t(rank, 2, 10)
        with cm(async_ops=True) as h:
            dist.all_reduce(a)
            dist.all_reduce(b)
        before = (a.tolist(), len(h.works))
        h.wait()
        return before, a, b
    if name == "async_op_inside":
        a = t(rank, 2)
        with cm():
            w = dist.all_reduce(a, async_op=True)
        try:
            w.wait()
            return "wait ok", a
        except Exception as e:
            return type(e).__name__ + ": " + str(e), a
    if name == "broadcast_inside":
        a, b = t(rank, 2), t(rank, 2, 10)
        with cm():
            dist.all_reduce(a)
            dist.broadcast(b, src=0)
        return a, b
    if name == "agi_vs_ar":  # rank 0 coalesces all_gather_into_tensor, others all_reduce
        a = t(rank, 2)
        ob = torch.zeros(2 * world)
        with cm():
            if rank == 0:
                dist.all_gather_into_tensor(ob, a)
            else:
                dist.all_reduce(a)
        return a, ob
    if name == "coalesced_vs_plain":  # rank 0 coalesces two all_reduces, others call them plainly
        a, b = t(rank, 2), t(rank, 3, 10)
        if rank == 0:
            with cm():
                dist.all_reduce(a)
                dist.all_reduce(b)
        else:
            dist.all_reduce(a)
            dist.all_reduce(b)
        return a, b
    if name == "subgroup":
        g = dist.new_group([0, 1])
        a, b = t(rank, 2), t(rank, 2, 10)
        if rank in (0, 1):
            with cm(group=g):
                dist.all_reduce(a, group=g)
                dist.all_reduce(b, group=g)
        return a, b
    if name == "empty":
        with cm():
            pass
        a = t(rank, 1)
        dist.all_reduce(a)
        return a
    if name == "order_swap":
        a, b = t(rank, 2), t(rank, 3, 10)
        with cm():
            if rank == 0:
                dist.all_reduce(b)
                dist.all_reduce(a)
            else:
                dist.all_reduce(a)
                dist.all_reduce(b)
        return a, b
    if name == "int_sum":
        a, b = t(rank, 2, dtype=torch.int32), t(rank, 2, 10, dtype=torch.int32)
        with cm():
            dist.all_reduce(a)
            dist.all_reduce(b)
        return a, b
    if name == "same_tensor_twice":  # sequentially: 2 * sum; coalesced?
        a = t(rank, 2)
        with cm():
            dist.all_reduce(a)
            dist.all_reduce(a)
        return a
    raise SystemExit("unknown scenario " + name)


def fmt(v):
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, tuple):
        return tuple(fmt(x) for x in v)
    return v


def worker(rank, world, port, name):
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=8),
    )
    try:
        r = scen(name, rank, world)
        print(f"[{name}] rank {rank}: {fmt(r)}", flush=True)
    except Exception as e:
        print(f"[{name}] rank {rank}: RAISED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    name, world = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    mp.start_processes(worker, args=(world, free_port(), name), nprocs=world, start_method="fork", join=True)
