"""Front-end bugs found while writing the language reference, one test each (grammar, parser, resolve, expand)."""

from __future__ import annotations

from commdsl.diagnostics import CommdslError
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.simulate import simulate
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import parse_tree
from commdsl.syntax.transform import to_ast


def program(text: str):
    return load(SourceFile("t.comm", text))


def errors(text: str, world: int | None = None) -> list[tuple[str, int, int]]:
    """(code, line, column) of every diagnostic that loading (and, given a world, expanding) gives."""
    try:
        prog = program(text)
        if world is not None:
            expand(prog, world)
    except CommdslError as e:
        return [(d.code, d.span.line, d.span.column) for d in e.diagnostics]
    return []


# `**` never lexed: MUL_OP's "*" matched first, so `2 ** 3` was "expected an expression, found `*`".
def test_power_operator_parses_right_associative():
    prog = program("let k = 2 ** 3 ** 2\n")
    value = prog.body[0].value
    assert isinstance(value, n.Binary) and value.op == "**"
    assert isinstance(value.right, n.Binary) and value.right.op == "**"


def test_power_values_per_rank_and_element_wise():
    text = ("world 2\nparam k = 2 ** 3 ** 2\ntensor x: float32[2 ** 2] = (i + 1) ** -1\n"
            "tensor y: int64[k // 128] = k\nexpect x == 1 / (i + 1)\nexpect y == 512\n")
    s = expand(program(text), 2)
    assert s.tensors[0]["x"].shape == (4,) and s.tensors[0]["y"].shape == (4,)
    result = simulate(s)
    assert len(result.expects) == 4 and all(e.ok for e in result.expects)


def test_power_too_large_or_complex_is_n121_not_a_hang():
    assert errors("world 2\nlet k = 10 ** 10 ** 10\n", 2) == [("N121", 2, 9)]
    assert errors("world 2\ntensor x: float32[4]\nlet k = (0 - 8) ** 0.5\nsend x[k] to 1\n", 2) == [("N121", 3, 9)]


def test_element_wise_power_needs_a_known_exponent():
    assert errors("world 2\ntensor x: float32[4] = 2 ** i\n", 2) == [("N103", 2, 29)]


# `splits [a], [b, c, d]` was cut in the middle of the flat list: in (a, b), out (c, d), no error.
def test_all_to_all_splits_keep_their_lists():
    prog = program("world 2\ntensor x: float32[4]\ntensor y: float32[4]\n"
                   "all_to_all x into y splits [1, 3], [2, 2]\n")
    op = prog.body[0]
    assert [e.value for e in op.in_splits] == [1, 3] and [e.value for e in op.out_splits] == [2, 2]


def test_all_to_all_split_lists_of_different_lengths_are_n107_on_the_splits():
    text = "world 2\ntensor x: float32[4]\ntensor y: float32[4]\nall_to_all x into y splits [4], [2, 1, 1]\n"
    assert errors(text) == [("N107", 4, 21)]


# Deep nesting overflowed Python's stack in the transformer or in resolve: "internal error: RecursionError".
def test_deep_nesting_is_s001_not_a_recursion_error():
    assert errors("let a = " + "-" * 5000 + "1\n") == [("S001", 1, 108)]  # the 100th `-`
    assert errors("let a = " + "(1 + " * 3000 + "1" + ")" * 3000 + "\n")[0][0] == "S001"
    assert errors("let a = " + " + ".join(["1"] * 2000) + "\n")[0][0] == "S001"
    blocks = "".join("    " * k + f"for s{k} in 0 .. 1:\n" for k in range(300)) + "    " * 300 + "barrier\n"
    assert errors(blocks)[0][0] == "S001"


def test_nesting_up_to_the_limit_goes_through_every_pass():
    text = ("world 2\ntensor x: float32[4] = " + "-" * 90 + "i\nexpect x == " + "-" * 90 + "i\n"
            + "".join("    " * k + f"for s{k} in 0 .. 0:\n" for k in range(40)) + "    " * 40 + "x += 1\n")
    result = simulate(expand(program(text), 2))
    assert [e.ok for e in result.expects] == [True, True]


# An integer literal over Python's 4300-digit str→int limit escaped the transformer as a ValueError.
def test_huge_integer_literal_is_n121():
    assert errors("let a = " + "9" * 5000 + "\n") == [("N121", 1, 9)]
    assert errors("world " + "9" * 5000 + "\n") == [("N121", 1, 7)]


# `world 2..99999999999` loaded, and `commdsl check` then built a list of every size in the range.
def test_world_size_over_the_limit_is_n112():
    assert errors("world 2..99999999999\n") == [("N112", 1, 1)]
    assert errors("world [2, 100000]\n") == [("N112", 1, 1)]
    assert errors("world 65536\n") == []


# An indented first line was accepted (`    barrier` alone), and `    x = 1\n    y = 2` blamed line 2.
def test_indented_first_line_is_s001_on_line_1():
    assert errors("    barrier\n") == [("S001", 1, 5)]
    assert errors("    let a = 1\n    let b = 2\n") == [("S001", 1, 5)]
    assert errors("# comment\n    barrier\n") == [("S001", 2, 5)]
    assert errors("   # an indented comment is fine\nbarrier\n") == []


