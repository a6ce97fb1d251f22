"""`commdsl.checker.access`: buffer races with in-flight ops (R503), reads of elements a `reduce` left undefined
(R504, also through a computation), and collective results overwritten unread (L705). Each program lists the
exact records the tracker must produce, as (rank, line of the op, line of the other op, ...)."""

from __future__ import annotations

import numpy as np
import pytest

from commdsl.checker.access import Access, DeadStore
from commdsl.engine import run_engine
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.source import SourceFile


@pytest.fixture(autouse=True, params=["elements", "segments"])
def granularity(request, monkeypatch):
    """Every test twice: tensors tracked element by element, and (as a large tensor is) by segments."""
    if request.param == "segments":
        monkeypatch.setattr("commdsl.checker.access.SEGMENTS_FROM", 0)
        monkeypatch.setattr("commdsl.checker.access.ELEMENTS_PER_SEGMENT", 0)  # however short the segments
    return request.param


def track(text: str, world: int = 2, lints: bool = False):
    s = expand(load(SourceFile("t.comm", text)), world)
    access = Access(s, lints)
    outcome = run_engine(s, observer=access)
    assert outcome.completed
    return s, access


def line(s, op_id: int) -> int:
    return s.locate(op_id)[0].span.line


def races(s, access) -> list[tuple]:
    return sorted((r.rank, line(s, r.op), line(s, r.inflight), r.writes, r.window_writes, r.tensor)
                  for r in access.races)


def undefined(s, access) -> list[tuple]:
    return sorted((u.rank, line(s, u.op), line(s, u.reduce)) for u in access.undefined_reads)


def dead(s, access) -> list[tuple]:
    return sorted((d.rank, line(s, d.producer), line(s, d.overwriter)) for d in access.dead_stores)


HEADER = "world 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\ntensor z: float32[4]\n"  # lines 1-4


# ---- R503: races with in-flight ops --------------------------------------------------------------------------

@pytest.mark.parametrize("body, want", [
    # 5: isend reads x; 6: a write while it is in flight races; 9: after the wait, nothing
    ("h = isend x to 1 - rank\nx = 5\nrecv y from 1 - rank\nwait h\nx = 6\n",
     [(r, 6, 5, True, False, "x") for r in (0, 1)]),
    # reading what an isend reads is fine
    ("h = isend x to 1 - rank\ny = x\nrecv z from 1 - rank\nwait h\n", []),
    # elements outside an irecv's window are free; one shared element is a race
    ("h = irecv y[0:2] from 1 - rank\ny[2:4] = 1\ny[1:3] = 2\nisend x[0:2] to 1 - rank\nwait all\n",
     [(r, 7, 5, True, True, "y") for r in (0, 1)]),
    # a blocking recv into a buffer an isend still reads
    ("h = isend x to 1 - rank\nrecv x from 1 - rank\nwait h\n", [(r, 6, 5, True, False, "x") for r in (0, 1)]),
])
def test_races_with_point_to_point_windows(body, want):
    s, access = track(HEADER + body)
    assert races(s, access) == want


def test_a_read_of_a_buffer_an_irecv_writes():
    text = HEADER + ("on rank == 0:\n    h = irecv y from 1\n    z = y\n    wait h\n    z = y\n"
                     "else:\n    send x to 0\n")
    s, access = track(text)
    assert races(s, access) == [(0, 7, 6, False, True, "y")]


def test_two_irecvs_into_one_buffer():
    text = HEADER + ("on rank == 0:\n    irecv y from 1\n    irecv y[3] from 1 tag 1\n    wait all\n"
                     "else:\n    send x to 0\n    send x[0] to 0 tag 1\n")
    s, access = track(text)
    assert races(s, access) == [(0, 7, 6, True, True, "y")]


def test_ops_of_one_batch_on_overlapping_elements():
    text = HEADER + ("batch:\n    send x[0:2] to 1 - rank\n    recv x[1:3] from 1 - rank\n"
                     "batch:\n    send x[0:2] to 1 - rank\n    recv x[2:4] from 1 - rank\n")
    s, access = track(text)
    # lines 6 and 7 share element 1 on each rank; lines 9 and 10 share nothing
    assert races(s, access) == [(r, 7, 6, True, False, "x") for r in (0, 1)]


