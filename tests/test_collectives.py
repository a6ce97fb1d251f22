"""`commdsl.collectives`: each kind's `apply` against an independent computation (plain Python per element, then
the dtype's wrap-around or rounding), `fit` (N131), `roles`, `busbw_factor` (nccl-tests' formulas) and `form`
(through `commdsl fmt`)."""

from __future__ import annotations

import dataclasses
import functools
import math
import operator

import numpy as np
import pytest

from commdsl.collectives import KINDS, Call, Instance
from commdsl.diagnostics import CommdslError
from commdsl.dtypes import DTYPES
from commdsl.emit.fmt import format_source
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.rules.backend import reduction
from commdsl.schedule import CollectiveRec, VView
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import parse_tree
from commdsl.syntax.transform import to_ast

SIZES = (1, 2, 3, 4, 5)
PART = 4  # elements per block
SCALE = 0.5

GLOO_PAIRS = [(op, dt) for op in ("sum", "product", "min", "max", "band", "bor", "bxor", "avg")
              for dt in DTYPES if not reduction("gloo", op, dt).refused]
NCCL_ONLY = [("premul_sum", dt) for dt in DTYPES if DTYPES[dt].is_float]


def test_gloo_pairs_cover_what_the_docs_table_allows():
    # docs/language.md §11: bitwise ops on integers and bool, avg on floating point, the rest on everything
    assert len(GLOO_PAIRS) == 4 * 9 + 3 * 5 + 4


# ---- data and the reference reduction --------------------------------------------------------------------

def member_data(j: int, numel: int, dtype: str) -> np.ndarray:
    """Member j's values: small, exact in every dtype, with negatives where the dtype has them."""
    i = np.arange(numel)
    d = DTYPES[dtype]
    if d.is_bool:
        values = (j + i) % 3 == 0
    elif dtype == "uint8":
        values = (3 * j + i) % 4
    else:
        values = (3 * j + i) % 4 - 1
    return np.asarray(values).astype(d.numpy)


def as_dtype(values: list, dtype: str) -> np.ndarray:
    """Python numbers stored in a dtype the way torch stores them: integers wrap, floats round, bool is `!= 0`."""
    d = DTYPES[dtype]
    if d.is_bool:
        return np.array([bool(v) for v in values], dtype=bool)
    if d.is_int:
        bits = 8 * d.itemsize
        lo = 0 if dtype == "uint8" else -(1 << (bits - 1))
        return np.array([(int(v) - lo) % (1 << bits) + lo for v in values], dtype=d.numpy)
    return np.array(values, dtype=np.float64).astype(d.numpy)


def reference_reduce(arrays: list[np.ndarray], redop: str, dtype: str) -> np.ndarray:
    columns = zip(*[[int(v) if isinstance(v, bool) else v for v in a.tolist()] for a in arrays])
    fold = {
        "sum": sum, "product": math.prod, "min": min, "max": max,
        "band": lambda c: functools.reduce(operator.and_, c), "bor": lambda c: functools.reduce(operator.or_, c),
        "bxor": lambda c: functools.reduce(operator.xor, c), "avg": lambda c: sum(c) / len(c),
        "premul_sum": lambda c: sum(v * SCALE for v in c),
    }[redop]
    return as_dtype([fold(list(c)) for c in columns], dtype)


def instance(size, inputs, *, root=None, redop=None, listed_in=False, listed_out=False, in_splits=None,
             out_splits=None) -> Instance:
    return Instance(size=size, root=root, redop=redop, scale=SCALE if redop == "premul_sum" else None, inputs=inputs,
                    input_shapes=[[x.shape for x in xs] for xs in inputs], output_numel=[[] for _ in inputs],
                    inputs_listed=[listed_in] * size if isinstance(listed_in, bool) else listed_in,
                    outputs_listed=[listed_out] * size if isinstance(listed_out, bool) else listed_out,
                    in_splits=in_splits or [()] * size, out_splits=out_splits or [()] * size)


def equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g.reshape(-1), w.reshape(-1))


def test_every_kind_is_tested_here():
    assert set(KINDS) == {"broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
                          "all_to_all", "barrier"}


