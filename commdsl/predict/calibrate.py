"""`commdsl bench --calibrate`: α and β of this machine's links, fitted from a measured ping-pong.

The ping-pong is a `.comm` program (`PINGPONG`: rank 0 sends to rank 1, which sends it back), swept and
timed by the bench itself (`bench.plan.build`, `bench.launch.run_plan`: the same workers, hang guard and
hard timeout as every `commdsl bench`), so a calibration measures what a bench measures. One way is half
the mean round trip (`one_way`); `fit` finds the α and β of t = α + bytes/β by least squares on the
relative error (each size weighs the same, so the small sizes set α and the large ones β). Local ops are
timed in this process (`memory_bandwidth`: torch's in-place add, counted as the cost model counts it), and so
are fresh pages (`page_fault_bandwidth`: what a temporary malloc maps anew costs beyond its copy).
`topology_text` writes the TOML file `commdsl predict --topology` reads, with the measurements as comments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from commdsl.predict.topology import MMAP_THRESHOLD_MAX
from commdsl.values import distinct

PINGPONG = """\
# the calibration ping-pong of `commdsl bench --calibrate`: rank 0 and rank 1 send `x` there and back
program calibrate_pingpong
world 2..
param n = 1024

tensor x: float32[n] = rank

on rank == 0:
    send x to 1
    recv x from 1
on rank == 1:
    recv x from 0
    send x to 0
"""


PAIRS = """\
# the second step of `commdsl bench --calibrate --nproc N` (N >= 4): every even rank ping-pongs with the next, at once
program calibrate_pairs
world 2..
param n = 1024

tensor x: float32[n] = rank

on rank % 2 == 0 and rank + 1 < world:
    send x to rank + 1
    recv x from rank + 1
on rank % 2 == 1:
    recv x from rank - 1
    send x to rank - 1
"""


@dataclass(frozen=True)
class Sharing:
    """One pair's one-way time and that of `pairs` pairs ping-ponging at once, at `size` bytes."""

    size: int
    pairs: int
    alone: float  # seconds
    together: float  # seconds

    @property
    def bus(self) -> bool:
        """Do the host's messages share one bus? Pairs at once take nearer `pairs` times one pair's time
        (serialised) than one pair's (side by side): the midpoint between the two decides."""
        return self.together / self.alone >= (1 + self.pairs) / 2


@dataclass(frozen=True)
class Fit:
    alpha: float  # seconds
    beta: float  # bytes per second
    worst: float  # the largest relative error of the fit over the measured sizes
    points: tuple[tuple[int, float], ...]  # (bytes, one-way seconds) measured


def fit(sizes: list[int], seconds: list[float]) -> Fit:
    """α, β of t = α + size/β, minimising Σ ((α + size/β − t) / t)²; α is kept ≥ 0."""
    s = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if s.size < 2 or distinct(s).size < 2:
        raise ValueError("calibration needs at least two different sizes")
    A = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if alpha < 0:  # no latency term: fit the slope alone
        alpha = 0.0
        inv_beta = float(np.sum(s / t) / np.sum((s / t) ** 2))
    if inv_beta <= 0:
        raise ValueError("the measured times do not grow with the size; measure larger sizes")
    pred = alpha + s * inv_beta
    return Fit(float(alpha), float(1.0 / inv_beta), float(np.max(np.abs(pred - t) / t)), tuple(zip(sizes, seconds)))


def one_way(plan, results: dict[int, dict[int, dict]]) -> list[float]:
    """Seconds one way for each measured case: half the mean, over the timed iterations, of the slowest
    rank's round trip. The mean, as the bench reports and `predict` predicts it: on a shared machine some
    iterations wait for a core, and what a message costs on average includes those waits (docs/predict.md:
    calibrating by the median predicted both measured campaigns worse)."""
    out = []
    for number in range(len(plan.cases)):
        per_rank = results.get(number, {})
        if len(per_rank) < plan.world:
            continue
        # ranks with nothing to do (beyond 0 and 1 in the ping-pong) time nothing: the slowest of the others
        got = [per_rank[r]["durations_ns"] for r in range(plan.world) if len(per_rank[r]["durations_ns"])]
        if not got:
            continue
        trips = np.max(np.array(got, dtype=np.float64), axis=0)
        out.append(float(np.mean(trips)) / 2 * 1e-9)
    return out


