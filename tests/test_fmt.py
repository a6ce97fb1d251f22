"""`commdsl fmt`: canonical, idempotent, comment-keeping, and never a change of meaning — checked on every
program in programs/, programs/bad/ and programs/real/ by comparing ASTs and per-rank Schedules."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.emit.fmt import _Exprs, format_source
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.schedule import Batch, Print
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import parse_tree
from commdsl.syntax.transform import to_ast

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").glob("*.comm")) + sorted((ROOT / "programs" / "bad").glob("*.comm")) \
    + sorted((ROOT / "programs" / "real").glob("*.comm"))
WORLD_BOUND = 64  # open ranges (`world 2..`) are expanded up to this size, as `commdsl check` does


def fmt(text: str, path: str = "t.comm") -> str:
    return format_source(SourceFile(path, text))


def codes(text: str, path: str) -> list[str] | None:
    """The diagnostic codes loading a program gives, or None if it loads."""
    try:
        load(SourceFile(path, text))
    except CommdslError as e:
        return sorted(d.code for d in e.diagnostics)
    return None


def plain(op):
    """An op with its spans dropped (and a print's labels without spaces): what it means, not where."""
    if type(op) is Batch:
        return dataclasses.replace(op, span=None, ops=tuple(plain(o) for o in op.ops))
    if type(op) is Print:
        return dataclasses.replace(op, span=None, texts=tuple("".join(t.split()) for t in op.texts))
    return dataclasses.replace(op, span=None)


def meaning(program, world: int):
    """Everything an expansion decides, or the diagnostic codes that stop it."""
    try:
        s = expand(program, world)
    except CommdslError as e:
        return sorted(d.code for d in e.diagnostics)
    tensors = [{k: dataclasses.replace(t, span=None) for k, t in r.items()} for r in s.tensors]
    return (s.program, s.params, s.backends, s.groups, tensors, [[plain(op) for op in ops] for ops in s.ops])


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_program_formats_without_changing_meaning(path):
    source = SourceFile.read(path)
    try:
        once = format_source(source)
    except CommdslError as e:  # a syntax fixture: fmt refuses with the parser's own diagnostic
        with pytest.raises(CommdslError) as parsed:
            to_ast(parse_tree(source), source)
        assert [d.code for d in e.diagnostics] == [d.code for d in parsed.value.diagnostics]
        return
    assert fmt(once, str(path)) == once
    assert codes(once, str(path)) == codes(source.text, str(path))
    if codes(once, str(path)) is not None:
        return
    before, after = load(source), load(SourceFile(str(path), once))
    assert unplaced(after) == unplaced(before)  # the same program at every world size, positions aside
    for world in before.world_sizes(WORLD_BOUND)[:2]:  # and, expanded, the same ops
        assert meaning(after, world) == meaning(before, world), f"world {world}"


def unplaced(program) -> dict:
    """A resolved program as data, without its source text and the spans that point into it: what formatting
    must not change (a check at every declared world size at once; expanding the largest, 1024, takes minutes)."""

    def strip(x):
        if dataclasses.is_dataclass(x):
            return {f.name: strip(getattr(x, f.name)) for f in dataclasses.fields(x) if f.name not in ("span", "source")}
        if isinstance(x, list | tuple):
            return [strip(v) for v in x]
        return x

    return strip(program)


def test_canonical_layout_and_comments():
    messy = (
        "# header\n"
        "program   t\n"
        "world [2,4]\n"
        "param n=4   # the size\n"
        "tensor x : float32[ n ]=rank+1\n"
        "tensor y: float32[n]\n"
        "let a = (rank+1)%world\n"
        "let b = ((a))\n"
        "let c = -(a*2) + 2**-1 - 1.50e3\n"
        "let e = not (a == 1) and (a < 2 or a > 3)\n"
        "for s in 0..world-2 :\n"
        "  send x[0:n//2] to a tag s\n"
        "    # deeper than the loop body\n"
        "  recv y[ : n-1] from (rank-1)%world\n"
        "\n"
        "\n"
        "  # about the else\n"
        "# at column 0\n"
        "on rank==0:\n"
        "        barrier\n"
        "else on rank == 1 :\n"
        "        all_reduce x op premul_sum(2.0) in g\n"
        "else:  # else\n"
        "        h = isend x to \\\n"
        "            1\n"
        "        wait h\n"
        "#tail"
    )
    assert fmt(messy) == (
        "# header\n"
        "program t\n"
        "world [2, 4]\n"
        "param n = 4  # the size\n"
        "tensor x: float32[n] = rank + 1\n"
        "tensor y: float32[n]\n"
        "let a = (rank + 1) % world\n"
        "let b = (a)\n"
        "let c = -(a * 2) + 2 ** -1 - 1.50e3\n"
        "let e = not (a == 1) and (a < 2 or a > 3)\n"
        "for s in 0 .. world - 2:\n"
        "    send x[0 : n // 2] to a tag s\n"
        "    # deeper than the loop body\n"
        "    recv y[: n - 1] from (rank - 1) % world\n"
        "\n"
        "    # about the else\n"
        "# at column 0\n"
        "on rank == 0:\n"
        "    barrier\n"
        "else on rank == 1:\n"
        "    all_reduce x op premul_sum(2.0) in g\n"
        "else:  # else\n"
        "    h = isend x to 1\n"
        "    wait h\n"
        "# tail\n"
    )


def test_aligned_trailing_comments_keep_their_column():
    text = "let a = 1          # one\nlet bb = 22        # two\nlet ccccccccccccccc = 333 # three\n"
    assert fmt(text) == "let a = 1          # one\nlet bb = 22        # two\nlet ccccccccccccccc = 333  # three\n"


def test_every_statement_form_round_trips():
    text = (
        "program forms\n"
        "world 2..\n"
        "backend gloo, nccl\n"
        "tensor x: float32[4] = rand(7)\n"
        "tensor s: int64[]\n"
        "tensor l: float32[8]\n"
        "group g = [0, 1]\n"
        "group halves = split by rank // 2\n"
        "mesh m = (dp=2, tp=world // 2)\n"
        "x.chunk(0, 2) += x[2:4]\n"
        "batch:\n"
        "    send x to 1 tag 3 in g\n"
        "    recv x[0] from 1\n"
        "h = irecv x from 0 in m.tp\n"
        "k = all_reduce x op premul_sum(0.5) in halves\n"
        "wait h, k\n"
        "broadcast x from 0 in g\n"
        "reduce x to 1 op min\n"
        "all_gather x into [l[0:4], l[4:8]]\n"
        "gather x into l to 0\n"
        "scatter [l[0:4], l[4:8]] into x from 1\n"
        "reduce_scatter l into x op avg\n"
        "all_to_all x into x splits [2, 2], [1, 3] in g\n"
        "barrier in g\n"
        "wait all\n"
        "expect x == min(i, 2) and true or not false\n"
        "print x, x[:2]\n"
    )
    assert fmt(text) == text


def test_parentheses_the_tree_needs_are_added():
    """An AST built by a program (no parentheses in any source) still prints to text that parses back to it."""
    source = SourceFile("t.comm", "let a = x * y\nlet b = p + q\nlet c = -z\n")
    product, total, neg = (s.value for s in to_ast(parse_tree(source), source).body)
    tree = dataclasses.replace(product, left=total)  # (p + q) * y
    assert _Exprs(source)(tree) == "(p + q) * y"
    power = n.Binary(span=neg.span, op="**", left=neg, right=total)  # (-z) ** (p + q)
    assert _Exprs(source)(power) == "(-z) ** (p + q)"


def test_integer_operators_and_while_round_trip():
    text = (
        "let mask = 1\n"
        "let p = rank ^ 1 << 2 | rank & 3 >> 1\n"
        "let q = (rank | 1) ^ (mask << 1)\n"
        "while (rank & mask) == 0 and mask < world:\n"
        "    mask <<= 1\n"
        "    mask ^= log2(mask)\n"
    )
    assert fmt(text) == text
    assert fmt("while mask<world :\n  mask>>=1\n") == "while mask < world:\n    mask >>= 1\n"


def test_computed_splits_round_trip():
    text = "all_to_all x into y splits [(j + 1) * 2 for j in 0 .. world - 1], [rank ^ 1 for k in 1 .. world]\n"
    assert fmt(text) == text
    assert fmt("all_to_all x into y splits [ j for j in 0..3 ], [1,1,1,1]\n") == (
        "all_to_all x into y splits [j for j in 0 .. 3], [1, 1, 1, 1]\n"
    )


def test_parentheses_an_integer_operator_needs_are_added():
    source = SourceFile("t.comm", "let a = x & y\nlet b = p | q\nlet c = u << v\n")
    conj, disj, shifted = (s.value for s in to_ast(parse_tree(source), source).body)
    assert _Exprs(source)(dataclasses.replace(conj, left=disj)) == "(p | q) & y"
    assert _Exprs(source)(dataclasses.replace(shifted, right=conj)) == "u << (x & y)"
    assert _Exprs(source)(dataclasses.replace(disj, right=shifted)) == "p | u << v"


def test_fmt_refuses_a_syntax_error():
    with pytest.raises(CommdslError) as e:
        fmt("program t\nsend x\n")
    assert [d.code for d in e.value.diagnostics] == ["S006"]


# ---- the command ----------------------------------------------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


MESSY = "program t\nworld 2\ntensor x:float32[4]=rank\non rank==0 :\n  send x to 1 # c\nelse:\n  recv x from 0\n"
CLEAN = ("program t\nworld 2\ntensor x: float32[4] = rank\non rank == 0:\n    send x to 1  # c\nelse:\n"
         "    recv x from 0\n")


def test_cli_check_diff_and_in_place(tmp_path, capsys):
    messy, clean = tmp_path / "messy.comm", tmp_path / "clean.comm"
    messy.write_text(MESSY)
    clean.write_text(CLEAN)
    code, out, err = run(capsys, "fmt", "--check", str(messy), str(clean))
    assert code == 1 and out == "" and f"would reformat {messy}" in err and messy.read_text() == MESSY
    code, out, _ = run(capsys, "fmt", "--diff", str(messy))
    assert code == 0 and messy.read_text() == MESSY
    assert out.startswith(f"--- {messy}\n+++ {messy} (formatted)\n")
    assert "\n-on rank==0 :\n" in out and "\n+on rank == 0:\n" in out
    code, _, err = run(capsys, "fmt", str(messy), str(clean))
    assert code == 0 and messy.read_text() == CLEAN and "1 file reformatted, 1 file left unchanged." in err
    assert run(capsys, "fmt", "--check", str(messy))[0] == 0


def test_cli_errors(tmp_path, capsys):
    bad = tmp_path / "bad.comm"
    bad.write_text("program t\nsend x\n")
    code, _, err = run(capsys, "fmt", str(bad))
    assert code == 1 and "error[S006]" in err and "cannot format" in err and bad.read_text() == "program t\nsend x\n"
    code, _, err = run(capsys, "fmt", str(tmp_path / "missing.comm"))
    assert code == 2 and "cannot read" in err


@pytest.mark.parametrize("text", [
    "world 2\ntensor x: float32[2]\nprint x \\\n\n(x)[0] = 1\n",  # a `\` continuation onto a blank line
    "world 2\ntensor x: float32[2]\nprint x\n(x)[0] = 1\n",
])
def test_a_parenthesis_that_starts_a_line_groups(text):
    """Found by the fuzzer: the first pass kept `(x)` and the second, reading `print x` on the line above,
    took the `(` for a call's and dropped it: fmt was not a fixed point."""
    from commdsl.source import SourceFile

    once = format_source(SourceFile("t.comm", text))
    assert format_source(SourceFile("t.comm", once)) == once
    assert once.endswith("print x\n(x)[0] = 1\n")