# ---- apply: reducing kinds, every reduce op and dtype Gloo runs ----------------------------------------------

@pytest.mark.parametrize("redop, dtype", GLOO_PAIRS + NCCL_ONLY)
def test_all_reduce_and_reduce(redop, dtype):
    for size in SIZES:
        xs = [member_data(j, PART, dtype) for j in range(size)]
        want = reference_reduce(xs, redop, dtype)
        out = KINDS["all_reduce"].apply(instance(size, [[x] for x in xs], redop=redop))
        for member in out:
            equal(member, [want])
        assert len({id(m[0]) for m in out}) == size  # each member owns its result
        for root in range(size):
            out = KINDS["reduce"].apply(instance(size, [[x] for x in xs], root=root, redop=redop))
            for j, member in enumerate(out):
                equal(member, [want] if j == root else [None])  # non-roots: undefined


@pytest.mark.parametrize("redop, dtype", GLOO_PAIRS + NCCL_ONLY)
def test_reduce_scatter_tensor_and_list_forms(redop, dtype):
    for size in SIZES:
        xs = [member_data(j, size * PART, dtype) for j in range(size)]
        blocks = [[x[k * PART:(k + 1) * PART] for k in range(size)] for x in xs]
        want = [reference_reduce([blocks[r][k] for r in range(size)], redop, dtype) for k in range(size)]
        tensor = KINDS["reduce_scatter"].apply(instance(size, [[x] for x in xs], redop=redop))
        listed = KINDS["reduce_scatter"].apply(instance(size, blocks, redop=redop, listed_in=True))
        for k in range(size):
            equal(tensor[k], [want[k]])
            equal(listed[k], [want[k]])


# ---- apply: the others --------------------------------------------------------------------------------------

DTYPE_SAMPLE = ("float32", "int8", "bool", "float16")


@pytest.mark.parametrize("dtype", DTYPE_SAMPLE)
@pytest.mark.parametrize("size", SIZES)
def test_broadcast_and_barrier(size, dtype):
    xs = [member_data(j, PART, dtype) for j in range(size)]
    for root in range(size):
        out = KINDS["broadcast"].apply(instance(size, [[x] for x in xs], root=root))
        for member in out:
            equal(member, [xs[root]])
    assert KINDS["barrier"].apply(instance(size, [[] for _ in range(size)])) == [[] for _ in range(size)]


@pytest.mark.parametrize("dtype", DTYPE_SAMPLE)
@pytest.mark.parametrize("size", SIZES)
def test_all_gather_and_gather_tensor_and_list_forms(size, dtype):
    xs = [member_data(j, PART, dtype) for j in range(size)]
    joined = np.array([v for x in xs for v in x.tolist()], dtype=xs[0].dtype)
    for listed in (False, True):
        want = list(xs) if listed else [joined]
        for member in KINDS["all_gather"].apply(instance(size, [[x] for x in xs], listed_out=listed)):
            equal(member, want)
        for root in range(size):
            out = KINDS["gather"].apply(instance(size, [[x] for x in xs], root=root, listed_out=listed))
            for j, member in enumerate(out):
                equal(member, want if j == root else [])  # non-roots receive nothing
    # each member chooses its own form (one statement per `on` branch)
    if size > 1:
        mixed = [j % 2 == 0 for j in range(size)]
        out = KINDS["all_gather"].apply(instance(size, [[x] for x in xs], listed_out=mixed))
        for j, member in enumerate(out):
            equal(member, list(xs) if mixed[j] else [joined])


@pytest.mark.parametrize("dtype", DTYPE_SAMPLE)
@pytest.mark.parametrize("size", SIZES)
def test_scatter_tensor_and_list_forms(size, dtype):
    for root in range(size):
        xs = [member_data(j, size * PART, dtype) for j in range(size)]
        parts = [xs[root][k * PART:(k + 1) * PART] for k in range(size)]
        out = KINDS["scatter"].apply(instance(size, [[x] for x in xs], root=root))
        for k in range(size):
            equal(out[k], [parts[k]])
        lists = [[member_data(10 * j + k, PART, dtype) for k in range(size)] for j in range(size)]
        out = KINDS["scatter"].apply(instance(size, lists, root=root, listed_in=True))
        for k in range(size):
            equal(out[k], [lists[root][k]])


