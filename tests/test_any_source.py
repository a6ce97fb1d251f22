"""`recv ... from any` through the pipeline: parser, resolve, expansion, the engine's matching, the message-race
rule (P211), NCCL's refusal (B603), the simulator, `compile`, `fmt`, and a real Gloo run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from processes import TOKEN_VAR

from commdsl.checker import CheckOptions, check_program, data_diagnostics
from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.emit.fmt import format_source
from commdsl.engine import NCCL, run_engine
from commdsl.expand import expand
from commdsl.p2p import ANY_SOURCE
from commdsl.resolve import load
from commdsl.simulate import simulate
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.validation import adapter, validate

ROOT = Path(__file__).resolve().parent.parent

RACE = """\
program race
world 3
tensor x: float32[2] = rank
tensor a: float32[2] = 0
tensor b: float32[2] = 0
on rank == 0:
    recv a from any
    recv b from any
else on rank == 1:
    send x to 0
else:
    x *= 10
    send x to 0
"""

TAGGED = """\
program tagged
world 3
tensor x: float32[2] = rank
tensor a: float32[2] = 0
tensor b: float32[2] = 0
on rank == 0:
    recv b from any tag 2
    recv a from any tag 1
    expect a == 1
    expect b == 2
else:
    send x to 0 tag rank
"""


def program(text: str):
    return load(SourceFile("t.comm", text))


def codes(text: str, **options) -> list[tuple[str, int]]:
    return [(d.code, d.span.line) for d in check_program(program(text), CheckOptions(**options))]


# ---- parser, resolve, expansion -----------------------------------------------------------------------


def test_parses_to_a_receive_without_a_peer():
    text = "program p\nworld 2\ntensor x: float32[2]\nrecv x from any tag 3 in g\nh = irecv x from any\n"
    with pytest.raises(CommdslError):  # `g` is undeclared: only the parse matters here
        program(text)
    from commdsl.syntax.parser import parse_tree
    from commdsl.syntax.transform import to_ast

    source = SourceFile("t.comm", text)
    body = to_ast(parse_tree(source), source).body
    recv, irecv = (validate(s) for s in body[3:])  # the nodes are valid
    assert (recv.peer, recv.blocking, recv.group.name, recv.tag.value) == (None, True, "g", 3)
    assert (irecv.peer, irecv.blocking, irecv.handle.name) == (None, False, "h")


def test_any_is_a_name_everywhere_else():
    ok = "program p\nworld 2\nlet any = 1\ntensor x: float32[2]\non rank == 0:\n    send x to any\nelse:\n" \
         "    recv x from 0\n"
    assert codes(ok) == []


def test_a_receive_from_any_cannot_be_batched():
    text = "program p\nworld 2\ntensor x: float32[2]\nbatch:\n    recv x from any\n"
    with pytest.raises(CommdslError) as e:
        program(text)
    assert [(d.code, d.span.line) for d in e.value.diagnostics] == [("N111", 5)]


def test_expansion_marks_the_source_as_any():
    schedule = expand(program(RACE), 3)
    recvs = [op for op in schedule.ops[0] if type(op).__name__ == "Recv"]
    assert [r.peer for r in recvs] == [ANY_SOURCE, ANY_SOURCE]


# ---- the engine's matching ----------------------------------------------------------------------------


def _pairs(text: str, world: int, model=None):
    schedule = expand(program(text), world)
    kwargs = {"model": model} if model else {}
    outcome = run_engine(schedule, record_matches=True, **kwargs)
    sends, recvs = outcome.matches
    lines = lambda rows, k: schedule.records[rows.rec[k]].span.line  # noqa: E731
    return outcome, sorted((int(sends.rank[k]), lines(sends, k), lines(recvs, k)) for k in range(len(sends)))


def test_tags_pick_the_sender_and_nothing_races():
    outcome, pairs = _pairs(TAGGED, 3)
    assert outcome.completed and outcome.races == []
    assert pairs == [(1, 12, 8), (2, 12, 7)]  # rank 2's tag-2 message meets the first receive


def test_the_lowest_sender_is_taken_and_the_race_recorded():
    outcome, pairs = _pairs(RACE, 3)
    assert outcome.completed
    assert pairs == [(1, 10, 7), (2, 13, 8)]
    (recv, took, other), = outcome.races
    lines = [outcome.schedule.records[rid].span.line for rid, _ in (recv, took, other)]
    assert lines == [7, 10, 13]


GATHER_FROM_ANY = """\
program gather_from_any
world 4
tensor x: float32[2] = rank
tensor y: float32[2] = 0
on rank == 0:
    for j in 0 .. 5:
        recv y from any
else:
    for k in 0 .. 1:
        send x to 0
