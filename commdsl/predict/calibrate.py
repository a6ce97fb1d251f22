"""`commdsl bench --calibrate`: α and β of this machine's links, fitted from a measured ping-pong.

The ping-pong is a `.comm` program (`PINGPONG`: rank 0 sends to rank 1, which sends it back), swept and
timed by the bench itself (`bench.plan.build`, `bench.launch.run_plan`: the same workers, hang guard and
hard timeout as every `commdsl bench`), so a calibration measures what a bench measures. One way is half
the mean round trip (`one_way`); `fit` finds the α and β of t = α + bytes/β by least squares on the
relative error (each size weighs the same, so the small sizes set α and the large ones β). Local ops are
timed in this process (`memory_bandwidth`: torch's in-place add, counted as the cost model counts it), and so
are fresh pages (`page_fault_bandwidth`: what a temporary malloc maps anew costs beyond its copy); how much an
isend writes from its caller is read from the kernel's settings (`send_buffer_bytes`).

A built-in collective's step is timed apart (`COLLECTIVE`, `Steps`): the all_reduce of every rank at small
sizes, less its bytes, over its steps, gives `collective_alpha_us`; a collective call that sends nothing
(`LONE`, `Lone`: each rank's all_reduce on a group of its own) gives `collective_call_us`. With more ranks
than the host has cores, so is a ring's step of messages, every rank sending to the next at once (`OVERLAP`
without its adds, at small sizes, `Crowded`): less its bytes it gives `crowded_alpha_us`. So is whether a rank
computes while its messages move (`OVERLAP`, `Turns`): its isend and irecv, its adds, and both at once give `overlap`,
the messages alone `exchange_gbps`; with more than 2 ranks the same messages at 2 ranks, a swap (`Swap`), give
`swap_gbps`.

One host's ranks share its cores: how much of the host several messages, or several ranks' local ops, get
at once is measured through the bench too (`AtOnce`): ping-pong pairs at once (`PAIRS`) against one pair,
every rank adding at once (`ADDS`) against one rank. `topology_text` writes the TOML file
`commdsl predict --topology` reads, with the measurements as comments.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from commdsl.collectives.all_reduce import KIND as ALL_REDUCE
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
# the second step of `commdsl bench --calibrate --nproc N` (N >= 4): every even rank below `k` sends to the next,
# which sends it back (`back = 1`: ping-pong pairs) or not (`back = 0`: one-way streams, on and on, timed on
# more ranks than cores)
program calibrate_pairs
world 2..
param n = 1024
param k = 2
param back = 1

tensor x: float32[n] = rank

on rank % 2 == 0 and rank + 1 < k:
    send x to rank + 1
    on back == 1:
        recv x from rank + 1
on rank % 2 == 1 and rank < k:
    recv x from rank - 1
    on back == 1:
        send x to rank - 1
"""


ADDS = """\
# the third step of `commdsl bench --calibrate`: the ranks below `k` add at once, the others wait. Six adds
# in a row: ranks released together start some wake-ups apart, and one add each would take turns unseen
program calibrate_adds
world 1..
param n = 1024
param k = 1

tensor x: float32[n] = rank
tensor y: float32[n] = 1

on rank < k:
    for j in 0 .. 5:
        x += y
"""


COLLECTIVE = """\
# the fourth step of `commdsl bench --calibrate`: every rank calls the built-in all_reduce
program calibrate_collective
world 2..
param n = 1024

tensor x: float32[n] = rank

all_reduce x op sum
"""

LONE = """\
# the last step of `commdsl bench --calibrate`: every rank calls the built-in all_reduce on a group of its own,
# timed by its line, after one on every rank (as a mesh's dimension of one, its worker thread idled meanwhile)
program calibrate_lone
world 1..
param n = 1024

tensor x: float32[n] = rank
tensor y: float32[n] = rank

group own = split by rank

all_reduce x op sum in own
all_reduce y op sum
"""

LONE_LINE = "all_reduce x op sum in own"
"""The statement of `LONE` whose time per call is a collective on a group of one (`lone_call`)."""

LATENCY_SIZES = (4096, 16384, 65536)
"""Bytes at which `bench --calibrate` times the latencies it measures apart from the ping-pong's fit (a
built-in collective's step, a crowded host's message): small enough that their bytes cost little beside their
waits (64 KiB over the 2-core machine's 2.6 GB/s: 25 us of a call's 1-6 ms), several so that one size's slow
spell weighs less."""


