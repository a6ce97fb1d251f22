"""Soundness of the engine and the checker on generated programs, against an independent reference.

The reference interpreter below shares no code with `commdsl.engine`: it repeatedly lets every rank
execute its head op if that op can complete now, until nothing moves. Properties:
* the engine completes exactly when the reference does, with the same ranks stuck at the same ops;
* the checker calls a program clean exactly when the run completes with no leftover message and no
  unwaited request; when it reports a deadlock, the ranks it names are stuck there.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from commdsl.checker import CheckOptions, check_program
from commdsl.engine import run_engine
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.source import SourceFile

# one rank's program: ops ("send", peer, tag) | ("recv", peer, tag) | ("isend", peer, tag)
# | ("irecv", peer, tag) | ("waitall",) | ("all_reduce",)


def _op_text(op, k: int) -> str:
    kind = op[0]
    if kind in ("send", "recv", "isend", "irecv"):
        buf = f"b{k}"
        word = "to" if kind.endswith("send") else "from"
        prefix = f"h{k} = " if kind.startswith("i") else ""
        return f"{prefix}{kind} {buf} {word} {op[1]} tag {op[2]}"
    if kind == "waitall":
        return "wait all"
    return "all_reduce z"


def program_text(world: int, ranks: list[list[tuple]]) -> str:
    nbuf = max((len(r) for r in ranks), default=0)
    lines = [f"world {world}", "tensor z: float32[1] = rank"]
    lines += [f"tensor b{k}: float32[1] = rank" for k in range(max(nbuf, 1))]
    for r, ops in enumerate(ranks):
        lines.append(f"on rank == {r}:")
        body = [_op_text(op, k) for k, op in enumerate(ops)] or ["z = 0"]
        lines += ["    " + b for b in body]
    return "\n".join(lines) + "\n"


def reference(world: int, ranks: list[list[tuple]]):
    """(completed, {rank: stuck op index}) under rendezvous sends."""
    pc = [0] * world
    posted_s: list[tuple] = []  # (src, dst, tag, rank, idx) async sends not yet matched
    posted_r: list[tuple] = []
    pending = [set() for _ in range(world)]  # unmatched async requests per rank
    coll = [0] * world  # collectives passed per rank

    def take(lst, src, dst, tag):
        for j, item in enumerate(lst):
            if item[:3] == (src, dst, tag):
                return lst.pop(j)
        return None

    moved = True
    while moved:
        moved = False
        for r in range(world):
            while pc[r] < len(ranks[r]):
                op = ranks[r][pc[r]]
                kind = op[0]
                if kind in ("isend", "irecv"):
                    src, dst = (r, op[1]) if kind == "isend" else (op[1], r)
                    other = posted_r if kind == "isend" else posted_s
                    hit = _first_match(other, src, dst, op[2])
                    if hit is not None:
                        other.remove(hit)
                        pending[hit[3]].discard(hit[4])
                    else:
                        (posted_s if kind == "isend" else posted_r).append((src, dst, op[2], r, pc[r]))
                        pending[r].add(pc[r])
                elif kind in ("send", "recv"):
                    peer = op[1]
                    src, dst = (r, peer) if kind == "send" else (peer, r)
                    other = posted_r if kind == "send" else posted_s
                    hit = _first_match(other, src, dst, op[2])
                    if hit is None and _peer_head_matches(ranks, pc, peer, kind, r, op[2], posted_s, posted_r):
                        hit = "head"
                    if hit is None:
                        break
                    if hit != "head":
                        other.remove(hit)
                        pending[hit[3]].discard(hit[4])
                    else:
                        pc[peer] += 1
                elif kind == "waitall":
                    if pending[r]:
                        break
                else:  # all_reduce: every rank's head must be its next all_reduce
                    if not all(pc[q] < len(ranks[q]) and ranks[q][pc[q]][0] == "all_reduce" and coll[q] == coll[r]
                               for q in range(world)):
                        break
                    for q in range(world):
                        if q != r:
                            pc[q] += 1
                            coll[q] += 1
                    coll[r] += 1
                pc[r] += 1
                moved = True
    stuck = {r: pc[r] for r in range(world) if pc[r] < len(ranks[r])}
    return not stuck, stuck


def _first_match(lst, src, dst, tag):
    """The earliest posted op on the channel: FIFO per (src, dst, tag)."""
    for item in lst:
        if item[:3] == (src, dst, tag):
            return item
    return None


def _peer_head_matches(ranks, pc, peer, kind, me, tag, posted_s, posted_r):
    """A blocking op meets the peer's blocking head op, unless an async op of its own kind posted earlier on the
    channel (this rank's `irecv` before its `recv`, or `isend` before `send`) is waiting: messages on one
    channel match in posting order, so that one takes the peer's op first."""
    if pc[peer] >= len(ranks[peer]):
        return False
    head = ranks[peer][pc[peer]]
    want = "recv" if kind == "send" else "send"
    if head[0] != want or head[1] != me or head[2] != tag:
        return False
    src, dst = (me, peer) if kind == "send" else (peer, me)
    mine = posted_s if kind == "send" else posted_r
    return _first_match(mine, src, dst, tag) is None


@st.composite
def programs(draw):
    world = draw(st.integers(2, 4))
    op = st.one_of(
        st.tuples(st.sampled_from(["send", "recv", "isend", "irecv"]), st.integers(0, world - 1), st.integers(0, 1)),
        st.just(("waitall",)),
        st.just(("all_reduce",)),
    )
    ranks = []
    for r in range(world):
        ops = [o for o in draw(st.lists(op, max_size=5)) if len(o) == 1 or o[1] != r]
        if any(o[0] in ("isend", "irecv") for o in ops):
            ops.append(("waitall",))
        ranks.append(ops)
    return world, ranks


def _program(world, ranks):
    return load(SourceFile("gen.comm", program_text(world, ranks)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
@example((4, [[], [], [("send", 3, 0)], [("irecv", 2, 0), ("recv", 2, 0), ("waitall",)]]))  # irecv takes it first
def test_engine_agrees_with_reference(case):
    world, ranks = case
    schedule = expand(_program(world, ranks), world)
    result = run_engine(schedule)
    done, stuck = reference(world, ranks)
    assert result.completed == done, program_text(world, ranks)
    # the reference counts ops per rank as written; the Schedule has exactly one op per statement here
    assert {r: b.index for r, b in result.stops.items()} == stuck, program_text(world, ranks)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_checker_verdict_matches_the_run(case):
    world, ranks = case
    program = _program(world, ranks)
    diags = [d for d in check_program(program, CheckOptions(worlds=(world,))) if d.severity == "error"]
    result = run_engine(expand(program, world))
    clean_run = result.completed and not len(result.unmatched) and not result.never_waited.size
    assert (not diags) == clean_run, (program_text(world, ranks), [d.code for d in diags])
    if not result.completed:
        assert diags, "a stalled run must be reported"
    for d in diags:
        if d.code in ("D401", "D402"):
            named = {int(x) for x in d.message.split("[")[1].split("]")[0].split(",")}
            assert named <= set(result.stops)


# ---- NCCL: tags ignored, posting order ------------------------------------------------------------------

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from commdsl import engine as engine_module  # noqa: E402
from commdsl.engine import GLOO, NCCL  # noqa: E402
from commdsl.limits import Deadline, TimeLimitReached  # noqa: E402
from commdsl.simulate import simulate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

REORDER = """\
world 2
tensor a: float32[2] = 1
tensor b: float32[2] = 2
on rank == 0:
    h1 = isend a to 1 tag 1
    h2 = isend b to 1 tag 2
    wait h1, h2
else:
    recv b from 0 tag 2
    recv a from 0 tag 1
"""


def _line(schedule, rid: int) -> int:
    return schedule.records[int(rid)].span.line


def _pairs(outcome) -> list[tuple]:
    """Matched (send line, sender, receive line, receiver), in the order the engine met them."""
    s = outcome.schedule
    sends, recvs = outcome.matches
    return [(_line(s, sends.rec[k]), int(sends.rank[k]), _line(s, recvs.rec[k]), int(recvs.rank[k]))
            for k in range(len(sends))]


def test_nccl_matches_in_posting_order_ignoring_tags():
    s = expand(load(SourceFile("t.comm", REORDER)), 2)
    gloo = run_engine(s, GLOO, record_matches=True)
    nccl = run_engine(s, NCCL, record_matches=True)
    assert gloo.completed and nccl.completed
    assert sorted(_pairs(gloo)) == [(5, 0, 10, 1), (6, 0, 9, 1)]  # by tag: a into a, b into b
    assert sorted(_pairs(nccl)) == [(5, 0, 9, 1), (6, 0, 10, 1)]  # first send meets first receive
    assert set(nccl.unmatched.tag.tolist()) <= {0} and len(nccl.unmatched) == 0


def test_nccl_completes_what_tags_deadlock_on_gloo():
    text = REORDER.replace("h1 = isend", "send").replace("h2 = isend", "send").replace("    wait h1, h2\n", "")
    s = expand(load(SourceFile("t.comm", text)), 2)
    assert not run_engine(s, GLOO).completed  # rank 0 waits in `send a tag 1`, rank 1 in `recv b tag 2`
    nccl = run_engine(s, NCCL, record_matches=True)
    assert nccl.completed and sorted(_pairs(nccl)) == [(5, 0, 8, 1), (6, 0, 9, 1)]


def test_nccl_keeps_channels_apart_by_peer_and_group():
    text = ("world 3\ntensor x: float32[1]\ngroup g = [0, 1]\n"
            "on rank == 0:\n    isend x to 1 tag 4\n    isend x to 2 tag 4\n    isend x to 1 in g\n    wait all\n"
            "else on rank == 1:\n    recv x from 0 in g\n    recv x from 0 tag 9\n"
            "else:\n    recv x from 0\n")
    s = expand(load(SourceFile("t.comm", text)), 3)
    nccl = run_engine(s, NCCL, record_matches=True)
    assert nccl.completed
    assert sorted(_pairs(nccl)) == [(5, 0, 11, 1), (6, 0, 13, 2), (7, 0, 10, 1)]


# ---- record_matches ---------------------------------------------------------------------------------------

def test_record_matches_pairs_every_message_and_instance():
    text = ("world 4\ntensor x: float32[2] = rank\ngroup pairs = split by rank // 2\n"
            "batch:\n    send x to (rank + 1) % world tag rank\n    recv x from (rank - 1) % world tag (rank - 1) % world\n"
            "all_reduce x in pairs\nall_reduce x\n")
    s = expand(load(SourceFile("t.comm", text)), 4)
    plain = run_engine(s)
    assert plain.matches is None and plain.instances is None
    out = run_engine(s, record_matches=True)
    sends, recvs = out.matches
    assert len(sends) == len(recvs) == 4
    assert sends.send.tolist() == [1] * 4 and recvs.send.tolist() == [0] * 4
    for col in ("src", "dst", "tag", "gid"):
        assert getattr(sends, col).tolist() == getattr(recvs, col).tolist()
    assert sorted(zip(sends.rank.tolist(), recvs.rank.tolist())) == [(r, (r + 1) % 4) for r in range(4)]
    insts = sorted((i.gid, i.seq, i.calls.rank.tolist(), i.calls.me.tolist()) for i in out.instances)
    pair_ids = [g.id for g in s.groups if g.name.startswith("pairs")]
    assert insts == [(0, 0, [0, 1, 2, 3], [0, 1, 2, 3])] + [(g, 0, [2 * k, 2 * k + 1], [0, 1])
                                                             for k, g in enumerate(pair_ids)]


# ---- the self-matched batch fast path -------------------------------------------------------------------------

PAIRWISE = """\
world 1..8
param n = 12
tensor x: int64[n * world] = rank * 1000 + i
tensor y: int64[n * world]
for s in 1 .. world - 1:
    batch:
        send x.chunk((rank + s) % world, world) to (rank + s) % world
        recv y.chunk((rank - s) % world, world) from (rank - s) % world
y.chunk(rank, world) = x.chunk(rank, world)
expect y == (i // n) * 1000 + rank * n + i % n
"""

SHARED_CHANNEL = """\
world 2..8
tensor x: int64[4] = rank * 10 + i
tensor y: int64[4]
batch:
    send x[0:2] to (rank + 1) % world
    recv y[0:2] from (rank - 1) % world
    send x[2:4] to (rank + 1) % world
    recv y[2:4] from (rank - 1) % world
expect y == ((rank - 1) % world) * 10 + i
"""

PARTIAL = """\
world 2..8
tensor x: int64[3] = rank
tensor y: int64[3]
on rank < world - world % 2:
    batch:
        send x to rank + 1 - 2 * (rank % 2) tag 7
        recv y from rank + 1 - 2 * (rank % 2) tag 7
    expect y == rank + 1 - 2 * (rank % 2)
"""

OUTSIDE = """\
world 2..8
tensor x: int64[3] = rank
tensor y: int64[3]
on rank < world - 1:
    batch:
        send x to rank + 1
        recv y from (rank - 1) % world
else:
    batch:
        send x to 0
        recv y from rank - 1
expect y == (rank - 1) % world
"""

NOWAIT = PAIRWISE.replace("    batch:", "    b[s] = batch:").replace("y.chunk(rank", "wait all b\ny.chunk(rank")

CASES = {"ring": (ROOT / "programs" / "ring_allreduce.comm").read_text(), "pairwise": PAIRWISE,
         "shared_channel": SHARED_CHANNEL, "partial": PARTIAL, "outside": OUTSIDE, "nowait": NOWAIT}
FAST_CASES = [(case, world) for case in sorted(CASES) for world in (1, 2, 3, 4, 7, 8)
              if load(SourceFile("c.comm", CASES[case])).accepts(world)]


def _summary(result) -> tuple:
    o = result.engine
    u = o.unmatched
    bad_s, bad_r = o.mismatched_messages
    return (o.finished.tolist(), o.pc.tolist(), sorted(zip(u.rank.tolist(), u.rec.tolist(), u.pos.tolist())),
            sorted(o.bad), len(bad_s), len(bad_r), o.req_done.tolist(), o.req_waited.tolist(), o.double_waits,
            len(o.disagreements), o.calls_seen, [(e.rank, e.op.base, e.ok) for e in result.expects])


def _fast_path_taken(monkeypatch, schedule):
    """Run the simulation with the fast path on; return the result and how often its plan applied."""
    taken = []
    original = engine_module.Engine.exchange_plan

    def spy(self, rec):
        plan = original(self, rec)
        taken.append(plan is not None)
        return plan
    with monkeypatch.context() as m:
        m.setattr(engine_module.Engine, "exchange_plan", spy)
        return simulate(schedule), taken


@pytest.mark.parametrize("case, world", FAST_CASES)
def test_self_matched_batches_meet_as_the_general_path_does(case, world, monkeypatch):
    program = load(SourceFile(f"{case}.comm", CASES[case]))
    s = expand(program, world, {"n": 8} if case == "ring" else None)
    fast, taken = _fast_path_taken(monkeypatch, s)
    with monkeypatch.context() as m:
        m.setattr(engine_module.Engine, "exchange_plan", lambda self, rec: None)
        general = simulate(expand(program, world, {"n": 8} if case == "ring" else None))
    assert fast.ok and general.ok
    assert _summary(fast) == _summary(general)
    for r in range(world):
        for name, values in general.tensors[r].items():
            np.testing.assert_array_equal(fast.tensors[r][name], values)
    if case == "shared_channel":
        assert not any(taken)  # two sends of a batch on one channel: their order is the general path's to keep
    elif case == "outside":
        assert not any(taken)  # a peer outside the batch's ranks: not self-matched
    elif world > 1:
        assert taken and all(taken)  # every batch meets itself (`partial`: only some ranks run it at odd worlds)


def test_self_matched_batch_with_mismatched_sizes_is_still_reported():
    text = ("world 2\ntensor x: float32[4]\ntensor y: float32[3]\n"
            "batch:\n    send x to 1 - rank\n    recv y from 1 - rank\n")
    s = expand(load(SourceFile("t.comm", text)), 2)
    out = run_engine(s)
    assert out.completed
    bad_s, bad_r = out.mismatched_messages
    assert sorted(zip(bad_s.rank.tolist(), bad_s.numel.tolist(), bad_r.numel.tolist())) == [(0, 4, 3), (1, 4, 3)]


# ---- collectives completed as they are called (`Engine.collective_run`, `Engine.settle`) -----------------

RUNS = {
    "loop": """\
world 1..5
tensor x: int64[3] = rank
tensor y: int64[3]
for s in 0 .. 5:
    all_reduce x
    barrier
    broadcast x from world - 1
    reduce x to 0 op max
x = rank + 1
all_reduce x
all_reduce x op max
expect x == world * (world + 1) / 2
""",
    "groups": """\
world [2, 4, 6]
group first_two = [0, 1]
group pairs = split by rank // 2
tensor x: int64[3] = rank
for s in 0 .. 3:
    all_reduce x in pairs
    on rank < 2:
        all_reduce x in first_two
        broadcast x from 1 in first_two
    all_reduce x op max
expect x == x
""",
    "mesh": """\
world [4, 8]
mesh m = (dp=2, tp=world // 2)
tensor x: int64[2] = rank
for s in 0 .. 3:
    all_reduce x in m.tp
    all_reduce x in m.dp
    broadcast x from 0
expect x == x
""",
    "mismatch": """\
world 2..4
tensor x: int64[2] = rank
for s in 0 .. 3:
    all_reduce x
on rank == 0:
    all_reduce x
all_reduce x
""",
    "outsider": """\
world 3..4
group first_two = [0, 1]
tensor x: int64[2] = rank
for s in 0 .. 2:
    all_reduce x in first_two
    all_reduce x
""",
    "collectives": (ROOT / "programs" / "collectives.comm").read_text(),
}
RUN_CASES = [(case, world, backend) for case in sorted(RUNS) for world in range(1, 9) for backend in ("gloo", "nccl")
             if load(SourceFile("c.comm", RUNS[case])).accepts(world)]


def _instances(outcome) -> list[tuple]:
    return [(i.gid, i.seq, i.calls.rank.tolist(), i.calls.rec.tolist()) for i in outcome.instances]


@pytest.mark.parametrize("case, world, backend", RUN_CASES)
def test_collectives_completed_as_called_agree_with_the_rounds(case, world, backend, monkeypatch):
    """A run of collectives that every member calls with nothing else under way completes as it is called;
    everything the checker and the simulator see is what the round-by-round path gives."""
    program = load(SourceFile(f"{case}.comm", RUNS[case]))
    model = {"gloo": GLOO, "nccl": NCCL}[backend]
    taken = []
    original = engine_module.Engine.collective_run

    def spy(self, G):
        taken.append(original(self, G))
        return taken[-1]

    with monkeypatch.context() as m:
        m.setattr(engine_module.Engine, "collective_run", spy)
        fast = simulate(expand(program, world))
        fast_run = run_engine(expand(program, world), model, record_matches=True)
    with monkeypatch.context() as m:
        m.setattr(engine_module.Engine, "collective_run", lambda self, G: False)
        m.setattr(engine_module.Engine, "settle", lambda self, G: None)
        general = simulate(expand(program, world))
        general_run = run_engine(expand(program, world), model, record_matches=True)
    assert _summary(fast) == _summary(general)
    assert _instances(fast_run) == _instances(general_run)
    assert (fast_run.finished.tolist(), fast_run.pc.tolist(), fast_run.calls_seen, len(fast_run.waiting)) == (
        general_run.finished.tolist(), general_run.pc.tolist(), general_run.calls_seen, len(general_run.waiting))
    for r in range(world):
        for name, values in general.tensors[r].items():
            np.testing.assert_array_equal(fast.tensors[r][name], values)
            np.testing.assert_array_equal(fast.undefined[r][name], general.undefined[r][name])
    if case in ("loop", "mismatch", "collectives"):
        assert any(taken)


def test_a_long_run_of_collectives_minds_the_deadline():
    text = "world 2\ntensor x: float32[1]\nfor s in 0 .. 49999:\n    barrier\n"
    s = expand(load(SourceFile("t.comm", text)), 2)
    with pytest.raises(TimeLimitReached):  # 50,000 barriers, completed as called
        run_engine(s, deadline=Deadline(0.01))
    assert run_engine(s).completed


# ---- batches bound to a handle -------------------------------------------------------------------------------

def test_a_batch_request_is_done_only_when_all_its_ops_are():
    text = ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\n"
            "on rank == 0:\n    b = batch:\n        send x to 1 tag 1\n        recv y from 1 tag 2\n    wait b\n"
            "else:\n    send x to 0 tag 2\n")  # rank 1 never receives tag 1: the batch's send never completes
    s = expand(load(SourceFile("t.comm", text)), 2)
    assert s.requests.parts.tolist() == [2]
    o = run_engine(s, GLOO)
    assert o.finished.tolist() == [False, True] and o.req_done.tolist() == [False]
    assert s.records[o.head(0)[0]].span.line == 8  # `wait b`, its receive done, its send not
    assert o.unmatched.send.tolist() == [1]


def test_a_batch_bound_to_a_handle_lets_the_rank_go_on():
    """Rank 0 posts a receive, then sends what rank 1 waits for before it answers: waited at the batch's end
    this is a deadlock; waited later it completes."""
    text = ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\n"
            "on rank == 0:\n    b = batch:\n        recv y from 1\n    send x to 1 tag 5\n    wait b\n"
            "else:\n    recv y from 0 tag 5\n    send x to 0\nexpect y == 1 - rank\n")
    result = simulate(expand(load(SourceFile("t.comm", text)), 2))
    assert result.ok and result.engine.completed and result.engine.req_done.tolist() == [True]
    blocking = text.replace("b = batch:", "batch:").replace("    wait b\n", "")
    o = run_engine(expand(load(SourceFile("t.comm", blocking)), 2), GLOO)
    assert o.finished.tolist() == [False, False]


@pytest.mark.parametrize("model", [GLOO, NCCL], ids=["gloo", "nccl"])
def test_the_ops_of_a_batch_bound_to_a_handle_start_together(model):
    """Both ranks send first: on NCCL only a batch lets the receives run beside the sends, as one group, also
    when the batch does not wait at its end. (Two messages on one channel keep the batch off the self-matched
    fast path, which bypasses the streams.)"""
    batch = "    send x[0:2] to 1 - rank\n    send x[2:4] to 1 - rank\n    recv y[0:2] from 1 - rank\n" \
            "    recv y[2:4] from 1 - rank\n"
    text = ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\n"
            f"b = batch:\n{batch}wait b\nc = batch:\n{batch}all_reduce z\nwait c\n").replace(
                "tensor y", "tensor z: float32[1]\ntensor y")
    s = expand(load(SourceFile("t.comm", text)), 2)
    o = run_engine(s, model)
    assert o.completed and o.req_done.all() and not o.double_waits