"""


def test_a_race_is_listed_once_per_statements_at_its_first_receive():
    """Rank 0's six receives from any could each take another sender's message; P211 names the statements, so
    the engine lists the first receive's race only (a gather from any at world 4096 raced 262,080 times)."""
    outcome = run_engine(expand(program(GATHER_FROM_ANY), 4))
    assert outcome.completed
    (recv, took, other), = outcome.races
    s = outcome.schedule
    first_recv = min(r.id for r in s.records if r.span.line == 7)
    assert recv == (first_recv, 0)
    assert [int(s.records[rid].ranks[pos]) for rid, pos in (took, other)] == [1, 2]
    (d,) = check_program(program(GATHER_FROM_ANY))
    assert (d.code, d.span.line, d.message) == (
        "P211", 7, "`recv from any` on rank 0 can take the message of rank 1 (line 10) or of rank 2 (line 10)")


def test_named_receives_take_their_messages_first():
    text = """\
program named
world 3
tensor x: float32[2] = rank
tensor a: float32[2] = 0
tensor b: float32[2] = 0
on rank == 0:
    h = irecv a from any
    recv b from 1
    wait h
else:
    send x to 0
"""
    outcome, pairs = _pairs(text, 3)
    assert outcome.completed and outcome.races == []
    assert pairs == [(1, 11, 8), (2, 11, 7)]


def test_rounds_ordered_by_barriers_do_not_race():
    text = """\
program rounds
world 4
tensor x: float32[2] = rank
tensor got: float32[2] = 0
for j in 1 .. world - 1:
    on rank == 0:
        recv got from any
    else on rank == j:
        send x to 0
    barrier
"""
    outcome, _ = _pairs(text, 4)
    assert outcome.completed and outcome.races == []


# ---- happens-before: a slower rank's send races too, an ordered one does not ------------------------------


def _race_lines(text: str, world: int) -> list[tuple[int, int, int]]:
    """(receive, send taken, other send) lines of each race the engine lists."""
    outcome = run_engine(expand(program(text), world))
    line = lambda where: outcome.schedule.records[where[0]].span.line  # noqa: E731
    return [tuple(line(w) for w in race) for race in outcome.races]


SLOW = """\
program slow
world 4
tensor x: float32[2] = rank
tensor got: float32[2] = 0
on rank == 0:
    RECEIVE
    recv got from any
else on rank == 1:
    send x to 0
else on rank == 2:
    recv got from 3
    send x to 0
else:
    send x to 2
"""


def test_a_send_a_slower_rank_posts_later_races():
    """Rank 2 sends after a message from rank 3, a chain rank 0 is not on: the rounds never show its send beside
    rank 1's, the clocks do."""
    assert _race_lines(SLOW.replace("RECEIVE", "recv got from any"), 4) == [(6, 9, 12)]
    (d,) = check_program(program(SLOW.replace("RECEIVE", "recv got from any")))
    assert (d.code, d.span.line, [lab.span.line for lab in d.labels]) == ("P211", 6, [9, 12])


ORDERED = """\
program ordered
world 3
tensor x: float32[2] = rank
tensor got: float32[2] = 0
tensor token: float32[1] = 0
on rank == 0:
    FIRST
    send token to 2
    THEN
else on rank == 1:
    send x to 0
else:
    recv token from 0
    send x to 0
"""


def test_a_send_ordered_after_the_receive_by_a_chain_from_it_does_not_race():
    text = ORDERED.replace("FIRST", "recv got from any").replace("THEN", "recv got from any")
    assert _race_lines(text, 3) == [] and codes(text) == []


def test_an_irecv_completes_at_its_wait_so_a_send_ordered_after_its_posting_only_still_races():
    early = ORDERED.replace("FIRST", "h = irecv got from any").replace("THEN", "wait h\n    recv got from any")
    assert _race_lines(early, 3) == [(7, 12, 15)]
    waited = ORDERED.replace("FIRST", "h = irecv got from any\n    wait h").replace("THEN", "recv got from any")
    assert _race_lines(waited, 3) == []


COLLECTIVE = """\
program ordered_by_a_collective
world 3
tensor x: float32[2] = rank
tensor got: float32[2] = 0
on rank == 0:
    recv got from any
on rank != 1:
    CALL
on rank == 2:
    send x to 0
on rank == 1:
    send x to 0
    CALL
"""


@pytest.mark.parametrize(
    ("call", "races"),
    [
        ("all_reduce x", False),  # every member's result holds rank 0's data
        ("barrier", False),
        ("broadcast x from 0", False),  # rank 2 holds the root's data
        ("reduce x to 0", True),  # only the root holds the others' data: rank 2 learns nothing of rank 0
        ("gather x to 0", True),
        ("scatter x from 0", False),
    ],
)
def test_a_collective_orders_what_its_result_holds(call, races):
    text = COLLECTIVE.replace("CALL", call.replace("x to 0", "x to 0" if "gather" not in call else "x into tmp to 0"))
    if "gather" in call:
        text = text.replace("tensor got:", "tensor tmp: float32[6] = 0\ntensor got:")
    if "scatter" in call:
        text = COLLECTIVE.replace("CALL", "scatter src into x from 0").replace(
            "tensor got:", "tensor src: float32[6] = 0\ntensor got:"
        )
    assert bool(_race_lines(text, 3)) == races, text


