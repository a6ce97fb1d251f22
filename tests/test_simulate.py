"""The simulator's data semantics against an independent NumPy computation, at several world sizes."""

from __future__ import annotations

import numpy as np
import pytest

from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.simulate import simulate
from commdsl.source import SourceFile

WORLDS = (1, 2, 3, 4, 5)
N = 6


def run(text: str, world: int):
    result = simulate(expand(load(SourceFile("case.comm", text)), world))
    assert result.engine.completed
    assert all(e.ok for e in result.expects), [e.detail for e in result.expects if not e.ok]
    return result


def inputs(world: int, dtype=np.int64) -> list[np.ndarray]:
    """What `rank * 7 + i % 5 + 1` initialises on each rank."""
    return [(r * 7 + np.arange(N) % 5 + 1).astype(dtype) for r in range(world)]


NP_REDUCE = {
    "sum": lambda xs: np.sum(xs, axis=0),
    "product": lambda xs: np.prod(xs, axis=0),
    "min": lambda xs: np.min(xs, axis=0),
    "max": lambda xs: np.max(xs, axis=0),
    "band": lambda xs: np.bitwise_and.reduce(xs, axis=0),
    "bor": lambda xs: np.bitwise_or.reduce(xs, axis=0),
    "bxor": lambda xs: np.bitwise_xor.reduce(xs, axis=0),
}


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("op", sorted(NP_REDUCE))
def test_all_reduce_every_integer_op(world, op):
    r = run(f"tensor x: int64[{N}] = rank * 7 + i % 5 + 1\nall_reduce x op {op}\n", world)
    want = NP_REDUCE[op](np.stack(inputs(world)))
    for rank in range(world):
        np.testing.assert_array_equal(r.tensors[rank]["x"], want)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("op", ["sum", "product", "min", "max", "avg", "premul_sum(0.5)"])
def test_all_reduce_float_ops(world, op):
    r = run(f"tensor x: float64[{N}] = rank * 7 + i % 5 + 1\nall_reduce x op {op}\n", world)
    xs = np.stack(inputs(world, np.float64))
    want = {"avg": np.mean(xs, axis=0), "premul_sum(0.5)": np.sum(0.5 * xs, axis=0)}.get(op)
    if want is None:
        want = NP_REDUCE[op](xs)
    for rank in range(world):
        np.testing.assert_allclose(r.tensors[rank]["x"], want)


def test_bool_sum_is_or_and_product_is_and():
    text = "tensor a: bool[2] = (rank + i) % 2\ntensor b: bool[2] = (rank + i) % 2\nall_reduce a op sum\nall_reduce b op product\n"
    r = run(text, 2)
    np.testing.assert_array_equal(r.tensors[0]["a"], [True, True])
    np.testing.assert_array_equal(r.tensors[0]["b"], [False, False])


def test_int8_product_wraps_like_torch():
    r = run("tensor x: int8[1] = 100\nall_reduce x op product\n", 2)
    assert r.tensors[0]["x"][0] == np.int8(np.int64(10000).astype(np.int8))


@pytest.mark.parametrize("world", WORLDS)
def test_broadcast_reduce_and_undefined_non_root(world):
    root = world - 1
    r = run(f"tensor x: int64[{N}] = rank * 7 + i % 5 + 1\ntensor y: int64[{N}] = rank * 7 + i % 5 + 1\n"
            f"broadcast x from {root}\nreduce y to {root} op max\n", world)
    xs = inputs(world)
    for rank in range(world):
        np.testing.assert_array_equal(r.tensors[rank]["x"], xs[root])
        assert r.undefined[rank]["y"].all() == (rank != root)
    np.testing.assert_array_equal(r.tensors[root]["y"], np.max(np.stack(xs), axis=0))