@pytest.mark.parametrize("dtype", DTYPE_SAMPLE)
@pytest.mark.parametrize("size", SIZES)
def test_all_to_all_even(size, dtype):
    xs = [member_data(j, size * PART, dtype) for j in range(size)]
    out = KINDS["all_to_all"].apply(instance(size, [[x] for x in xs]))
    for k in range(size):
        want = np.array([v for r in range(size) for v in xs[r][k * PART:(k + 1) * PART].tolist()], dtype=xs[0].dtype)
        equal(out[k], [want])


@pytest.mark.parametrize("size", SIZES)
def test_all_to_all_uneven_splits(size):
    cols = 3  # elements per row: split sizes count rows
    rng = np.random.default_rng(size)
    in_splits = [tuple(int(s) for s in rng.integers(0, 3, size)) for _ in range(size)]
    out_splits = [tuple(in_splits[r][k] for r in range(size)) for k in range(size)]
    xs = [np.arange(sum(s) * cols, dtype=np.int64) + 1000 * j for j, s in enumerate(in_splits)]
    out = KINDS["all_to_all"].apply(instance(size, [[x] for x in xs], in_splits=in_splits, out_splits=out_splits))
    for k in range(size):
        want = []
        for r in range(size):
            first = sum(in_splits[r][:k])
            want += xs[r].tolist()[first * cols:(first + in_splits[r][k]) * cols]
        equal(out[k], [np.array(want, dtype=np.int64)])
        assert out[k][0].size == sum(out_splits[k]) * cols


# ---- fit --------------------------------------------------------------------------------------------------

def call(kind: str, size, ins, outs, *, listed_in=False, listed_out=False, in_splits=(), out_splits=(),
         is_root=False, rows=None) -> Call:
    """A call by len(...) ranks (per-rank entries are arrays); `ins`/`outs` are element counts of 1-d views, or
    (rows, cols) for 2-d views."""
    count = next((len(x) for x in (size, *ins, *outs, *in_splits) if isinstance(x, np.ndarray)), 2)

    def views(items):
        return tuple(VView("t", 0, tuple(np.asarray(d) if isinstance(d, list) else d for d in x) if isinstance(x, tuple)
                           else (x,)) for x in items)
    rec = CollectiveRec(node=None, ranks=np.arange(count), bindings=(), kind=KINDS[kind], inputs=views(ins),
                        outputs=views(outs), inputs_listed=listed_in, outputs_listed=listed_out,
                        in_splits=tuple(in_splits), out_splits=tuple(out_splits))
    return Call(rec, size, np.arange(count), np.broadcast_to(np.asarray(is_root), (count,)), count)


def problem(c: Call):
    p = c.rec.kind.fit(c)
    return None if p is None else (np.asarray(p.mask).tolist(), {k: p.message(k) for k in np.flatnonzero(p.mask)})


@pytest.mark.parametrize("kind", ["broadcast", "all_reduce", "reduce", "barrier"])
def test_kinds_without_a_size_rule_fit_anything(kind):
    assert problem(call(kind, 3, [np.array([1, 7])], [np.array([1, 7])])) is None


def test_all_gather_fit():
    assert problem(call("all_gather", 3, [4], [12])) is None
    assert problem(call("all_gather", np.array([2, 3]), [4], [np.array([8, 8])])) == \
        ([False, True], {1: "the output has 8 elements; a group of 3 × 4 needs 12"})
    assert problem(call("all_gather", 2, [4], [4, 4], listed_out=True)) is None
    assert problem(call("all_gather", 3, [4], [4, 4], listed_out=True)) == \
        ([True, True], {0: "the output list has 2 buffers for a group of 3", 1: "the output list has 2 buffers for a group of 3"})
    assert problem(call("all_gather", 2, [4], [4, np.array([4, 5])], listed_out=True)) == \
        ([False, True], {1: "the member's own output buffer (entry 1) must hold 4 elements (the input), it holds 5"})


