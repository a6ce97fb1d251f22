"""Algorithm and bus bandwidth, exactly as nccl-tests defines them (its doc/PERFORMANCE.md).

algbw = size / time. busbw = algbw × a factor that makes the figure comparable with the hardware's
link bandwidth whatever the number of ranks: a ring all_reduce moves 2(n−1)/n of the buffer over each
rank's link, an all_gather (n−1)/n, a broadcast the whole buffer once. GB/s are 10⁹ bytes per second.
"""

from __future__ import annotations

# nccl-tests: all_reduce.cu, all_gather.cu, reduce_scatter.cu, alltoall.cu, gather.cu, scatter.cu,
# broadcast.cu, reduce.cu, sendrecv.cu (the `factor` in each file's GetBw)
_RING = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
KINDS = ("all_reduce",) + _RING + ("broadcast", "reduce", "sendrecv")


def factor(kind: str, world: int) -> float:
    """The busbw/algbw ratio of `kind` at `world` ranks; 1 for anything nccl-tests does not scale."""
    if kind == "all_reduce":
        return 2 * (world - 1) / world
    if kind in _RING:
        return (world - 1) / world
    return 1.0


def algbw(size_bytes: int, seconds: float) -> float:
    """GB/s (10⁹ B/s) of moving `size_bytes` in `seconds`."""
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw(kind: str, world: int, size_bytes: int, seconds: float) -> float:
    return algbw(size_bytes, seconds) * factor(kind, world)
