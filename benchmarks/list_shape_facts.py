"""Which shape checks torch's backends make on the buffers of collectives, at world 1: the list forms (C320
list-shape-mismatch, N131 for uneven lists) and the flat forms `all_gather_into_tensor` / `reduce_scatter_tensor`
given tensors of the right element count but another shape. docs/backend-support.md#list-forms states the results.
World 1 is what one GPU gives NCCL; the checks below are made before anything moves, so one rank shows them.

    timeout 120 python benchmarks/list_shape_facts.py nccl     # one GPU
    timeout 120 python benchmarks/list_shape_facts.py gloo     # CPU, for comparison

Each line: the case, then what the call returned (the output buffers) or `RAISED` with the exception's first line.
"""

import os
import sys

import torch
import torch.distributed as dist


def tr(name, fn):
    try:
        print(name, fn(), flush=True)
    except Exception as e:
        print(name, "RAISED", type(e).__name__, str(e).splitlines()[0][:160], flush=True)


def all_gather_list_2d():
    out = [torch.zeros(2, 2)]
    dist.all_gather(out, torch.arange(4.0))
    return [t.tolist() for t in out]


def all_gather_list_more_elements():
    out = [torch.zeros(6)]
    dist.all_gather(out, torch.arange(4.0))
    return [t.tolist() for t in out]


def gather_list_2d():
    out = [torch.zeros(2, 2)]
    dist.gather(torch.arange(4.0), out, dst=0)
    return [t.tolist() for t in out]


def scatter_list_2d():
    out = torch.zeros(4)
    dist.scatter(out, [torch.arange(4.0).reshape(2, 2)], src=0)
    return out.tolist()


def reduce_scatter_list_2d():
    out = torch.zeros(4)
    dist.reduce_scatter(out, [torch.arange(4.0).reshape(2, 2)])
    return out.tolist()


def all_gather_into_tensor_2d_out():
    out = torch.zeros(1, 4)
    dist.all_gather_into_tensor(out, torch.arange(4.0))
    return out.tolist()


def all_gather_into_tensor_2d_in():
    out = torch.zeros(4)
    dist.all_gather_into_tensor(out, torch.arange(4.0).reshape(2, 2))
    return out.tolist()


def reduce_scatter_tensor_2d_in():
    out = torch.zeros(4)
    dist.reduce_scatter_tensor(out, torch.arange(4.0).reshape(1, 4))
    return out.tolist()


def reduce_scatter_tensor_2d_out():
    out = torch.zeros(2, 2)
    dist.reduce_scatter_tensor(out, torch.arange(4.0))
    return out.tolist()


def broadcast_reshaped():
    x = torch.arange(4.0).reshape(2, 2)
    dist.broadcast(x, src=0)
    return x.tolist()


CASES = [
    all_gather_list_2d,
    all_gather_list_more_elements,
    gather_list_2d,
    scatter_list_2d,
    reduce_scatter_list_2d,
    all_gather_into_tensor_2d_out,
    all_gather_into_tensor_2d_in,
    reduce_scatter_tensor_2d_in,
    reduce_scatter_tensor_2d_out,
    broadcast_reshaped,
]

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "gloo"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29534")
    if backend == "nccl":
        torch.cuda.set_device(0)
        torch.set_default_device("cuda:0")
    dist.init_process_group(backend, rank=0, world_size=1)
    nccl = f", NCCL {torch.cuda.nccl.version()}" if backend == "nccl" else ""
    print(f"# torch {torch.__version__}, {backend}{nccl}")
    for case in CASES:
        tr(case.__name__, case)
    dist.destroy_process_group()