OVERLAP = """\
# the fifth step of `commdsl bench --calibrate`: every rank's messages and its adds, alone and at once
program calibrate_overlap
world 2..
param n = 1024
param messages = 1
param adds = 6

tensor x: float32[n] = rank
tensor y: float32[n]
tensor z: float32[n] = 1

on messages == 1:
    h = isend x to (rank + 1) % world
    r = irecv y from (rank - 1) % world
for k in 0 .. adds - 1:
    z += x
on messages == 1:
    wait h, r
"""

OVERLAP_BYTES = 16 << 20
"""Bytes of the messages and adds `bench --calibrate` times alone and at once: where both take milliseconds (on
the 2-core machine the message 9-12 ms, six adds 5-8 ms), so neither hides in the other's noise."""

HIDDEN = 0.5
"""At least this much of the shorter of a rank's messages and its adds ran under the longer (`Turns.hidden`):
they run side by side (`overlap = true`); less: they take turns (the 2-core machine: none of it, three times)."""


AT_ONCE_ROUNDS = 3
"""How many times `bench --calibrate` benches one thing alone and several at once, in turn, so that a slow
spell of the host weighs on both sides of the ratio: on the quiet 2-core machine one launch's two pairs at
once took 1.45×, 1.78× and 1.81× one pair's time minutes apart (20 iterations each), and a whole ping-pong
sweep can run at half speed (64 MiB one way: 43.5 ms in one calibration, 17.8 and 20.9 ms in the two around
it)."""

FULL_SPEED = 1.15
"""Things at once no slower than this times one alone ran side by side (the 16-core host's four pairs: x1.13;
the quiet 2-core machine's two: x1.34-1.81): the host's limit is not seen, only that it is at least their count."""


@dataclass(frozen=True)
class AtOnce:
    """Seconds of one thing alone (a ping-pong pair's one way, a rank's add) and of `count` of them at once,
    at `size` bytes each: the host's capacity for them."""

    size: int
    count: int
    alone: float  # seconds
    together: float  # seconds

    @property
    def capacity(self) -> float:
        """How many of them the host runs at once at full speed: `count` at once take `count / capacity`
        times one's time (processor sharing), so capacity = count · alone / together, between 1 (one at a
        time: `count` at once take `count` times as long) and `count` (side by side: no slower than one)."""
        return min(float(self.count), max(1.0, self.count * self.alone / self.together))


@dataclass(frozen=True)
class Fit:
    alpha: float  # seconds
    beta: float  # bytes per second
    worst: float  # the largest relative error of the fit over the measured sizes
    points: tuple[tuple[int, float], ...]  # (bytes, one-way seconds) measured


STREAMING = 0.95
"""β is fitted again over the sizes whose bytes take at least this share of their time (at the first fit's α
and β): there a message's time is its bytes, where at the small sizes it is α and its noise. Fitted over
every size, the 2-core machine's α (0.2-0.9 ms from one size to the next) bent the line so that it missed the
64 MiB ping-pong by -14 to +15 % and put a whole campaign's predictions 11-16 % under or over; refitted at
≥ 1 MiB, ≥ 4 MiB, ≥ 16 MiB or here, the seven campaigns of 2026-11-28/29 gained 49, 81, 98 and 92 rows of
2,142 within ±25 % (docs/predict-accuracy.md, "β from the sizes its bytes decide")."""


def fit(sizes: list[int], seconds: list[float]) -> Fit:
    """α, β of t = α + size/β: first both minimising Σ ((α + size/β − t) / t)² over every size (so each size
    weighs the same; α is kept ≥ 0), then β again, α kept, over the sizes whose bytes are `STREAMING` of their
    time at that fit, where there are two or more."""
    s = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if s.size < 2 or distinct(s).size < 2:
        raise ValueError("calibration needs at least two different sizes")
    A = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if alpha < 0:  # no latency term: fit the slope alone
        alpha = 0.0
        inv_beta = _slope(s, t, 0.0)
    if inv_beta <= 0:
        raise ValueError("the measured times do not grow with the size; measure larger sizes")
    streaming = s * inv_beta >= STREAMING * (alpha + s * inv_beta)
    if distinct(s[streaming]).size >= 2 and (refit := _slope(s[streaming], t[streaming], alpha)) > 0:
        inv_beta = refit
    pred = alpha + s * inv_beta
    return Fit(float(alpha), float(1.0 / inv_beta), float(np.max(np.abs(pred - t) / t)), tuple(zip(sizes, seconds)))


