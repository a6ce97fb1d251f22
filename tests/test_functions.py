"""User functions (`def NAME(params):`, `NAME(args)`): macros inlined at each call, through every stage — the
parser, the kinds `resolve` gives each parameter per call, `expand`'s inlining and its call-site notes, the
checker's notes, `fmt`, `compile` (a Python function, run on Gloo ranks) and a real Gloo run."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest
from test_compile import run_script
from test_runtime import run_here

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics import CommdslError
from commdsl.emit.fmt import format_source
from commdsl.emit.python import emit_python
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.simulate import simulate
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import parse_tree
from commdsl.syntax.transform import to_ast

HEAD = "program f\nworld 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\n"

SWAP = """\
def swap(out, into, peer):
    on rank < peer:
        send out to peer
        recv into from peer
    else:
        recv into from peer
        send out to peer
"""

# every kind of argument, nested calls, a call in a loop, a call inside `batch:`, handles local to a call
EVERYTHING = """\
program everything
world 2..4
tensor x: float32[4] = rank
tensor y: float32[4]
tensor z: int32[2, 2] = rank
tensor w: int32[2, 2]
tensor acc: float32[4]
group pair = [0, 1]
mesh m = (dp=1, tp=world)

def swap(out, into, peer):
    on rank < peer:
        send out to peer
        recv into from peer
    else:
        recv into from peer
        send out to peer

def pair_swap(a, b):                 # a function calling another
    swap(a, b, 1 - rank)

def ring_add(buf, tmp, ring, times):
    let right = ring.peer((ring.rank + 1) % ring.size)
    let left = ring.peer((ring.rank + ring.size - 1) % ring.size)
    for t in 1 .. times:
        h = isend buf to right
        got[0] = irecv tmp from left
        wait h
        wait all got
        acc += tmp

def post(a, b, peer):
    send a to peer
    recv b from peer

on rank < 2:
    pair_swap(x, y)
    pair_swap(z, w)
    ring_add(x, y, pair, 2)
    expect w == 1 - rank
    expect acc == 2 * (1 - rank)
ring_add(x, y, m.tp, 1)
on rank < 2:
    batch:
        post(z[0], w[1], 1 - rank)
    expect w == 1 - rank
"""

# group parameters in every place a group goes: `in grp` of a collective and of P2P, `grp.peer(k)`, a mesh passed
# whole (`in mm.tp`), a mesh dimension, a declared group, a group made by `new_group`
GROUPS = """\
program groups
world 4
tensor x: float32[2] = rank
tensor y: float32[2] = rank
tensor z: float32[2] = rank
tensor w: float32[2]
group pair = [0, 1]
mesh m = (dp=2, tp=2)

def total(v, grp):
    all_reduce v in grp

def total_tp(v, mm):
    all_reduce v in mm.tp

def hand_over(a, b, grp):
    on grp.rank == 0:
        send a to grp.peer(1) in grp
    else:
        recv b from grp.peer(0) in grp
    broadcast a from grp.peer(0) in grp

g = new_group [2, 3]
total(x, m.tp)
total_tp(y, m)
on rank < 2:
    total(z, pair)
else:
    total(z, g)
