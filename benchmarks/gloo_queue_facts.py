"""How torch's Gloo backend queues a process group's collectives, measured with plain torch: the facts
`commdsl predict` models (docs/predict.md, "Gloo's worker threads" and "Coalesced blocks on Gloo") and the
checker's barrier (docs/backend-support.md#async-ops).

    timeout 300 python benchmarks/gloo_queue_facts.py threads     # a small all_reduce behind 0-3 big async ones
    timeout 300 python benchmarks/gloo_queue_facts.py coalesced   # a coalesced block against the same calls alone
    timeout 300 python benchmarks/gloo_queue_facts.py barrier     # does a barrier end an async all_reduce?
    timeout 300 python benchmarks/gloo_queue_facts.py isend       # how long an isend holds its caller
    timeout 300 python benchmarks/gloo_queue_facts.py overlap     # does a rank compute while its messages move?
    timeout 300 python benchmarks/gloo_queue_facts.py crowded     # a message when 4 ranks on 2 cores all exchange
    timeout 300 python benchmarks/gloo_queue_facts.py pages [N]   # an all_gather's fresh pages at N ranks (4)
    timeout 300 python benchmarks/gloo_queue_facts.py kinds [N]   # each built-in's latency at N ranks (2)
    timeout 300 python benchmarks/gloo_queue_facts.py between     # all_reduce back to back, or after an add or a wait
    timeout 600 python benchmarks/gloo_queue_facts.py sweep [N]   # N ranks' messages and all_reduce, 1-64 MiB (4)
    timeout 600 python benchmarks/gloo_queue_facts.py after [N]   # a collective alone, after itself, after an add (4)
    timeout 600 python benchmarks/gloo_queue_facts.py adders      # all_reduce after an add on 0-4 of its ranks
    timeout 600 python benchmarks/gloo_queue_facts.py lone [N]    # a message, all_to_all, all_reduce of all and of one
    timeout 600 python benchmarks/gloo_queue_facts.py receivers [N] # a receiver's CPU: one way, ping-pong, a tree (4)

`threads`: rank 0 prints when a 1-element async `all_reduce`, issued behind k async ones of 256 MiB, ended,
and which of the big ones had ended by then. With two worker threads per group it waits for the first big one
once two are in flight. `coalesced`: the median of 15 calls of `all_reduce` on 8 and 16 MiB (and 3 elements)
in a `_coalescing_manager` block, the same three blocking one by one, and one `all_reduce` of their 24 MiB.
`barrier`: whether an async 256 MiB `all_reduce` has ended when a barrier returns, with the barrier on the
all_reduce's group and on another (rank 1 reaches the barrier 50 ms late). `isend`: the median time (9 calls)
an `isend` call takes to return when its receive was posted 10 ms before it and when it is posted 10 ms after,
the first's time to its `wait()`, and an `irecv` call's time when its send was issued 10 ms before it
(docs/predict.md, "An isend to a posted receive writes from its caller"). `overlap`: the median (15 calls) of
each rank's isend and irecv of n bytes to and from the other, of its compute on n bytes (`acc += q * kv` in
float64, ring attention's step), and of both at once, the compute issued between the messages' posts and their
waits (docs/predict.md, "A rank's local ops and its messages"). `crowded` (four ranks): the median and mean of
100 calls at 4 and 64 KiB of a lone ping-pong's one way between ranks 0 and 1 while ranks 2 and 3 wait, and of
a ring's step where every rank isends to the next and irecvs from the last at once (docs/predict-accuracy.md,
"A crowded host"). `pages` (N ranks, default 4): the mean of 10 calls at 16 and 64 MiB of
`all_gather_into_tensor`, of what torch does around Gloo's ring on every rank at once (a fresh tensor of the
output's size filled, then copied into the output), and of the ring's messages alone (p - 1 steps of isend to
the next and irecv from the last of a member's block) (docs/predict-accuracy.md, "Another machine": a
collective's fresh pages on a crowded host). `kinds` (N ranks, default 2): the median and mean of 100 calls at
4 and 64 KiB of each built-in collective the model prices by its own latency rule — all_reduce and
reduce_scatter (2(p - 1) ring steps), all_gather (p - 1), all_to_all (one wait), broadcast (a binomial tree of
messages) — beside a lone ping-pong's one way (docs/predict-accuracy.md, "A sixth campaign, and three more
trials not kept"). Two ranks (four for `crowded` and `pages`) on 127.0.0.1, one intra-op thread each (as
`commdsl bench`). `between` (four ranks): the mean over 20 calls (after 5) of the slowest rank's built-in
`all_reduce` at 64 KiB, 1, 4 and 16 MiB, called back to back, after an add of the same size, and after 3 ms
idle: whether a loop of one collective, as `commdsl bench --collective` runs it, pays a ring step's wake-ups
as a collective between a program's other ops does (docs/predict-accuracy.md, "A tenth campaign").
`sweep` (N ranks, default 4): at 1-64 MiB, the median of 12 calls (6 from 24 MiB) of a lone ping-pong's one way
between ranks 0 and 1, of two pairs' at once (0-1 and 2-3; at two ranks the one pair again), of a ring step
(every rank isends to the next and irecvs from the last: at two ranks both send to each other at once) and of the
built-in `all_reduce`: whether the bytes cost more a MiB once the four ranks' buffers outgrow the cache
(docs/predict-accuracy.md, "The model against a second campaign of its day"), and at two ranks what an exchange
costs against a one-way message ("A fourteenth campaign").
`after` (N ranks, default 4): at 1, 4 and 8 MiB, the built-in `all_reduce`, `all_gather_into_tensor`,
`reduce_scatter_tensor` and `all_to_all_single` each timed five ways in one launch, the five alternating round by
round (24 rounds, after 3 untimed): alone after a barrier, right after a call of itself, right after an add of the
same size, right after a ring step (every rank isends to the next and irecvs from the last) and right after
another barrier. Each round every rank times from the barrier to the end of what precedes the collective and to
the collective's end; the collective's time is the slowest rank's second less the slowest rank's first, its median
over the rounds printed (docs/predict-accuracy.md, "A collective straight from communication"). `adders` (four
ranks): the same for the built-in `all_reduce` at 4 and 8 MiB right after itself and right after an add of its
size on rank 0, on ranks 0 and 1, on ranks 0 and 2, on ranks 0-2 and on every rank: how many members computing
before it make its steps cost on top of its bytes. `lone` (N ranks, default 2): at 4 KiB, 64 KiB, 1 and 4 MiB,
60 rounds (after 5 untimed calls of each) each timing, after a barrier, a ping-pong's one way between ranks 0
and 1, `all_to_all_single`, the built-in `all_reduce` of every rank and one on a group of the rank alone; the
slowest rank's mean and median of each (docs/predict-accuracy.md, "A sixteenth campaign, on a fresh machine":
at two ranks the all-to-all costs one message of its bytes, and a collective on a group of one is not free).
`receivers` (N ranks, default 4): at 1 and 16 MiB, 100 calls (12 at 16 MiB) back to back after 5 of each of:
rank 1 sending to rank 0, one way or as a ping-pong (rank 0 sends it back), alone (the other ranks idle) or, from
four ranks, beside rank 3 doing the same to rank 2; and the binomial-tree reduce of the N ranks (at four, 1 → 0
and 3 → 2, then 2 → 0, each receiver adding): the slowest rank's time a message (a reduce: a call) and each
rank's CPU time in it, all its threads' (`getrusage`), and in brackets its Gloo loop threads' (Linux's
/proc/self/task; in clock ticks, so ±10 ms over the calls): what a receiver's loop thread burns while a sender
streams to it (docs/predict-accuracy.md, "A receiver's CPU, measured").
"""