@pytest.mark.parametrize("world", WORLDS)
def test_all_gather_both_forms_and_gather(world):
    lst = ", ".join(f"o{j}" for j in range(world))
    decls = "".join(f"tensor o{j}: int64[{N}]\n" for j in range(world))
    r = run(f"tensor x: int64[{N}] = rank * 7 + i % 5 + 1\ntensor out: int64[{world * N}]\ntensor g: int64[{world * N}]\n"
            f"{decls}all_gather x into out\nall_gather x into [{lst}]\ngather x into g to 0\n", world)
    want = np.concatenate(inputs(world))
    for rank in range(world):
        np.testing.assert_array_equal(r.tensors[rank]["out"], want)
        for j in range(world):
            np.testing.assert_array_equal(r.tensors[rank][f"o{j}"], inputs(world)[j])
    np.testing.assert_array_equal(r.tensors[0]["g"], want)
    for rank in range(1, world):
        assert not r.tensors[rank]["g"].any()


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_scatter_and_reduce_scatter(world, op):
    r = run(f"tensor big: int64[{world * N}] = rank * 100 + i\ntensor part: int64[{N}]\ntensor red: int64[{N}]\n"
            f"scatter big into part from 0\nreduce_scatter big into red op {op}\n", world)
    bigs = [r_ * 100 + np.arange(world * N) for r_ in range(world)]
    for rank in range(world):
        np.testing.assert_array_equal(r.tensors[rank]["part"], bigs[0][rank * N : (rank + 1) * N])
        chunks = np.stack([b[rank * N : (rank + 1) * N] for b in bigs])
        np.testing.assert_array_equal(r.tensors[rank]["red"], NP_REDUCE[op](chunks))


@pytest.mark.parametrize("world", WORLDS)
def test_all_to_all_even(world):
    r = run(f"tensor s: int64[{world * 2}] = rank * 100 + i\ntensor d: int64[{world * 2}]\nall_to_all s into d\n", world)
    src = [r_ * 100 + np.arange(world * 2) for r_ in range(world)]
    for rank in range(world):
        want = np.concatenate([src[j][rank * 2 : rank * 2 + 2] for j in range(world)])
        np.testing.assert_array_equal(r.tensors[rank]["d"], want)


def test_all_to_all_uneven_splits():
    # rank r sends r + 1 + j rows to rank j; so rank j receives r + 1 + j rows from each rank r
    world = 3
    prog = ["world 3", "tensor s: int64[12] = rank * 100 + i", "tensor d: int64[12]"]
    for r_ in range(world):
        ins = [r_ + 1 + j for j in range(world)]
        outs = [j + 1 + r_ for j in range(world)]
        prog.append(f"on rank == {r_}:\n    all_to_all s[0:{sum(ins)}] into d[0:{sum(outs)}] splits "
                    f"{ins}, {outs}")
    r = run("\n".join(prog) + "\n", world)
    for j in range(world):
        pieces = []
        for r_ in range(world):
            start = sum(r_ + 1 + k for k in range(j))
            pieces.append(r_ * 100 + np.arange(start, start + r_ + 1 + j))
        want = np.concatenate(pieces)
        np.testing.assert_array_equal(r.tensors[j]["d"][: len(want)], want)


def test_groups_split_and_mesh():
    text = ("world 4\nmesh m = (dp=2, tp=2)\ngroup pairs = split by rank // 2\n"
            "tensor a: int64[1] = rank\ntensor b: int64[1] = rank\ntensor c: int64[1] = rank\n"
            "all_reduce a in m.tp\nall_reduce b in m.dp\nall_reduce c in pairs\n")
    r = run(text, 4)
    assert [int(r.tensors[k]["a"][0]) for k in range(4)] == [1, 1, 5, 5]
    assert [int(r.tensors[k]["b"][0]) for k in range(4)] == [2, 4, 2, 4]
    assert [int(r.tensors[k]["c"][0]) for k in range(4)] == [1, 1, 5, 5]


def test_group_attributes_in_an_initialiser_are_each_ranks_own():
    """Issue 12, item 1: `= m.tp.rank` once gave every rank rank 0's value (a cache keyed by shape)."""
    text = ("world 4\nmesh m = (dp=2, tp=2)\ngroup pairs = split by rank // 2\n"
            "tensor x: float32[3] = m.tp.rank\ntensor y: int64[2] = pairs.rank * 10 + m.dp.rank\n"
            "tensor z: int64[1] = pairs.size + i\n")
    r = run(text, 4)
    assert [r.tensors[k]["x"].tolist() for k in range(4)] == [[0.0] * 3, [1.0] * 3, [0.0] * 3, [1.0] * 3]
    assert [r.tensors[k]["y"].tolist() for k in range(4)] == [[0, 0], [10, 10], [1, 1], [11, 11]]
    assert [r.tensors[k]["z"].tolist() for k in range(4)] == [[2]] * 4