# ---- groups made as steps: a member waits in `new_group` for the other members (Gloo), C313 compares sequences -----


def _lint(text: str) -> list:
    return check_program(load(SourceFile("t.comm", text)), CheckOptions(bound=8))


def test_ranks_whose_kth_new_group_differs_get_one_c313_naming_both_lines():
    (d,) = _lint(
        "program t\nworld 3\ntensor x: float32[2] = rank\n"
        "on rank < 2:\n    a = new_group [0, 1]\n    b = new_group [1, 2]\n"
        "else:\n    b = new_group [1, 2]\n    a = new_group [0, 1]\n"
        "on rank < 2:\n    all_reduce x in a\n"
    )
    assert d.code == "C313"
    assert d.message == "rank 0 makes group `a` [0, 1] as its 1st `new_group`, rank 2 makes `b` [1, 2]"
    assert d.span.line == 5 and [(lb.span.line, lb.message) for lb in d.labels] == [(8, "rank 2 makes [1, 2]")]


def test_a_rank_that_skips_new_group_is_named():
    (d,) = _lint(
        "program t\nworld 3\ntensor x: float32[2] = rank\n"
        "on rank > 0:\n    g = new_group [1, 2]\n    all_reduce x in g\n"
    )
    assert d.code == "C313" and d.span.line == 5
    assert d.message == "rank 1 makes group `g` [1, 2] as its 1st `new_group`, rank 0 makes no 1st group"
    assert [nt.message for nt in d.notes][0] == "rank 0 makes 0 groups in all"