def test_async_collectives_hold_their_buffers_until_the_wait():
    text = HEADER + ("h = all_reduce x\ny = x\nwait h\ny = x\n"  # 5-8: all_reduce writes x: a read races
                     "k = broadcast z from 0\nz = 1\ny = z\nwait k\n")  # 9-12: the root only reads z
    s, access = track(text)
    assert races(s, access) == [(0, 6, 5, False, True, "x"), (0, 10, 9, True, False, "z"),
                                (1, 6, 5, False, True, "x"), (1, 10, 9, True, True, "z"), (1, 11, 9, False, True, "z")]


GROUPED = "world 2\ngroup solo = split by rank\ntensor x: float32[4] = rank\ntensor z: float32[4]\n"  # lines 1-4


@pytest.mark.parametrize("body, want", [
    # 5: async all_reduce of x; 6: a barrier of its group ends it on the rank: reading x at 7 is no race
    ("h = all_reduce x\nbarrier\nz = x\nwait h\n", []),
    # an async barrier ends it at its wait (8): the read at 9 is safe, the one at 7, before, races
    ("h = all_reduce x\nb = barrier\nz = x\nwait b\nz = x\nwait h\n", [(r, 7, 5, False, True, "x") for r in (0, 1)]),
    # a barrier of another group does not end it
    ("h = all_reduce x\nbarrier in solo\nz = x\nwait h\n", [(r, 7, 5, False, True, "x") for r in (0, 1)]),
    # nor point-to-point ops, which torch's Gloo runs outside the group's queue
    ("h = isend x to 1 - rank\nrecv z from 1 - rank\nbarrier\nx = 1\nwait h\n",
     [(r, 8, 5, True, False, "x") for r in (0, 1)]),
])
def test_a_barrier_ends_the_groups_earlier_async_collectives(body, want):
    """torch's Gloo barrier waits for every earlier collective of its group (measured: a 256 MiB all_reduce
    was complete when the barrier returned; with the barrier on another group it was not): a read after it
    is no race, where R503 said the result "depends on timing"."""
    s, access = track(GROUPED + body)
    assert races(s, access) == want


def nccl_ordered(s, access) -> list[tuple]:
    return sorted((r.rank, line(s, r.op), line(s, r.inflight)) for r in access.races if r.nccl_ordered)


@pytest.mark.parametrize("body, gloo, nccl_ordered_lines", [
    # 5: async all_reduce of x; 6: a blocking all_reduce of its group; 7: reading x races on Gloo (two worker
    # threads), not on NCCL (the blocking call makes the rank's stream wait for it, behind x's on the group's)
    ("h = all_reduce x\nall_reduce z\nz = x\nwait h\n", [(7, 5)], [(7, 5)]),
    # a later collective of the group on the same buffer: beside it on Gloo, after it on NCCL's one stream
    ("h = all_reduce x\nall_reduce x\nwait h\n", [(6, 5)], [(6, 5)]),
    # a blocking collective of another group orders nothing: a race on both
    ("h = all_reduce x\nall_reduce z in solo\nz = x\nwait h\n", [(7, 5)], []),
    # nor does an async one of the group, for work outside the group's stream (7 races with both)
    ("h = all_reduce x\nk = all_reduce z\nz = x\nwait k\nwait h\n", [(7, 5), (7, 6)], []),
    # a batch of the group runs on its stream too: after the async all_reduce (its send of x at 7), and, blocking,
    # before the rank's later work (the read of x at 9; 8 races with 7 inside the batch, on both)
    ("h = all_reduce x\nbatch:\n    send x to 1 - rank\n    recv z from 1 - rank\nwait h\n", [(7, 5)], [(7, 5)]),
    ("h = all_reduce x\nbatch:\n    send z to 1 - rank\n    recv z from 1 - rank\nz = x\nwait h\n",
     [(8, 7), (9, 5)], [(9, 5)]),
    # an async batch of the group, then a blocking all_reduce of it: both of the batch's buffers are through by 9
    ("b = batch:\n    send z to 1 - rank\n    recv x from 1 - rank\nall_reduce z\nz = x\nwait b\n",
     [(8, 6), (9, 6), (9, 7)], [(8, 6), (9, 6), (9, 7)]),
    # ... but not without it
    ("b = batch:\n    send z to 1 - rank\n    recv x from 1 - rank\nz = x\nwait b\n", [(8, 6), (8, 7)], []),
])
def test_nccl_orders_a_groups_async_ops_before_the_ranks_later_work_after_a_blocking_one(
    body, gloo, nccl_ordered_lines
):
    """Gloo runs a group's collectives on two threads (measured) and a batch's ops as separate sends and
    receives, so these are races there; NCCL runs a group's collectives and batches on its stream in issue
    order, and a blocking one makes the rank's current stream wait for it (torch's `WorkNCCL::synchronize`):
    R503 under nccl skips the races marked `nccl_ordered`."""
    s, access = track(GROUPED + body)
    assert sorted({(ln, op) for _, ln, op, *_ in races(s, access)}) == gloo
    assert sorted({(ln, op) for _, ln, op in nccl_ordered(s, access)}) == nccl_ordered_lines