def memory_bandwidth(nbytes: int = 64 << 20, repeats: int = 5, threads: int | None = None) -> float:
    """Bytes per second of `x += y` on float32 tensors of `nbytes`, counted as the cost model counts a local
    op (the target once, plus each view it reads: 2 × nbytes here); the best of `repeats`. `threads`: torch's
    intra-op threads while timing (None: as they are). The bench's workers run with one thread when a host
    has several ranks (bench/worker.py, as torchrun does), so a calibration for them times one thread: this
    process's default (one thread per core) would time an add spread over every core, which no rank gets."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        x = torch.ones(nbytes // 4, dtype=torch.float32)
        y = torch.ones(nbytes // 4, dtype=torch.float32)
        x += y  # touch the pages first
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            x += y
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return 2 * nbytes / best


def page_fault_bandwidth(nbytes: int = 64 << 20, repeats: int = 5, threads: int | None = None) -> float | None:
    """Bytes per second at which this process gets fresh pages: `torch.empty(n).fill_(1)` of `nbytes` (above
    glibc's mmap threshold, so mapped anew, faulted in and zeroed by the kernel, unmapped when freed) less the
    same fill into a kept tensor, the best of `repeats` of each; `threads` as in `memory_bandwidth`. None when
    a fresh tensor costs no more than a kept one (malloc told to keep its memory: `MALLOC_MMAP_THRESHOLD_` and
    `MALLOC_TRIM_THRESHOLD_` set, mallopt(3))."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        n = nbytes // 4
        kept = torch.zeros(n, dtype=torch.float32)
        fresh = kept_time = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.empty(n, dtype=torch.float32).fill_(1)
            t1 = time.perf_counter()
            kept.fill_(1)
            t2 = time.perf_counter()
            fresh, kept_time = min(fresh, t1 - t0), min(kept_time, t2 - t1)
    finally:
        torch.set_num_threads(before)
    return nbytes / (fresh - kept_time) if fresh > kept_time * 1.1 else None


def topology_text(
    f: Fit,
    memory_bps: float,
    nproc: int,
    backend: str,
    command: str,
    sharing: Sharing | None = None,
    page_bps: float | None = None,
) -> str:
    """The topology file: one node, every rank on it, α and β fitted, the measurements as comments. Its
    messages share one bus (`shared_node`) unless `sharing` measured pairs of ranks running side by side;
    then each rank has one way for its messages in and out (`duplex = false`: Gloo's TCP transport moves
    a process's bytes on one loop thread, gloo/transport/tcp/loop.cc)."""
    lines = [
        f"# written by `{command}`",
        f"# on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one-way time of a {backend} ping-pong between",
        "# ranks 0 and 1 (half the mean round trip of the slowest rank), fitted to t = alpha + bytes / beta",
        "#        bytes     measured (us)     fitted (us)    error",
    ]
    for size, sec in f.points:
        got = f.alpha + size / f.beta
        lines.append(f"# {size:>12}  {sec * 1e6:>16.2f}  {got * 1e6:>14.2f}  {(got - sec) / sec * 100:>+6.1f} %")
    lines += [
        f"# largest error of the fit: {f.worst * 100:.1f} %",
    ]
    if sharing is None:
        lines.append("# whether messages share one bus was not measured (--nproc 4 or more does): assumed")
        bus = True
    else:
        lines.append(
            f"# {sharing.pairs} pairs at once, {sharing.size} bytes: {sharing.together * 1e6:.1f} us one way against"
            f" {sharing.alone * 1e6:.1f} us for one pair alone (x{sharing.together / sharing.alone:.2f})"
        )
        bus = sharing.bus
    lines += [
        'name = "calibrated"',
        f'backend = "{backend}"',
        "ranks_per_node = 65536    # one host: every rank of this machine on one node",
        "nics_per_node = 1",
    ]
    if bus:
        lines.append("shared_node = true        # one host: its messages share the same cores and memory")
    else:
        lines += [
            "shared_node = false       # pairs of ranks ran side by side: no bus shared by every message",
            "duplex = false            # a rank's messages in and out share its one Gloo loop thread",
        ]
    lines += [
        f"memory_gbps = {memory_bps / 1e9:.4g}    # torch `x += y` on 64 MiB float32, 2 x 64 MiB counted",
    ]
    if page_bps is None:
        lines.append("# fresh pages cost nothing measurable here (malloc keeps its memory): not counted")
    else:
        lines += [
            f"page_fault_gbps = {page_bps / 1e9:.4g}    # a fresh 64 MiB torch tensor filled, less a kept one",
            f"mmap_threshold_bytes = {MMAP_THRESHOLD_MAX}    # glibc's largest mmap threshold (mallopt(3))",
        ]
    lines += [
        f'source = "measured with `{command}`"',
        "",
        "[intra]",
        f"alpha_us = {f.alpha * 1e6:.4g}",
        f"bandwidth_gbps = {f.beta / 1e9:.4g}",
        "",
    ]
    return "\n".join(lines)
