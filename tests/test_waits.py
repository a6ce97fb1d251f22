"""`commdsl.checker.waits`: the wait-for analysis of stalled runs — cycles of 2 and of N ranks, waits on finished
peers, missing collective members, tag near-misses, and which cycles are definite (D401) or buffering hazards
(D402). Each case states the exact records the analysis must produce."""

from __future__ import annotations

import dataclasses

import pytest

from commdsl.checker.waits import Pending, Waiting, analyse
from commdsl.engine import GLOO, NCCL, run_engine
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.source import SourceFile

BUFFERED = dataclasses.replace(GLOO, eager_sends=True)  # every send returns when posted


def run(text: str, world: int, model=GLOO):
    s = expand(load(SourceFile("t.comm", text)), world)
    outcome = run_engine(s, model)
    return s, outcome, analyse(outcome)


def line_of(s, op_id: int) -> int:
    rec, _ = s.locate(op_id)
    return rec.span.line


def cycle_path(s, cycle) -> list[tuple[int, int, int]]:
    """(rank, line it is stuck at, rank it waits for) along a cycle."""
    return [(e.rank, line_of(s, e.op), e.target) for e in cycle]


def loc(s, where: tuple[int, int]) -> tuple[int, int]:
    """(line, rank) of a (record id, position)."""
    rec = s.records[where[0]]
    return rec.span.line, int(rec.ranks[where[1]])


# ---- cycles -------------------------------------------------------------------------------------------

HEAD_TO_HEAD_SENDS = """\
world 2
tensor x: float32[1]
tensor y: float32[1]
send x to 1 - rank
recv y from 1 - rank
"""

HEAD_TO_HEAD_RECVS = HEAD_TO_HEAD_SENDS.replace("send x to 1 - rank\nrecv y from 1 - rank",
                                                "recv y from 1 - rank\nsend x to 1 - rank")


def test_send_cycle_of_two_is_a_buffering_hazard():
    s, outcome, a = run(HEAD_TO_HEAD_SENDS, 2)
    assert [cycle_path(s, c) for c in a.cycles] == [[(0, 4, 1), (1, 4, 0)]]
    assert a.only_sends == {0, 1} and not a.definite(a.cycles[0])  # D402: it hangs only where sends wait
    assert a.unmatched == [] and a.missing == [] and a.tag_mismatches == []
    # with eager sends the same program completes
    assert run_engine(s, BUFFERED).completed


def test_receive_cycle_of_two_is_definite():
    s, outcome, a = run(HEAD_TO_HEAD_RECVS, 2)
    assert [cycle_path(s, c) for c in a.cycles] == [[(0, 4, 1), (1, 4, 0)]]
    assert a.only_sends == set() and a.definite(a.cycles[0])  # D401
    assert all(isinstance(e.thing, Pending) for c in a.cycles for e in c)


@pytest.mark.parametrize("world", [3, 5, 8])
def test_receive_ring_is_one_cycle_through_every_rank(world):
    text = ("world 2..\ntensor x: float32[1]\nrecv x from (rank - 1) % world\nsend x to (rank + 1) % world\n")
    s, outcome, a = run(text, world)
    # walked from the smallest rank: 0 waits for world - 1, which waits for world - 2, ...
    assert [cycle_path(s, c) for c in a.cycles] == [[(r, 3, (r - 1) % world)
                                                    for r in [0] + list(range(world - 1, 0, -1))]]
    assert a.definite(a.cycles[0])
    assert sum(len(v) for v in a.edges.values()) == world


def test_a_cycle_with_one_rank_stuck_in_a_send_is_not_definite():
    text = ("world 3\ntensor x: float32[1]\n"
            "on rank == 0:\n    send x to 1\n    send x to 2\n"
            "else on rank == 1:\n    recv x from 2\n    recv x from 0\n"
            "else:\n    recv x from 0\n    send x to 1\n")
    s, outcome, a = run(text, 3)
    assert [cycle_path(s, c) for c in a.cycles] == [[(0, 4, 1), (1, 7, 2), (2, 10, 0)]]
    assert a.only_sends == {0} and not a.definite(a.cycles[0])
    assert run_engine(s, BUFFERED).completed  # a send that returns at once breaks it


def test_two_independent_cycles_are_both_reported():
    text = "world 4\ntensor x: float32[1]\nrecv x from rank ^ 1\nsend x to rank ^ 1\n".replace("rank ^ 1",
                                                                                              "rank + 1 - 2 * (rank % 2)")
    s, outcome, a = run(text, 4)
    assert [cycle_path(s, c) for c in a.cycles] == [[(0, 3, 1), (1, 3, 0)], [(2, 3, 3), (3, 3, 2)]]


# ---- waits that can never end ---------------------------------------------------------------------------

