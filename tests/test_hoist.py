"""`commdsl.hoist`: a loop's integer expressions computed for many iterations at once give the expansion
exactly what computing them iteration by iteration gives: every rank's ops, and every diagnostic, for
programs built to trip it (names the body reassigns, `let`s scoped to a `batch`, a failure at one iteration,
ranks that stop mid-loop, int64 overflow, nested loops, lists, calls) and for random SPMD programs."""

from __future__ import annotations

import random
import sys

import pytest
from spmd_programs import generate

from commdsl.diagnostics import CommdslError
from commdsl.expand import expand
from commdsl.hoist import Hoist
from commdsl.resolve import load
from commdsl.source import SourceFile

EXPAND = sys.modules["commdsl.expand"]  # the module: the package's `expand` is the function


def outcome(text: str, world: int, params=None):
    """Every rank's ops, or the diagnostics."""
    try:
        schedule = expand(load(SourceFile("t.comm", text)), world, params)
    except CommdslError as e:
        return [(d.code, d.message, d.span.start if d.span else None) for d in e.diagnostics]
    return [list(schedule.ops[r]) for r in range(world)]


def hoisted_and_not(text: str, world: int, monkeypatch, params=None) -> tuple[list, list, int]:
    """The outcome with the hoist, without it, and how many values and views the hoist gave."""
    hits = [0]

    def counted(method):
        def count(self, e, A):
            got = method(self, e, A)
            hits[0] += got is not None
            return got

        return count

    with monkeypatch.context() as m:
        m.setattr(Hoist, "get", counted(Hoist.get))
        m.setattr(Hoist, "view", counted(Hoist.view))
        with_hoist = outcome(text, world, params)
    with monkeypatch.context() as m:
        m.setattr(EXPAND.Expander, "hoist", lambda self, *args: None)
        without = outcome(text, world, params)
    return with_hoist, without, hits[0]


HEAD = """world 1..8
param n = 8
tensor x: float32[n] = rank + i
tensor y: float32[n]
"""

CASES = {
    "ring": """
let right = (rank + 1) % world
for s in 0 .. world - 2:
    let out = (rank - s) % world
    batch:
        send x.chunk(out, world) to right
        recv y.chunk((rank - s - 1) % world, world) from (rank - 1) % world
    x.chunk((rank - s - 1) % world, world) += y.chunk((rank - s - 1) % world, world)
""",
    "a name the body reassigns": """
let d = 1
for s in 0 .. 3:
    send x to (rank + d) % world
    recv y from (rank - d) % world
    d = d + rank % 2 + 1
""",
    "a let scoped to its batch": """
let k = rank % 2
for s in 0 .. 3:
    batch:
        let k = (rank + s + 1) % world
        send x.chunk(k % 2, 2) to k
        recv y.chunk(k % 2, 2) from (rank - s - 1) % world
    x.chunk(k % 2, 2) += 1
    x[(k + s) % n] += 1
""",
    "a division by zero at one iteration": """
for s in 0 .. 3:
    let d = rank // (2 - s)
    x[d % n] = 1
""",
    "ranks that stop mid-loop": """
for s in 0 .. 5:
    x[rank + s] = s
""",
    "int64 overflow at a late iteration": """
for s in 0 .. 3:
    let big = (rank + 1) * 3037000499 * s * 3037000499
    x[big % n] = 1
""",
    "nested loops and a list": """
for s in 0 .. 2:
    for t in 0 .. 1:
        let j = (rank + s + t) % world
        send x.chunk(j % 2, 2) to (rank + 1) % world
        recv y.chunk((j + 1) % 2, 2) from (rank - 1) % world
    let m = min(rank, s) + abs(rank - s) - max(s, 1)
    x[m % n] = 2
""",
    "a call in the loop": """
def step(k):
    for s in 0 .. 1:
        x[(k + s) % n] += s

for s in 0 .. 2:
    step(rank + s)
""",
    "per-rank bounds around a uniform loop": """
for r in 0 .. rank:
    for s in 0 .. 2:
        x[(rank * s + r) % n] += 1
""",
    "nested views and a slice bound from a view's size": """
tensor m: float32[4, n] = rank * i
for s in 0 .. world - 1:
    let k = (rank + s) % 2
    batch:
        send x.chunk(k, 2).chunk((rank + 1) % 2, 2) to (rank + 1) % world
        recv y[0 : x.chunk((rank - s) % world, world).size] from (rank - 1) % world
    m[(rank + s) % 4][k * 2 : k * 2 + x.chunk(k, 4).size] += 1
    m.chunk((s + rank) % 2, 2)[1] = y[(rank * s) % n]
""",
    "a view out of bounds at one iteration": """
for s in 0 .. 3:
    x.chunk((rank + s) % 5, 4) += 1
""",
    "a view whose shape is per rank": """
tensor z: float32[2 * (rank % 2 + 1)] = i
for s in 0 .. 3:
    z[(rank + s) % 2 : 2] += 1
    z.chunk((rank * s) % 2, 2) += z.chunk(((rank * s) + 1) % 2, 2)
""",
    "a view the same on every rank": """
for s in 0 .. 3:
    let k = s % 2
    x.chunk(k, 2) += x[rank % n]
""",
    "a loop variable the body shadows": """
for s in 0 .. 2:
    let t = s * 2
    on rank % 2 == 0:
        let t = rank + s
        x[t % n] = 1
    x[(t + rank) % n] = 3
""",
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_hoisted_expressions_expand_as_iteration_by_iteration(case: str, world: int, monkeypatch):
    text = HEAD + CASES[case]
    with_hoist, without, hits = hoisted_and_not(text, world, monkeypatch)
    assert with_hoist == without
    if case == "ring" and world > 2:
        assert hits >= 2 * (world - 1)  # `out` and the inline chunk indices, at every iteration


def test_blocks_of_iterations_meet_as_one(monkeypatch):
    """A loop longer than one block (BLOCK_ELEMENTS) reads each iteration's row from the right block."""
    monkeypatch.setattr("commdsl.hoist.BLOCK_ELEMENTS", 8)  # 2 iterations per block at world 4
    text = HEAD + "for s in 0 .. 6:\n    x[(rank * 3 + s * s) % n] += s\n"
    with_hoist, without, hits = hoisted_and_not(text, 4, monkeypatch)
    assert with_hoist == without and hits == 7


@pytest.mark.parametrize("seed", range(120))
def test_random_spmd_programs_expand_alike(seed: int, monkeypatch):
    world, text = generate(random.Random(seed))
    with_hoist, without, _ = hoisted_and_not(text, world, monkeypatch)
    assert with_hoist == without


def test_only_values_that_differ_by_rank_are_hoisted(monkeypatch):
    """`s + 1` is one number at an iteration: the expansion keeps it a Python int, not a row of equal values;
    `(rank + d) % n` is per rank and comes from the hoist, at every iteration."""
    text = HEAD + "for s in 0 .. 3:\n    let d = s + 1\n    x[(rank + d) % n] = d\n"
    with_hoist, without, hits = hoisted_and_not(text, 4, monkeypatch)
    assert with_hoist == without and hits == 4
