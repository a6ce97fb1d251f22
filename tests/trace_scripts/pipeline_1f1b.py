"""A 1F1B pipeline schedule (Megatron's shape): one stage per rank, activations forward, gradients back,
steady-state sends and receives posted together with batch_isend_irecv. Clean at every world size;
with --drop-grad the last stage forgets to send its last gradient back: the stage before it waits
forever in recv_backward."""

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--microbatches", type=int, default=8)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--drop-grad", action="store_true")
args = parser.parse_args()

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
first, last = rank == 0, rank == world - 1
layer = torch.nn.Linear(args.hidden, args.hidden)
shape = (4, args.hidden)


def recv_forward():
    if first:
        return torch.randn(shape)
    x = torch.empty(shape)
    dist.recv(x, rank - 1)
    return x


def send_forward(y):
    if not last:
        dist.send(y, rank + 1)


def recv_backward():
    if last:
        return torch.ones(shape)
    g = torch.empty(shape)
    dist.recv(g, rank + 1)
    return g


def send_backward(g):
    if not first:
        dist.send(g, rank - 1)


def exchange(send, peer_send, recv_shape, peer_recv):
    """Send one tensor and receive another in one batch (either side may be absent at the ends)."""
    out = torch.empty(recv_shape)
    ops = []
    if peer_send is not None:
        ops.append(dist.P2POp(dist.isend, send, peer_send))
    if peer_recv is not None:
        ops.append(dist.P2POp(dist.irecv, out, peer_recv))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return out if peer_recv is not None else torch.ones(recv_shape)


def forward(x):
    with torch.no_grad():
        return layer(x)


def backward(g):
    with torch.no_grad():
        return g @ layer.weight


warmup = min(world - rank - 1, args.microbatches)
remaining = args.microbatches - warmup
for _ in range(warmup):
    send_forward(forward(recv_forward()))
x = recv_forward() if remaining else None
for i in range(remaining):
    g = exchange(forward(x), None if last else rank + 1, shape, None if last else rank + 1)
    dx = backward(g)
    if i == remaining - 1:
        if not (args.drop_grad and last):
            send_backward(dx)
    else:
        x = exchange(dx, None if first else rank - 1, shape, None if first else rank - 1)
        if first:
            x = torch.randn(shape)
for _ in range(warmup):
    send_backward(backward(recv_backward()))
dist.barrier()
dist.destroy_process_group()
