"""A toy DDP training loop (torchrun style). With --uneven, rank 0 takes one step more than the
others: its gradient all-reduce in backward() has no partner (caught at the backward line)."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--uneven", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ddp = DDP(model.to(f"cuda:{local_rank}"), device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    steps = args.steps + (1 if args.uneven and rank == 0 else 0)
    for _ in range(steps):
        x = torch.randn(4, 8).to(f"cuda:{local_rank}")
        loss = ddp(x).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