def test_a_name_made_again_in_a_loop_means_the_latest_group_on_each_rank():
    text = (
        "program t\nworld 4\ntensor x: float32[1] = rank\n"
        "for h in 0 .. 1:\n    g = new_group [2 * h, 2 * h + 1]\n    on rank // 2 == h:\n        all_reduce x in g\n"
        "expect x == 4 * (rank // 2) + 1\n"
    )
    assert _lint(text) == []
    s = expand(load(SourceFile("t.comm", text)), 4)
    made = [g for g in s.groups if g.step]
    assert [g.ranks for g in made] == [(0, 1), (2, 3)] and s.made == {"g"}
    outcome = run_engine(s)
    assert outcome.completed and not outcome.disagreements


NEW_GROUP_CYCLE = (
    "program t\nworld 3\ntensor x: float32[2] = rank\n"
    "on rank == 0:\n    g = new_group [0, 1]\n    send x to 1\n"
    "else on rank == 1:\n    recv x from 0\n    g = new_group [0, 1]\n"
    "else:\n    g = new_group [0, 1]\n"
)


def test_a_member_waits_in_new_group_for_the_other_members_and_a_non_member_goes_on():
    s = expand(load(SourceFile("t.comm", NEW_GROUP_CYCLE)), 3)
    outcome = run_engine(s)
    assert outcome.finished.tolist() == [False, False, True]  # rank 2, no member, returned at once
    assert outcome.in_new_group == {0: (0, (1,))}  # rank 0's first new_group waits for rank 1's
    assert s.records[outcome.head(0)[0]].span.line == 5 and s.records[outcome.head(1)[0]].span.line == 8