ROUTED = """\
program routed
world 3
tensor x: float32[3] = rank
tensor y: float32[3] = 0
tensor got: float32[3] = 0
on rank == 0:
    recv got from any
    all_to_all x into y splits A0
    recv got from 2
else on rank == 1:
    send x to 0
    all_to_all x into y splits A1
else:
    all_to_all x into y splits A2
    send x to 0
"""


def test_an_uneven_all_to_all_orders_only_who_gets_rows_from_whom():
    even = ROUTED.replace("A0", "[1, 1, 1], [1, 1, 1]").replace("A1", "[1, 1, 1], [1, 1, 1]")
    assert _race_lines(even.replace("A2", "[1, 1, 1], [1, 1, 1]"), 3) == []  # rank 2 holds a row of rank 0's
    # rows sent i → j: [[2, 1, 0], [0, 1, 2], [1, 1, 1]]: rank 2 gets none of rank 0's, so nothing orders its send
    routed = ROUTED.replace("A0", "[2, 1, 0], [2, 0, 1]").replace("A1", "[0, 1, 2], [1, 1, 1]")
    routed = routed.replace("A2", "[1, 1, 1], [0, 2, 1]")
    assert _race_lines(routed, 3) == [(7, 11, 15)]
    assert codes(routed) == [("P211", 7)]


def test_new_group_orders_its_members():
    text = """\
program made
world 3
tensor x: float32[2] = rank
tensor got: float32[2] = 0
on rank == 0:
    recv got from any
    g = new_group [0, 2]
    recv got from 2
else on rank == 1:
    send x to 0
    g = new_group [0, 2]
else:
    g = new_group [0, 2]
    send x to 0
"""
    assert _race_lines(text, 3) == [] and codes(text) == []
    assert _race_lines(text.replace("[0, 2]", "[1, 2]"), 3) == [(6, 10, 14)]  # rank 0 no member: nothing ordered


def test_a_master_at_world_1024_is_checked_with_its_clocks():
    text = """\
program master
world 1024
tensor x: float32[2] = rank
tensor got: float32[2] = 0
on rank == 0:
    for j in 1 .. world - 1:
        recv got from any tag j
    recv got from any
else:
    send x to 0 tag rank
on rank == 1023:
    send x to 0
on rank == 5:
    send x to 0
"""
    assert _race_lines(text, 1024) == [(8, 14, 12)]


# ---- the rules ----------------------------------------------------------------------------------------


def test_message_race_names_the_receive_and_both_sends():
    (d,) = check_program(program(RACE))
    assert (d.code, d.severity, d.span.line) == ("P211", "error", 7)
    assert [lab.span.line for lab in d.labels] == [10, 13]
    assert "rank 1 (line 10) or of rank 2 (line 13)" in d.message


def test_one_send_statement_for_both_senders_is_one_label():
    text = "program p\nworld 3\ntensor x: float32[2]\non rank == 0:\n    recv x from any\n    recv x from any\n" \
           "else:\n    send x to 0\n"
    (d,) = check_program(program(text))
    assert d.code == "P211" and [(lab.span.line, lab.message) for lab in d.labels] == [(8, "ranks 1 and 2 both send here")]


def test_tagged_and_clean_programs_are_clean():
    assert codes(TAGGED) == []
    assert codes((ROOT / "programs" / "any_source.comm").read_text()) == []


def test_nccl_refuses_a_receive_from_any():
    one = "program p\nworld 2\ntensor x: float32[2]\non rank == 0:\n    recv x from any\nelse:\n    send x to 0\n"
    assert codes(one, backends=("nccl",)) == [("B603", 5)]
    assert codes(one, backends=("gloo",)) == []
    found = codes(TAGGED, backends=("nccl",))  # NCCL ignores tags: they no longer keep the senders apart
    assert ("B603", 7) in found and ("B603", 8) in found and ("P211", 7) in found


def test_nobody_left_to_send_is_unmatched_and_a_wait_on_each_other_is_a_deadlock():
    lonely = "program p\nworld 2\ntensor x: float32[2]\non rank == 0:\n    recv x from any tag 3\n"
    (d,) = check_program(program(lonely))
    assert (d.code, d.message) == ("P202", "`recv` on rank 0 from any rank has no matching `send`")
    assert d.label == "every other rank finishes without one"
    both = "program p\nworld 2\ntensor x: float32[2]\nrecv x from any\nsend x to (rank + 1) % world\n"
    assert codes(both) == [("D401", 4)]


