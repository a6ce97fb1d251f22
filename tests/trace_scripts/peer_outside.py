"""Even ranks send to the next rank without wrapping around: at an odd world size the last one names a rank
outside the world (P208), which the recording must keep as it is rather than wrap to rank 0."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(4)
    if rank % 2 == 0:
        dist.send(x, rank + 1)
    else:
        dist.recv(x, rank - 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