def test_a_batch_bound_to_a_handle_holds_its_buffers_until_the_wait():
    # 5-7: the batch sends x, receives y; 8: reading x is fine, 9: writing it races with the send, 10: reading y
    # races with the receive; after `wait b` (11) nothing does
    text = HEADER + ("b = batch:\n    send x to 1 - rank\n    recv y from 1 - rank\nz = x\nx = 1\nz = y\nwait b\n"
                     "y = 2\n")
    s, access = track(text)
    assert races(s, access) == [(r, line, op, writes, window, t) for r in (0, 1)
                                for line, op, writes, window, t in ((9, 6, True, False, "x"), (10, 7, False, True, "y"))]
    assert not any(r.same_batch for r in access.races)


def test_ops_of_one_unwaited_batch_race_as_in_a_waited_one():
    text = HEADER + "b = batch:\n    send x[0:2] to 1 - rank\n    recv x[1:3] from 1 - rank\nwait b\n"
    s, access = track(text)
    assert races(s, access) == [(r, 7, 6, True, False, "x") for r in (0, 1)]
    assert all(r.same_batch for r in access.races)


def test_no_window_without_async_ops():
    s, access = track(HEADER + "batch:\n    send x to 1 - rank\n    recv y from 1 - rank\nx = y\n")
    assert races(s, access) == [] and access.writing == {}


# ---- R504: reads of undefined elements ---------------------------------------------------------------------

REDUCE = HEADER + "reduce x to 0\n"  # line 5; rank 1's x is undefined afterwards


@pytest.mark.parametrize("body, want", [
    ("y = x\n", [(1, 6, 5)]),  # a non-root's read; the root's is fine
    ("batch:\n    send x to 1 - rank\n    recv y from 1 - rank\n", [(1, 7, 5)]),  # a send reads its buffer
    ("x += 1\n", [(1, 6, 5)]),  # an augmented assignment reads its target
    ("expect x >= 0\n", [(1, 6, 5)]),
    ("x = 1\ny = x\n", []),  # overwritten first
    ("batch:\n    send y to 1 - rank\n    recv x from 1 - rank\ny = x\n", []),  # received into first
    ("x[0:2] = 1\ny[0:2] = x[0:2]\ny[2:4] = x[2:4]\n", [(1, 8, 5)]),  # only the part still undefined
    ("broadcast x from 0\ny = x\n", []),  # a collective's output is defined again
])
def test_reads_after_reduce(body, want):
    s, access = track(REDUCE + body)
    assert undefined(s, access) == want


def test_an_undefined_value_flows_through_a_computation():
    body = "z = x * 2 + 1\ny = z\ny[0] = 3\nz[0] = y[0]\nz[1:4] = 0\ny[0:3] = z[1:4]\ny = z\n"
    s, access = track(REDUCE + body)
    # 6 reads x (undefined); 7 reads z, computed from it; 8 redefines y[0], which 9 copies into z[0]; 10
    # redefines the rest of z, so 11 and 12 read defined elements only
    assert undefined(s, access) == [(1, 6, 5), (1, 7, 5)]
    body = "z = x * 2 + 1\nz[1:4] = 0\ny = z\n"
    s, access = track(REDUCE + body)
    assert undefined(s, access) == [(1, 6, 5), (1, 8, 5)]  # z[0] is still computed from undefined x[0]


def test_undefined_elements_are_tracked_per_rank():
    text = "world 3\ntensor x: float32[2] = rank\ntensor y: float32[2]\nreduce x to 1\ny = x\n"
    s, access = track(text, 3)
    assert undefined(s, access) == [(0, 5, 4), (2, 5, 4)]


# ---- L705: collective results overwritten unread -----------------------------------------------------------

