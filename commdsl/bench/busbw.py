"""Algorithm and bus bandwidth, exactly as nccl-tests defines them (its doc/PERFORMANCE.md).

algbw = size / time. busbw = algbw × a factor that makes the figure comparable with the hardware's
link bandwidth whatever the number of ranks: a ring all_reduce moves 2(n−1)/n of the buffer over each
rank's link, an all_gather (n−1)/n, a broadcast the whole buffer once. GB/s are 10⁹ bytes per second.
"""

from __future__ import annotations

from commdsl import collectives

KINDS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "broadcast",
    "reduce",
    "sendrecv",
)
"""What the bench measures: nccl-tests' tests (all_reduce.cu, ..., sendrecv.cu), in its order."""


def factor(kind: str, world: int) -> float:
    """The busbw/algbw ratio of `kind` at `world` ranks (each collective's `busbw_factor`, from the `factor`
    in each nccl-tests file's GetBw); 1 for a send/receive pair."""
    return collectives.KINDS[kind].busbw_factor(world) if kind in collectives.KINDS else 1.0


def algbw(size_bytes: int, seconds: float) -> float:
    """GB/s (10⁹ B/s) of moving `size_bytes` in `seconds`."""
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw(kind: str, world: int, size_bytes: int, seconds: float) -> float:
    return algbw(size_bytes, seconds) * factor(kind, world)