def test_a_send_whose_tag_misses_a_receive_from_any_is_one_tag_mismatch():
    text = "program p\nworld 2\ntensor x: float32[2]\non rank == 0:\n    recv x from any tag 3\nelse:\n" \
           "    send x to 0 tag 1\n"
    (d,) = check_program(program(text))
    assert (d.code, d.span.line, [lab.span.line for lab in d.labels]) == ("P204", 7, [5])


def test_under_nccl_the_engine_still_matches_it():
    schedule = expand(program(TAGGED), 3)
    assert run_engine(schedule, NCCL).completed


# ---- simulator, compile, fmt ----------------------------------------------------------------------------


def test_simulator_is_deterministic_and_says_it_raced():
    schedule = expand(program(RACE), 3)
    runs = [simulate(schedule) for _ in range(2)]
    assert [list(r.tensors[0]["a"]) for r in runs] == [[1.0, 1.0]] * 2  # rank 1's: the lowest rank
    assert [list(r.tensors[0]["b"]) for r in runs] == [[20.0, 20.0]] * 2
    assert [d.code for d in data_diagnostics(runs[0])] == ["P211"]
    tagged = simulate(expand(program(TAGGED), 3))
    assert tagged.ok and data_diagnostics(tagged) == []


def test_sim_cli_exits_1_on_a_race(tmp_path, capsys):
    path = tmp_path / "race.comm"
    path.write_text(RACE)
    assert main(["sim", str(path), "--world", "3"]) == 1
    out = capsys.readouterr().out
    assert "error[P211]" in out and "the simulator shows one outcome, in which rank 1's message arrives first" in out


def test_compile_writes_src_none(tmp_path, capsys):
    out = tmp_path / "any.py"
    assert main(["compile", str(ROOT / "programs" / "any_source.comm"), "-o", str(out)]) == 0
    script = out.read_text()
    assert "dist.recv(tagged[j], None, tag=j)" in script
    assert "dist.irecv(ordered[j], None)" in script


def test_fmt_round_trips():
    text = "recv x from any\nrecv x[0:2] from any tag 3 in g\nh = irecv x from any in m.tp\n"
    assert format_source(SourceFile("t.comm", text)) == text
    assert format_source(SourceFile("t.comm", "recv x   from  any  tag 3\n")) == "recv x from any tag 3\n"


# ---- a real run ---------------------------------------------------------------------------------------------


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_gloo_run_matches_the_simulator(capfd, no_orphans):
    code = main(["run", str(ROOT / "programs" / "any_source.comm"), "--nproc", "3", "--timeout", "60"])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "every rank matches the simulator" in out


SLOW_SENDER_ON_GLOO = """\
import datetime, multiprocessing as mp, os, socket, sys, time
import torch, torch.distributed as dist

def worker(rank, port, slow, q):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4,
                            timeout=datetime.timedelta(seconds=20))
    x, got = torch.full((2,), float(rank)), torch.zeros(2)
    if rank == 0:  # programs/bad/message_race_slow_sender.comm, its first phase
        q.put((dist.recv(got), dist.recv(got)))
    elif rank == 1:
        time.sleep(2.0 if slow == 1 else 0)
        dist.send(x, 0)
    elif rank == 2:
        dist.recv(got, 3)
        dist.send(x, 0)
    else:
        time.sleep(2.0 if slow == 3 else 0)
        dist.send(x, 2)
    dist.destroy_process_group()

if __name__ == "__main__":
    for slow in (1, 3):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        ctx = mp.get_context("fork"); q = ctx.Queue()
        ps = [ctx.Process(target=worker, args=(r, port, slow, q)) for r in range(4)]
        for p in ps: p.start()
        print(slow, *q.get(timeout=40), flush=True)
        for p in ps: p.join(timeout=30)
"""


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_on_gloo_the_slow_senders_race_goes_either_way(no_orphans):
    """The race P211 now finds is real: with rank 1 2 s late, rank 0's first `recv(src=None)` returns rank 2 (whose
    send followed a message from rank 3); with rank 3 2 s late, rank 1. The checker's simulation shows the second."""
    env = dict(os.environ, **{TOKEN_VAR: no_orphans})
    proc = subprocess.run([sys.executable, "-c", SLOW_SENDER_ON_GLOO], capture_output=True, text=True, env=env,
                          timeout=100, start_new_session=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split("\n")[:2] == ["1 2 1", "3 1 2"]
    bad = (ROOT / "programs" / "bad" / "message_race_slow_sender.comm").read_text()
    assert _race_lines(bad, 4) == [(13, 16, 19)]  # the engine's run: line 13 takes rank 1's (line 16), not rank 2's
