"""The grammar and the parser: every construct gives the AST it should, spans point at the source,
every syntax mistake is a diagnostic (S001–S007), and no input at all gets a Python traceback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from lark import Lark

from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.resolve import load
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import lark_parser, parse_tree
from commdsl.syntax.transform import to_ast
from commdsl.validation import validate

ROOT = Path(__file__).resolve().parent.parent


def parse(text: str) -> n.Module:
    source = SourceFile("t.comm", text)
    return to_ast(parse_tree(source), source)


def stmt(text: str):
    """The one statement `text` holds."""
    body = parse(text).body
    assert len(body) == 1, body
    return body[0]


def expr(text: str):
    """An expression, parsed as the value of a `let`."""
    return stmt(f"let v = {text}\n").value


def syntax_error(text: str) -> Diagnostic:
    with pytest.raises(CommdslError) as info:
        parse(text)
    (d,) = info.value.diagnostics
    return d


def show(e) -> str:
    """An expression tree in prefix form, so precedence and associativity show at a glance."""
    match e:
        case n.IntLit() | n.FloatLit() | n.BoolLit():
            return repr(e.value)
        case n.Name():
            return e.id
        case n.Binary():
            return f"({e.op} {show(e.left)} {show(e.right)})"
        case n.Unary():
            return f"({e.op} {show(e.operand)})"
        case n.Attr():
            return f"{show(e.value)}.{e.attr}"
        case n.Call():
            return f"{show(e.func)}({', '.join(show(a) for a in e.args)})"
        case n.Slice():
            return f"{show(e.value)}[{show(e.lo) if e.lo else ''}:{show(e.hi) if e.hi else ''}]"
        case n.Index():
            return f"{show(e.value)}[{show(e.index)}]"
    raise AssertionError(e)


# ---- the grammar itself -----------------------------------------------------------------------------


def test_grammar_builds_strict_lalr():
    """strict=True fails on any shift/reduce conflict or terminal collision LALR would settle quietly."""
    parser = lark_parser(strict=True)
    assert isinstance(parser, Lark)
    assert parser.options.parser == "lalr" and parser.options.strict


def test_the_packaged_grammar_is_the_one_in_grammar():
    from importlib.resources import files

    from commdsl.syntax.parser import grammar_text

    assert files("commdsl").joinpath("grammar/commdsl.lark").read_text(encoding="utf-8") == grammar_text()


# ---- header and declarations ------------------------------------------------------------------------


def test_program_backend_param():
    prog, backend, param = parse("program ring\nbackend gloo, nccl\nparam n = 1024\n").body
    assert isinstance(prog, n.ProgramDecl) and prog.name == "ring"
    assert isinstance(backend, n.BackendDecl) and [b.name for b in backend.names] == ["gloo", "nccl"]
    assert isinstance(param, n.ParamDecl) and param.name == "n" and param.default.value == 1024


@pytest.mark.parametrize("text, sizes, lo, hi, open_", [
    ("world 4", (4,), None, None, False),
    ("world 2..16", (), 2, 16, False),
    ("world 2 .. 16", (), 2, 16, False),
    ("world 2..", (), 2, None, True),
    ("world [2, 4, 8]", (2, 4, 8), None, None, False),
])
def test_world_forms(text, sizes, lo, hi, open_):
    w = stmt(text + "\n")
    assert isinstance(w, n.WorldDecl)
    assert (w.sizes, w.lo, w.hi, w.open) == (sizes, lo, hi, open_)


def test_tensor_declarations():
    t = stmt("tensor x: float32[n, world / 2] = rank + i\n")
    assert isinstance(t, n.TensorDecl) and t.name == "x" and t.dtype.name == "float32"
    assert [show(d) for d in t.shape] == ["n", "(/ world 2)"]
    assert show(t.init) == "(+ rank i)"
    scalar = stmt("tensor s: int64[]\n")
    assert scalar.shape == () and scalar.init is None
    rnd = stmt("tensor r: float32[8] = randn(7)\n")
    assert show(rnd.init) == "randn(7)"


def test_group_list_split_and_mesh():
    g = stmt("group g = [0, 2, world - 1]\n")
    assert isinstance(g, n.GroupDecl) and [show(m) for m in g.members] == ["0", "2", "(- world 1)"]
    assert g.split_key is None
    pairs = stmt("group pairs = split by rank // 2\n")
    assert pairs.members == () and show(pairs.split_key) == "(// rank 2)"
    m = stmt("mesh m = (dp=2, tp=world // 2)\n")
    assert isinstance(m, n.MeshDecl) and [d.name for d in m.dims] == ["dp", "tp"]
    assert [show(d.size) for d in m.dims] == ["2", "(// world 2)"]


def test_let():
    s = stmt("let left = (rank - 1) % world\n")
    assert isinstance(s, n.Let) and s.name == "left" and show(s.value) == "(% (- rank 1) world)"


# ---- local compute ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["<<=", ">>=", "&=", "|=", "^="])
def test_integer_augmented_assignments(op):
    s = stmt(f"mask {op} 1\n")
    assert isinstance(s, n.Assign) and s.op == op and show(s.target) == "mask" and show(s.value) == "1"


def test_while():
    s = stmt("while mask < world:\n    send x to rank ^ mask\n    mask <<= 1\n")
    assert isinstance(s, n.While) and show(s.cond) == "(< mask world)"
    assert [type(b).__name__ for b in s.body] == ["Send", "Assign"]
    assert (s.span.line, s.span.end_line) == (1, 3)


def test_while_without_colon_is_s005():
    d = syntax_error("while rank < 3\n    barrier\n")
    assert d.code == "S005" and (d.span.line, d.span.column) == (1, 15)


@pytest.mark.parametrize("op", ["=", "+=", "-=", "*=", "/="])
def test_assignments(op):
    s = stmt(f"x.chunk(k, 4) {op} tmp[0:2]\n")
    assert isinstance(s, n.Assign) and s.op == op
    assert show(s.target) == "x.chunk(k, 4)" and show(s.value) == "tmp[0:2]"


# ---- point-to-point ---------------------------------------------------------------------------------


def test_send_and_recv():
    s = stmt("send x to 1\n")
    assert isinstance(s, n.Send) and s.blocking and s.handle is None and s.tag is None and s.group is None
    assert show(s.buffer) == "x" and show(s.peer) == "1"
    r = stmt("recv x[2:] from (rank - 1) % world tag s + 1 in g\n")
    assert isinstance(r, n.Recv) and r.blocking
    assert (show(r.buffer), show(r.peer), show(r.tag)) == ("x[2:]", "(% (- rank 1) world)", "(+ s 1)")
    assert (r.group.name, r.group.dim) == ("g", None)


def test_isend_irecv_with_and_without_handles():
    s = stmt("isend x to 1 in m.tp\n")
    assert isinstance(s, n.Send) and not s.blocking and s.handle is None
    assert (s.group.name, s.group.dim, s.group.text) == ("m", "tp", "m.tp")
    h = stmt("h = irecv y from 0 tag 3\n")
    assert isinstance(h, n.Recv) and not h.blocking and h.handle.name == "h" and show(h.tag) == "3"


def test_wait():
    w = stmt("wait h1, h2\n")
    assert isinstance(w, n.Wait) and [h.name for h in w.handles] == ["h1", "h2"] and not w.all
    a = stmt("wait all\n")
    assert a.all and a.handles == ()


def test_batch():
    b = stmt("batch:\n    send x to right\n    recv y from left\n")
    assert isinstance(b, n.Batch) and b.handle is None
    assert [type(s) for s in b.body] == [n.Send, n.Recv]


def test_coalesced():
    c = stmt("coalesced:\n    all_reduce x\n    all_reduce y op max in g\n")
    assert isinstance(c, n.Coalesced) and (c.span.line, c.span.column, c.span.end_line) == (1, 1, 3)
    assert [(s.op, s.redop and s.redop.name.name, s.group and s.group.name) for s in c.body] == [
        ("all_reduce", None, None),
        ("all_reduce", "max", "g"),
    ]
    assert c.handle is None
    bound = stmt("h[k] = coalesced:\n    all_reduce x\n")
    assert isinstance(bound, n.Coalesced) and (bound.handle.name, show(bound.handle.index)) == ("h", "k")


def test_arrays_of_handles():
    s = stmt("h[k + 1] = isend x to 1\n")
    assert isinstance(s, n.Send) and not s.blocking
    assert (s.handle.name, show(s.handle.index), s.handle.is_array) == ("h", "(+ k 1)", True)
    assert (s.handle.span.column, s.handle.span.end - s.handle.span.start) == (1, 8)  # `h[k + 1]`
    c = stmt("r[0] = all_reduce x\n")
    assert c.handle.name == "r" and show(c.handle.index) == "0" and not c.blocking
    w = stmt("wait h[j], g, h[j - 1]\n")
    assert [(h.name, h.index and show(h.index)) for h in w.handles] == [("h", "j"), ("g", None), ("h", "(- j 1)")]
    a = stmt("wait all h\n")
    assert a.all and a.array.name == "h" and a.handles == ()


def test_a_batch_bound_to_a_handle_does_not_wait():
    b = stmt("b = batch:\n    send x to right\n    recv y from left\n")
    assert isinstance(b, n.Batch) and b.handle.name == "b" and b.handle.index is None
    assert (b.span.line, b.span.column) == (1, 1)
    b = stmt("p[s] = batch:\n    send x to right\n")
    assert b.handle.name == "p" and show(b.handle.index) == "s"


@pytest.mark.parametrize("text, column", [
    ("h += isend x to 1\n", 1),  # augmented: no handle
    ("x[0:2] = isend x to 1\n", 1),  # a slice is no handle slot
    ("h.a = isend x to 1\n", 1),
    ("b[0][1] = batch:\n    send x to 1\n", 1),
])
def test_only_a_name_or_one_slot_binds_a_handle(text, column):
    source = SourceFile("t.comm", text)
    with pytest.raises(CommdslError) as info:
        to_ast(parse_tree(source), source)
    (d,) = info.value.diagnostics
    assert (d.code, d.span.line, d.span.column) == ("N108", 1, column)


# ---- collectives ------------------------------------------------------------------------------------


def coll(text: str) -> n.Collective:
    c = stmt(text + "\n")
    assert isinstance(c, n.Collective)
    return c


def views(c: n.Collective):
    return [show(v) for v in c.inputs], [show(v) for v in c.outputs]


def test_broadcast():
    c = coll("broadcast x from 0")
    assert c.op == "broadcast" and views(c) == (["x"], ["x"]) and show(c.root) == "0" and c.redop is None


def test_all_reduce_default_and_with_op():
    c = coll("all_reduce x")
    assert c.op == "all_reduce" and views(c) == (["x"], ["x"]) and c.redop is None and c.blocking
    c = coll("all_reduce x op max in g")
    assert c.redop.name.name == "max" and c.redop.scale is None and c.group.name == "g"
    c = coll("all_reduce x op premul_sum(0.5)")
    assert c.redop.name.name == "premul_sum" and show(c.redop.scale) == "0.5"


def test_reduce():
    c = coll("reduce x to world - 1 op min in m.dp")
    assert c.op == "reduce" and show(c.root) == "(- world 1)" and c.redop.name.name == "min"
    assert c.group.text == "m.dp"


def test_all_gather_tensor_and_list_forms():
    c = coll("all_gather x into y")
    assert c.op == "all_gather" and views(c) == (["x"], ["y"]) and not c.outputs_listed
    c = coll("all_gather x into [a, b[0:2]] in pairs")
    assert views(c) == (["x"], ["a", "b[0:2]"]) and c.outputs_listed and c.group.name == "pairs"


def test_gather():
    c = coll("gather x into y to 0")
    assert c.op == "gather" and views(c) == (["x"], ["y"]) and show(c.root) == "0"
    c = coll("gather x into [a, b] to 1")
    assert c.outputs_listed and views(c) == (["x"], ["a", "b"])


def test_scatter_tensor_and_list_forms():
    c = coll("scatter x into y from 0")
    assert c.op == "scatter" and views(c) == (["x"], ["y"]) and not c.inputs_listed and show(c.root) == "0"
    c = coll("scatter [a, b] into y from 1 in pairs")
    assert c.inputs_listed and views(c) == (["a", "b"], ["y"])


def test_reduce_scatter():
    c = coll("reduce_scatter x into y op sum")
    assert c.op == "reduce_scatter" and views(c) == (["x"], ["y"]) and c.redop.name.name == "sum"
    c = coll("reduce_scatter [a, b] into y")
    assert c.inputs_listed and c.redop is None


def test_all_to_all_even_and_uneven():
    c = coll("all_to_all x into y")
    assert c.op == "all_to_all" and views(c) == (["x"], ["y"]) and c.in_splits == () and c.out_splits == ()
    c = coll("all_to_all x into y splits [1, 2], [2, rank] in g")
    assert [show(e) for e in c.in_splits] == ["1", "2"] and [show(e) for e in c.out_splits] == ["2", "rank"]
    assert c.group.name == "g"


def test_all_to_all_with_computed_splits():
    c = coll("all_to_all x into y splits [j + 1 for j in 0 .. world - 1], [2, 3] in g")
    (sizes,) = c.in_splits
    assert isinstance(sizes, n.ListFor) and sizes.var == "j"
    assert (show(sizes.value), show(sizes.lo), show(sizes.hi)) == ("(+ j 1)", "0", "(- world 1)")
    assert [show(e) for e in c.out_splits] == ["2", "3"]  # a computed list's length is known at expansion only


def test_barrier():
    assert coll("barrier").op == "barrier" and coll("barrier").group is None
    c = coll("barrier in m.tp")
    assert c.inputs == c.outputs == () and c.group.text == "m.tp"


def test_async_collective_binds_a_handle():
    c = coll("h = all_gather x into y in g")
    assert c.handle.name == "h" and not c.blocking and c.op == "all_gather"


# ---- control ----------------------------------------------------------------------------------------


def test_for():
    f = stmt("for s in 0 .. world - 2:\n    barrier\n    let k = s\n")
    assert isinstance(f, n.For) and f.var == "s"
    assert (show(f.lo), show(f.hi)) == ("0", "(- world 2)")
    assert [type(s) for s in f.body] == [n.Collective, n.Let]


def test_on_else_on_else():
    o = stmt("on rank == 0:\n    barrier\nelse on rank == 1:\n    barrier\n    barrier\nelse:\n    let a = 1\n")
    assert isinstance(o, n.On) and len(o.branches) == 2
    assert [show(b.cond) for b in o.branches] == ["(== rank 0)", "(== rank 1)"]
    assert [len(b.body) for b in o.branches] == [1, 2]
    assert [type(s) for s in o.orelse] == [n.Let]
    bare = stmt("on rank < 2 and world > 2:\n    barrier\n")
    assert bare.orelse == () and show(bare.branches[0].cond) == "(and (< rank 2) (> world 2))"


def test_nested_blocks():
    f = stmt("for s in 0 .. 1:\n    on s == 0:\n        batch:\n            send x to 1\n    barrier\n")
    on, barrier = f.body
    assert isinstance(on.branches[0].body[0], n.Batch) and isinstance(barrier, n.Collective)


# ---- expect and print -------------------------------------------------------------------------------


@pytest.mark.parametrize("cmp", ["==", "!=", "<", "<=", ">", ">="])
def test_expect(cmp):
    e = stmt(f"expect x[0:2] {cmp} world * (world + 1) / 2\n")
    assert isinstance(e, n.Expect) and e.cond.op == cmp
    assert show(e.cond.left) == "x[0:2]" and show(e.cond.right) == "(/ (* world (+ world 1)) 2)"


def test_print():
    p = stmt("print x, y.chunk(rank, world)\n")
    assert isinstance(p, n.Print) and [show(v) for v in p.views] == ["x", "y.chunk(rank, world)"]


# ---- expressions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, tree", [
    ("1 + 2 * 3", "(+ 1 (* 2 3))"),
    ("(1 + 2) * 3", "(* (+ 1 2) 3)"),
    ("a - b - c", "(- (- a b) c)"),
    ("a / b // c % d", "(% (// (/ a b) c) d)"),
    ("-a + +b", "(+ (- a) (+ b))"),
    ("2 ** 3 ** 2", "(** 2 (** 3 2))"),
    ("-2 ** 2", "(- (** 2 2))"),
    ("a < b + 1", "(< a (+ b 1))"),
    ("not a == b and c or d", "(or (and (not (== a b)) c) d)"),
    ("a or b or c", "(or (or a b) c)"),
    ("min(a, max(b, 3))", "min(a, max(b, 3))"),
    ("m.tp.size * g.rank", "(* m.tp.size g.rank)"),
    ("x.chunk(k, p)[1:][0]", "x.chunk(k, p)[1:][0]"),
    ("x[:n]", "x[:n]"),
    ("x[:]", "x[:]"),
    ("x.size // x.rows", "(// x.size x.rows)"),
    ("true", "True"),
    ("false", "False"),
    ("1.5e3", "1500.0"),
    ("2e-3", "0.002"),
    ("007", "7"),
    # the integer operators, bound as in Python: | loosest, then ^, &, shifts, all tighter than comparisons
    ("a | b ^ c & d", "(| a (^ b (& c d)))"),
    ("a & b | c ^ d", "(| (& a b) (^ c d))"),
    ("1 << k + 1", "(<< 1 (+ k 1))"),
    ("a >> 1 << 2", "(<< (>> a 1) 2)"),
    ("rank ^ 1 << s", "(^ rank (<< 1 s))"),
    ("rank & mask == 0", "(== (& rank mask) 0)"),
    ("a < b << 1", "(< a (<< b 1))"),
    ("a <= b >> 1", "(<= a (>> b 1))"),
    ("a ^ b ^ c", "(^ (^ a b) c)"),
    ("log2(world) - 1", "(- log2(world) 1)"),
])
def test_expressions(text, tree):
    assert show(expr(text)) == tree


def test_literal_node_types():
    assert isinstance(expr("3"), n.IntLit) and isinstance(expr("3.0"), n.FloatLit)
    assert isinstance(expr("true"), n.BoolLit) and isinstance(expr("rank"), n.Name)


def test_line_continuation_and_comments():
    s = stmt("# header comment\n\nlet a = 1 + \\\n    2   # trailing\n\n# done\n")
    assert show(s.value) == "(+ 1 2)"


# ---- spans ------------------------------------------------------------------------------------------


def where(node) -> tuple[int, int, int, int]:
    s = node.span
    return s.line, s.column, s.end_line, s.end_column


def test_spans_of_a_send_and_its_parts():
    text = "tensor x: float32[4]\nfor s in 0 .. 3:\n    send x[1:3] to (rank + 1) % world tag s in g\n"
    tensor, loop = parse(text).body
    send = loop.body[0]
    assert where(tensor) == (1, 1, 1, 21) and where(tensor.dtype) == (1, 11, 1, 18)
    assert where(send) == (3, 5, 3, 49)
    assert where(send.buffer) == (3, 10, 3, 16)
    assert where(send.peer) == (3, 20, 3, 38)          # from `(` of `(rank + 1)` to the end of `world`
    assert where(send.peer.left) == (3, 21, 3, 29)     # `rank + 1`, inside its parentheses
    assert where(send.tag) == (3, 43, 3, 44)
    assert where(send.group) == (3, 45, 3, 49)         # `in g`
    assert where(loop) == (2, 1, 3, 49)


def test_spans_of_a_collective_with_handle_and_op():
    c = stmt("h = all_reduce x op premul_sum(0.5) in m.tp\n")
    assert where(c) == (1, 1, 1, 44) and where(c.handle) == (1, 1, 1, 2)
    assert where(c.redop) == (1, 18, 1, 36) and where(c.redop.name) == (1, 21, 1, 31)
    assert where(c.group) == (1, 37, 1, 44)


def test_spans_of_an_expression_chain():
    e = expr("a + b * c")  # `let v = ` is 8 characters
    assert where(e) == (1, 9, 1, 18) and where(e.right) == (1, 13, 1, 18) and where(e.left) == (1, 9, 1, 10)


def test_spans_use_lines_and_columns_after_crlf_and_tabs():
    body = parse("world 2\r\nlet a = 1\r\n").body
    assert where(body[1]) == (2, 1, 2, 10)
    # a tab is expanded to the next multiple of 8 before columns are counted
    loop = stmt("for s in 0 .. 1:\n\tbarrier\n")
    assert where(loop.body[0]) == (2, 9, 2, 16)


# ---- syntax diagnostics -----------------------------------------------------------------------------


def test_s001_unexpected_token():
    d = syntax_error("world 2\nlet a = = 1\n")
    assert d.code == "S001" and (d.span.line, d.span.column) == (2, 9)
    assert d.message == "expected an expression, found `=`"
    assert "$END" not in d.message and "_NL" not in d.message


def test_s001_names_what_was_expected_in_words():
    d = syntax_error("barrier x\n")
    assert d.code == "S001" and d.message == "expected `in` or end of line, found `x`"
    d = syntax_error("barrier\n    barrier\n")
    assert d.code == "S001" and d.message == "expected a statement, found an unexpected indent"
    assert (d.span.line, d.span.column) == (2, 5)


def test_s002_unexpected_character():
    d = syntax_error("world 2\nlet a = 1 @ 2\n")
    assert d.code == "S002" and (d.span.line, d.span.column, d.span.end_column) == (2, 11, 12)
    assert d.message == "unexpected character `@`"


def test_s003_inconsistent_dedent():
    d = syntax_error("for s in 0 .. 3:\n    barrier\n  barrier\n")
    assert d.code == "S003" and (d.span.line, d.span.column) == (3, 1)


def test_s004_unexpected_end_of_file():
    d = syntax_error("world 2\non rank == 0:")
    assert d.code == "S004" and (d.span.line, d.span.column) == (2, 14)  # just after the last character
    assert d.label == "expected an indented block"
    d = syntax_error("for s in 0 .. 1:\n\n# the body never comes\n")
    assert d.code == "S004" and (d.span.line, d.span.column) == (3, 23)


@pytest.mark.parametrize("text, line, column", [
    ("for s in 0 .. 3\n    barrier\n", 1, 16),
    ("on rank == 0\n    barrier\n", 1, 13),
    ("batch\n    send x to 1\n", 1, 6),
    ("coalesced\n    all_reduce x\n", 1, 10),
    ("on rank == 0:\n    barrier\nelse\n    barrier\n", 3, 5),
    ("on rank == 0:\n    barrier\nelse on rank == 1\n    barrier\n", 3, 18),
    ("world 2\nfor s in 0 .. 1:\n    for t in 0 .. 1\n        barrier\n", 3, 20),
    ("world 2\ndef f(x, peer)\n    send x to peer\n", 2, 15),
    ("def f()\n    barrier\n", 1, 8),
])
def test_s005_missing_colon(text, line, column):
    d = syntax_error(text)
    assert d.code == "S005" and (d.span.line, d.span.column) == (line, column)
    assert d.help == "a block header ends with `:`"


@pytest.mark.parametrize("text, line, column", [
    ("send x\n", 1, 7),
    ("isend x.chunk(0, 2)\n", 1, 20),
    ("h = isend x[1:2]\n", 1, 17),
    ("send x tag 1\n", 1, 8),
    ("world 2\ntensor x: float32[4]\nfor s in 0 .. 1:\n    send x\n", 4, 11),
])
def test_s006_send_without_destination(text, line, column):
    d = syntax_error(text)
    assert d.code == "S006" and (d.span.line, d.span.column) == (line, column)


@pytest.mark.parametrize("text, line, column", [
    ("recv x\n", 1, 7),
    ("irecv x[0]\n", 1, 11),
    ("h = irecv x\n", 1, 12),
    ("recv x tag 1\n", 1, 8),
    ("world 2\nbatch:\n    recv x\n", 3, 11),
])
def test_s007_recv_without_source(text, line, column):
    d = syntax_error(text)
    assert d.code == "S007" and (d.span.line, d.span.column) == (line, column)


def test_named_mistakes_do_not_name_unrelated_lines():
    """match_examples classes are keyed by LALR state: a state every NAME shares must not be one of them."""
    for text in ("send x 1\n", "recv x 0\n", "let a = b 1\n", "x = a tag 1\n", "broadcast x tag 1\n"):
        assert syntax_error(text).code == "S001", text


# ---- no input gets a traceback ----------------------------------------------------------------------

MB = 1 << 20
NASTY = {
    "empty file": "",
    "only a newline": "\n",
    "only comments": "# one\n   # two, indented\n#\n",
    "only whitespace": "  \t \n\n   \n",
    "tabs": "for s in 0 .. 1:\n\tbarrier\n        barrier\n",
    "mixed tabs and spaces": "for s in 0 .. 1:\n    barrier\n\tbarrier\n",
    "crlf line endings": "program p\r\nworld 2\r\ntensor x: float32[4]\r\nfor s in 0 .. 1:\r\n    barrier\r\n",
    "lone cr": "world 2\rbarrier\r",
    "no final newline": "world 2\nbarrier",
    "no final newline after a block": "for s in 0 .. 1:\n    barrier",
    "unicode identifier": "let größe = 1\n",
    "unicode in a comment": "# größe 😀\nbarrier\n",
    "emoji": "let a = 😀\n",
    "nul byte": "let a = 1\x00\n",
    "bom": "\ufeffworld 2\n",
    "deeply nested parentheses": "let a = " + "(" * 5000 + "1" + ")" * 5000 + "\n",
    "deeply nested expressions": "let a = " + "(1 + " * 1000 + "1" + ")" * 1000 + "\n",
    "deeply nested unary minus": "let a = " + "-" * 5000 + "1\n",
    "deeply nested blocks": "".join("    " * k + f"for s{k} in 0 .. 1:\n" for k in range(200)) + "    " * 200 + "barrier\n",
    "unclosed parenthesis": "let a = (((1\n",
    "a 1 MB comment line": "# " + "x" * MB + "\nbarrier\n",
    "a 1 MB name": "let " + "a" * MB + " = 1\n",
    "a 1 MB integer": "let a = " + "9" * MB + "\n",
    "a 1 MB line of spaces": " " * MB + "\n" + "barrier\n",
    "a 1 MB line of garbage": "$" * MB + "\n",
    "a 1 MB line, error at its end": "let a = 1" + " " * MB + "2\n",
    "keywords where names belong": "send send send\n",
    "keywords as names": "tensor all: float32[1]\nsend all to from\n",
    "dedent to nowhere": "for s in 0 .. 1:\n        barrier\n    barrier\n",
    "colon only": ":\n",
    "very long for range": "for s in 0 .. 99999999999999999999:\n    barrier\n",
}


@pytest.mark.parametrize("name", list(NASTY))
def test_no_input_gets_a_traceback(name):
    """Parse and resolve: a Module, a Program or syntax/name diagnostics — never any other exception."""
    text = NASTY[name]
    try:
        program = load(SourceFile("t.comm", text))
    except CommdslError as e:
        assert e.diagnostics and all(d.code[0] in "SN" and d.span is not None for d in e.diagnostics)
    else:
        assert isinstance(program.body, tuple) and program.path == "t.comm"


@pytest.mark.parametrize("name, code", [
    ("empty file", None), ("only comments", None), ("only whitespace", None), ("crlf line endings", None),
    ("no final newline", None), ("no final newline after a block", None), ("unicode in a comment", None),
    ("a 1 MB comment line", None), ("a 1 MB line of spaces", None), ("deeply nested parentheses", None),
    ("tabs", None),
    ("unicode identifier", "S002"), ("emoji", "S002"), ("nul byte", "S002"), ("bom", "S002"), ("lone cr", "S002"),
    ("a 1 MB line of garbage", "S002"),
    ("mixed tabs and spaces", "S001"), ("deeply nested expressions", "S001"), ("deeply nested unary minus", "S001"),
    ("deeply nested blocks", "S001"), ("keywords where names belong", "S001"), ("colon only", "S001"),
    ("a 1 MB line, error at its end", "S001"), ("dedent to nowhere", "S003"), ("unclosed parenthesis", "S001"), ("keywords as names", None),
    ("a 1 MB integer", "N121"),
])
def test_nasty_inputs_give_these_codes(name, code):
    try:
        parse(NASTY[name])
    except CommdslError as e:
        assert [d.code for d in e.diagnostics] == [code]
    else:
        assert code is None


def test_keywords_are_names_where_no_keyword_fits():
    """The lexer is contextual: `all` is a tensor after `tensor` and in `send all`, a keyword in `wait all`."""
    tensor, send = parse(NASTY["keywords as names"]).body
    assert tensor.name == "all" and show(send.buffer) == "all" and show(send.peer) == "from"
    assert stmt("wait all\n").all


def test_a_tab_counts_as_eight_columns():
    """`\\t` and eight spaces are the same indentation (tabs expand to multiples of 8, as in Python 2)."""
    loop = stmt(NASTY["tabs"])
    assert len(loop.body) == 2


def test_the_s002_for_a_unicode_name_points_at_the_character():
    d = syntax_error("world 2\nlet größe = 1\n")
    assert d.code == "S002" and (d.span.line, d.span.column) == (2, 7) and d.message == "unexpected character `ö`"


def test_error_at_the_end_of_a_1mb_line_has_the_right_column():
    d = syntax_error(NASTY["a 1 MB line, error at its end"])
    assert (d.span.line, d.span.column) == (1, 10 + MB)


def test_expected_tokens_read_as_one_list():
    """Multi-token classes (`+=` ... `/=`) are items of the list, not a nested "or" inside it."""
    d = syntax_error("x 1\n")
    assert d.message == (
        "expected `(`, `+=`, `-=`, `*=`, `/=`, `<<=`, `>>=`, `&=`, `|=`, `^=`, `.`, `=`, `[` or end of line, found `1`"
    )  # end of line: `f(x)` alone is a call


# ---- nodes are built unvalidated: each must be what its model accepts ------------------------------

def _validate_tree(node) -> int:
    """Validate `node` and every node and span below it against its annotations; the number validated."""
    if isinstance(node, tuple):
        return sum(_validate_tree(x) for x in node)
    if not dataclasses.is_dataclass(node):
        return 0
    assert validate(node) == node, f"{type(node).__name__} at {getattr(node, 'span', None)}"
    return 1 + sum(_validate_tree(getattr(node, f.name)) for f in dataclasses.fields(node))


def test_the_parser_builds_nodes_their_models_accept():
    """The transformer builds nodes unvalidated (start-up: docs/benchmarks.md); validated here, every node of
    every example has the types, tuples and collective kinds its annotations require."""
    parsed = 0
    for path in sorted(ROOT.glob("programs/**/*.comm")):
        source = SourceFile.read(path)
        try:
            module = to_ast(parse_tree(source), source)
        except CommdslError:
            assert path.parent.name == "bad", path  # only a bad example may fail to parse
            continue
        assert _validate_tree(module) > 10, path
        parsed += 1
    assert parsed > len(list(ROOT.glob("programs/*.comm")))


def test_the_built_parser_is_cached_privately_under_the_grammars_hash(tmp_path, monkeypatch):
    """Lark's own default cache is a predictable pickle in the shared temp directory; ours is the user's."""
    import os
    import stat

    from commdsl.syntax.parser import cache_file

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first, changed = cache_file("start: NAME"), cache_file("start: INT")
    assert first != changed  # a changed grammar never loads the old parser
    assert os.path.dirname(first) == str(tmp_path / "commdsl") == os.path.dirname(changed)
    assert stat.S_IMODE(os.stat(tmp_path / "commdsl").st_mode) == 0o700
    (tmp_path / "commdsl").chmod(0o777)  # writable by others: not used
    assert cache_file("start: NAME") is False
    (tmp_path / "commdsl").chmod(0o700)
    (tmp_path / "blocked").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))  # a file where the directory should be
    assert cache_file("start: NAME") is False


def test_new_group_is_a_statement_that_binds_a_name():
    s = stmt("g = new_group [0, 2]\n")
    assert isinstance(s, n.NewGroup) and s.name.name == "g" and [m.value for m in s.members] == [0, 2]
    s = stmt("g = new_group [2 * j for j in 0 .. world // 2 - 1]\n")
    (member,) = s.members
    assert isinstance(member, n.ListFor) and member.var == "j"
    (on,) = parse("on rank < 2:\n    g = new_group [0, 1]\n").body
    assert isinstance(on.branches[0].body[0], n.NewGroup)


def test_new_group_binds_a_plain_name_with_equals():
    for text in ("g.x = new_group [0, 1]\n", "g += new_group [0, 1]\n"):
        d = syntax_error(text)
        assert (d.code, d.span.line, d.span.column) == ("S001", 1, 1) and "new_group" in d.message
