"""Soundness of the engine and the checker on generated programs, against an independent reference.

The reference interpreter below shares no code with `commdsl.engine`: it repeatedly lets every rank
execute its head op if that op can complete now, until nothing moves. Properties:
* the engine completes exactly when the reference does, with the same ranks stuck at the same ops;
* the checker calls a program clean exactly when the run completes with no leftover message and no
  unwaited request; when it reports a deadlock, the ranks it names are stuck there.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
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
    """A blocking op meets the peer's blocking head op, if no earlier async op on the channel is queued."""
    if pc[peer] >= len(ranks[peer]):
        return False
    head = ranks[peer][pc[peer]]
    want = "recv" if kind == "send" else "send"
    if head[0] != want or head[1] != me or head[2] != tag:
        return False
    src, dst = (me, peer) if kind == "send" else (peer, me)
    queue = posted_s if want == "send" else posted_r
    return _first_match(queue, src, dst, tag) is None


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