def test_a_late_member_releases_the_others_once_it_makes_the_group():
    text = (
        "program t\nworld 3\ntensor x: float32[2] = rank\n"
        "on rank == 1:\n    recv x from 2\n"
        "else on rank == 2:\n    send x to 1\n"
        "g = new_group [0, 1, 2]\n"
        "all_reduce x in g\n"
    )
    outcome = run_engine(expand(load(SourceFile("t.comm", text)), 3))
    assert outcome.completed and outcome.in_new_group == {}


def test_the_recv_new_group_cycle_is_a_deadlock_naming_both_lines():
    (d,) = _lint(NEW_GROUP_CYCLE)
    assert (d.code, d.span.line, [lb.span.line for lb in d.labels]) == ("D401", 5, [8])
    notes = [nt.message for nt in d.notes]
    assert notes[0] == (
        "cycle: rank 0 at line 5 `g = new_group [0, 1]` waits for rank 1; "
        "rank 1 at line 8 `recv x from 0` waits for rank 0"
    )
    assert notes[1].startswith("a member of a group returns from `new_group` only once every member has called it")
    assert d.help == "have every member call `new_group` before it waits for another member"


def test_under_nccl_new_group_is_stepped_over():
    """NCCL makes a group's communicator at its first op (not measured here): the NCCL model keeps stepping over."""
    from commdsl.engine import NCCL

    assert run_engine(expand(load(SourceFile("t.comm", NEW_GROUP_CYCLE)), 3), NCCL).completed
    found = check_program(load(SourceFile("t.comm", NEW_GROUP_CYCLE)), CheckOptions(backends=("gloo", "nccl")))
    (d,) = [d for d in found if d.code == "D401"]
    assert "only on gloo (checked for gloo, nccl)" in [nt.message for nt in d.notes]