def test_a_list_of_uneven_sizes_fits_when_each_members_own_entry_holds_its_part():
    """An all-gather-v (torch's NCCL runs it as one broadcast per member): rank r gathers entry j of member j's
    size, its own entry its own input's; the members' agreement on the others is C306's, member by member."""
    ins = [np.array([1, 2, 3])]
    assert problem(call("all_gather", 3, ins, [1, 2, 3], listed_out=True)) is None
    assert problem(call("all_gather", 3, ins, [1, 2, np.array([3, 3, 4])], listed_out=True)) == \
        ([False, False, True], {2: "the member's own output buffer (entry 2) must hold 3 elements (the input), it holds 4"})
    assert problem(call("reduce_scatter", 3, [1, 2, 3], ins, listed_in=True)) is None
    assert problem(call("reduce_scatter", 3, [np.array([2, 1, 1]), 2, 3], ins, listed_in=True)) == \
        ([True, False, False], {0: "the member's own input buffer (entry 0) must hold 1 elements (the output), it holds 2"})


def test_uneven_lists_contribute_minus_one_and_are_compared_member_by_member():
    kind = KINDS["all_gather"]
    assert np.asarray(kind.contribution(call("all_gather", 2, [4], [4, 4], listed_out=True))).tolist() == [4, 4]
    assert np.asarray(kind.contribution(call("all_gather", 2, [np.array([1, 2])], [1, 2], listed_out=True))).tolist() == [-1, -1]
    two = instance(2, [[np.zeros(1)], [np.zeros(2)]])
    two.outputs_listed = [True, True]
    two.output_numel = [[1, 2], [1, 2]]
    assert kind.members_disagree(two) is None
    two.output_numel = [[1, 3], [1, 2]]
    assert kind.members_disagree(two) == (1, 0)  # member 1 gives 2 elements, member 0's entry for it holds 3
    two.outputs_listed, two.output_numel = [True, False], [[1, 2], [4]]
    assert kind.members_disagree(two) == (0, 1)  # an uneven list against the one-tensor form


def test_gather_fit_holds_at_the_root_only():
    assert problem(call("gather", 2, [4], [np.array([8, 3])], is_root=np.array([True, False]))) is None
    assert problem(call("gather", 2, [4], [np.array([8, 3])], is_root=np.array([False, True]))) == \
        ([False, True], {1: "the output has 3 elements; a group of 2 × 4 needs 8"})
    assert problem(call("gather", 2, [4], [4], listed_out=True, is_root=np.array([False, True]))) == \
        ([False, True], {1: "the output list has 1 buffers for a group of 2"})


def test_scatter_fit_holds_at_the_root_only():
    assert problem(call("scatter", 3, [np.array([12, 5])], [4], is_root=np.array([True, False]))) is None
    assert problem(call("scatter", 3, [np.array([12, 5])], [4], is_root=np.array([False, True]))) == \
        ([False, True], {1: "the input has 5 elements; a group of 3 × 4 needs 12"})
    assert problem(call("scatter", 2, [4, 3], [4], listed_in=True, is_root=True)) == \
        ([True, True], {0: "each input buffer must hold 4 elements (the output), one holds 3",
                        1: "each input buffer must hold 4 elements (the output), one holds 3"})


def test_reduce_scatter_fit():
    assert problem(call("reduce_scatter", 4, [16], [4])) is None
    assert problem(call("reduce_scatter", 4, [np.array([16, 15])], [4])) == \
        ([False, True], {1: "the input has 15 elements; a group of 4 × 4 needs 16"})
    assert problem(call("reduce_scatter", 2, [4, 4], [4], listed_in=True)) is None