def _slope(s: np.ndarray, t: np.ndarray, alpha: float) -> float:
    """1/β minimising Σ ((α + s/β − t) / t)² with α given."""
    return float(np.sum((s / t) * (t - alpha) / t) / np.sum((s / t) ** 2))


@dataclass(frozen=True)
class Steps:
    """The built-in all_reduce of `world` ranks at small sizes, each launch's: how long one step of a
    collective's algorithm takes, which is not a message's α. On Gloo each of the ring's 2(p - 1) steps sends,
    receives and waits on torch's worker thread and the peers' (gloo/allreduce.cc), and on a host with fewer
    cores than ranks each wait may wait for a core: the 2-core machine's ping-pong gives α 0.2 ms, its
    all_reduce 0.6-1.1 ms a step at 2 and 4 ranks (docs/predict-accuracy.md)."""

    world: int
    beta: float  # bytes per second: the fitted link's, for the steps' bytes
    points: tuple[tuple[int, float], ...]  # (bytes, seconds of one call), every launch's

    @property
    def alpha(self) -> float:
        """Seconds of one step: each call's time less its bytes' (the model's all_reduce at α = 0) over its
        `latency_steps`, averaged over the calls (the mean, as the bench and `one_way` count); at least 0."""
        steps = ALL_REDUCE.latency_steps(self.world)
        per = [(t - float(ALL_REDUCE.cost(self.world, n, 0.0, self.beta))) / steps for n, t in self.points]
        return max(0.0, float(np.mean(per)))


@dataclass(frozen=True)
class Lone:
    """The built-in all_reduce on a group of one (`LONE`), every one of `world` ranks on its own at once, each
    right after an all_reduce of every rank, at small sizes; each launch's time of it: what a collective call
    costs that sends nothing. On Gloo torch hands the call to the group's worker thread and waits for it to
    finish (`ProcessGroupGloo`'s work queue), and Gloo's all-reduce of one reduces nothing in place. On the
    2-core machine such a call took 55-80 µs in a loop of nothing else and 190-470 µs in the hierarchical
    all-reduce, after a collective of another group, where the model charged nothing (docs/predict-accuracy.md,
    "A seventeenth campaign, and a collective on a group of one")."""

    world: int
    points: tuple[tuple[int, float], ...]  # (bytes, seconds of one call), every launch's

    @property
    def seconds(self) -> float:
        """Seconds of one call: the mean over the calls (as the bench and `one_way` count)."""
        return float(np.mean([t for _, t in self.points]))


@dataclass(frozen=True)
class Crowded:
    """Every one of `world` ranks sending to the next and receiving from the last at once (`OVERLAP` without its
    adds, a ring's step) at small sizes, on a host of `cores` cores, fewer than the ranks; each launch's time:
    a message's latency when every rank of the host exchanges at once, which is not a lone ping-pong's. Each of
    its wake-ups (the caller's, Gloo's loop threads', the receiver's) may wait for a core: on the 2-core
    machine the ping-pong's α is 0.1-0.2 ms, such a step 0.35-1.2 ms at 4 ranks (docs/predict-accuracy.md)."""

    cores: int
    world: int
    beta: float  # bytes per second: the fitted link's, for the messages' bytes
    points: tuple[tuple[int, float], ...]  # (bytes, seconds of a step), every launch's

    @property
    def alpha(self) -> float:
        """Seconds of a crowded message's latency: each step less its message's bytes at β, averaged (the mean,
        as the bench and `one_way` count); at least 0."""
        return max(0.0, float(np.mean([t - n / self.beta for n, t in self.points])))


def host_cores() -> int:
    """The cores this process may run on (its affinity, as a container's CPU set limits it), else the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


BUSY_LOAD = 0.5
"""Load average per core above which, before anything of the calibration runs, the host is said to be busy."""


def busy_host(cores: int) -> str | None:
    """A warning when other work already loads the host (the 1-minute load average over `cores`): a latency
    measured then can be several times a quiet host's (a calibration at load 7 on two cores fitted α 1.6 ms and
    a crowded α 3.7 ms where one an hour later, idle, fitted 574 µs and 1.5 ms; programs predicted on the first
    came out +76..+126 % at 1 MiB). None on a quiet host, or where the load average cannot be read."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available here
        return None
    if load <= BUSY_LOAD * cores:
        return None
    return (
        f"the host is busy before calibrating (load average {load:.1f} on {cores} core{'s' * (cores != 1)}): "
        "latencies measured now can be several times a quiet host's; calibrate when it is idle"
    )