def test_a_rank_waiting_for_a_finished_peer():
    text = ("world 2\ntensor x: float32[1]\non rank == 0:\n    recv x from 1\n    recv x from 1\n"
            "else:\n    send x to 0\n")
    s, outcome, a = run(text, 2)
    assert outcome.finished.tolist() == [False, True]
    [(row, why)] = a.unmatched
    assert why == "finished" and int(outcome.unmatched.rank[row]) == 0 and line_of(
        s, int(s.records[int(outcome.unmatched.rec[row])].base)) == 5
    assert a.cycles == [] and a.edges == {0: []}


def test_a_message_the_peer_never_posts():
    text = "world 2\ntensor x: float32[1]\non rank == 0:\n    recv x from 1\nelse:\n    recv x from 0\n    x = 1\n"
    s, outcome, a = run(text, 2)
    assert sorted(why for _, why in a.unmatched) == ["never", "never"]
    assert a.cycles == [] and all(v == [] for v in a.edges.values())


def test_a_missing_participant_that_finished():
    text = "world 4\ntensor x: float32[1]\non rank != 2:\n    all_reduce x\n"
    s, outcome, a = run(text, 4)
    # one finding per absent member: the instance, the member it lacks, the first waiting rank's op
    found = [(inst.gid, inst.seq, len(inst.rows), member, s.locate(op)[0].ranks[s.locate(op)[1]], line_of(s, op), why)
             for inst, member, op, why in a.missing]
    assert found == [(0, 0, 3, 2, 0, 4, "finished")]
    assert all(isinstance(inst, Waiting) for inst, *_ in a.missing)
    # each waiting rank points at the collective's node, which points nowhere: no cycle
    assert a.cycles == [] and all(v == [] for node, v in a.edges.items() if node >= 4)


def test_a_missing_participant_at_world_64_keeps_edges_linear():
    """Ranks 0..62 wait in an all_reduce for rank 63, which waits for a message rank 0 sends after it."""
    text = ("world 64\ntensor x: float32[1]\n"
            "on rank < 63:\n    all_reduce x\n    on rank == 0:\n        send x to 63\n"
            "else:\n    recv x from 0\n    all_reduce x\n")
    s, outcome, a = run(text, 64)
    assert a.missing == [] and a.unmatched == []
    assert [cycle_path(s, c) for c in a.cycles] == [[(0, 4, 63), (63, 8, 0)]]
    # one edge per stuck rank, and one from the all_reduce's node to the member it lacks
    assert sum(len(v) for v in a.edges.values()) == 65
    assert all(isinstance(e.thing, Waiting) for r in range(63) for e in a.edges[r])


def test_many_late_members_keep_edges_linear():
    text = ("world 64\ntensor x: float32[1]\n"
            "on rank < 32:\n    all_reduce x\n    send x to rank + 32\n"
            "else:\n    recv x from rank - 32\n    all_reduce x\n")
    s, outcome, a = run(text, 64)
    assert a.cycles  # rank 32 waits for rank 0's send, rank 0 for the all_reduce rank 32 has not called
    assert sum(len(v) for v in a.edges.values()) <= 4 * 64


def test_a_member_that_never_calls_the_group_again():
    text = ("world 3\ntensor x: float32[1]\ngroup g = [0, 1]\n"
            "on rank == 0:\n    all_reduce x in g\nelse on rank == 1:\n    recv x from 2\n"
            "else:\n    recv x from 1\n")
    s, outcome, a = run(text, 3)
    [(inst, member, op, why)] = a.missing  # rank 0 waits in g's all_reduce; rank 1 never calls one
    assert (member, why, line_of(s, op)) == (1, "never", 5)
    assert sorted(why for _, why in a.unmatched) == ["never", "never"]


# ---- tag near-misses --------------------------------------------------------------------------------------

def test_a_tag_near_miss_names_the_peers_first_op_in_program_order():
    text = ("world 2\ntensor x: float32[1]\non rank == 0:\n    send x to 1 tag 5\n"
            "else:\n    recv x from 0 tag 2\n    recv x from 0 tag 3\n")
    s, outcome, a = run(text, 2)
    [(row, near, peer)] = a.tag_mismatches  # one finding for the pair, not one per side
    assert (int(outcome.unmatched.rank[row]), int(outcome.unmatched.tag[row])) == (0, 5)
    assert (loc(s, near), peer) == ((6, 1), 1)  # tag 2, the first rank 1 would post, not tag 3
    assert a.unmatched == [] and a.cycles == []


def test_posted_near_misses_pick_the_first_in_program_order():
    text = ("world 2\ntensor x: float32[1]\ntensor y: float32[1]\non rank == 0:\n    send x to 1 tag 5\n"
            "else:\n    h = irecv x from 0 tag 3\n    k = irecv y from 0 tag 2\n    wait h, k\n")
    s, outcome, a = run(text, 2)
    found = [(int(outcome.unmatched.rank[row]), int(outcome.unmatched.tag[row]), loc(s, near), peer)
             for row, near, peer in a.tag_mismatches]
    assert found == [(0, 5, (7, 1), 1),  # rank 0's send: rank 1's irecv with tag 3 is posted first
                     (1, 2, (5, 0), 0)]  # rank 1's tag-2 irecv meets the same send: a second finding


