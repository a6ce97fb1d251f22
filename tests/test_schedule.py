"""`commdsl.schedule`: cohorts give each rank exactly its records; op ids round-trip through `locate`; per-rank
fields (views, element constants, loop bindings) made concrete for one rank are that rank's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.schedule import BatchRec, ComputeRec, Record, View, VView, elem_at
from commdsl.source import SourceFile, Span


def program(text: str):
    return load(SourceFile("t.comm", text))


# ---- sequences and cohorts -----------------------------------------------------------------------------

conditions = st.one_of(
    st.builds(lambda k, j: f"rank % {k} == {j % k}", st.integers(1, 4), st.integers(0, 3)),
    st.builds(lambda c: f"rank < {c}", st.integers(0, 9)),
    st.builds(lambda c: f"rank >= world - {c}", st.integers(0, 4)),
    st.builds(lambda c: f"rank == {c}", st.integers(0, 9)),
)


@st.composite
def bodies(draw, depth: int = 0):
    """Statements: assignments, sends to self (expansion does not mind), loops with per-rank bounds, and `on` chains."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["assign", "send", "loop", "on", "on"] if depth < 3 else ["assign", "send"]))
        if kind == "assign":
            lines.append(f"x = {draw(st.integers(0, 9))}")
        elif kind == "send":
            lines.append("send x to rank")
        elif kind == "loop":
            lines.append(f"for s{depth} in 0 .. rank % {draw(st.integers(1, 3))}:")
            lines += ["    " + b for b in draw(bodies(depth + 1))]
        else:
            lines.append(f"on {draw(conditions)}:")
            lines += ["    " + b for b in draw(bodies(depth + 1))]
            for _ in range(draw(st.integers(0, 2))):
                lines.append(f"else on {draw(conditions)}:")
                lines += ["    " + b for b in draw(bodies(depth + 1))]
            if draw(st.booleans()):
                lines.append("else:")
                lines += ["    " + b for b in draw(bodies(depth + 1))]
    return lines


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(), st.integers(1, 12))
def test_each_rank_steps_through_exactly_the_records_that_contain_it(lines, world):
    s = expand(program("tensor x: float32[1]\n" + "\n".join(lines) + "\n"), world)
    seqs = s.sequences
    for r in range(world):
        want = [rid for rid in s.top if r in s.records[rid].ranks.tolist()]
        assert s.sequence(r).tolist() == want, f"rank {r}"
        assert int(seqs.length[r]) == len(want) == len(s.ops[r])
    # a cohort is exactly a set of ranks with one sequence
    for a in range(world):
        for b in range(world):
            assert (seqs.cohort[a] == seqs.cohort[b]) == (s.sequence(a).tolist() == s.sequence(b).tolist())


def test_batch_members_are_reached_through_their_batch():
    s = expand(program("tensor x: float32[1]\nbatch:\n    send x to (rank + 1) % world\n"
                       "    recv x from (rank - 1) % world\nx = 1\n"), 3)
    kinds = [type(s.records[rid]).__name__ for rid in s.sequence(1)]
    assert kinds == ["BatchRec", "ComputeRec"]
    batch = s.records[int(s.sequence(1)[0])]
    assert all(op.id not in s.top for op in batch.ops)
    assert [op.id for op, _ in batch.members(1)] == [op.id for op in batch.ops]


# ---- op ids -------------------------------------------------------------------------------------------------

LOCATE = """\
world 1..6
tensor x: float32[4] = rank
for s in 0 .. rank:
    on s % 2 == 0:
        x[s % 4] = s
batch:
    on rank % 2 == 0:
        send x to (rank + 1) % world
    recv x[0] from (rank - 1) % world
all_reduce x
"""


@pytest.mark.parametrize("world", [1, 2, 3, 6])
def test_locate_and_op_bases_round_trip_every_op_id(world):
    s = expand(program(LOCATE), world)
    seen = []
    for rec in s.records:
        assert s.op_bases[rec.id] == rec.base
        for k in range(rec.ranks.size):
            got, pos = s.locate(rec.base + k)
            assert got is rec and pos == k
            seen.append(rec.base + k)
    assert seen == list(range(len(seen)))  # ids are dense, record by record
    assert s.num_ops == sum(r.ranks.size for r in s.records if not isinstance(r, BatchRec))


# ---- per-rank fields made concrete ----------------------------------------------------------------------------

def test_vview_at_reads_each_ranks_offset_and_shape():
    v = VView("x", np.array([0, 6, 12], dtype=np.int8), (np.array([2, 3, 1], dtype=np.int16), 3))
    assert [v.at(k) for k in range(3)] == [View("x", 0, (2, 3), 6), View("x", 6, (3, 3), 9), View("x", 12, (1, 3), 3)]
    assert all(type(d) is int for k in range(3) for d in (v.at(k).offset, *v.at(k).shape, v.at(k).numel))
    assert v.numel.tolist() == [6, 9, 3] and v.numel.dtype == np.int64  # widened before the product
    assert VView("y", 4, ()).at(0) == View("y", 4, (), 1)  # 0-dimensional: one element


SPAN = Span(path="t.comm", start=0, end=1, line=1, column=1, end_line=1, end_column=2)


def test_elem_at_makes_per_rank_constants_and_views_concrete():
    view = VView("x", np.array([0, 4]), (2,))
    e = ("b", "+", ("u", "-", ("c", np.array([1.5, 2.5]))), ("f", "min", (("v", view), ("i",), ("c", 3))), SPAN)
    assert elem_at(e, 1) == ("b", "+", ("u", "-", ("c", 2.5)), ("f", "min", (("v", View("x", 4, (2,), 2)), ("i",),
                                                                                  ("c", 3))), SPAN)
    assert type(elem_at(("c", np.array([1, 2], dtype=np.int8)), 0)[1]) is int
    assert elem_at(("rand", np.array([7, 8]), True), 1) == ("rand", 8, True)


def test_bindings_at_uses_the_global_rank_for_per_rank_loop_values():
    # a loop whose bounds differ by rank holds its variable as an array over every rank of the world
    rec = Record(node=None, ranks=np.array([1, 3]), bindings=(("t", 5), ("s", np.array([0, 10, 20, 30]))))
    assert rec.bindings_at(0) == (("t", 5), ("s", 10)) and rec.bindings_at(1) == (("t", 5), ("s", 30))
    uniform = Record(node=None, ranks=np.array([0, 2]), bindings=(("s", 4),))
    assert uniform.bindings_at(1) == (("s", 4),)


def test_records_in_a_per_rank_loop_carry_each_ranks_own_values():
    text = "world 5\ntensor x: float32[9] = rank\nfor s in rank .. 2 * rank:\n    x[s] = s * 10 + rank\n"
    s = expand(program(text), 5)
    for rec in s.records:
        assert isinstance(rec, ComputeRec)
        for k, r in enumerate(rec.ranks.tolist()):
            (name, value), = rec.bindings_at(k)
            assert name == "s" and r <= value <= 2 * r
            assert rec.target.at(k) == View("x", value, (), 1)
            assert elem_at(rec.value, k) == ("c", value * 10 + r)
    for r in range(5):
        assert [op.bindings for op in s.ops[r]] == [(("s", v),) for v in range(r, 2 * r + 1)]