@dataclass(frozen=True)
class Turns:
    """Seconds of every rank's isend and irecv of `size` bytes (to the next rank, from the last) alone, of its
    adds of that size alone, and of both at once (`OVERLAP`): whether a rank computes while Gloo's loop thread
    moves its messages, or the two take turns for a core."""

    size: int
    messages: float
    adds: float
    together: float

    @property
    def hidden(self) -> float:
        """How much of the shorter of the two ran under the longer: (messages + adds − together) over the
        shorter, between 0 (one after the other) and 1 (side by side)."""
        return min(1.0, max(0.0, (self.messages + self.adds - self.together) / min(self.messages, self.adds)))

    @property
    def overlap(self) -> bool:
        return self.hidden >= HIDDEN

    def exchange_bps(
        self, world: int, alpha: float, crowded_alpha: float | None = None, cores: int | None = None
    ) -> float | None:
        """Bytes per second the host moved in all while every one of `world` ranks sent and received at once
        (`moved_bps`)."""
        return moved_bps(world, self.size, self.messages, alpha, crowded_alpha, cores)


@dataclass(frozen=True)
class Swap:
    """Seconds of two ranks' isend and irecv of `size` bytes each, to each other (`OVERLAP` without its adds,
    at 2 ranks), where the calibration runs more: a swap is not every rank of a ring's step at once (on the
    2-core host two ranks swapping moved 0.76-0.87 x β in all, four ranks' ring step 0.9-1.4 x β)."""

    size: int
    seconds: float

    def bps(self, alpha: float, crowded_alpha: float | None = None, cores: int | None = None) -> float | None:
        """Bytes per second the two moved in all (`moved_bps`)."""
        return moved_bps(2, self.size, self.seconds, alpha, crowded_alpha, cores)


@dataclass(frozen=True)
class Streams:
    """Seconds of a one-way stream's message of `size` bytes (`PAIRS` with `back = 0`: one pair sending one way on
    and on, the other ranks idle) and of `count` such pairs at once, on a host with fewer cores than ranks. A ping-pong
    and its pairs (`AtOnce`) are what β and `bus_gbps` come from; a stream is not one: on the 2-core host with
    4 ranks the receivers of two streams burned 2-4 times their senders' CPU (Gloo's loop thread waking for
    every few segments), and a 4-16 MiB message took 1.3-2.0 times a ping-pong's one way in two ping-pong pairs
    at once (docs/predict-accuracy.md, "One-way streams on a crowded host")."""

    size: int
    count: int
    alone: float  # seconds: one pair streaming
    together: float  # seconds: `count` pairs streaming at once

    @property
    def bps(self) -> float:
        """Bytes per second of one stream's message, alone (`stream_gbps`)."""
        return self.size / self.alone

    @property
    def bus_bps(self) -> float:
        """Bytes per second of `count` streams at once, all together (`stream_bus_gbps`)."""
        return self.count * self.size / self.together


def moved_bps(
    world: int, size: int, seconds: float, alpha: float, crowded_alpha: float | None = None, cores: int | None = None
) -> float | None:
    """Bytes per second `world` ranks each sending `size` bytes and receiving as many at once moved in all, in
    `seconds`: their bytes over the time less one message's latency (`alpha`; `crowded_alpha` where the ranks
    outnumber the host's `cores`). None where the latency is most of it (no bandwidth to read)."""
    if crowded_alpha is not None and cores is not None and world > cores:
        alpha = crowded_alpha
    moving = seconds - alpha
    return world * size / moving if moving > 0.5 * seconds else None


def lone_call(plan, results: dict[int, dict[int, dict]]) -> list[float]:
    """Seconds of each measured case's `LONE_LINE` a call, on the slowest rank (the bench's per-line time: the
    mean over the timed iterations)."""
    from commdsl.bench.results import rows

    return [line["us"] * 1e-6 for row in rows(plan, results) for line in row.lines if line["text"] == LONE_LINE]


def one_way(plan, results: dict[int, dict[int, dict]]) -> list[float]:
    """Seconds one way for each measured case: half the mean, over the timed iterations, of the slowest
    rank's round trip. The mean, as the bench reports and `predict` predicts it: on a shared machine some
    iterations wait for a core, and what a message costs on average includes those waits (docs/predict-accuracy.md:
    calibrating by the median predicted both measured campaigns worse)."""
    return [t / 2 for t in slowest(plan, results)]


