"""../shared/seeds/003: mp.Process per rank, a send/recv pair on GPUs by index, then an all_reduce in
a new group of ranks [0, 1]."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def init_process(rank, size, fn, backend="nccl"):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


def run(rank, size):
    torch.cuda.set_device(rank)
    tensor = torch.zeros(1).to(rank)
    if rank == 0:
        tensor += 1
        dist.send(tensor=tensor, dst=1)
    else:
        print("init tensor", tensor)
        dist.recv(tensor=tensor, src=0)
    print(f"Rank: {rank}, has data {tensor}")
    group = dist.new_group([0, 1])
    if rank == 0:
        tensor = torch.tensor([1.0, 2.0, 3.0])
    else:
        tensor = torch.tensor([4.0, 5.0, 6.0])
    tensor = tensor.to(rank)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print(f"Rank: {rank}, has data: {tensor}")


if __name__ == "__main__":
    size = 2
    processes = []
    mp.set_start_method("spawn")
    for rank in range(size):
        p = mp.Process(target=init_process, args=(rank, size, run))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