def test_all_to_all_fit_even_and_uneven():
    assert problem(call("all_to_all", 4, [8], [8])) is None
    assert problem(call("all_to_all", 3, [np.array([9, 8])], [np.array([9, 9])])) == \
        ([False, True], {1: "`all_to_all` input has 8 elements but output has 9"})
    assert problem(call("all_to_all", 3, [8], [8])) == \
        ([True, True], {0: "`all_to_all` moves 8 elements, not divisible by the group size 3",
                        1: "`all_to_all` moves 8 elements, not divisible by the group size 3"})
    two_d = ((4, 2),)  # 4 rows of 2: split sizes count rows
    assert problem(call("all_to_all", 2, two_d, two_d, in_splits=(1, 3), out_splits=(2, 2))) is None
    assert problem(call("all_to_all", 2, two_d, two_d, in_splits=(1, 2), out_splits=(2, 2))) == \
        ([True, True], {k: "`all_to_all` splits sum to 3 in / 4 out rows, but the buffers have 4 / 4" for k in (0, 1)})
    assert problem(call("all_to_all", 3, two_d, two_d, in_splits=(1, 3), out_splits=(2, 2))) == \
        ([True, True], {k: "`all_to_all` splits list 2 sizes for a group of 3" for k in (0, 1)})
    assert problem(call("all_to_all", 2, two_d, two_d, in_splits=(np.array([5, 1]), 3),
                        out_splits=(np.array([-1, 2]), 2))) == \
        ([True, False], {0: "`all_to_all` split sizes must not be negative"})


@pytest.mark.parametrize("text, message", [
    ("tensor x: float32[3]\ntensor y: float32[5]\nall_gather x into y\n",
     "the output has 5 elements; a group of 2 × 3 needs 6"),
    ("tensor x: float32[3]\ntensor y: float32[6]\nscatter y into x from 0\nreduce_scatter x into y\n",
     "the input has 3 elements; a group of 2 × 6 needs 12"),
    ("tensor x: float32[3]\nall_to_all x into x\n", "`all_to_all` moves 3 elements, not divisible by the group size 2"),
])
def test_a_buffer_that_does_not_fit_is_n131_through_the_expansion(text, message):
    with pytest.raises(CommdslError) as e:
        expand(load(SourceFile("t.comm", "world 2\n" + text)), 2)
    [d] = e.value.diagnostics
    assert (d.code, d.message, d.label) == ("N131", message, "on rank 0, group of 2")


# ---- roles and bus bandwidth ------------------------------------------------------------------------------

# (reads its inputs, writes its outputs, leaves its outputs undefined): root, then non-root (docs/language.md §10)
ROLES = {
    "broadcast": ((True, False, False), (False, True, False)),
    "all_reduce": ((True, True, False), (True, True, False)),
    "reduce": ((True, True, False), (True, False, True)),
    "all_gather": ((True, True, False), (True, True, False)),
    "gather": ((True, True, False), (True, False, False)),
    "scatter": ((True, True, False), (False, True, False)),
    "reduce_scatter": ((True, True, False), (True, True, False)),
    "all_to_all": ((True, True, False), (True, True, False)),
    "barrier": ((False, False, False), (False, False, False)),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_roles_of_root_and_non_root(kind):
    assert (KINDS[kind].roles(True), KINDS[kind].roles(False)) == ROLES[kind]


# nccl-tests' src/*.cu GetBw: busBw = algBw * factor
NCCL_TESTS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
}


@pytest.mark.parametrize("kind", sorted(NCCL_TESTS_FACTOR))
def test_busbw_factor_is_nccl_tests_formula(kind):
    for world in (1, 2, 3, 4, 7, 8, 64, 1000):
        assert KINDS[kind].busbw_factor(world) == pytest.approx(NCCL_TESTS_FACTOR[kind](world), rel=1e-15)


def test_every_benchmarked_kind_has_a_formula():
    assert {k.name for k in KINDS.values() if k.bench is not None} == set(NCCL_TESTS_FACTOR)


# ---- form, through `commdsl fmt` -------------------------------------------------------------------------------