@pytest.mark.parametrize("body, want", [
    ("all_reduce x\nx = 1\n", [(0, 5, 6), (1, 5, 6)]),  # overwritten in full, never read
    ("all_reduce x\ny[0] = x[3]\nx = 1\n", []),  # read in part: used
    ("all_reduce x\nx[0:2] = 1\nx[2:4] = 1\n", []),  # overwritten in part: its other elements may still be read
    ("all_reduce x\nall_reduce x\ny = x\n", []),  # the second all_reduce reads the first's result
    ("all_gather x[0:2] into y\nbatch:\n    send z to 1 - rank\n    recv y from 1 - rank\n",
     [(0, 5, 8), (1, 5, 8)]),  # overwritten by a message
])
def test_dead_stores(body, want):
    s, access = track(HEADER + body, lints=True)
    assert dead(s, access) == want


def test_a_dead_store_only_where_the_result_is_written():
    body = "reduce x to 0\nx = 1\n"  # the root's result is overwritten unread; the non-root's x is undefined
    s, access = track(HEADER + body, lints=True)
    assert dead(s, access) == [(0, 5, 6)]


@pytest.mark.parametrize("body, want", [
    ("all_reduce x\n", [2]),  # every member gets the sum
    ("reduce x to 0\n", [1]),  # the root only: the others' x is undefined
    ("broadcast x from 1\n", [1]),  # the non-roots only: the root's x is its input
    ("gather x into z to 0\n", [1]),
    ("scatter z into x from 0\n", [2]),
    ("barrier\n", []),  # no result at all
])
def test_the_ranks_a_collective_leaves_a_result_on(body, want):
    _, access = track(HEADER.replace("float32[4]\n", "float32[8]\n") + body, lints=True)
    assert sorted(access.receivers.values()) == want


def _overwrite_rank_by_rank(self, t, idx, owner, G, op_ids):
    """The rule as first written, one writing rank and one producer at a time: the reference for `overwrite`."""
    held = self.unread[t][idx]
    live = (held >= 0) & (held != op_ids[owner])
    if not live.any():
        return
    table = self.unread[t]
    for k in np.unique(owner[live]):
        mine = owner == k
        for producer in np.unique(held[mine & live]):
            if int((held[mine] == producer).sum()) == int((table == producer).sum()):
                self.dead_stores.append(DeadStore(int(G[k]), int(producer), int(op_ids[k])))
    self.forget(t, held[live])


OVERWRITES = [
    "all_reduce x[0:2]\nall_reduce x[2:4]\nx = 1\n",  # two results, one write over both: both dead
    "all_reduce x[0:2]\nall_reduce x[1:3]\nx = 1\n",  # the second replaced half the first's
    "all_reduce x\non rank == 1:\n    y = x\nx = 2\n",  # read on one rank only
    "broadcast x from 1\nall_gather x[0:1] into z[0 : world]\nx[1:4] = 7\nz = x\n",
    "for s in 0 .. 2:\n    all_reduce x[s : s + 2]\n    x[s : s + 1] = s\nx = 0\n",
    "reduce x to 0\nall_reduce y\nbatch:\n    send x to (rank + 1) % world\n    recv y from (rank - 1) % world\n",
]


@pytest.mark.parametrize("body", OVERWRITES)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_dead_stores_are_found_as_rank_by_rank(body, world, monkeypatch):
    text = HEADER.replace("world 2", f"world {world}") + body
    _, fast = track(text, world, lints=True)
    monkeypatch.setattr(Access, "overwrite", _overwrite_rank_by_rank)
    _, slow = track(text, world, lints=True)
    assert fast.dead_stores == slow.dead_stores


def test_dead_stores_are_lint_only():
    s, access = track(HEADER + "all_reduce x\nx = 1\n", lints=False)
    assert dead(s, access) == [] and access.unread == {} and access.receivers == {}


def test_r503_after_a_blocking_collective_of_the_group_is_gloos_only():
    from commdsl.checker import CheckOptions, check_program

    text = ("program o\nworld 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\ntensor z: float32[4]\n"
            "h = all_reduce x\nall_reduce y\nz = x\nwait h\n")
    found = check_program(load(SourceFile("o.comm", text)), CheckOptions(backends=("gloo", "nccl")))
    assert [d.code for d in found] == ["R503"]
    assert "only on gloo (checked for gloo, nccl)" in [n.message for n in found[0].notes]
    assert check_program(load(SourceFile("o.comm", text)), CheckOptions(backends=("nccl",))) == []


