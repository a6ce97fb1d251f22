"""Integers read from tensor data (`T[k]`, `sum(E)`, issue 13): what resolve accepts, the expansion's fixed point
beside the simulator (reads after local work, after an exchange, in a loop fed by the previous iteration, in a
rank-dependent order, a stall, the bound on runs), the notes that name the values read, the runtime's comparison
with the checked value, and the compiled script's reads."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics import CommdslError
from commdsl.expand import expand
from commdsl.limits import MAX_READ_PASSES
from commdsl.resolve import load
from commdsl.schedule import Read, ReadRec
from commdsl.simulate import simulate
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
EXPAND = importlib.import_module("commdsl.expand")  # the module (the package exports the function by that name)


def program(text: str):
    return load(SourceFile("t.comm", text))


def codes_of(text: str) -> list[str]:
    try:
        return [d.code for d in check_program(program(text))]
    except CommdslError as e:
        return [d.code for d in e.diagnostics]


def diagnostics(text: str):
    try:
        return check_program(program(text))
    except CommdslError as e:
        return e.diagnostics


def runs(monkeypatch) -> list[int]:
    """Counts the expansions `expand` makes (one per run of the partial schedule, plus the last)."""
    count = [0]
    once = EXPAND._expand_once

    def counted(*args):
        count[0] += 1
        return once(*args)

    monkeypatch.setattr(EXPAND, "_expand_once", counted)
    return count


# ---- resolve ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("tensor c: int64[2]\ntensor x: float32[sum(c)]\n", "N103"),  # a declaration reads no data
        ("tensor c: int64[2]\nparam n = sum(c)\n", "N103"),
        ("tensor c: int64[2]\ntensor x: float32[c[0]]\n", "N103"),
        ("tensor c: float32[2]\ntensor x: float32[4]\nsend x[0 : c[0]] to 1 - rank\n", "N121"),  # a float read
        ("tensor c: int64[2]\ntensor x: float32[4]\nsend x[0 : sum(c / 2)] to 1 - rank\n", "N121"),
        ("tensor c: int64[2]\ntensor x: float32[4]\nsend x[0 : sum(c, c)] to 1 - rank\n", "N107"),
        ("tensor c: int64[2]\ntensor x: float32[4] = sum(c)\n", "N103"),  # nor an initialiser
        ("tensor x: float32[4]\nsend x[0 : sum(i < 3)] to 1 - rank\n", "N103"),  # `sum` reads a tensor
    ],
)
def test_resolve_refuses_reads_where_no_data_exists_yet_and_float_reads(text, code):
    assert code in codes_of("program p\nworld 2\n" + text)


def test_a_comparison_of_floats_counts_as_an_integer_read():
    text = """program p
world 2
tensor w: float32[4] = i
tensor x: float32[4]
tensor y: float32[4]
on rank == 0:
    send x[0 : sum(w > 1.5)] to 1
else:
    recv y[0 : 2] from 0
"""
    assert codes_of(text) == []


def test_an_index_with_several_elements_is_no_integer():
    text = "program p\nworld 2\ntensor c: int64[2, 2]\ntensor x: float32[4]\nsend x[0 : c[0]] to 1 - rank\n"
    found = diagnostics(text)
    assert [d.code for d in found] == ["N123"] and "has 2 elements, not one" in found[0].message


def test_a_batch_reads_no_data():
    text = """program p
world 2
tensor c: int64[1] = 2
tensor x: float32[4]
batch:
    send x[0 : c[0]] to 1 - rank
    recv x[2 : 4] from 1 - rank
"""
    assert codes_of(text) == ["N111"]


# ---- the fixed point -------------------------------------------------------------------------------------------

LOCAL = """program p
world 3
tensor route: int64[5] = (i + rank) % 3
tensor x: float32[8] = rank
tensor y: float32[8]
let mine = sum(route == 0)
on rank == 0:
    send x[0 : mine] to 1
else on rank == 1:
    recv y[0 : 2] from 0
"""


def test_reads_of_data_no_message_changed_take_one_expansion(monkeypatch):
    count = runs(monkeypatch)
    s = expand(program(LOCAL), 3)
    assert count[0] == 1 and not s.unread
    reads = [r for r in s.records if isinstance(r, ReadRec)]
    assert [(int(k), int(v)) for r in reads for k, v in zip(r.ranks, r.known)] == [(0, 2), (1, 1), (2, 2)]
    assert s.ops[0][-1].view.numel == 2


EXCHANGED = """program p
world 4
tensor counts: int64[world] = (rank + i) % 3
tensor got: int64[world]
tensor x: float32[world * 4] = rank
tensor y: float32[world * 4]
all_to_all counts into got
all_to_all x[0 : sum(counts)] into y[0 : sum(got)] splits [counts[j] for j in 0 .. world - 1], \
    [got[j] for j in 0 .. world - 1]