hand_over(x, w, m.dp)
expect y == rank - rank % 2 + (rank - rank % 2 + 1)
expect z == rank - rank % 2 + (rank - rank % 2 + 1)
"""


def parse(text: str) -> n.Module:
    source = SourceFile("case.comm", text)
    return to_ast(parse_tree(source), source)


def errors(text: str, world: int | None = None) -> list:
    """The diagnostics of loading, then checking (or expanding at `world`)."""
    try:
        program = load(SourceFile("case.comm", text))
        if world is not None:
            expand(program, world)
            return []
        return check_program(program, CheckOptions())
    except CommdslError as e:
        return e.diagnostics


def only(text: str, code: str, world: int | None = None):
    found = errors(text, world)
    assert [d.code for d in found] == [code], [d.message for d in found]
    return found[0]


def notes(d) -> list[tuple[str, int | None]]:
    return [(x.message, x.span.line if x.span else None) for x in d.notes]


# ---- syntax --------------------------------------------------------------------------------------------


def test_a_def_and_a_call_parse_to_their_nodes():
    m = parse(HEAD + SWAP + "swap(x, y[0:2], 1 - rank)\ndef none():\n    barrier\nnone()\n")
    d, call = m.body[4], m.body[5]
    assert (
        isinstance(d, n.FunctionDef) and d.name.name == "swap" and [p.name for p in d.params] == ["out", "into", "peer"]
    )
    assert len(d.body) == 1 and isinstance(d.body[0], n.On) and d.span.line == 5 and d.span.end_line == 11
    assert isinstance(call, n.CallStmt) and call.name.name == "swap" and (call.span.line, call.span.column) == (12, 1)
    assert [a.kind for a in call.args] == ["name", "slice", "binary"]
    assert m.body[6].params == () and m.body[7].args == ()


def test_an_expression_alone_on_a_line_is_not_a_statement():
    d = only(HEAD + "x[0]\n", "S001")
    assert d.message == "an expression on its own is not a statement" and (d.span.line, d.span.column) == (5, 1)


# ---- resolve: kinds per call, and what it refuses --------------------------------------------------------


@pytest.mark.parametrize("text", [EVERYTHING, GROUPS], ids=["everything", "groups"])
def test_a_parameter_takes_its_kind_from_each_call(text):
    """One body, called with a view, a group, a mesh dimension and integers: each call checks it with those kinds,
    and the schedule holds each op in the group its call passed."""
    assert errors(text) == []


def test_a_body_checked_with_a_wrong_kind_names_the_call():
    text = HEAD + "group g = [0, 1]\ndef f(v, k):\n    send v to k\nf(x, 1 - rank)\nf(g, 1 - rank)\nf(x, y)\n"
    found = errors(text)
    assert [(d.code, d.span.line, d.message) for d in found] == [
        ("N103", 7, "`v` is not a tensor"),
        ("N103", 7, "tensor `k` used where an integer known per rank is expected"),
    ]
    assert notes(found[0]) == [("in the call of `f` at line 9", 9)]
    assert notes(found[1]) == [("in the call of `f` at line 10", 10)]


def test_one_mistake_in_a_body_gets_a_note_per_call():
    d = only(HEAD + "def f(v):\n    send v to nobody\nf(x)\nf(x[0:2])\nf(y)\n", "N101")
    assert d.span.line == 6 and notes(d) == [(f"in the call of `f` at line {k}", k) for k in (7, 8, 9)]


def test_an_undefined_function_names_the_closest():
    d = only(HEAD + SWAP + "swp(x, y, 1 - rank)\n", "N101")
    assert d.message == "undefined function `swp`" and d.help == "a function `swap` exists"
    assert (d.span.line, d.span.column, d.span.end_column) == (12, 1, 4)


def test_calling_a_tensor_says_it_is_no_function():
    d = only(HEAD + "x(1)\n", "N103")
    assert d.message == "`x` is a tensor, not a function"


def test_wrong_number_of_arguments_points_at_the_definition():
    d = only(HEAD + SWAP + "swap(x, y)\n", "N114")
    assert d.message == "`swap` takes 3 arguments, 2 given" and d.label == "expected `swap(out, into, peer)`"
    assert notes(d) == [("defined here", 5)]


@pytest.mark.parametrize(
    ("defs", "line", "message"),
    [
        ("def f(k):\n    f(k - 1)\n", 6, "`f` calls itself"),
        (
            "def a():\n    b()\ndef b():\n    c()\ndef c():\n    a()\n",
            10,
            "`a` calls itself through `b`, `c` (`a` → `b` → `c` → `a`)",
        ),
    ],
)
def test_recursion_direct_or_mutual_is_refused_once_per_cycle(defs, line, message):
    found = errors(HEAD + defs + ("f(3)\n" if "f(k)" in defs else "a()\n"))
    assert [(d.code, d.span.line, d.message) for d in found] == [("N113", line, message)]


def test_handles_tables_and_functions_are_no_arguments():
    text = HEAD + "table t = [1]\ndef f(v):\n    barrier\nh = isend x to 1 - rank\nf(h)\nf(t)\nf(f)\nwait h\n"
    found = errors(text)
    assert [(d.code, d.message) for d in found] == [
        ("N103", "a handle cannot be passed to a function"),
        ("N103", "a table cannot be passed to a function"),
        ("N103", "a function cannot be passed to a function"),
    ]


def test_definitions_belong_at_the_top_level_and_make_no_groups():
    found = errors(HEAD + "on rank == 0:\n    def f():\n        barrier\ndef g():\n    s = new_group [0, 1]\n")
    assert [(d.code, d.span.line) for d in found] == [("N106", 9), ("N106", 6)]


def test_a_parameter_is_a_new_name():
    found = errors(HEAD + "def f(x, k, k):\n    barrier\n")
    assert [(d.code, d.span.column) for d in found] == [("N102", 7), ("N102", 13)]


def test_a_body_does_not_see_the_callers_lets():
    d = only(HEAD + "def f():\n    send x to peer\nlet peer = 1 - rank\nf()\n", "N101")
    assert d.span.line == 6 and notes(d) == [("in the call of `f` at line 8", 8)]


# ---- expand: inlining -----------------------------------------------------------------------------------


def test_inlining_gives_the_schedule_written_out_by_hand():
    called = HEAD + SWAP + "for s in 0 .. 1:\n    swap(x[s * 2 : s * 2 + 2], y[2 - s * 2 : 4 - s * 2], 1 - rank)\n"
    by_hand = (
        HEAD + "for s in 0 .. 1:\n    on rank < 1 - rank:\n        send x[s * 2 : s * 2 + 2] to 1 - rank\n"
        "        recv y[2 - s * 2 : 4 - s * 2] from 1 - rank\n    else:\n"
        "        recv y[2 - s * 2 : 4 - s * 2] from 1 - rank\n        send x[s * 2 : s * 2 + 2] to 1 - rank\n"
    )
    a, b = (expand(load(SourceFile("case.comm", t)), 2) for t in (called, by_hand))
    assert [type(r).__name__ for r in a.records] == [type(r).__name__ for r in b.records]
    for r, s in zip(a.records, b.records, strict=True):
        assert r.ranks.tolist() == s.ranks.tolist() and r.bindings == s.bindings  # the loop's `s`, through the call
        assert (r.view.offset, r.view.shape, r.peer) == (s.view.offset, s.view.shape, s.peer)
    assert a.reached == {"swap": tuple((a_call,) for a_call in [load(SourceFile("case.comm", called)).body[0].body[0]])}


def test_nested_calls_groups_and_handles_simulate_to_the_expected_tensors():
    program = load(SourceFile("everything.comm", EVERYTHING))
    for world in (2, 3, 4):
        result = simulate(expand(program, world))
        assert result.ok
        assert np.array_equal(result.tensors[0]["w"], np.full((2, 2), 1))


def test_a_groups_size_and_rank_are_integer_arguments_and_views_may_overlap():
    text = (
        HEAD + "group g = [0, 1]\ndef f(k, v):\n    v[0:1] = k\n    v[1:3] = v[0:2]\n    v[2:4] += v[1:3]\n"
        "f(g.size, x)\nf(g.rank, x[0:4])\n"
    )
    program = load(SourceFile("case.comm", text))
    got = simulate(expand(program, 2)).tensors
    assert got[0]["x"].tolist() == [0, 0, 2, 2] and got[1]["x"].tolist() == [1, 1, 3, 4]
    script = emit_python(program)
    assert "f(2, x)" in script and "f(dist.get_rank(g), x[0:4])" in script
    assert "v[1:3].copy_(v[0:2].clone())" in script and "v[2:4].copy_(v[2:4] + v[1:3])" in script


def test_an_expansion_error_in_a_body_names_every_call_chain():
    text = (
        HEAD + "def inner(v, k):\n    send v[k] to 1 - rank\ndef outer(k):\n    inner(x, k)\n"
        "on rank == 0:\n    outer(9)\nelse:\n    inner(y, 7)\n"
    )
    d = only(text, "N120", world=2)
    assert d.span.line == 6 and d.message == "index 9 is out of bounds for 4 rows"
    assert notes(d) == [
        ("in the call of `inner` at line 8, inside the call of `outer` at line 10", 8),
        ("in the call of `inner` at line 12", 12),  # on rank 1, which fails there too
        ("on rank 0", None),
    ]


def test_a_handle_bound_in_a_body_is_the_calls_own():
    """After the call its name means nothing (N129 where it is waited); its request is still the rank's, which
    a later `wait all` waits for."""
    body = "def post(v):\n    h = isend v to 1 - rank\n"
    d = only(HEAD + body + "post(x)\nrecv y from 1 - rank\nwait h\n", "N129", world=2)
    assert d.span.line == 9
    assert errors(HEAD + body + "post(x)\nrecv y from 1 - rank\nwait all\nexpect y == 1 - rank\n") == []
    d = only(HEAD + body + "post(x)\nrecv y from 1 - rank\n", "R501")
    assert d.span.line == 6 and ("in the call of `post` at line 7", 7) in notes(d)


def test_a_handle_of_the_caller_is_untouched_by_a_call_binding_the_same_name():
    text = (
        HEAD + "def post(v):\n    h = isend v to 1 - rank\n    wait h\n"
        "h = irecv y from 1 - rank\npost(x)\nwait h\nexpect y == 1 - rank\n"
    )
    assert errors(text) == []


def test_a_checker_finding_in_a_body_notes_the_calls_that_inlined_it():
    d = only(HEAD + "def push(v):\n    send v to 1 - rank\npush(x)\npush(x[0:2])\n", "P201")
    assert d.span.line == 6
    assert [m for m, _ in notes(d) if m.startswith("in the call")] == [
        "in the call of `push` at line 7",
        "in the call of `push` at line 8",
    ]


# ---- fmt, compile, a real run ---------------------------------------------------------------------------


def test_fmt_writes_the_canonical_form_and_keeps_the_meaning():
    messy = (
        HEAD + "def  swap( out,into ,   peer ) :   # c\n        send out to peer\n"
        "        recv into from peer\nswap(x,y,  1-rank)\n"
    )
    text = format_source(SourceFile("case.comm", messy))
    assert (
        "def swap(out, into, peer):" in text and "\n    send out to peer\n" in text and "swap(x, y, 1 - rank)\n" in text
    )
    assert format_source(SourceFile("case.comm", text)) == text


def test_compile_writes_one_python_function_per_def_called_where_the_program_calls_it():
    script = emit_python(load(SourceFile("everything.comm", EVERYTHING)))
    tree = ast.parse(script)
    main = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "main")
    inner = [f.name for f in main.body if isinstance(f, ast.FunctionDef)]
    assert inner == ["swap", "pair_swap", "ring_add"]  # swap once: its code is the same for float32 and int32 views
    assert "    def ring_add(buf, tmp, ring, times):\n" in script
    groups = emit_python(load(SourceFile("groups.comm", GROUPS)))
    assert 'dist.all_reduce(v, dist.ReduceOp.SUM, group=mm.get_group("tp"))' in groups
    assert "dist.send(a, dist.get_global_rank(grp, 1), group=grp)" in groups and "total(z, g)  # line 29" in groups
    assert "got = {}  # an array of handles" in script
    assert "acc.copy_(acc + tmp)" in script  # `tmp` may be a view of any tensor, of `acc` too: computed, then copied
    assert "pair_swap(x, y)  # line 37" in script and 'ring_add(x, y, m.get_group("tp"), 1)' in script
    assert "# line 45: post(z[0], w[1], 1 - rank), inlined: its ops join the batch" in script
    assert "p2p_ops.append(dist.P2POp(dist.isend, z[0], (1 - rank)))" in script


def test_a_call_written_in_place_in_a_batch_keeps_the_callers_names():
    """The body's `let k`, written into the caller's Python scope, gets a name of its own, not the caller's `k`."""
    body = "def post(a, b):\n    let k = 1 - rank\n    send a to k\n    recv b from k\n"
    text = HEAD + body + "let k = 7\nbatch:\n    post(x, y)\nexpect x == k - 7 + rank\n"
    script = emit_python(load(SourceFile("case.comm", text)))
    assert "    k = 7\n" in script and "    k_ = 1 - rank\n" in script
    assert "p2p_ops.append(dist.P2POp(dist.isend, x, k_))" in script and '"==", k - 7 + rank)' in script


@pytest.mark.gloo
@pytest.mark.timeout(300)
@pytest.mark.parametrize("text", [EVERYTHING, GROUPS], ids=["everything", "groups"])
def test_the_compiled_functions_run_on_gloo(text, tmp_path, no_orphans):
    script = tmp_path / "functions.py"
    script.write_text(emit_python(load(SourceFile("functions.comm", text))))
    proc = run_script(script, 4, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(line for line in proc.stdout.splitlines() if "every expect holds" in line) == [
        f"rank {r}: every expect holds" for r in range(4)
    ]


@pytest.mark.gloo
@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", [EVERYTHING, GROUPS], ids=["everything", "groups"])
def test_a_program_with_functions_runs_on_gloo_as_simulated(text, tmp_path, capfd, no_orphans):
    path = tmp_path / "functions.comm"
    path.write_text(text)
    report = tmp_path / "report.json"
    code, out, err = run_here(
        ["run", str(path), "--nproc", "4", "--backend", "gloo", "--timeout", "60", "--report", str(report)], capfd
    )
    assert code == 0, out + err
    data = json.loads(report.read_text())
    assert data["ok"] and data["mismatches"] == [] and all(e["ok"] for e in data["expects"])