def test_a_member_whose_partner_never_makes_the_group_is_c313_not_a_deadlock():
    text = (
        "program t\nworld 2\ntensor x: float32[2] = rank\n"
        "on rank == 0:\n    g = new_group [0, 1]\n"
    )
    assert [d.code for d in _lint(text)] == ["C313"]


# ---- NCCL streams ------------------------------------------------------------------------------------------

def test_stream_keys_tell_every_stream_apart():
    """A post's stream as an int (`post_streams`): equal exactly where the stream is, as torch picks it (a batch
    on its group's communicator on the rank, an unbatched op on the pair's), at the extremes of ranks and groups;
    a collective call's (`call_streams`) is its group's on the rank, as a batch's."""
    from commdsl.engine import STREAM_GROUPS, Posts, call_streams, post_streams
    from commdsl.p2p import ANY_SOURCE
    from commdsl.resolve import MAX_WORLD

    ranks, gids = [0, 1, 2, MAX_WORLD - 2, MAX_WORLD - 1], [0, 1, STREAM_GROUPS - 1]
    rows, want = [], []
    for g in gids:
        for rank in ranks:
            for peer in [*ranks, ANY_SOURCE]:
                for send in (0, 1):
                    for batched in (False, True):
                        src, dst = (rank, peer) if send else (peer, rank)
                        rows.append((g, src, dst, rank, 7 if batched else 3))
                        want.append(("main", g, rank) if batched else ("pair", g, min(src, dst), max(src, dst), rank))
    cols = np.array(rows, dtype=np.int64).T
    posts = Posts(size=len(rows), send=0, gid=cols[0], src=cols[1], dst=cols[2], tag=0, rank=cols[3], rec=3, pos=0,
                  req=-1, via=cols[4], numel=1, dtype=0)
    keys = post_streams(posts).tolist()
    assert all(k >= 0 for k in keys)
    index = {}
    for key, stream in zip(keys, want):
        assert index.setdefault(stream, key) == key
    assert len(set(index.values())) == len(index)  # and distinct streams, distinct keys
    calls = call_streams(np.array(gids[-1]), np.array(ranks)).tolist()
    assert calls == [index[("main", gids[-1], r)] for r in ranks]


