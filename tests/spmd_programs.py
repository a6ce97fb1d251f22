"""Random SPMD programs built from the language's statements, for the golden verdicts (test_golden.py).

Each program declares a few tensors and groups and strings together statements that exercise
expansion (views, chunks, per-rank values, loops with per-rank bounds), matching (batches, tags,
neighbour exchanges), collectives on groups, local compute in every dtype and expects, some buggy and
most not. Deterministic for a seed (random.Random), so their verdicts can be pinned in a file.
"""

from __future__ import annotations

import random

_PEER = ["(rank + 1) % world", "(rank - 1) % world", "(rank + 2) % world", "rank", "rank + 1",
         "world - 1 - rank", "(rank + world // 2) % world"]
_K = ["0", "1", "rank % 2", "(rank + 1) % 2", "rank % world"]
_ROOT = ["0", "1", "world - 1", "rank % 2"]


def _statement(rng: random.Random) -> str:
    c = rng.choice
    kinds = [
        lambda: f"batch:\n    send x.chunk({c(_K)}, 2) to {c(_PEER)}{c(['', ' tag 1'])}\n"
                f"    recv y.chunk({c(_K)}, 2) from {c(_PEER)}{c(['', ' tag 1'])}",
        lambda: (lambda p, first: f"on rank % 2 == 0:\n    send x to {p}\n    recv y from {p}\nelse:\n"
                 f"    {'recv y from rank - 1' if first else 'send x to rank - 1'}\n"
                 f"    {'send x to rank - 1' if first else 'recv y from rank - 1'}")(
            c(["rank + 1", "(rank + 1) % world"]), c([True, False])),
        lambda: "on rank == 0:\n    for d in 1 .. world - 1:\n        send x to d\nelse:\n    recv x from 0",
        lambda: (lambda r, t: f"on rank == {r}:\n    send x to (rank + 1) % world tag {t}\n"
                 f"on rank == ({r} + 1) % world:\n    recv y from {r} tag 1")(c(["0", "1"]), c(["0", "1"])),
        lambda: f"all_reduce x op {c(['sum', 'max', 'min', 'product', 'avg', 'band'])}",
        lambda: f"broadcast y from {c(_ROOT)}",
        lambda: f"reduce x to {c(_ROOT)}",
        lambda: "all_gather x into g",
        lambda: f"gather y into g to {c(_ROOT)}",
        lambda: f"scatter g into x from {c(_ROOT)}",
        lambda: "reduce_scatter g into y op sum",
        lambda: "all_to_all g into h",
        lambda: "barrier",
        lambda: "all_reduce x in pairs",
        lambda: f"broadcast y from {c(['rank', 'rank - rank % 2', '0'])} in pairs",
        lambda: c(["x = rank + i", "y += x", "x *= 2", "y = x - rank * 2", "x.chunk(rank % 2, 2) += 1",
                   "y = min(x, 3) + 1", "x = y / 2", "x = y // 2 + rank", "g = i * 2 - rank", "x[0] = world / 3",
                   "y = x + 0.25", "x.chunk(1, 2) -= y.chunk(0, 2)", "h = g * rank"]),
        lambda: c(["expect x >= 0", "expect y == y", "expect x == rank + i", "expect g < 100",
                   "expect x.chunk(0, 2) != 7", "print x"]),
        lambda: f"for s in 0 .. world - 2:\n    batch:\n        send x.chunk((rank - s) % world, world) to "
                f"(rank + 1) % world\n        recv y.chunk((rank - s - {c(['1', '0'])}) % world, world) from "
                f"(rank - 1) % world\n    x.chunk((rank - s - 1) % world, world) += y.chunk((rank - s - 1) % world, world)",
        lambda: c(["for s in 0 .. 2:\n    let k = (rank + s) % 2\n    x.chunk(k, 2) += s / 2\n    expect x >= -100",
                   "for s in 1 .. world - 1:\n    send x to (rank + s) % world\n    recv y from (rank - s) % world",
                   "for s in 0 .. 1:\n    batch:\n        let d = s + 1\n        send x to (rank + d) % world\n"
                   "        recv y from (rank - d) % world\n    y += s\n    print y",
                   "for s in 0 .. world - 1:\n    g.chunk(s, world) = x[0] * s - rank"]),
        lambda: c(["all_gather x into [p0, p1]", "scatter [p0, p1] into y from 1", "reduce_scatter [p0, p1] into y op max",
                   "gather y into [p0, p1] to 0", "all_reduce x op premul_sum(0.5)", "all_reduce x op bxor",
                   "m[rank % 2] = rank + i", "send m[0] to (rank + 1) % world\nrecv m[1] from (rank - 1) % world",
                   "batch:\n    send m[0] to (rank + 1) % world\n    recv m[1] from (rank - 1) % world",
                   "all_reduce m op min", "m[1] += m[0]", "expect m[0] == rank + i", "broadcast m[1] from 0"]),
        lambda: c(["for s in 0 .. rank:\n    x += s", "for s in rank .. 2:\n    y -= 1",
                   "for s in 0 .. rank % 3:\n    all_reduce x in pairs",
                   "h1 = isend x to (rank + 1) % world\nh2 = irecv y from (rank - 1) % world\nwait h1, h2",
                   "h1 = isend x to (rank + 1) % world\nirecv y from (rank - 1) % world\nwait all",
                   "q = all_reduce x\nwait q", "q = all_reduce x\nx = 1\nwait q",
                   "h1 = isend x to (rank + 1) % world\nx = 2\nrecv y from (rank - 1) % world\nwait h1",
                   "tag_peer = 0", "x = y * 0.5 + rank", "y = -x + abs(rank - 2)"]),
    ]
    return rng.choice(kinds)()


def generate(rng: random.Random) -> tuple[int, str]:
    world = rng.randint(1, 6)
    n = rng.choice([2, 4, 6, 12])
    dtype = rng.choice(["float32", "float64", "int32", "int64", "float16", "bfloat16", "uint8"])
    body = [_statement(rng) for _ in range(rng.randint(1, 6))]
    backend = rng.choice(["", "backend nccl", "backend gloo, nccl"])
    head = [f"world {world}", backend, "group pairs = split by rank // 2", f"tensor x: {dtype}[{n}] = rank * 3 + i",
            f"tensor y: {dtype}[{n}] = {n} - i", f"tensor g: {dtype}[world * {n}] = i",
            f"tensor h: {dtype}[world * {n}]", f"tensor p0: {dtype}[{n}] = rank", f"tensor p1: {dtype}[{n}] = 1",
            f"tensor m: {dtype}[2, {n // 2}] = i + rank"]
    return world, "\n".join(head + body) + "\n"