def test_blocking_and_async_calls_of_one_collective_meet():
    """Issue 12, item 2: torch matches `all_reduce x` on some ranks with `h = all_reduce x` + `wait h` on
    others (async_op only decides whether Python waits); the simulator must too."""
    text = ("world 4\ntensor z: int64[2] = rank\n"
            "on rank % 2 == 0:\n    all_reduce z\nelse:\n    h = all_reduce z\n    wait h\n"
            "expect z == 6\n")
    r = run(text, 4)
    assert [r.tensors[k]["z"].tolist() for k in range(4)] == [[6, 6]] * 4


def test_p2p_views_and_local_compute():
    text = ("world 2\ntensor x: float32[4, 2] = i\ntensor y: float32[2, 2]\n"
            "on rank == 0:\n    send x.chunk(1, 2) to 1\nelse:\n    recv y from 0\n    y += 1\n    y[0] = max(y[0], 100)\n")
    r = run(text, 2)
    np.testing.assert_array_equal(r.tensors[1]["y"], [[100, 100], [7, 8]])


def test_stall_is_reported_not_looped():
    r = simulate(expand(load(SourceFile("s.comm", "world 2\ntensor x: float32[1]\nrecv x from 1 - rank\n")), 2))
    assert not r.engine.completed
    assert sorted(r.engine.stops) == [0, 1]
    assert all(b.op.span.line == 3 for b in r.engine.stops.values())


def test_elementwise_comparisons_make_masks():
    r = run("world 2\ntensor m: bool[4] = i <= rank\ntensor f: float32[4] = (i > 1) * 10 + 1\n", 2)
    np.testing.assert_array_equal(r.tensors[1]["m"], [True, True, False, False])
    np.testing.assert_array_equal(r.tensors[0]["f"], [1, 1, 11, 11])


def test_boolean_operators_are_not_elementwise():
    from commdsl.diagnostics import CommdslError

    with pytest.raises(CommdslError) as e:
        load(SourceFile("b.comm", "tensor m: bool[4] = i <= 1 and rank\n"))
    assert [(d.code, d.span.column) for d in e.value.diagnostics] == [("N103", 21)]


# ---- large tensors: initialisers and expects a piece at a time (issue 14) ------------------------------------

PIECES = """\
world 1..
tensor x: float32[7, 5] = i * 3 + rank
tensor k: int64[3] = (i + 1) * (rank + 2)
tensor b: bool[9] = (i + rank) % 3
tensor one: float32[1] = rank + 0.5
tensor y: float32[35] = i % 4 - rank / 3
all_reduce x
expect x == world * (i * 3) + world * (world - 1) / 2
expect y == i % 4 - rank / 3
expect y > i % 4 - rank / 3 - one
expect x != x + one
expect k == (i + 1) * (rank + 2)
expect x < 17 + i % 11
expect y[20:35] == one * 0 + (i + 20) % 4 - rank / 3 + (i == 7)
expect b == (i + rank) % 3
"""


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7, 11, 36, 40])
@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_pieces_give_what_the_whole_gives(chunk, world, monkeypatch):
    """Initial values and expect verdicts (with each failing rank's first failing element) are the same
    whatever the piece size: ranks together, a rank alone, a rank in windows."""
    import importlib

    sim_module = importlib.import_module("commdsl.simulate")

    schedule = expand(load(SourceFile("p.comm", PIECES)), world)
    whole = simulate(schedule)
    monkeypatch.setattr(sim_module, "SIM_CHUNK", chunk)
    pieces = simulate(schedule)
    for r in range(world):
        for name, values in whole.tensors[r].items():
            assert np.array_equal(values, pieces.tensors[r][name]), (r, name)
    assert [(e.rank, e.ok, e.detail) for e in whole.expects] == [(e.rank, e.ok, e.detail) for e in pieces.expects]
    assert any(not e.ok for e in whole.expects) and any(e.ok for e in whole.expects)


def test_groups_made_as_steps_reduce_among_their_members():
    sim = run(
        "world 4\ntensor x: int64[1] = rank\n"
        "low = new_group [0, 1]\nhigh = new_group [2, 3]\n"
        "on rank < 2:\n    all_reduce x in low\nelse:\n    all_reduce x in high\n",
        4,
    )
    assert [int(sim.tensors[r]["x"][0]) for r in range(4)] == [1, 1, 5, 5]