# An assignment, expect or print under a `for` or `on` inside `batch` passed resolve; expand then put a
# Compute into the Batch and the engine failed ("'Compute' object has no attribute 'peer'").
def test_local_statements_nested_in_a_batch_are_n111():
    text = ("world 2\ntensor x: float32[4]\nbatch:\n    for s in 0 .. 0:\n        x = 1\n"
            "        send x to (rank + 1) % world\n    on rank == 0:\n        expect x == 1\n        print x\n"
            "    recv x from (rank + 1) % world\n")
    assert errors(text) == [("N111", 5, 9), ("N111", 8, 9), ("N111", 9, 9)]


# A `for`, `on` or `batch` span ran on over the blank and comment lines after the block, to the next
# statement (the `_NL` token swallows them), and an `on`'s first branch spanned the whole statement.
def test_block_spans_end_with_their_last_statement():
    prog = program("tensor x: float32[4]\nfor s in 0 .. 1:\n    on rank == 0:\n        barrier\n"
                   "    else:\n        barrier   # c\n\n# next\nbatch:\n    send x to 1\n\n")
    loop, batch = prog.body
    on = loop.body[0]
    assert (loop.span.line, loop.span.end_line, loop.span.end_column) == (2, 6, 16)
    assert (on.span.end_line, on.branches[0].span.end_line) == (6, 4)
    assert (batch.span.line, batch.span.end_line, batch.span.end_column) == (9, 10, 16)


# `else on COND` without `:` and `send x tag 1` (the peer forgotten before a tag) got the generic S001.
def test_more_named_syntax_mistakes():
    pre = "tensor x: float32[4]\n"
    assert errors(pre + "on rank == 0:\n    barrier\nelse on rank == 1\n    barrier\n") == [("S005", 4, 18)]
    assert errors(pre + "h = isend x tag 3\n") == [("S006", 2, 13)]
    assert errors(pre + "recv x tag 1\n") == [("S007", 2, 8)]
    assert errors(pre + "let b = x tag 1\n")[0][0] == "S001"  # only a send or recv names S006/S007


# A binary expression's span started at its left operand, inside that operand's parentheses:
# `(rank + 1) % world` was underlined as `rank + 1) % world`.
def test_binary_spans_include_the_parentheses_of_their_operands():
    src = "let v = ((a) + b) * (c) - min((d), e) + (f - (g))\n"
    value = to_ast(parse_tree(SourceFile("t.comm", src)), SourceFile("t.comm", src)).body[0].value
    found = []

    def walk(e):
        if isinstance(e, n.Binary):
            found.append(src[e.span.start:e.span.end])
            walk(e.left)
            walk(e.right)

    walk(value)
    assert found == ["((a) + b) * (c) - min((d), e) + (f - (g))", "((a) + b) * (c) - min((d), e)",
                     "((a) + b) * (c)", "(a) + b", "f - (g)"]
    assert errors("world 2\ntensor x: float32[4]\nsend x to (rank + 1) / 2\n", 2) == [("N121", 3, 11)]


# An expansion error carried the note "at world size 2", which hid the list of every failing size
# the checker merges into `worlds` (the text renderer skips that list when a note names a world size).
def test_expansion_errors_list_every_failing_world_size(tmp_path, capsys):
    from commdsl.cli.main import main

    path = tmp_path / "w.comm"
    path.write_text("world 2..\ngroup g = [0, 1, 2, 3, 4, 5, 6]\n")
    assert main(["check", str(path), "--max-world", "5", "--color", "never"]) == 1
    out = capsys.readouterr().out
    assert "= note: at world sizes 2, 3, 4 and 5\n" in out and "at world size 2\n" not in out


# `group g = [1, 0]` made rank 1 the group's rank 0, but torch's new_group sorts the ranks: the
# simulator put rank 1's block first in an all_gather and disagreed with the real run.
def test_an_explicit_group_is_ordered_by_global_rank():
    text = ("world 3\ngroup g = [2, 0]\ntensor x: float32[1] = rank\ntensor y: float32[2]\n"
            "tensor r: int64[1]\non rank != 1:\n    all_gather x into y in g\n    r = g.rank\n")
    s = expand(program(text), 3)
    assert s.groups[1].ranks == (0, 2)
    result = simulate(s)
    assert list(result.tensors[2]["y"]) == [0.0, 2.0] and list(result.tensors[2]["r"]) == [1]


# `rand(1) * 2` in an initialiser passed resolve, and the evaluator then failed with a ValueError:
# a seeded random initialiser is only ever the whole initialiser.
def test_random_initialiser_inside_an_expression_is_n103():
    assert errors("world 2\ntensor x: float32[4] = rand(1) * 2\n") == [("N103", 2, 24)]
    assert errors("world 2\ntensor x: float32[4] = min(randn(1), 0)\n") == [("N103", 2, 28)]
    assert errors("world 2\ntensor x: float32[4] = randn(rank)\n", 2) == []


# `group g = [a.size - 4]` (or a split key, mesh size or tensor shape using a tensor's size) passed
# resolve and ended in an internal KeyError: groups and shapes are settled before any tensor exists.
def test_a_group_or_shape_using_a_tensor_size_is_n103():
    pre = "world 2\ntensor a: float32[4]\n"
    assert errors(pre + "group g = [a.size - 4]\n") == [("N103", 3, 12)]
    assert errors(pre + "group g = split by a.rows\n") == [("N103", 3, 20)]
    assert errors(pre + "mesh m = (dp=a.rows // 2, tp=1)\n") == [("N103", 3, 14)]
    assert errors(pre + "tensor b: float32[a.size * 2]\n", 2) == [("N103", 3, 19)]  # shapes come first too
    assert errors(pre + "tensor b: float32[4] = a.size\n", 2) == []  # an initialiser may use it