import os
import resource
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads(rank: int) -> None:
    small = torch.ones(1)
    for k in range(4):
        big = [torch.ones(64 << 20) for _ in range(k)]
        dist.barrier()
        t0 = time.perf_counter()
        handles = [dist.all_reduce(b, async_op=True) for b in big]
        dist.all_reduce(small, async_op=True).wait()
        ended = time.perf_counter() - t0
        done = [h.is_completed() for h in handles]
        for h in handles:
            h.wait()
        if rank == 0:
            print(
                f"{k} of 256 MiB in flight: the small one ended at {ended * 1e3:.1f} ms; big ones ended by then: {done}"
            )


def coalesced(rank: int) -> None:
    n = 1 << 22
    a, b, c = torch.ones(n // 2), torch.ones(n), torch.ones(3)
    flat = torch.ones(3 * n // 2 + 3)

    def block():
        with dist._coalescing_manager():
            for t in (a, b, c):
                dist.all_reduce(t)

    def one_by_one():
        for t in (a, b, c):
            dist.all_reduce(t)

    for name, call in (
        ("coalesced 8 + 16 MiB", block),
        ("the three blocking", one_by_one),
        ("one of 24 MiB", lambda: dist.all_reduce(flat)),
    ):
        for _ in range(3):
            call()
        dist.barrier()
        times = []
        for _ in range(15):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"{name}: median {sorted(times)[7] * 1e3:.1f} ms")


def barrier(rank: int) -> None:
    other = dist.new_group([0, 1])  # the same ranks, another process group
    for label, group in (("its group", None), ("another group", other)):
        x = torch.ones(64 << 20)
        dist.barrier()
        t0 = time.perf_counter()
        handle = dist.all_reduce(x, async_op=True)
        if rank == 1:
            time.sleep(0.05)
        dist.barrier(group=group)
        returned, ended = time.perf_counter() - t0, handle.is_completed()
        handle.wait()
        if rank == 0:
            print(f"barrier on {label}: returned at {returned * 1e3:.0f} ms; the all_reduce had ended: {ended}")


def isend(rank: int) -> None:
    def settle():
        dist.barrier()
        time.sleep(0.01)

    for size in (1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26):
        x, y = torch.ones(size // 4), torch.empty(size // 4)
        after, total, before, recv = [], [], [], []
        for _ in range(9):
            h = dist.irecv(y, 0) if rank == 1 else None
            settle()
            if rank == 0:  # the receive is posted: the call writes the message
                t0 = time.perf_counter()
                h = dist.isend(x, 1)
                after.append(time.perf_counter() - t0)
            h.wait()  # once: a Gloo send's second wait() does not return (torch 2.13)
            if rank == 0:
                total.append(time.perf_counter() - t0)
            dist.barrier()
            if rank == 0:  # no receive yet: the call returns at once, and the receive, later, is quick
                t0 = time.perf_counter()
                h = dist.isend(x, 1)
                before.append(time.perf_counter() - t0)
            settle()
            if rank == 1:
                t0 = time.perf_counter()
                h = dist.irecv(y, 0)
                recv.append(time.perf_counter() - t0)
            h.wait()
            dist.barrier()
        recv_t = torch.tensor([sorted(recv)[4] if recv else 0.0])
        dist.all_reduce(recv_t)
        if rank == 0:
            ms = [sorted(v)[4] * 1e3 for v in (after, total, before)] + [recv_t.item() * 1e3]
            print(
                f"{size >> 10:6d} KiB: isend after its irecv returned in {ms[0]:6.2f} ms (done at its wait "
                f"{ms[1]:6.2f} ms); before it {ms[2]:5.2f} ms; irecv after its isend {ms[3]:5.2f} ms"
            )


def overlap(rank: int) -> None:
    for size in (1 << 22, 1 << 24, 1 << 26):
        ms = overlap_at(1 - rank, size)
        if rank == 0:
            print(
                f"{size >> 20:3d} MiB: messages {ms['messages']:6.2f} ms, compute {ms['compute']:6.2f} ms, both at "
                f"once {ms['both']:6.2f} ms (their sum {ms['messages'] + ms['compute']:6.2f}, the longer "
                f"{max(ms['messages'], ms['compute']):6.2f})"
            )


def overlap_at(peer: int, size: int) -> dict[str, float]:
    """Milliseconds (median of 15) of the messages, the compute and both, at `size` bytes."""
    kv, incoming = torch.ones(size // 8, dtype=torch.float64), torch.empty(size // 8, dtype=torch.float64)
    q, acc = torch.ones_like(kv), torch.zeros_like(kv)

    def messages():
        h, r = dist.isend(kv, peer), dist.irecv(incoming, peer)
        h.wait()  # once each: a Gloo send's second wait() does not return (torch 2.13)
        r.wait()

    def compute():
        acc.add_(q * kv)

    def both():
        h, r = dist.isend(kv, peer), dist.irecv(incoming, peer)
        acc.add_(q * kv)
        h.wait()
        r.wait()

    ms = {}
    for name, f in (("messages", messages), ("compute", compute), ("both", both)):
        times = []
        for _ in range(15):
            dist.barrier()
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        ms[name] = sorted(times)[7] * 1e3
    return ms


def ping_pong(rank: int, x: torch.Tensor, y: torch.Tensor) -> None:
    """Rank 0 sends `x` to rank 1, which sends it back into rank 0's `y`; the other ranks wait."""
    if rank == 0:
        dist.send(x, 1)
        dist.recv(y, 1)
    elif rank == 1:
        dist.recv(y, 0)
        dist.send(x, 0)


def crowded(rank: int) -> None:
    world = dist.get_world_size()
    for size in (1 << 12, 1 << 16):
        x, y = torch.ones(size // 4), torch.empty(size // 4)

        def lone(x=x, y=y):
            ping_pong(rank, x, y)

        def ring(x=x, y=y):
            h, r = dist.isend(x, (rank + 1) % world), dist.irecv(y, (rank - 1) % world)
            h.wait()
            r.wait()

        lone_us = [t / 2 for t in timed(lone)]  # one way: half the round trip
        ring_us = timed(ring)
        if rank == 0:
            print(
                f"{size >> 10:2d} KiB: a lone pair's one way median {statistics.median(lone_us):6.0f} us, mean "
                f"{statistics.mean(lone_us):6.0f}; every rank's ring step median {statistics.median(ring_us):6.0f} us,"
                f" mean {statistics.mean(ring_us):6.0f} ({world} ranks, {len(os.sched_getaffinity(0))} cores)"
            )


def pages(rank: int) -> None:
    world = dist.get_world_size()
    for mib in (16, 64):
        n = (mib << 20) // 4
        out, block, got = torch.empty(n), torch.full((n // world,), float(rank)), torch.empty(n // world)

        def gather(out=out, block=block):
            dist.all_gather_into_tensor(out, block)

        def fresh(out=out, n=n):
            flat = torch.empty(n)  # at least glibc's mmap threshold: mapped anew, faulted in, on every call
            flat.fill_(1.0)
            out.copy_(flat)

        def ring(block=block, got=got):
            for _ in range(world - 1):
                h, r = dist.isend(block, (rank + 1) % world), dist.irecv(got, (rank - 1) % world)
                h.wait()
                r.wait()

        ms = {
            name: statistics.mean(timed(f, calls=10)) / 1e3
            for name, f in (("all_gather", gather), ("fresh + copy out", fresh), ("ring alone", ring))
        }
        if rank == 0:
            print(
                f"{mib} MiB at {world} ranks on {len(os.sched_getaffinity(0))} cores, ms a call (mean of 10): "
                + ", ".join(f"{name} {t:.1f}" for name, t in ms.items())
            )


def kinds(rank: int) -> None:
    world = dist.get_world_size()
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # torch 2.13's name
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    for size in (1 << 12, 1 << 16):
        n = size // 4 // world * world
        x, whole, part, y = torch.ones(n), torch.empty(n * world), torch.empty(n // world), torch.empty(n)
        calls = {
            "all_reduce": lambda x=x: dist.all_reduce(x),
            "reduce_scatter": lambda x=x, part=part: scatter(part, x),
            "all_gather": lambda x=x, whole=whole: gather(whole, x),
            "all_to_all": lambda x=x, y=y: dist.all_to_all_single(y, x),
            "broadcast": lambda x=x: dist.broadcast(x, 0),
        }
        us = {name: timed(f) for name, f in calls.items()}
        us["ping-pong one way"] = [t / 2 for t in timed(lambda x=x, y=y: ping_pong(rank, x, y))]
        if rank == 0:
            for name, times in us.items():
                print(
                    f"{size >> 10:2d} KiB, {world} ranks on {len(os.sched_getaffinity(0))} cores: {name:17s} median"
                    f" {statistics.median(times):6.0f} us, mean {statistics.mean(times):6.0f}"
                )


def between(rank: int) -> None:
    for size in (1 << 16, 1 << 20, 1 << 22, 1 << 24):
        x = torch.ones(size // 4)
        y = torch.empty_like(x)
        before = {
            "back to back": lambda: None,
            "after an add": lambda x=x, y=y: torch.mul(x, 2, out=y),
            "after 3 ms idle": lambda: time.sleep(0.003),
        }
        ms = {}
        for name, first in before.items():
            dist.barrier()
            times = []
            for _ in range(25):
                first()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times.append(time.perf_counter() - t0)
                x.fill_(1.0)
            slowest = torch.tensor([statistics.mean(times[5:])])
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            ms[name] = slowest.item() * 1e3
        if rank == 0:
            print(
                f"{size >> 10:5d} KiB all_reduce at {dist.get_world_size()} ranks on {len(os.sched_getaffinity(0))}"
                " cores, ms a call (the slowest rank's mean of 20): " + ", ".join(f"{k} {v:.1f}" for k, v in ms.items())
            )


def sweep(rank: int) -> None:
    world = dist.get_world_size()
    for mib in (1, 2, 4, 8, 12, 16, 24, 32, 64):
        x, y = torch.ones(mib << 18), torch.empty(mib << 18)

        def pairs(x=x, y=y):
            partner = rank ^ 1
            if rank % 2 == 0:
                dist.send(x, partner)
                dist.recv(y, partner)
            else:
                dist.recv(y, partner)
                dist.send(x, partner)

        def ring(x=x, y=y):
            h, r = dist.isend(x, (rank + 1) % world), dist.irecv(y, (rank - 1) % world)
            h.wait()
            r.wait()

        calls = 12 if mib <= 16 else 6
        lone = statistics.median(t / 2 for t in timed(lambda x=x, y=y: ping_pong(rank, x, y), calls))
        two = statistics.median(t / 2 for t in timed(pairs, calls))
        step = statistics.median(timed(ring, calls))
        reduced = statistics.median(timed(lambda x=x: dist.all_reduce(x), calls))
        if rank == 0:
            b = mib << 20
            print(
                f"{mib:2d} MiB: a lone pair's one way {lone:7.0f} us ({b / lone / 1e3:.2f} GB/s), two pairs at once"
                f" {two:7.0f} (x{two / lone:.2f}), a ring step {step:7.0f} ({b / step / 1e3:.2f} GB/s), all_reduce"
                f" {reduced:7.0f} ({reduced / mib / 1e3:.2f} ms a MiB)",
                flush=True,
            )


def after(rank: int) -> None:
    world = dist.get_world_size()
    for mib in (1, 4, 8):
        x, y = torch.ones(mib << 18), torch.empty(mib << 18)
        gathered, shard = torch.empty(world * (mib << 18)), torch.empty((mib << 18) // world)
        kinds = {
            "all_reduce": lambda x=x: dist.all_reduce(x),
            "all_gather": lambda x=x, g=gathered: dist.all_gather_into_tensor(g, x),
            "reduce_scatter": lambda x=x, s=shard: dist.reduce_scatter_tensor(s, x),
            "all_to_all": lambda x=x, y=y: dist.all_to_all_single(y, x),
        }
        for name, collective in kinds.items():
            before = {
                "alone": lambda: None,
                "after itself": collective,
                "after an add": lambda x=x, y=y: torch.add(x, 1, out=y),
                "after a ring step": lambda x=x, y=y: ring_step(rank, x, y),
                "after a barrier": dist.barrier,
            }
            alternated(rank, f"{mib} MiB {name:14s}", collective, before)


def adders(rank: int) -> None:
    world = dist.get_world_size()
    for mib in (4, 8):
        x, y = torch.ones(mib << 18), torch.empty(mib << 18)

        def add_on(ranks: set[int], x=x, y=y):
            return lambda: torch.add(x, 1, out=y) if rank in ranks else None

        def collective(x=x):
            dist.all_reduce(x)

        before = {
            "after itself": collective,
            "an add on rank 0": add_on({0}),
            "on 0 and 1": add_on({0, 1}),
            "on 0 and 2": add_on({0, 2}),
            "on 0-2": add_on({0, 1, 2}),
            "on every rank": add_on(set(range(world))),
        }
        alternated(rank, f"{mib} MiB all_reduce", collective, before)


def alternated(rank: int, label: str, collective, before: dict) -> None:
    """Rank 0 prints, per case of `before`, the median over 24 rounds (after 3 untimed) of `collective`'s time
    right after the case, the cases alternating round by round. Each round every rank times from a barrier to
    the end of the case and to the collective's end; the collective's time is the slowest rank's second less
    the slowest rank's first."""
    for _ in range(3):
        for first in before.values():
            first()
            collective()
    ends = torch.zeros(2, len(before), 24, dtype=torch.float64)  # (the case's end, the collective's) per round
    for r in range(24):
        for j, first in enumerate(before.values()):
            dist.barrier()
            t0 = time.perf_counter()
            first()
            t1 = time.perf_counter()
            collective()
            ends[0, j, r], ends[1, j, r] = t1 - t0, time.perf_counter() - t0
    dist.all_reduce(ends, op=dist.ReduceOp.MAX)  # the slowest rank's, each round
    if rank == 0:
        ms = [statistics.median((ends[1, j] - ends[0, j]).tolist()) * 1e3 for j in range(len(before))]
        print(
            f"{label} at {dist.get_world_size()} ranks, ms (median of 24 rounds): "
            + ", ".join(f"{k} {v:.1f}" for k, v in zip(before, ms)),
            flush=True,
        )


def lone(rank: int) -> None:
    world = dist.get_world_size()
    own = [dist.new_group([r]) for r in range(world)][rank]  # every rank makes every group, in the same order
    for size in (1 << 12, 1 << 16, 1 << 20, 1 << 22):
        n = size // 4 // world * world
        x, y = torch.ones(n), torch.empty(n)
        calls = {
            "ping-pong one way": lambda x=x, y=y: ping_pong(rank, x, y),
            "all_to_all": lambda x=x, y=y: dist.all_to_all_single(y, x),
            "all_reduce": lambda x=x: dist.all_reduce(x),
            "all_reduce of one": lambda x=x: dist.all_reduce(x, group=own),
        }
        us: dict[str, list[float]] = {name: [] for name in calls}
        for f in calls.values():
            for _ in range(5):
                f()
        for _ in range(60):
            for name, f in calls.items():
                dist.barrier()
                t0 = time.perf_counter()
                f()
                us[name].append((time.perf_counter() - t0) * 1e6)
        halves = {name: 2 if name == "ping-pong one way" else 1 for name in calls}
        got = torch.tensor([[statistics.mean(t), statistics.median(t)] for t in us.values()], dtype=torch.float64)
        dist.all_reduce(got, op=dist.ReduceOp.MAX)  # the slowest rank's
        if rank == 0:
            print(
                f"{size >> 10:5d} KiB, {world} ranks, us mean / median: "
                + ", ".join(f"{k} {m / halves[k]:.0f} / {d / halves[k]:.0f}" for k, (m, d) in zip(calls, got.tolist())),
                flush=True,
            )


def receivers(rank: int) -> None:
    for size in (1 << 20, 16 << 20):
        x, tmp = torch.ones(size // 4), torch.empty(size // 4)
        calls = 100 if size < 8 << 20 else 12
        patterns = {  # name: (one call, messages a call)
            "ping-pong, 1 pair": (lambda x=x: pairs_send(rank, x, 1, one_way=False), 2),
            "ping-pong, 2 pairs": (lambda x=x: pairs_send(rank, x, 2, one_way=False), 2),
            "one way, 1 pair": (lambda x=x: pairs_send(rank, x, 1, one_way=True), 1),
            "one way, 2 pairs": (lambda x=x: pairs_send(rank, x, 2, one_way=True), 1),
            "binomial reduce": (lambda x=x, tmp=tmp: binomial_reduce(rank, x, tmp), 1),
        }
        for name, (once, messages) in patterns.items():
            if "2 pairs" in name and dist.get_world_size() < 4:
                continue
            for _ in range(5):
                once()
            dist.barrier()
            cpu0, loop0, t0 = cpu_seconds(), loop_seconds(), time.perf_counter()
            for _ in range(calls):
                once()
            spent = [time.perf_counter() - t0, cpu_seconds() - cpu0, loop_seconds() - loop0]
            mine = torch.tensor(spent) * 1e6 / calls / messages
            every = [torch.empty(3) for _ in range(dist.get_world_size())]
            dist.all_gather(every, mine)
            if rank == 0:
                print(
                    f"{size >> 20:2d} MiB, {name:18s}: {max(float(e[0]) for e in every):6.0f} us a "
                    f"{'call' if name == 'binomial reduce' else 'message'}; CPU (its loop threads'), ranks "
                    f"0-{len(every) - 1}: "
                    + ", ".join(f"{float(e[1]):.0f} ({float(e[2]):.0f})" for e in every)
                    + " us",
                    flush=True,
                )


def pairs_send(rank: int, x: torch.Tensor, pairs: int, one_way: bool) -> None:
    """Ranks 1 → 0 (and 3 → 2 with two pairs): one message, or a ping-pong (the even rank sends it back)."""
    if rank >= 2 * pairs:
        return
    peer = rank ^ 1
    if rank & 1:
        dist.send(x, peer)
        if not one_way:
            dist.recv(x, peer)
    else:
        dist.recv(x, peer)
        if not one_way:
            dist.send(x, peer)


def binomial_reduce(rank: int, x: torch.Tensor, tmp: torch.Tensor) -> None:
    """A sum to rank 0 along a binomial tree (benchmarks/figures/predict-novel/binomial_reduce.comm)."""
    world, mask = dist.get_world_size(), 1
    while mask < world:
        if rank & mask:
            dist.send(x, rank - mask)
            return
        if rank + mask < world:
            dist.recv(tmp, rank + mask)
            x += tmp
        mask <<= 1


def cpu_seconds() -> float:
    """This process's CPU time so far, user and system, every thread's (Gloo's loop threads too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def loop_seconds() -> float:
    """The CPU time so far of this process's Gloo loop threads (named `gloo_tcp_loop`), from Linux's
    /proc/self/task/*/stat (utime and stime, in clock ticks: 10 ms, so a sum over many calls)."""
    ticks = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread ended
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")] == "gloo_tcp_loop":
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def ring_step(rank: int, x: torch.Tensor, y: torch.Tensor) -> None:
    """Every rank isends `x` to the next and irecvs `y` from the last, and waits for both."""
    world = dist.get_world_size()
    sent, got = dist.isend(x, (rank + 1) % world), dist.irecv(y, (rank - 1) % world)
    sent.wait()
    got.wait()


def timed(f, calls: int = 100) -> list[float]:
    """Microseconds of each of `calls` calls of `f`, every rank starting each together, after 10 untimed."""
    for _ in range(10):
        f()
    times = []
    for _ in range(calls):
        dist.barrier()
        t0 = time.perf_counter()
        f()
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def worker(rank: int, world: int, port: int, scenario: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        SCENARIOS[scenario](rank)
    finally:
        dist.destroy_process_group()


SCENARIOS = {
    "threads": threads,
    "coalesced": coalesced,
    "barrier": barrier,
    "isend": isend,
    "overlap": overlap,
    "crowded": crowded,
    "pages": pages,
    "kinds": kinds,
    "between": between,
    "sweep": sweep,
    "after": after,
    "adders": adders,
    "lone": lone,
    "receivers": receivers,
}
# ranks per scenario (default 2; `pages N`, `kinds N`, `sweep N`, `after N`, `lone N` or `receivers N` for N)
WORLDS = {"crowded": 4, "pages": 4, "between": 4, "sweep": 4, "after": 4, "adders": 4, "receivers": 4}

if __name__ == "__main__":
    scenario = sys.argv[1] if len(sys.argv) > 1 else ""
    if scenario not in SCENARIOS:
        sys.exit(
            f"usage: gloo_queue_facts.py {'|'.join(SCENARIOS)} [ranks, for pages, kinds, sweep, after, lone, receivers]"
        )
    sized = scenario in ("pages", "kinds", "after", "sweep", "lone", "receivers") and len(sys.argv) > 2
    world = int(sys.argv[2]) if sized else WORLDS.get(scenario, 2)
    if world < 2:
        sys.exit(f"gloo_queue_facts.py {scenario}: needs 2 ranks or more")
    if scenario in ("after", "sweep") and world & (world - 1):  # blocks of 2^k elements; pairs of ranks
        sys.exit(f"gloo_queue_facts.py {scenario}: needs a power of two of ranks")
    mp.spawn(worker, args=(world, free_port(), scenario), nprocs=world)