QUEUED = """\
world 2
tensor x: float32[2] = rank
tensor y: float32[2]
on rank == 0:
    h = isend x to 1
    g = isend x to 1
    recv y from 1
    wait h, g
else:
    recv y from 0
    LATER
"""


def test_an_op_queued_on_its_stream_starts_when_the_one_ahead_completes():
    """NCCL: rank 0's second isend to rank 1 runs on the pair's stream behind the first, and its recv behind both:
    they start one after another as each before completes. Where rank 1 never receives the second message, the
    recv never starts and the outcome names the isend it waits behind."""
    text = QUEUED.replace("LATER", "recv y from 0\n    send x to 0")
    o = run_engine(expand(load(SourceFile("t.comm", text)), 2), NCCL, record_matches=True)
    assert o.completed and o.req_done.all() and not o.behind
    assert sorted(_pairs(o)) == [(5, 0, 10, 1), (6, 0, 11, 1), (12, 1, 7, 0)]
    stuck = run_engine(expand(load(SourceFile("t.comm", QUEUED.replace("LATER", "send x to 0"))), 2), NCCL)
    assert not stuck.completed and stuck.req_done.tolist() == [True, False]
    assert [(_line(stuck.schedule, rid), pos) for rid, pos in stuck.behind] == [(7, 0)]
    assert list(stuck.behind.values()) == [1]  # the second isend's request, still running