FORM_CASES = {
    "broadcast": [dict(ins="x", root="0"), dict(ins="x[0:2]", root="world - 1", tail=" in g", handle="h = ")],
    "all_reduce": [dict(ins="x"), dict(ins="x", redop=" op max", tail=" in m.tp"),
                   dict(ins="x.chunk(1, 2)", redop=" op premul_sum(0.5)", handle="h = ")],
    "reduce": [dict(ins="x", root="1", redop=" op min"), dict(ins="x", root="rank - rank % 2", tail=" in g")],
    "all_gather": [dict(ins="x", outs="y"), dict(ins="x", outs="[a, b]", tail=" in g", handle="h = ")],
    "gather": [dict(ins="x", outs="y", root="0"), dict(ins="x", outs="[a, b]", root="1")],
    "scatter": [dict(ins="y", outs="x", root="0"), dict(ins="[a, b]", outs="x", root="1", tail=" in g")],
    "reduce_scatter": [dict(ins="y", outs="x", redop=" op avg"), dict(ins="[a, b]", outs="x")],
    "all_to_all": [dict(ins="y", outs="z"), dict(ins="y", outs="z", splits=" splits [1, 3], [2, 2]", tail=" in g")],
    "barrier": [dict(), dict(tail=" in m.dp", handle="h = ")],
}
DECLS = ("world 2\ntensor x: float32[4]\ntensor y: float32[8]\ntensor z: float32[8]\ntensor a: float32[4]\n"
         "tensor b: float32[4]\ngroup g = [0, 1]\nmesh m = (dp=1, tp=2)\n")


def without_spans(node):
    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k != "span"}
        if isinstance(d, (list, tuple)):
            return [strip(v) for v in d]
        return d
    return strip(dataclasses.asdict(node))


def parse(text: str) -> n.Module:
    source = SourceFile("t.comm", text)
    return to_ast(parse_tree(source), source)