def test_values_beyond_the_dtype_become_inf_without_a_warning():
    """1001 all-reduces of `rank` at world 8 pass float32's range: inf, as torch's copy makes it, and no
    NumPy RuntimeWarning on the user's terminal (`commdsl sim` printed one)."""
    import warnings

    text = "program long\nworld 8\ntensor x: float32[4] = rank\nfor s in 0 .. 1000:\n    all_reduce x\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim = simulate(expand(load(SourceFile("long.comm", text)), 8))
    assert np.isinf(sim.tensors[0]["x"]).all()


def test_a_float_an_integer_cannot_hold_is_noted_where_it_is_stored():
    """V804: the initialiser and the assignment that store NaN, inf or a float beyond the dtype, each with its
    first rank, element and value, and what x86 torch stores there (int32: -2**31; int8: the low bits)."""
    from commdsl.checker import data_findings

    text = ("program casts\nworld 2\ntensor q: int32[4] = (i + rank) * 1e9\ntensor b: int8[4] = 0\n"
            "tensor z: float32[4] = i\nb = z / 0 + 300.7\n")  # fmt: skip
    sim = simulate(expand(load(SourceFile("casts.comm", text)), 2))
    assert sim.tensors[1]["q"].tolist() == [1000000000, 2000000000, -(2**31), -(2**31)]
    assert sim.tensors[0]["b"].tolist() == [0, 0, 0, 0]  # NaN and inf: int32's lowest, whose low bits are 0
    found = {(d.span.line, d.label) for d in data_findings(sim) if d.code == "V804"}
    assert found == {(3, "element 3 is 3000000000.0 on rank 0"), (6, "element 0 is nan on rank 0")}


def test_an_integer_beyond_the_dtype_wraps_in_arithmetic_as_in_torch():
    """`w + 2147483648` on an int32 tensor: torch wraps the number into int32 (NumPy raised OverflowError, which
    `lint` reported as an internal error)."""
    sim = run("program wrap\nworld 1\ntensor w: int32[2] = i\nw = w + 2147483648\n", 1)
    assert sim.tensors[0]["w"].tolist() == [-(2**31), -(2**31) + 1]


def test_a_number_that_wraps_to_zero_in_the_tensors_dtype_is_a_division_by_zero():
    """torch converts the number into the int8 tensor's dtype first: `d // 2147483648` divides by 0 and raises
    ZeroDivisionError (measured); V802 names it (the number is not 0, so N122 cannot)."""
    from commdsl.checker import data_findings

    text = "program wrap\nworld 2\ntensor c: int64[6] = rank + i\ntensor d: int8[6] = i\nc *= d // 2147483648\n"
    sim = simulate(expand(load(SourceFile("wrap.comm", text)), 2))
    assert [(d.code, d.span.line) for d in data_findings(sim)] == [("V802", 5)]


PIPELINE = """\
world 2..8
param micro = 6
tensor act: int64[micro, 3] = -1
for m in 0 .. micro - 1:
    on rank > 0:
        recv act[m] from rank - 1
    else:
        act[m] = m * 100 + i
    act[m] += rank
    on rank < world - 1:
        h[m] = isend act[m] to rank + 1
wait all h
"""


@pytest.mark.parametrize("world", (2, 3, 5, 8))
def test_a_pipelines_messages_matched_together_carry_each_its_own_values(world):
    """The ranks of a pipeline step apart, so one round matches messages of many records, one rank each (the
    simulator moves them together, `Data.matched`): each rank holds what its predecessors computed."""
    r = run(PIPELINE, world)
    for rank in range(world):
        want = np.arange(6)[:, None] * 100 + np.arange(3) + rank * (rank + 1) // 2
        np.testing.assert_array_equal(r.tensors[rank]["act"], want)


def test_messages_of_one_round_that_overlap_move_in_the_engines_order():
    """Two messages of one round where one reads what the other writes (a batch sending and receiving one buffer,
    a race the checker reports): moved one after another, in the engine's order, not joined."""
    text = ("world 2\ntensor x: int64[1] = rank + 10\non rank == 0:\n    batch:\n        send x to 1\n"
            "        recv x from 1\nelse:\n    batch:\n        recv x from 0\n        send x to 0\n")
    r = simulate(expand(load(SourceFile("race.comm", text)), 2))
    assert r.engine.completed
    assert [r.tensors[k]["x"].tolist() for k in (0, 1)] == [[10], [10]]