def test_a_large_tensor_is_tracked_by_the_segments_its_views_cut(granularity):
    """Ring attention with blocks of 2**24 float64 (128 MiB a tensor a rank, 4 ranks): each tensor is tracked
    by segments (its views are whole blocks: one segment per rank), not 2**26 elements, with the same (no)
    findings; `commdsl predict` checks the largest size it is asked for this way."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "programs" / "ring_attention.comm").read_text()
    s = expand(load(SourceFile("ring_attention.comm", text)), 4, {"block": 1 << 24})
    access = Access(s, True)
    assert run_engine(s, observer=access).completed
    assert not (access.races or access.undefined_reads or access.dead_stores)
    assert access.segments("kv").tolist() == [k << 24 for k in range(5)]
    assert access.writing["incoming"].size == 4


def test_a_race_on_every_rank_keeps_the_first_races_of_each_pair_of_statements():
    """A ring step that writes its in-flight send buffer races on every rank at every iteration: the tracker
    keeps, per pair of statements, the first `LISTED` races in rank order (R503 reports the first), not one per
    rank and iteration (16 million at world 4096)."""
    from commdsl.rules import LISTED

    text = ("world 12\ntensor x: float32[4] = rank\ntensor y: float32[4]\nfor s in 0 .. 3:\n"
            "    h = isend x to (rank + 1) % world\n    recv y from (rank - 1) % world\n    x = s\n    wait h\n")
    s, access = track(text, 12)
    assert LISTED == 8 and races(s, access) == [(r, 7, 5, True, False, "x") for r in (0, 0, 0, 0, 1, 1, 1, 1)]
    assert [s.locate(r.op)[0].bindings for r in sorted(access.races)][:4] == [(("s", k),) for k in range(4)]


def test_windows_close_what_each_request_holds_once():
    """`Windows`: one entry per op and its ranks; a request that holds several (two ops of a batch bound to one
    handle) gives them all back at its wait, others keep theirs, and a second wait finds nothing."""
    import numpy as np

    from commdsl.checker.access import Windows

    w = Windows(6)
    w.open("x", np.array([0, 1, 2, 3]), np.array([0, 0, 1, 1]), False, np.array([3, 4]))
    w.open("y", np.array([7, 8]), np.array([0, 1]), True, np.array([4, 5]))
    got = sorted((t, idx.tolist(), writes) for t, idx, writes in w.close(np.array([4, 4])))
    assert got == [("x", [2, 3], False), ("y", [7], True)]
    assert 4 not in w and 3 in w and 5 in w and list(w.close(np.array([4]))) == []
    assert [(t, idx.tolist()) for t, idx, _ in w.close(np.array([5, 3]))] in (
        [("x", [0, 1]), ("y", [8])], [("y", [8]), ("x", [0, 1])])
    assert not w and w.entries == [None, None]


def test_a_tensor_cut_at_nearly_every_element_is_tracked_by_element(monkeypatch):
    """Views of one element, one per iteration, cut a large tensor at every element: its segments would be as
    many as its elements, each view's ends looked up among them; it is tracked element by element, with the
    same findings (a ring's chunks of one element at world 4096 took minutes to lint)."""
    monkeypatch.setattr("commdsl.checker.access.SEGMENTS_FROM", 16)  # x is large
    monkeypatch.setattr("commdsl.checker.access.ELEMENTS_PER_SEGMENT", 2)
    text = ("world 2\ntensor x: float32[16] = rank\ntensor y: float32[1]\nfor s in 0 .. 15:\n"
            "    h = isend x[s] to 1 - rank\n    recv y from 1 - rank\n    x[s] = 2\n    wait h\n")
    s, access = track(text)
    assert "x" in access.cuts and access.cuts["x"] is None
    assert races(s, access) == [(r, 7, 5, True, False, "x") for r in (0, 0, 0, 0, 0, 0, 0, 0)]
    monkeypatch.setattr("commdsl.checker.access.ELEMENTS_PER_SEGMENT", 0)  # by segments: the same findings
    s, by_segments = track(text)
    assert by_segments.cuts["x"] is not None and races(s, by_segments) == races(s, access)


def test_undefined_reads_on_every_rank_keep_the_first_of_each_pair_of_statements():
    """Every non-root rank reads after `reduce` at every iteration: per pair of statements the first `LISTED`
    reads in rank order are kept (R504 reports the first), as races are."""
    text = "world 12\ntensor x: float32[4] = rank\ntensor y: float32[4]\nfor s in 0 .. 2:\n    reduce x to 0\n    y = x\n"
    s, access = track(text, 12)
    # the reduce itself reads x at s = 1 and 2, and `y = x` at s = 0, 1 and 2, on every rank but the root
    assert undefined(s, access) == sorted([(r, 5, 5) for r in (1, 1, 2, 2, 3, 3, 4, 4)]
                                          + [(r, 6, 5) for r in (1, 1, 1, 2, 2, 2, 3, 3)])