def test_nccl_ignores_tags_so_there_is_no_near_miss():
    text = ("world 2\ntensor x: float32[1]\non rank == 0:\n    send x to 1 tag 5\nelse:\n    recv x from 0 tag 2\n")
    s, outcome, a = run(text, 2, NCCL)
    assert outcome.completed
    s, outcome, a = run(text, 2, GLOO)
    assert len(a.tag_mismatches) == 1


def test_a_wait_on_a_batch_waits_for_every_peer_of_its_ops():
    """Rank 0 waits for a batch that receives from ranks 1 and 2, which wait for what rank 0 sends after the wait:
    two cycles through the one `wait b`."""
    text = ("world 3\ntensor x: float32[1]\ntensor y: float32[2]\non rank == 0:\n    b = batch:\n"
            "        recv y[0] from 1\n        recv y[1] from 2\n    wait b\n    send x to 1\n    send x to 2\n"
            "else:\n    recv x from 0\n    send x to 0\n")
    s, outcome, a = run(text, 3)
    assert sorted((e.rank, line_of(s, e.op), e.target) for e in a.edges[0]) == [(0, 8, 1), (0, 8, 2)]
    assert sorted(cycle_path(s, c) for c in a.cycles) == [[(0, 8, 1), (1, 12, 0)]]  # one per component
    assert a.definite(a.cycles[0]) and a.unmatched == []


# ---- looking ahead through a loop -----------------------------------------------------------------------

def _looped(rng) -> tuple[int, str]:
    """A loop whose sends and receives every rank runs (one array of ranks for all iterations), beside guarded
    tagged receives that stop some ranks at some iteration: what their peers wait for lies in later
    iterations of ops with equal arrays."""
    world = rng.randint(2, 6)
    peer = ["(rank + 1) % world", "(rank - 1) % world", "(rank + 2) % world", "world - 1 - rank"]
    stops = [f"on rank == {r} and s == {rng.randrange(4)}:\n        recv y from {rng.randrange(world)} tag 7"
             for r in rng.sample(range(world), min(world, 2))]
    ops = [rng.choice([f"batch:\n        send x to {p}\n        recv y from {p}"] * 3
                      + [f"send x to {rng.choice(peer)}", f"recv y from {rng.choice(peer)}"])
           for p in rng.choices(peer, k=rng.randint(1, 3))]
    body = rng.sample(stops + ops, len(stops) + len(ops))
    return world, (f"world {world}\ntensor x: float32[1] = rank\ntensor y: float32[1]\nfor s in 0 .. 4:\n"
                   + "\n".join("    " + b for b in body) + "\n")


def test_an_op_a_loop_repeats_is_read_again_once_a_later_stalled_rank_runs_it(monkeypatch):
    """Rank 0 stalls at s = 0 and rank 1 at s = 2; rank 2 waits in the swap of s = 2 for rank 1, whose own swap
    of s = 2 lies after where it stopped. The swaps of s = 0 and 1 have the same arrays but rank 1 stopped
    after them: the one of s = 2 must be read again, or rank 2's messages would look never met."""
    text = ("world 4\ntensor x: float32[1] = rank\ntensor y: float32[1]\nfor s in 0 .. 3:\n"
            "    on rank == 0 and s == 0:\n        recv y from 3 tag 9\n"
            "    on rank == 1 and s == 2:\n        recv y from 0 tag 7\n"
            "    batch:\n        send x to world - 1 - rank\n        recv y from world - 1 - rank\n")
    s, outcome, a = run(text, 4)
    assert sorted(outcome.stalled.tolist()) == [0, 1, 2, 3]
    never = [(int(outcome.unmatched.rank[row]), s.records[int(outcome.unmatched.rec[row])].span.line)
             for row, _ in a.unmatched]
    assert never == [(1, 8)]  # rank 1's tagged receive; rank 2's swap with rank 1 is still coming (rank 0's
    assert [loc(s, near) for _, near, _ in a.tag_mismatches] == [(10, 3)]  # is a near miss of rank 3's swap)


@pytest.mark.parametrize("seed", range(60))
def test_ops_a_loop_repeats_are_looked_through_once(seed: int, monkeypatch):
    """`_Ahead.messages` reads a loop's ops once while nothing it asks has changed: the analysis is what reading
    every op gives (each key made unique, the memory never hits)."""
    import random

    from commdsl.checker import waits

    world, text = _looped(random.Random(seed))
    s = expand(load(SourceFile("t.comm", text)), world)
    outcome = run_engine(s, GLOO)
    remembered = analyse(outcome)
    monkeypatch.setattr(waits, "_content", lambda v: object())
    assert analyse(outcome) == remembered, text