expect y[0 : sum(got)] == 0
"""


def test_reads_after_an_exchange_are_learnt_by_running_the_schedule(monkeypatch):
    count = runs(monkeypatch)
    s = expand(program(EXCHANGED), 4)
    assert count[0] == 2 and not s.unread
    for rank in range(4):
        (a2a,) = [op for op in s.ops[rank] if getattr(op, "kind", "") == "all_to_all" and op.in_splits]
        assert a2a.in_splits == tuple((rank + j) % 3 for j in range(4))
        assert a2a.out_splits == tuple((j + rank) % 3 for j in range(4))


def test_moe_dispatch_simulates_its_expects_at_every_size_it_declares_up_to_8():
    p = load(SourceFile.read(ROOT / "programs" / "moe_dispatch.comm"))
    for world in [w for w in p.world_sizes() if w <= 8]:
        result = simulate(expand(p, world))
        assert result.ok, world


RING = """program p
world 4
tensor token: int64[1] = rank + 1
tensor got: int64[1]
tensor x: float32[16] = rank
tensor y: float32[16]
for s in 0 .. 2:
    batch:
        send token to (rank + 1) % world
        recv got from (rank - 1) % world
    let n_out = token[0]
    let n_in = got[0]
    batch:
        send x[0 : n_out] to (rank + 1) % world
        recv y[0 : n_in] from (rank - 1) % world
    token = got + 1
"""


def test_a_read_in_a_loop_fed_by_the_previous_iteration_is_learnt_iteration_by_iteration(monkeypatch):
    count = runs(monkeypatch)
    s = expand(program(RING), 4)
    assert count[0] == 4 and not s.unread  # one run per iteration (its reads follow a receive), then the last
    token = [r + 1 for r in range(4)]
    for _ in range(3):
        for rank in range(4):
            (send,) = [o for o in s.ops[rank] if type(o).__name__ == "Batch" and o.ops[0].view.tensor == "x"][_].ops[:1]
            assert send.view.numel == token[rank]
        token = [token[(r - 1) % 4] + 1 for r in range(4)]
    assert codes_of(RING) == []


def test_a_wrong_size_read_in_a_loop_names_the_value_each_rank_read():
    text = RING.replace("recv y[0 : n_in]", "recv y[0 : n_in + 1]")
    found = diagnostics(text)
    assert found and all(d.code == "P205" for d in found)
    assert any("`got[0]` was" in n.message for d in found for n in d.notes)


ORDER = """program p
world 2
tensor n: int64[1] = 3
tensor x: float32[8] = 1
tensor y: float32[8]
on rank == 0:
    recv n from 1
    send x[0 : n[0]] to 1
else:
    n = 5
    send n to 0
    recv y[0 : n[0]] from 0
"""


def test_a_read_after_a_receive_on_one_rank_and_a_local_one_on_another(monkeypatch):
    count = runs(monkeypatch)
    s = expand(program(ORDER), 2)
    assert count[0] == 2 and not s.unread  # rank 1 reads at once, rank 0 after its receive
    assert s.ops[0][-1].view.numel == 5 and s.ops[1][-1].view.numel == 5
    assert codes_of(ORDER) == []


WHILE = """program p
world 2
tensor left: int64[1] = 3
tensor x: float32[4] = rank
while left[0] > 0:
    all_reduce x
    left -= 1
expect x == 4
"""


def test_a_while_on_data_runs_until_its_condition_reads_false(monkeypatch):
    count = runs(monkeypatch)
    s = expand(program(WHILE), 2)
    assert count[0] == 4 and not s.unread  # the first condition is read at once, each later one after a run
    assert codes_of(WHILE) == []  # no N133: a condition read from data changes with no `let` changed
    assert simulate(s).ok


STALL = """program p
world 2
tensor c: int64[1]
tensor buf: float32[4]
on rank == 0:
    recv c from 1
    send buf[0 : c[0]] to 1
else:
    recv buf[0 : 2] from 0
    send c to 0
"""


def test_a_read_no_run_reaches_is_reported_with_what_blocks_it():
    s = expand(program(STALL), 2)
    assert list(s.unread) == [0] and s.unread[0].text == "c[0]"
    (d,) = diagnostics(STALL)
    assert d.code == "P202"
    assert any("rank 0 stopped at `c[0]` (line 7)" in n.message for n in d.notes)


def test_more_runs_than_the_bound_is_n133(monkeypatch):
    monkeypatch.setattr(EXPAND, "MAX_READ_PASSES", 8)  # each run reaches one more iteration: 8 are enough to see
    text = """program p