def slowest(plan, results: dict[int, dict[int, dict]]) -> list[float]:
    """Seconds of each measured case: the mean over the timed iterations of the slowest rank's time, among
    the ranks that timed something."""
    out = []
    for number in range(len(plan.cases)):
        per_rank = results.get(number, {})
        if len(per_rank) < plan.world:
            continue
        # ranks with nothing to do (beyond 0 and 1 in the ping-pong) time nothing: the slowest of the others
        got = [per_rank[r]["durations_ns"] for r in range(plan.world) if len(per_rank[r]["durations_ns"])]
        if not got:
            continue
        times = np.max(np.array(got, dtype=np.float64), axis=0)
        out.append(float(np.mean(times)) * 1e-9)
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


TCP_WMEM = Path("/proc/sys/net/ipv4/tcp_wmem")


def send_buffer_bytes(path: Path = TCP_WMEM) -> int | None:
    """The most a TCP socket's send buffer grows to here (Linux: the last of net.ipv4.tcp_wmem's three
    numbers; Gloo leaves an unbound buffer's socket to grow by itself): what a Gloo isend whose receive is
    posted writes from its caller before the rest goes to the loop thread. None where it cannot be read."""
    try:
        return int(path.read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return None


RUNS = 3
"""How many times `bench --calibrate` measures everything by default (`--runs`), each number the median of its
runs': three back-to-back calibrations of the 2-core machine fitted β 3.15-4.17 GB/s and timed a crowded
message 807-1,395 µs, and predicted one measured campaign on 186-247 of its 306 rows ≥ 1 MiB within ±25 %
depending on which one was used; their median predicted it on 239 (docs/predict-accuracy.md)."""


@dataclass(frozen=True)
class Measured:
    """What one run of `bench --calibrate` measured (or the median of several runs, `median`), from which
    `topology_text` writes the topology file."""

    fit: Fit
    memory_bps: float
    page_bps: float | None = None  # None: fresh pages cost nothing measurable
    pairs: AtOnce | None = None
    adds: AtOnce | None = None
    steps: Steps | None = None
    turns: Turns | None = None
    crowded: Crowded | None = None
    lone: Lone | None = None
    swap: Swap | None = None
    streams: Streams | None = None

    @staticmethod
    def median(runs: list[Measured]) -> Measured:
        """Each number the median of the runs' (the lower middle of an even count): α the runs' median, the
        ping-pong's points each size's median one way, and β fitted once over those points (`fit`): one run's β
        rests on its few largest sizes, where one slow call moves it, and each size's median over the runs is
        steadier (seven 3-run calibrations of the 2-core machine predicted their campaigns on 1,749 rows so
        where the runs' median β got 1,701, and none lost more than a row: docs/predict-accuracy.md, "A
        fourteenth campaign"); a latency timed apart (`Steps`, `Crowded`) less its bytes at that β; a call on a
        group of one (`Lone`) the run whose mean call is the median; a measurement of several parts (`AtOnce`,
        `Turns`, `Streams`) the run whose result (capacity, hidden share, streams at once) is the median, so that
        its parts stay one launch's."""
        if len(runs) == 1:
            return runs[0]
        alpha = _middle([r.fit.alpha for r in runs])
        per_size: dict[int, list[float]] = {}
        for r in runs:
            for size, seconds in r.fit.points:
                per_size.setdefault(size, []).append(seconds)
        points = tuple((size, _middle(t)) for size, t in sorted(per_size.items()))
        beta = fit([size for size, _ in points], [t for _, t in points]).beta
        worst = max(abs(alpha + size / beta - t) / t for size, t in points)
        steps = [replace(r.steps, beta=beta) for r in runs if r.steps is not None]
        crowded = [replace(r.crowded, beta=beta) for r in runs if r.crowded is not None]
        return Measured(
            Fit(alpha, beta, worst, points),
            _middle([r.memory_bps for r in runs]),
            _middle([r.page_bps for r in runs], key=lambda b: np.inf if b is None else b),  # None: no cost
            _middle([r.pairs for r in runs if r.pairs is not None], key=lambda a: a.capacity),
            _middle([r.adds for r in runs if r.adds is not None], key=lambda a: a.capacity),
            _middle(steps, key=lambda s: s.alpha),
            _middle([r.turns for r in runs if r.turns is not None], key=lambda t: t.hidden),
            _middle(crowded, key=lambda c: c.alpha),
            _middle([r.lone for r in runs if r.lone is not None], key=lambda c: c.seconds),
            _middle([r.swap for r in runs if r.swap is not None], key=lambda w: w.seconds),
            _middle([r.streams for r in runs if r.streams is not None], key=lambda w: w.together),
        )


def _middle(values: list, key=None):
    """The median item of `values` by `key` (the lower middle of an even count, so always one of them); None
    when there are none."""
    return sorted(values, key=key)[(len(values) - 1) // 2] if values else None


def spread(runs: list[Measured]) -> list[str]:
    """The topology file's comment on several runs: each number's value in every run, of which the file keeps
    the median."""
    if len(runs) < 2:
        return []

    def each(values, unit: str, scale: float) -> str:
        return " / ".join("-" if v is None else f"{v * scale:.4g}" for v in values) + unit

    lines = [
        f"# {len(runs)} runs of every measurement below, each number in the keys the median of the runs' (--runs):",
        f"#   alpha {each([r.fit.alpha for r in runs], ' us', 1e6)},"
        f" beta {each([r.fit.beta for r in runs], ' GB/s', 1e-9)}",
        f"#   memory {each([r.memory_bps for r in runs], ' GB/s', 1e-9)}, fresh pages"
        f" {each([r.page_bps for r in runs], ' GB/s', 1e-9)}",
    ]
    if any(r.steps is not None for r in runs):
        lines.append(f"#   a collective's step {each([r.steps and r.steps.alpha for r in runs], ' us', 1e6)}")
    if any(r.crowded is not None for r in runs):
        lines.append(f"#   a crowded message {each([r.crowded and r.crowded.alpha for r in runs], ' us', 1e6)}")
    if any(r.lone is not None for r in runs):
        lines.append(f"#   a call on a group of one {each([r.lone and r.lone.seconds for r in runs], ' us', 1e6)}")
    if any(r.pairs is not None for r in runs):
        lines.append(f"#   messages at full speed at once {each([r.pairs and r.pairs.capacity for r in runs], '', 1)}")
    if any(r.adds is not None for r in runs):
        lines.append(f"#   adds at full speed at once {each([r.adds and r.adds.capacity for r in runs], '', 1)}")
    if any(r.turns is not None for r in runs):
        lines.append(
            f"#   share of messages hidden under adds {each([r.turns and r.turns.hidden for r in runs], ' %', 100)}"
        )
    if any(r.swap is not None for r in runs):
        lines.append(f"#   a swap of 2 ranks {each([r.swap and r.swap.seconds for r in runs], ' ms', 1e3)}")
    if any(r.streams is not None for r in runs):
        lines.append(
            f"#   one-way streams at once {each([r.streams and r.streams.together for r in runs], ' ms', 1e3)}"
        )
    return lines


def topology_text(
    m: Measured,
    nproc: int,
    backend: str,
    command: str,
    send_buffer: int | None = None,
    cores: int | None = None,
    runs: list[Measured] | None = None,
) -> str:
    """The topology file from `m` (one run's measurements, or the median of `runs`, whose spread it notes):
    one node, every rank on it, α and β fitted, the measurements as comments. Its
    ranks share the host (`shared_node`): its messages a bus of `pairs.capacity` messages at full speed
    (`bus_gbps`; not measured below 4 ranks: one at a time assumed), its ranks' adds a memory of
    `adds.capacity` adds at full speed (`node_memory_gbps`). On Gloo a rank's messages in and out share one
    way (`duplex = false`: its TCP transport moves a process's bytes on one loop thread, gloo/transport/tcp/
    loop.cc); an isend to a posted receive holds its caller while `send_buffer` bytes move (`send_buffer_bytes`);
    a built-in collective's step takes `steps.alpha` (`collective_alpha_us`; without `steps`, a message's α);
    a rank's local ops and messages take turns where `turns` saw them do so (`overlap = false`); the host has
    `cores` cores (`cores_per_node`), and messages at once on more ranks than that take `crowded.alpha`
    (`crowded_alpha_us`; without `crowded`, the ping-pong's α); a collective on a group of one takes
    `lone.seconds` (`collective_call_us`; without `lone`, nothing); its ranks' messages when every rank sends and
    receives at once a bus of what `turns` moved so (`exchange_gbps`), and when two ranks swap what `swap` moved
    (`swap_gbps`); on more ranks than cores a one-way stream's message what `streams` moved alone (`stream_gbps`)
    and such streams at once what they moved together (`stream_bus_gbps`)."""
    f, memory_bps, page_bps, pairs, adds = m.fit, m.memory_bps, m.page_bps, m.pairs, m.adds
    steps, turns, crowded = m.steps, m.turns, m.crowded
    lines = _measurements(m, nproc, backend, command, cores, len(runs or ())) + spread(runs or [])
    lines += [
        'name = "calibrated"',
        f'backend = "{backend}"',
        "ranks_per_node = 65536    # one host: every rank of this machine on one node",
        "nics_per_node = 1",
        "shared_node = true        # one host: its ranks share its cores and memory",
    ]
    if pairs is not None:
        lines.append(
            f"bus_gbps = {pairs.capacity * f.beta / 1e9:.4g}    # its messages together: beta x {pairs.capacity:.2f}"
        )
    crowded_alpha = None if crowded is None else crowded.alpha
    exchange = None if turns is None else turns.exchange_bps(nproc, f.alpha, crowded_alpha, cores)
    if exchange is not None:
        lines.append(
            f"exchange_gbps = {exchange / 1e9:.4g}    # its messages together when every rank sends and receives"
            f" at once: beta x {exchange / f.beta:.2f}"
        )
    swap = None if m.swap is None else m.swap.bps(f.alpha, crowded_alpha, cores)
    if swap is not None:
        lines.append(
            f"swap_gbps = {swap / 1e9:.4g}    # its messages together when two ranks swap: beta x {swap / f.beta:.2f}"
        )
    if m.streams is not None:
        lines += [
            f"stream_gbps = {m.streams.bps / 1e9:.4g}    # a one-way stream's message, one pair streaming:"
            f" beta x {m.streams.bps / f.beta:.2f}",
            f"stream_bus_gbps = {m.streams.bus_bps / 1e9:.4g}    # such streams together, more ranks than cores:"
            f" beta x {m.streams.bus_bps / f.beta:.2f}",
        ]
    if backend == "gloo":
        lines.append("duplex = false            # a rank's messages in and out share its one Gloo loop thread")
    if turns is not None and not turns.overlap:
        lines.append("overlap = false           # a rank's local ops and its messages take turns for a core")
    lines.append(f"memory_gbps = {memory_bps / 1e9:.4g}    # torch `x += y` on 64 MiB float32, 2 x 64 MiB counted")
    if adds is not None:
        lines.append(
            f"node_memory_gbps = {adds.capacity * memory_bps / 1e9:.4g}"
            f"    # its ranks' adds together: memory x {adds.capacity:.2f}"
        )
    if page_bps is None:
        lines.append("# fresh pages cost nothing measurable here (malloc keeps its memory): not counted")
    else:
        lines += [
            f"page_fault_gbps = {page_bps / 1e9:.4g}    # a fresh 64 MiB torch tensor filled, less a kept one",
            f"mmap_threshold_bytes = {MMAP_THRESHOLD_MAX}    # glibc's largest mmap threshold (mallopt(3))",
        ]
    if backend == "gloo" and send_buffer is not None:
        lines.append(
            f"send_buffer_bytes = {send_buffer}    # net.ipv4.tcp_wmem's maximum: an isend to a posted receive"
            " writes this much itself"
        )
    if cores is not None:
        lines.append(f"cores_per_node = {cores}        # this host's cores: more ranks than this crowd it")
    if m.lone is not None:
        lines.append(
            f"collective_call_us = {m.lone.seconds * 1e6:.4g}    # a built-in collective on a group of one: the call"
        )
    lines += [
        f'source = "measured with `{command}`"',
        "",
        "[intra]",
        f"alpha_us = {f.alpha * 1e6:.4g}",
        f"bandwidth_gbps = {f.beta / 1e9:.4g}",
    ]
    if steps is not None:
        lines.append(f"collective_alpha_us = {steps.alpha * 1e6:.4g}    # one step of a built-in collective")
    if crowded is not None and cores is not None:
        lines.append(f"crowded_alpha_us = {crowded.alpha * 1e6:.4g}    # messages at once on more ranks than cores")
    lines.append("")
    return "\n".join(lines)


def _measurements(m: Measured, nproc: int, backend: str, command: str, cores: int | None, runs: int) -> list[str]:
    """The topology file's comments: what was measured (with `runs` > 1, the medians `Measured.median` keeps),
    from which the keys below them follow."""
    f, pairs, adds, steps, turns, crowded = m.fit, m.pairs, m.adds, m.steps, m.turns, m.crowded
    lines = [
        f"# written by `{command}`",
        f"# on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one-way time of a {backend} ping-pong between",
        "# ranks 0 and 1 (half the mean round trip of the slowest rank), fitted to t = alpha + bytes / beta",
        f"# (beta fitted again over the sizes whose bytes are {STREAMING:.0%} of their time, where there are two)",
    ]
    if runs > 1:
        lines.append(f"# (each size its {runs} runs' median, beta fitted over those; alpha the runs' fits' median)")
    lines.append("#        bytes     measured (us)     fitted (us)    error")
    for size, sec in f.points:
        got = f.alpha + size / f.beta
        lines.append(f"# {size:>12}  {sec * 1e6:>16.2f}  {got * 1e6:>14.2f}  {(got - sec) / sec * 100:>+6.1f} %")
    lines.append(f"# largest error of the fit: {f.worst * 100:.1f} %")
    if pairs is None:
        lines.append(
            "# messages at once were not measured (--nproc 4 or more does): one at full speed at a time assumed"
        )
    else:
        lines.append(
            f"# {pairs.count} ping-pong pairs at once, {pairs.size} bytes: {pairs.together * 1e6:.1f} us one way"
            f" against {pairs.alone * 1e6:.1f} us for one pair alone (x{pairs.together / pairs.alone:.2f}):"
            f" {pairs.capacity:.2f} messages at full speed at once"
        )
        if pairs.together <= FULL_SPEED * pairs.alone:  # no sharing seen: the bus is at least this, maybe more
            lines.append(
                f"# every pair ran at full speed, so the host may carry more than {pairs.count} at once: to predict"
                f" more ranks, calibrate with --nproc {4 * pairs.count} ({2 * pairs.count} pairs)"
            )
    if steps is not None:
        calls = ", ".join(f"{n} B {t * 1e6:.0f}" for n, t in steps.points)
        lines.append(
            f"# built-in all_reduce of {steps.world} ranks, us per call: {calls}: {steps.alpha * 1e6:.1f} us a step"
            f" ({ALL_REDUCE.latency_steps(steps.world)} steps a call, less their bytes at beta)"
        )
    if m.lone is not None:
        calls = ", ".join(f"{n} B {t * 1e6:.0f}" for n, t in m.lone.points)
        lines.append(
            f"# built-in all_reduce of {m.lone.world} ranks, each on a group of its own, us per call: {calls}:"
            f" {m.lone.seconds * 1e6:.1f} us a call"
        )
    if crowded is not None:
        ways = ", ".join(f"{n} B {t * 1e6:.0f}" for n, t in crowded.points)
        lines.append(
            f"# {crowded.world} ranks on {crowded.cores} cores each sending to the next and receiving from the last"
            f" at once, us a step: {ways}: {crowded.alpha * 1e6:.1f} us less their bytes at beta (a crowded message)"
        )
    elif cores is not None and nproc <= cores:
        lines.append(
            f"# {nproc} ranks on {cores} cores: a crowded host's messages were not measured (--nproc {cores + 1} does)"
        )
    if turns is not None:
        lines.append(
            f"# every rank's isend and irecv of {turns.size} bytes: {turns.messages * 1e6:.1f} us, its adds of them:"
            f" {turns.adds * 1e6:.1f} us, both at once: {turns.together * 1e6:.1f} us ({turns.hidden * 100:.0f} % of"
            f" the shorter hidden under the longer): {'side by side' if turns.overlap else 'they take turns'}"
        )
    if m.swap is not None:
        lines.append(
            f"# 2 ranks' isend and irecv of {m.swap.size} bytes, to each other at once: {m.swap.seconds * 1e6:.1f} us"
        )
    if m.streams is not None:
        w = m.streams
        lines.append(
            f"# {w.count} pairs each sending {w.size} bytes one way on and on, at once: {w.together * 1e6:.1f} us a"
            f" message, one such pair alone {w.alone * 1e6:.1f} us"
        )
    if adds is not None:
        lines.append(
            f"# {adds.count} ranks adding {adds.size} bytes at once, six adds in a row: {adds.together * 1e6:.1f} us"
            f" against {adds.alone * 1e6:.1f} us for one rank alone (x{adds.together / adds.alone:.2f}):"
            f" {adds.capacity:.2f} adds at full speed at once"
        )
    return lines