@pytest.mark.parametrize("kind, case", [(k, c) for k, cs in FORM_CASES.items() for c in cs],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_form_round_trips_through_fmt(kind, case):
    fields = dict(ins="", outs="", root="", redop="", splits="") | {k: v for k, v in case.items()
                                                                  if k not in ("tail", "handle")}
    stmt = case.get("handle", "") + KINDS[kind].form.format(**fields) + case.get("tail", "")
    text = DECLS + stmt + ("\nwait h\n" if "handle" in case else "\n")
    module = parse(text)
    [coll] = [s for s in module.body if isinstance(s, n.Collective)]
    assert coll.op == kind
    formatted = format_source(SourceFile("t.comm", text))
    assert formatted == text  # the form is the canonical text
    assert without_spans(parse(formatted)) == without_spans(module)


# ---- C318: a collective's input and output overlapping --------------------------------------------------------


def _overlaps(statement: str, backend: str) -> list[str]:
    """The C318 messages for one collective statement at world 4 under one backend."""
    from commdsl.checker import CheckOptions, check_program

    text = ("program o\nworld 4\ntensor x: float32[8] = rank * 8 + i\ntensor y: float32[12] = rank + i\n"
            f"{statement}\n")
    found = check_program(load(SourceFile("o.comm", text)), CheckOptions(backends=(backend,)))
    return [d.message for d in found if d.code == "C318"]


@pytest.mark.parametrize("statement", [
    "all_to_all x into y[0 : 8]",                       # separate buffers
    "all_reduce x", "broadcast x from 1", "reduce x to 2",  # one buffer: in place by nature
    "all_gather x.chunk(rank, world) into x",           # the in-place forms torch and NCCL name
    "reduce_scatter x into x.chunk(rank, world)",
    "gather x.chunk(rank, world) into x to 0",
    "scatter x into x.chunk(rank, world) from 0",
    "gather x[0 : 2] into x to 0",                      # rank 0's own block: in place at the root, which alone writes
    # list forms torch runs through a flat temporary on both backends
    "all_gather x[0 : 2] into [x[0 : 2], x[2 : 4], x[4 : 6], x[6 : 8]]",
    "reduce_scatter [x[0 : 2], x[2 : 4], x[4 : 6], x[6 : 8]] into x[2 : 4]",
])
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_in_place_forms_are_not_overlaps(statement, backend):
    assert _overlaps(statement, backend) == []


@pytest.mark.parametrize("statement, backends, first", [
    # all_to_all has no in-place form: wrong blocks on Gloo, varying from run to run (measured)
    ("all_to_all x into x", ("gloo", "nccl"), 0),
    ("all_to_all y[0 : 8] into y[4 : 12]", ("gloo", "nccl"), 0),
    # scatter at the root off its own block: Gloo hands rank 1 the block as it was before the root's copy
    ("scatter x into x[2 : 4] from 0", ("gloo", "nccl"), 0),
    ("scatter [x[0 : 2], x[2 : 4], x[4 : 6], x[6 : 8]] into x[2 : 4] from 0", ("gloo", "nccl"), 0),  # measured too
    # Gloo copies these through a temporary (measured right); NCCL runs them in place only at the own block
    ("all_gather x[0 : 2] into x", ("nccl",), 1),
    ("reduce_scatter x into x[0 : 2]", ("nccl",), 1),
    ("gather x[2 : 4] into x to 0", ("nccl",), 0),
])
def test_overlaps_outside_the_in_place_form_are_c318(statement, backends, first):
    for backend in ("gloo", "nccl"):
        found = _overlaps(statement, backend)
        if backend in backends:
            assert found and found[0].startswith(f"`{statement.split()[0]}` on rank {first} reads and writes"), found
        else:
            assert found == []


# ---- C319: on NCCL, an op on one group while an async op on another is in flight --------------------------------


def _across(body: str, backend: str = "nccl") -> list[tuple[int, list[int]]]:
    from commdsl.checker import CheckOptions, check_program

    text = ("program a\nworld 4\ngroup pair = split by rank // 2\ntensor x: float32[4] = rank\n"
            f"tensor y: float32[4] = rank\n{body}")  # the body starts at line 6
    found = check_program(load(SourceFile("a.comm", text)), CheckOptions(backends=(backend,)))
    return [(d.span.line, [lab.span.line for lab in d.labels]) for d in found if d.code == "C319"]


@pytest.mark.parametrize("body, want", [
    ("h = all_reduce x in pair\nall_reduce y\nwait h\n", [(7, [6])]),        # the world while the pair's runs
    ("h = all_reduce x in pair\nwait h\nall_reduce y\n", []),                # waited first
    ("h = all_reduce x in pair\nall_reduce y in pair\nwait h\n", []),        # one group: one stream, in order
    ("h = all_reduce x in pair\nwait all\nall_reduce y\n", []),              # `wait all` ends it too
    ("h = batch:\n    send x to rank ^ 1\n    recv y from rank ^ 1\nall_reduce y in pair\nwait h\n",
     [(9, [6])]),                                                            # a batch on the world is in flight
    ("h = isend x to rank ^ 1\nall_reduce y in pair\nrecv y from rank ^ 1\nwait h\n", []),  # P2P: its own
])
def test_an_op_on_another_group_while_an_async_one_is_in_flight_is_c319_on_nccl(body, want):
    assert _across(body) == want
    assert _across(body, "gloo") == []  # Gloo's groups have threads of their own


def test_uneven_lists_apply_as_nccls_broadcasts_and_reduces():
    """The simulator runs an all-gather-v and a reduce-scatter-v as the NCCL fallback does: entry j is member
    j's input (all_gather), member j's output is the sum of every member's entry j (reduce_scatter)."""
    xs = [np.arange(j + 1, dtype=np.float32) + 10 * j for j in range(3)]
    out = KINDS["all_gather"].apply(instance(3, [[x] for x in xs], listed_out=True))
    for m in range(3):
        equal(out[m], xs)
    parts = [[np.full(j + 1, r + 1, dtype=np.float32) for j in range(3)] for r in range(3)]
    out = KINDS["reduce_scatter"].apply(instance(3, parts, redop="sum", listed_in=True))
    for j in range(3):
        equal(out[j], [np.full(j + 1, 6, dtype=np.float32)])


# ---- list forms: shapes (C320) and uneven sizes (NCCL's all-gather-v) ------------------------------------------


def _codes(text: str, backend: str) -> list[tuple[str, str]]:
    """(code, message) of every finding of a world-3 program under one backend."""
    from commdsl.checker import CheckOptions, check_program

    found = check_program(load(SourceFile("l.comm", "program l\nworld 3\n" + text)), CheckOptions(backends=(backend,)))
    return [(d.code, d.message) for d in found]


UNEVEN = """\
tensor x: float32[rank + 1] = rank
tensor a: float32[1]
tensor b: float32[2]
tensor c: float32[3]
all_gather x into [a, b, c]
expect a == 0
expect b == 1
expect c == 2
tensor y: float32[rank + 1]
reduce_scatter [a, b, c] into y
expect y == 3 * rank
"""


def test_uneven_lists_check_clean_and_simulate_on_nccl_and_the_all_gather_is_c320_on_gloo():
    """torch's NCCL runs both (one broadcast, one reduce per member): clean, and the simulator's results pass
    the program's expects. torch's Gloo raises at the all-gather-v on every rank and runs the reduce-scatter-v
    (measured): C320 at the first statement only."""
    assert _codes(UNEVEN, "nccl") == []
    assert _codes(UNEVEN, "gloo") == [
        ("C320", "`all_gather` on rank 0: buffer 1 of the output list, `b`, has shape [2], the input `x` [1]"),
    ]


def test_members_whose_uneven_lists_disagree_are_c306_naming_both():
    text = ("tensor x: float32[rank + 1] = rank\ntensor a: float32[1]\ntensor b: float32[2 + rank // 2]\n"
            "tensor c: float32[3]\nall_gather x into [a, b, c]\n")
    assert _codes(text, "nccl") == [("C306", "`all_gather`: rank 1's input holds 2 elements, rank 2's buffer for it 3")]


@pytest.mark.parametrize("statement, backends", [
    ("gather x into [a, a, a] to 0", ("gloo", "nccl")),  # PGNCCL's gather compares shapes too
    ("scatter [a, a, a] into x from 1", ("gloo", "nccl")),
    ("all_gather x into [a, a, a]", ("gloo",)),  # PGNCCL's all_gather compares element counts only
    ("reduce_scatter [a, a, a] into x", ("gloo",)),
    ("reduce_scatter [x, x, a] into x", ("gloo",)),  # Gloo compares the member's own entry only: rank 2's
    ("reduce_scatter [a, x, x] into x", ("gloo",)),  # ... rank 0's
])
def test_a_list_buffer_of_another_shape_is_c320_where_torch_compares_shapes(statement, backends):
    text = f"tensor x: float32[4] = rank\ntensor a: float32[2, 2]\n{statement}\n"
    for backend in ("gloo", "nccl"):
        found = [c for c, _ in _codes(text, backend)]
        assert found == (["C320"] if backend in backends else []), (backend, found)


@pytest.mark.parametrize("decls, statement, gloo", [
    ("tensor y: float32[3, 4]", "all_gather x into y", True),  # torch's stacked form: NCCL only
    ("tensor y: float32[6, 2]", "all_gather x into y", True),
    ("tensor y: float32[12]", "all_gather x into y", False),
    ("tensor y: float32[3, 4]", "all_gather y.chunk(rank, world) into y", False),  # rows of [1, 4]
    ("tensor y: float32[3, 4]\ntensor v: float32[1, 4]", "all_gather v into y", False),
    ("tensor y: float32[12]", "reduce_scatter y into x", False),
    ("tensor y: float32[3, 4]", "reduce_scatter y into x", True),
    ("tensor y: float32[3, 4]", "reduce_scatter y into y.chunk(rank, world)", False),
    ("tensor y: float32[12]\ntensor v: float32[2, 2]", "reduce_scatter y into v", True),
])
def test_a_whole_buffer_not_shaped_as_the_parts_side_by_side_is_c321_on_gloo(decls, statement, gloo):
    """Gloo chunks `all_gather_into_tensor`'s output (`reduce_scatter_tensor`'s input) along dimension 0 and
    compares each chunk with the part (measured); NCCL compares element counts only (measured at world 1)."""
    text = f"tensor x: float32[4] = rank\n{decls}\n{statement}\n"
    for backend in ("gloo", "nccl"):
        found = [c for c, _ in _codes(text, backend)]
        assert found == (["C321"] if gloo and backend == "gloo" else []), (backend, found)


def test_gloo_reduce_scatter_compares_only_the_members_own_entry():
    """Measured: with its own entry of the output's shape, a member may pass the others in any shape."""
    assert _codes("tensor x: float32[4] = rank\ntensor a: float32[2, 2]\n"
                  "on rank == 0:\n    reduce_scatter [x, a, a] into x\nelse:\n    reduce_scatter [a, a, a] into x\n",
                  "gloo") == [("C320", "`reduce_scatter` on rank 1: buffer 1 of the input list, `a`, has shape [2, 2], "
                                       "the output `x` [4]")]
