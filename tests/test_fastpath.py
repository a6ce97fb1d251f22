"""The fast path (`commdsl.fast`) against the precise pipeline: "clean" only where the precise one is.

Soundness: wherever `proves_clean` answers True, `expand` + `analyse_schedule` (lints and data on)
finds nothing: every program under programs/ and programs/bad/ at its declared sizes, and
generated programs (the engine tests' per-rank programs, SPMD programs built from the language's
statements, and the same with every final value of the precise simulation written as `expect`s,
one of them sometimes wrong). Use: it does answer True for the programs it is built for, so
`check`/`lint` really take it; the ring at world 1024 included.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import program_text, programs

from commdsl.checker import analyse_schedule
from commdsl.diagnostics import CommdslError
from commdsl.expand import expand
from commdsl.fast import proves_clean
from commdsl.limits import memory_problem
from commdsl.resolve import load
from commdsl.simulate import simulate
from commdsl.source import SourceFile

MAX_SIZES = 10


def precise_clean(program, world: int, lints: bool) -> bool:
    try:
        schedule = expand(program, world)
    except CommdslError:
        return False
    if memory_problem(schedule) is not None:
        return False
    diags, _ = analyse_schedule(program, schedule, program.backends, lints, True)
    return not diags


def fast_clean(program, world: int, lints: bool) -> bool:
    return proves_clean(program, world, {}, program.backends, lints, True, strict=True)


def _cases():
    for path in sorted(glob.glob("programs/*.comm")) + sorted(glob.glob("programs/bad/*.comm")):
        program = load(SourceFile.read(path))
        for world in program.world_sizes()[:MAX_SIZES]:
            yield path, world


@pytest.mark.parametrize("path,world", list(_cases()))
def test_never_clean_where_the_precise_pipeline_reports(path, world):
    program = load(SourceFile.read(path))
    for lints in (False, True):
        if fast_clean(program, world, lints):
            assert precise_clean(program, world, lints), (path, world, lints)


@pytest.mark.parametrize("name", ["ring_allreduce", "collectives", "allreduce", "allreduce_rank", "mesh_2d",
                                  "moe_all_to_all", "pipeline_1f1b", "p2p"])
def test_clean_programs_take_the_fast_path(name):
    program = load(SourceFile.read(f"programs/{name}.comm"))
    for world in program.world_sizes()[:MAX_SIZES]:
        assert fast_clean(program, world, True), (name, world)


def test_bad_programs_never_take_it():
    for path in sorted(glob.glob("programs/bad/*.comm")):
        program = load(SourceFile.read(path))
        for world in program.world_sizes()[:MAX_SIZES]:
            if not precise_clean(program, world, True):
                assert not fast_clean(program, world, True), (path, world)


def test_ring_at_world_1024_is_answered_by_the_fast_path():
    text = Path("programs/ring_allreduce.comm").read_text().replace("world 1..16", "world 1..")
    program = load(SourceFile("programs/ring_allreduce.comm", text))
    assert fast_clean(program, 1024, True)


# ---- generated programs --------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_per_rank_programs(case):
    world, ranks = case
    program = load(SourceFile("gen.comm", program_text(world, ranks)))
    for lints in (False, True):
        if fast_clean(program, world, lints):
            assert precise_clean(program, world, lints), program_text(world, ranks)


_ROOT = st.sampled_from(["0", "1", "world - 1", "rank % 2"])
_PEER = st.sampled_from(["(rank + 1) % world", "(rank - 1) % world", "(rank + 2) % world", "rank", "rank + 1",
                         "world - 1 - rank", "(rank + world // 2) % world"])
_K = st.sampled_from(["0", "1", "rank % 2", "(rank + 1) % 2", "rank % world"])
_STATEMENTS = [
    st.builds(lambda p, q, k1, k2, tag: f"batch:\n    send x.chunk({k1}, 2) to {p}{tag}\n"
              f"    recv y.chunk({k2}, 2) from {q}{tag}", _PEER, _PEER, _K, _K, st.sampled_from(["", " tag 1"])),
    st.builds(lambda p, first: f"on rank % 2 == 0:\n    send x to {p}\n    recv y from {p}\nelse:\n"
              f"    {'recv y from rank - 1' if first else 'send x to rank - 1'}\n"
              f"    {'send x to rank - 1' if first else 'recv y from rank - 1'}",
              st.sampled_from(["rank + 1", "(rank + 1) % world"]), st.booleans()),
    st.builds(lambda: "on rank == 0:\n    for d in 1 .. world - 1:\n        send x to d\nelse:\n    recv x from 0"),
    st.builds(lambda r, t: f"on rank == {r}:\n    send x to (rank + 1) % world tag {t}\n"
              f"on rank == ({r} + 1) % world:\n    recv y from {r} tag 1", st.sampled_from(["0", "1"]),
              st.sampled_from(["0", "1"])),
    st.builds(lambda op: f"all_reduce x op {op}", st.sampled_from(["sum", "max", "min", "product", "avg", "band"])),
    st.builds(lambda r: f"broadcast y from {r}", _ROOT),
    st.builds(lambda r: f"reduce x to {r}", _ROOT),
    st.builds(lambda: "all_gather x into g"),
    st.builds(lambda r: f"gather y into g to {r}", _ROOT),
    st.builds(lambda r: f"scatter g into x from {r}", _ROOT),
    st.builds(lambda: "reduce_scatter g into y op sum"),
    st.builds(lambda: "all_to_all g into h"),
    st.builds(lambda: "barrier"),
    st.builds(lambda: "all_reduce x in pairs"),
    st.builds(lambda r: f"broadcast y from {r} in pairs", st.sampled_from(["rank", "rank - rank % 2", "0"])),
    st.sampled_from(["x = rank + i", "y += x", "x *= 2", "y = x - rank * 2", "x.chunk(rank % 2, 2) += 1",
                     "y = min(x, 3) + 1", "x = y / 2", "x = y // 2 + rank", "g = i * 2 - rank", "x[0] = world / 3",
                     "y = x + 0.25", "x.chunk(1, 2) -= y.chunk(0, 2)", "h = g * rank"]),
    st.sampled_from(["expect x >= 0", "expect y == y", "expect x == rank + i", "expect g < 100",
                     "expect x.chunk(0, 2) != 7", "print x"]),
    st.builds(lambda k: f"for s in 0 .. world - 2:\n    batch:\n        send x.chunk((rank - s) % world, world) to "
              f"(rank + 1) % world\n        recv y.chunk((rank - s - {k}) % world, world) from (rank - 1) % world\n"
              f"    x.chunk((rank - s - 1) % world, world) += y.chunk((rank - s - 1) % world, world)",
              st.sampled_from(["1", "0"])),
    st.sampled_from([
        "for s in 0 .. 2:\n    let k = (rank + s) % 2\n    x.chunk(k, 2) += s / 2\n    expect x >= -100",
        "for s in 1 .. world - 1:\n    send x to (rank + s) % world\n    recv y from (rank - s) % world",
        ("for s in 0 .. 1:\n    batch:\n        let d = s + 1\n        send x to (rank + d) % world\n"
         "        recv y from (rank - d) % world\n    y += s\n    print y"),
        "for s in 0 .. world - 1:\n    g.chunk(s, world) = x[0] * s - rank",
    ]),
    st.sampled_from(["all_gather x into [p0, p1]", "scatter [p0, p1] into y from 1", "reduce_scatter [p0, p1] into y op max",
                     "gather y into [p0, p1] to 0", "all_reduce x op premul_sum(0.5)", "all_reduce x op bxor",
                     "m[rank % 2] = rank + i", "send m[0] to (rank + 1) % world\nrecv m[1] from (rank - 1) % world",
                     "batch:\n    send m[0] to (rank + 1) % world\n    recv m[1] from (rank - 1) % world",
                     "all_reduce m op min", "m[1] += m[0]", "expect m[0] == rank + i", "broadcast m[1] from 0"]),
]


@st.composite
def spmd_programs(draw):
    """A world size, a dtype, sizes and a body of SPMD statements (some buggy, most not)."""
    world = draw(st.integers(1, 6))
    n = draw(st.sampled_from([2, 4, 6, 12]))
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64", "float16", "bfloat16", "uint8"]))
    body = draw(st.lists(st.one_of(_STATEMENTS), min_size=1, max_size=6))
    backend = draw(st.sampled_from(["", "backend nccl", "backend gloo, nccl"]))
    head = [f"world {world}", backend, "group pairs = split by rank // 2", f"tensor x: {dtype}[{n}] = rank * 3 + i",
            f"tensor y: {dtype}[{n}] = {n} - i", f"tensor g: {dtype}[world * {n}] = i",
            f"tensor h: {dtype}[world * {n}]", f"tensor p0: {dtype}[{n}] = rank", f"tensor p1: {dtype}[{n}] = 1",
            f"tensor m: {dtype}[2, {n // 2}] = i + rank"]
    return world, "\n".join(head + body) + "\n"


def _check(world: int, text: str):
    program = load(SourceFile("gen.comm", text))
    for lints in (False, True):
        if fast_clean(program, world, lints):
            assert precise_clean(program, world, lints), (lints, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spmd_programs())
def test_spmd_programs(case):
    _check(*case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spmd_programs(), st.integers(-1, 50))
def test_spmd_programs_with_every_result_expected(case, wrong):
    """Expect every final element the precise simulator computes (one made wrong when `wrong` hits):
    the fast path's data must agree with the simulator's to the last bit that `close` looks at."""
    world, text = case
    program = load(SourceFile("gen.comm", text))
    try:
        sim = simulate(expand(program, world))
    except CommdslError:
        return
    if not sim.engine.completed:
        return
    lines = []
    for r in range(world):
        for name, values in sim.tensors[r].items():
            values = np.asarray(values)
            for k, v in enumerate(values.reshape(-1)):
                if sim.undefined[r][name].reshape(-1)[k]:
                    continue
                v = v.item()
                if not np.isfinite(v) or "e" in repr(v):
                    continue
                if len(lines) == wrong:
                    v = v + 1
                where = "".join(f"[{x}]" for x in np.unravel_index(k, values.shape))
                lines.append(f"on rank == {r}:\n    expect {name}{where} == {v!r}")
    _check(world, text + "\n".join(lines) + "\n")