world 2
tensor t: int64[1] = 1
tensor u: int64[1]
for s in 0 .. 9:
    batch:
        send t to 1 - rank
        recv u from 1 - rank
    let k = u[0]
"""
    (d,) = diagnostics(text)
    assert d.code == "N133" and "over 8 runs" in d.message
    assert MAX_READ_PASSES == 256


def test_an_expansion_error_names_the_value_read():
    text = """program p
world 2
tensor counts: int64[2] = 3 + rank
tensor buf: float32[4]
let n = counts[1] + 1
recv buf[0 : n] from 1 - rank
"""
    (d,) = diagnostics(text)
    assert d.code == "N120"
    assert [n.message for n in d.notes][0] == "on rank 1, `counts[1]` was 4 (read at line 5)"


def test_the_bad_program_names_the_counts_it_read_too_early():
    path = ROOT / "programs" / "bad" / "splits_read_before_exchange.comm"
    (d,) = check_program(load(SourceFile.read(path)), CheckOptions())
    notes = [n.message for n in d.notes]
    assert "on rank 0, `recv_counts[j]` was 0, 0 (read at line 14)" in notes


# ---- the runtime's comparison, and compile ---------------------------------------------------------------------


def test_the_runtime_stops_where_a_read_differs_from_the_checked_value():
    torch = pytest.importorskip("torch")
    from commdsl.runtime.ops import Context, DataReadMismatch, build_steps

    s = expand(program(LOCAL), 3)
    (rec,) = [r for r in s.records if isinstance(r, ReadRec)]
    op = rec.at(0)
    assert isinstance(op, Read) and op.expected == 2
    route = torch.tensor([0, 1, 2, 0, 1], dtype=torch.int64)
    ctx = Context(0, "gloo", torch.device("cpu"), {"route": route}, {"route": "int64"}, [None], lambda *a: None)
    (step,) = build_steps([op], ctx)
    step()  # the tensor holds what the simulator assumed
    route[1] = 0
    with pytest.raises(
        DataReadMismatch,
        match=r"`sum\(route == 0\)` is 3 on this rank, but the checked schedule "
        r"was expanded with 2",
    ):
        step()


def test_compile_reads_as_torch_does():
    from commdsl.emit.python import emit_python

    script = emit_python(load(SourceFile.read(ROOT / "programs" / "moe_dispatch.comm")))
    assert "send_counts[j].fill_(int((expert == j).sum()))" in script
    assert "received = int(recv_counts.sum())" in script
    assert "[*[int(send_counts[j]) for j in range(world)]]" in script


def test_sum_is_highlighted_as_a_builtin():
    from pygments.token import Name

    from commdsl.highlight import CommdslLexer

    tokens = {v: t for t, v in CommdslLexer().get_tokens("let n = sum(x == 1)\n") if v.strip()}
    assert tokens["sum"] == Name.Builtin


def test_expansion_without_reads_keeps_no_read_bookkeeping():
    s = expand(load(SourceFile.read(ROOT / "programs" / "moe_all_to_all.comm")), 4)
    assert not any(isinstance(r, ReadRec) or r.data for r in s.records)
    assert np.all([not s.unread])


def test_graph_and_predict_take_a_program_that_reads_data(capsys):
    from commdsl.cli.main import main

    path = str(ROOT / "programs" / "moe_dispatch.comm")
    assert main(["graph", path, "--world", "3"]) == 0
    assert "all_to_all · 12 × float32 = 48 B · line 23" in capsys.readouterr().out  # 6 tokens of 2 floats a rank
    argv = ["predict", path, "--world", "4", "--topology", "dgx-h100", "--param", "tokens", "--sizes", "8:16"]
    assert main(argv) == 0
    assert "critical path" in capsys.readouterr().out


FUNCTION_READS = """program fr
world 3
tensor counts: int64[world] = (rank + i) % 3
tensor recv_counts: int64[world]
tensor total: int64[1]
tensor weights: float32[world]

def tally(c, t):
    t = sum(c)

all_to_all counts into recv_counts
tally(recv_counts, total)
expect total == 3
"""


def test_a_function_reads_data_through_a_view_parameter_of_the_argument_s_dtype():
    """A body's read sees the argument's tensor: counts received by an exchange sum to 3 on every rank (each
    rank gets (j + rank) % 3 from every j), and the same body called on a float tensor is N121 at the body's
    line with a note naming the call."""
    assert codes_of(FUNCTION_READS) == []
    sim = simulate(expand(program(FUNCTION_READS), 3))
    assert len(sim.expects) == 3 and all(e.ok for e in sim.expects)
    bad = diagnostics(FUNCTION_READS + "tally(weights, total)\n")
    assert [d.code for d in bad] == ["N121"]
    assert bad[0].span.line == 9
    assert any("in the call of `tally` at line 14" in note.message for note in bad[0].notes)
