"""Reads its own arguments (after `--`): the sizes differ by rank only if --uneven is given."""

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=4)
parser.add_argument("--uneven", action="store_true")
args = parser.parse_args()
dist.init_process_group("gloo")
n = args.size + (dist.get_rank() if args.uneven else 0)
dist.all_reduce(torch.ones(n))
