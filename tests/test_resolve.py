"""Every syntax (S) and name/type/shape (N) diagnostic: a program that raises it, where it points, and
what `commdsl check` prints for it (exit 1, the caret under that place). Also: the AST models refuse
malformed nodes, `--set` mistakes, and a world size the program does not declare (N124)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pydantic import ValidationError

from commdsl.checker import CheckOptions, check_program
from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.rules.registry import CODES
from commdsl.source import SourceFile, Span
from commdsl.syntax import nodes as n
from commdsl.validation import adapter, validate


@dataclass(frozen=True)
class Case:
    text: str
    line: int | None  # where the primary span starts; None: the diagnostic has no span
    column: int | None
    args: tuple[str, ...] = ()  # extra `commdsl check` flags
    world: int | None = None  # the world size to expand at (default: every declared size)
    params: dict = field(default_factory=dict)
    seconds: float | None = None  # the check's time limit (`--max-time`)


X = "world 2\ntensor x: float32[4]\n"  # most cases start with this

CASES: dict[str, Case] = {
    # syntax
    "S001": Case("world 2\nlet a = = 1\n", 2, 9),
    "S002": Case("world 2\nlet a = 1 @ 2\n", 2, 11),
    "S003": Case("world 2\nfor s in 0 .. 1:\n    barrier\n  barrier\n", 4, 1),
    "S004": Case("world 2\non rank == 0:", 2, 14),
    "S005": Case("world 2\nfor s in 0 .. 1\n    barrier\n", 2, 16),
    "S006": Case(X + "send x\n", 3, 7),
    "S007": Case(X + "recv x\n", 3, 7),
    "S008": Case(X + "barrier\n" * 20_000, 20_001, 1),  # refused before parsing, so cheap
    # names, kinds, dtypes: decided once, without a world size
    "N101": Case(X + "send x to lfet\n", 3, 11),
    "N102": Case(X + "tensor x: float32[8]\n", 3, 1),
    "N103": Case(X + "send x to x\n", 3, 11),
    "N104": Case("world 2\ntensor x: flaot32[4]\n", 2, 11),
    "N105": Case(X + "all_reduce x op summ\n", 3, 17),
    "N106": Case("program p\nlet a = 1\nworld 2\n", 3, 1),
    "N107": Case(X + "send 3 to 1\n", 3, 6),
    "N108": Case(X + "h = send x to 1\n", 3, 5),
    "N109": Case(X + "expect x\n", 3, 8),
    "N110": Case("world 2\nbackend mpi\n", 2, 9),
    "N111": Case(X + "batch:\n    all_reduce x\n", 4, 5),
    "N112": Case("world 4..2\n", 1, 1),
    "N113": Case(X + "def f(k):\n    f(k - 1)\nf(3)\n", 4, 5),
    "N114": Case(X + "def f(v, peer):\n    send v to peer\nf(x)\n", 5, 1),
    "N115": Case(X + "coalesced:\n    broadcast x from 0\n", 4, 5),
    # sizes and values: decided per world size, at expansion
    "N120": Case(X + "send x[5] to 1 - rank\n", 3, 6),
    "N121": Case(X + "send x to (rank + 1) / 2\n", 3, 11),
    "N122": Case(X + "send x to rank % 0\n", 3, 11),
    "N123": Case(X + "tensor y: float32[3]\nx = y\n", 4, 5),
    "N124": Case("world 2\n", 1, 1, args=("--world", "3"), world=3),
    "N125": Case("world 2\nparam n = 4\n", None, None, args=("--set", "m=1"), params={"m": "1"}),
    "N126": Case("world 4\nmesh m = (dp=2, tp=3)\n", 2, 1),
    "N127": Case("world 2\ngroup g = [0, 5]\n", 2, 1),
    "N128": Case("world 2\ntensor x: float32[0 - 1]\n", 2, 1),
    "N129": Case(X + "on rank == 0:\n    h = isend x to 1\nelse:\n    irecv x from 0\nwait h\n", 7, 6),
    "N130": Case(X + "tensor y: int32[8]\nall_gather x into y\n", 4, 1),
    "N131": Case(X + "tensor y: float32[4]\nall_gather x into y\n", 4, 1),
    "N132": Case("world 64\ntensor huge: float64[2 ** 34]\n", 2, 1),
    "N133": Case("world 2\nfor s in 0 .. 1000000000:\n    barrier\n", 2, 1),
    "N134": Case(X + "for s in 0 .. 1000:\n    all_reduce x\n", 4, 5, args=("--max-time", "0.000001"), seconds=1e-6),
    "N135": Case(X + "tensor m: bool[4] = i == rank\nx = 1 - m\n", 4, 5),
    "N138": Case(X + "tensor u: uint8[4] = 0\nu = 256\n", 4, 5),
}

NOT_ABOUT_A_PROGRAM = {"N136", "N137"}  # topology and settings files: tests/test_predict.py, test_lint_settings.py
FRONT_END_CODES = sorted(c for c in CODES if c[0] in "SN" and c not in NOT_ABOUT_A_PROGRAM)


def test_every_syntax_and_name_code_has_a_case():
    assert sorted(CASES) == FRONT_END_CODES


def diagnostics(case: Case) -> list[Diagnostic]:
    """What the library reports for a case: load, then expand or check at its world sizes."""
    source = SourceFile("case.comm", case.text)
    try:
        program = load(source)
        if case.world is not None or case.params:
            expand(program, case.world or program.world_sizes()[0], case.params)
            return []
        return check_program(program, CheckOptions(max_seconds=case.seconds or CheckOptions.max_seconds))
    except CommdslError as e:
        return e.diagnostics


@pytest.mark.parametrize("code", FRONT_END_CODES)
def test_code_and_span(code):
    case = CASES[code]
    found = diagnostics(case)
    assert [d.code for d in found] == [code], [d.message for d in found]
    (d,) = found
    if case.line is None:
        assert d.span is None
    else:
        assert (d.span.line, d.span.column) == (case.line, case.column)
        assert d.span.path == "case.comm"
    assert d.message and not d.message[0].isupper() and not d.message.endswith(".")  # style.md (e)


def check_cli(text: str, args, tmp_path: Path, capsys) -> tuple[int, str, str]:
    path = tmp_path / "case.comm"
    path.write_text(text, encoding="utf-8")
    capsys.readouterr()
    rc = main(["check", str(path), "--color", "never", *args])
    out, err = capsys.readouterr()
    return rc, out.replace(str(path), "case.comm"), err


def caret(out: str, line: int) -> int:
    """The column of the first `^` under source line `line` in rustc-style text output."""
    rows = out.splitlines()
    for k, row in enumerate(rows):
        m = re.match(rf"^\s*{line} \| ", row)
        if m:
            for below in rows[k + 1:]:
                hit = re.match(r"^\s*\| ( *)\^", below)
                if hit:
                    return len(hit.group(1)) + 1
    raise AssertionError(f"no caret under line {line} in:\n{out}")


@pytest.mark.parametrize("code", FRONT_END_CODES)
def test_commdsl_check_prints_it_with_the_caret_in_place(code, tmp_path, capsys):
    case = CASES[code]
    rc, out, err = check_cli(case.text, case.args, tmp_path, capsys)
    assert rc == 1, err
    assert out.startswith(f"error[{code}]: ")
    assert "Traceback" not in out + err
    if case.line is not None:
        assert f"--> case.comm:{case.line}:{case.column}\n" in out
        assert caret(out, case.line) == case.column
    assert "Found 1 error." in err


def test_every_resolve_error_is_reported_at_once():
    text = "world 2\ntensor x: flaot32[4]\nsend x to lfet\nall_reduce x op summ\n"
    found = diagnostics(Case(text, 0, 0))
    assert sorted((d.code, d.span.line) for d in found) == [("N101", 3), ("N104", 2), ("N105", 4)]


def test_expansion_errors_name_the_world_size_and_rank():
    (d,) = diagnostics(CASES["N120"])
    assert d.worlds == (2,) and [note.message for note in d.notes] == ["on rank 0"]


def test_a_world_dependent_error_lists_the_failing_sizes_once():
    text = "world [2, 3, 5, 8]\nparam n = 12\ntensor x: float32[n / world]\n"  # 12 / 5 and 12 / 8 are not integers
    found = diagnostics(Case(text, 0, 0))
    assert [(d.code, d.worlds) for d in found] == [("N121", (5, 8))]


def test_help_and_label_of_an_undefined_name(tmp_path, capsys):
    text = "world 2\ntensor x: float32[4]\nlet left = (rank - 1) % world\nsend x to lfet\n"
    rc, out, _ = check_cli(text, [], tmp_path, capsys)
    assert rc == 1
    assert out == (
        "error[N101]: undefined name `lfet`\n"
        " --> case.comm:4:11\n"
        "  |\n"
        "4 | send x to lfet\n"
        "  |           ^^^^ not declared\n"
        "  |\n"
        "  = help: a name `left` exists\n\n"
    )


# ---- `--set` and the world size -------------------------------------------------------------------------


PARAMS = "world [2, 4]\nparam n = 4\ntensor x: float32[n] = 1\nall_reduce x\nexpect x == world\n"


def test_set_overrides_a_param(tmp_path, capsys):
    rc, out, err = check_cli(PARAMS, ["--set", "n=8"], tmp_path, capsys)
    assert rc == 0 and out == "" and "All checks passed" in err
    assert expand(load(SourceFile("p.comm", PARAMS)), 2, {"n": "8"}).tensors[0]["x"].shape == (8,)


def test_set_of_an_unknown_param_is_n125(tmp_path, capsys):
    rc, out, _ = check_cli(PARAMS, ["--set", "m=8"], tmp_path, capsys)
    assert rc == 1
    assert out.startswith("error[N125]: `--set m`: the program has no param `m`\n")
    assert "= note: its params: n" in out


def test_set_with_a_value_that_is_not_a_number_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "p.comm"
    path.write_text(PARAMS)
    with pytest.raises(SystemExit) as info:
        main(["check", str(path), "--set", "n=four"])
    assert info.value.code == 2
    assert "--set n=four: the value is not an integer, number or true/false" in capsys.readouterr().err


def test_a_bad_value_through_the_api_is_n125_at_the_param():
    with pytest.raises(CommdslError) as info:
        expand(load(SourceFile("p.comm", PARAMS)), 2, {"n": "four"})
    (d,) = info.value.diagnostics
    assert d.code == "N125" and (d.span.line, d.span.column) == (2, 1)


def test_a_param_that_makes_a_size_wrong_is_reported_at_its_use(tmp_path, capsys):
    rc, out, _ = check_cli(PARAMS, ["--set", "n=2.5"], tmp_path, capsys)
    assert rc == 1 and out.startswith("error[N121]: a tensor dimension must be an integer, but it is 2.5")
    assert "--> case.comm:3:19" in out


@pytest.mark.parametrize("world", [1, 3, 5])
def test_a_world_size_outside_the_declared_set_is_n124(world, tmp_path, capsys):
    with pytest.raises(CommdslError) as info:
        expand(load(SourceFile("p.comm", PARAMS)), world)
    (d,) = info.value.diagnostics
    assert d.code == "N124" and (d.span.line, d.span.column) == (1, 1)
    assert f"world size {world} is outside the program's declared sizes (2, 4)" == d.message
    rc, out, _ = check_cli(PARAMS, ["--world", str(world)], tmp_path, capsys)
    assert rc == 1 and out.startswith("error[N124]") and caret(out, 1) == 1


@pytest.mark.parametrize("world_line, inside, outside", [
    ("world 4", [4], [3, 5]),
    ("world 2..16", [2, 16], [1, 17]),
    ("world 2..", [2, 64, 1000], [1]),
    ("world [2, 4, 8]", [2, 8], [3, 16]),
])
def test_which_sizes_a_world_line_accepts(world_line, inside, outside):
    program = load(SourceFile("w.comm", world_line + "\n"))
    assert all(program.accepts(w) for w in inside) and not any(program.accepts(w) for w in outside)


def test_open_world_ranges_are_checked_up_to_max_world(tmp_path, capsys):
    program = load(SourceFile("w.comm", "world 2..\n"))
    assert program.world_sizes() == list(range(2, 65)) and program.world_sizes(bound=5) == [2, 3, 4, 5]
    text = "world 2..\ngroup g = [0, 1, 2, 3, 4, 5, 6]\n"  # names rank 6: wrong below world 7
    rc, out, _ = check_cli(text, ["--max-world", "5"], tmp_path, capsys)
    assert rc == 1 and "N127" in out and "at world sizes 2, 3, 4 and 5" in out


# ---- the AST models refuse malformed nodes ------------------------------------------------------


def span() -> Span:
    return SourceFile("t.comm", "send x to 1\n").span(0, 11)


def name(id_: str) -> n.Name:
    return n.Name(span=span(), id=id_)


def test_a_well_formed_node_builds_through_the_api():
    send = n.Send(span=span(), buffer=name("x"), peer=n.IntLit(span=span(), value=1))
    assert send.kind == "send" and send.blocking and send.tag is None


def test_a_node_missing_a_field_is_refused():
    with pytest.raises(TypeError, match="peer"):
        n.Send(span=span(), buffer=name("x"))  # type: ignore[call-arg]


def test_a_node_with_an_extra_field_is_refused():
    with pytest.raises(TypeError, match="root"):
        n.Send(span=span(), buffer=name("x"), peer=name("right"), root=name("r"))  # type: ignore[call-arg]


def test_a_child_of_the_wrong_kind_is_refused_by_validation():
    """Nodes are built unvalidated (commdsl/validation.py says why); `validate` checks one against its
    annotations with pydantic."""
    with pytest.raises(ValidationError) as info:
        validate(n.For(span=span(), var="s", lo=n.IntLit(span=span(), value=0), hi=name("k"), body=(name("x"),)))
    assert info.value.errors()[0]["type"] == "union_tag_invalid"
    with pytest.raises(ValidationError):
        validate(n.Assign(span=span(), target=name("x"), op="**=", value=name("y")))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        validate(n.Collective(span=span(), op="all_reduce_sum"))


def test_nodes_are_frozen_and_hashable():
    send = n.Send(span=span(), buffer=name("x"), peer=name("right"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        send.peer = name("left")  # type: ignore[misc]
    assert hash(send) == hash(dataclasses.replace(send)) and dataclasses.replace(send, tag=None) == send


def test_a_loaded_program_validates_to_itself():
    program = load(SourceFile.read(Path(__file__).resolve().parent.parent / "programs" / "ring_allreduce.comm"))
    assert validate(program) == program


def test_a_statement_union_validates_from_plain_data():
    data = dataclasses.asdict(n.Send(span=span(), buffer=name("x"), peer=name("right")))
    assert adapter(n.Stmt).validate_python(data).kind == "send"
    data["kind"] = "sned"
    with pytest.raises(ValidationError) as info:
        adapter(n.Stmt).validate_python(data)
    assert info.value.errors()[0]["type"] == "union_tag_invalid"


# ---- arrays of handles and batches bound to a handle ------------------------------------------------------

@pytest.mark.parametrize("body, code, line, column", [
    ("h[0] = isend x to 1\nh = isend x to 1\n", "N108", 4, 1),  # one name, both kinds of binding
    ("h = isend x to 1\nb[0] = batch:\n    send x to 1\nh[0] = all_reduce x\n", "N108", 6, 1),
    ("h[0] = isend x to 1\nwait h\n", "N108", 4, 6),  # an array waited without a slot
    ("h = isend x to 1\nwait h[0]\n", "N108", 4, 6),  # a single handle waited with one
    ("h = isend x to 1\nwait all h\n", "N108", 4, 10),  # `wait all h` takes an array
    ("wait all x\n", "N108", 3, 10),
    ("wait all hh\n", "N101", 3, 10),
    ("h[k] = isend x to 1\n", "N101", 3, 3),  # the slot is an integer expression in scope
    ("h[x] = isend x to 1\n", "N103", 3, 3),
    ("h[0] = isend x to 1\nwait h[i]\n", "N103", 4, 8),
    ("b[k] = batch:\n    send x to 1\n", "N101", 3, 3),
    ("batch:\n    h[0] = isend x to 1\n", "N111", 4, 5),  # an op in a batch has no handle of its own
    ("rank[0] = isend x to 1\n", "N102", 3, 1),
])
def test_handle_misuse(body, code, line, column):
    found = diagnostics(Case(X + body, line, column))
    assert [(d.code, d.span.line, d.span.column) for d in found] == [(code, line, column)], [d.message for d in found]


def test_slots_and_batch_handles_resolve_in_their_loops():
    text = X + ("tensor y: float32[2, 4]\nfor k in 0 .. 1:\n    h[k] = isend x to 1 - rank tag k\n    b[k] = batch:\n"
                "        recv y[k] from 1 - rank tag k\nfor j in 0 .. 1:\n    wait h[1 - j], b[j]\nwait all h\n")
    program = load(SourceFile("t.comm", text))
    assert check_program(program, CheckOptions()) == []


def test_a_slot_not_assigned_on_a_rank_names_the_slot():
    text = X + "on rank == 0:\n    h[1] = isend x to 1\nelse:\n    recv x from 0\nwait h[rank]\n"
    (d,) = diagnostics(Case(text, 7, 6))
    assert (d.code, d.span.line, d.span.column) == ("N129", 7, 6)
    assert d.message == "handle `h[0]` has no request on rank 0"


# ---- integer operators, log2 and while (issue 13) ---------------------------------------------------------


def where(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.span.line, d.span.column) for d in diagnostics(Case(text, 0, 0))]


@pytest.mark.parametrize("body, found", [
    ("x = rank ^ 1\n", []),                                   # per-rank operands fold to a constant
    ("x = x.size >> 1 | log2(x.rows)\n", []),                 # `.size` and `.rows` are one number per rank
    ("x = i ^ 1\n", [("N103", 3, 5)]),                        # `i` varies per element
    ("x = rank & x\n", [("N103", 3, 12)]),                    # so does a tensor
    ("x = 1 << log2(i + 1)\n", [("N103", 3, 15)]),
    ("x ^= 1\n", [("N103", 3, 1)]),                           # no element-wise integer operators
    ("expect x == (rank << 1) * 0\n", []),
])
def test_integer_operators_in_element_expressions(body, found):
    assert where("world 2\ntensor x: int64[4]\n" + body) == found


@pytest.mark.parametrize("body, found", [
    ("let d = 1\nwhile d < world:\n    d <<= 1\n", []),
    ("let d = 1\nwhile d < world:\n    while d < 4:\n        d += 1\n    d *= 2\n", []),  # nested whiles
    ("let d = 1\nd = d + 1\n", []),                                                        # its own block
    ("let d = 1\non rank == 0:\n    d = 2\n", []),
    ("let d = 1\nfor s in 0 .. 1:\n    d += s\n", []),
    ("let d = 1\nbatch:\n    while d < 2:\n        send x[0:2] to 1 - rank\n        recv x[2:4] from 1 - rank\n"
     "        d += 1\n", []),
    ("for s in 0 .. 1:\n    s = 2\n", [("N103", 4, 5)]),                                   # not a let
    ("let d = 1\nd = x\n", [("N103", 4, 5)]),                                              # a tensor's values
    ("on rank == 0:\n    let d = 2\nd = 3\n", [("N101", 5, 1)]),                            # out of its scope
])
def test_where_a_let_can_be_reassigned(body, found):
    assert where("world 2\ntensor x: float32[4]\n" + body) == found


SPLITS = "world 1..4\ntensor x: float32[world * 2]\ntensor y: float32[world * 2]\n"


@pytest.mark.parametrize("line, found", [
    ("all_to_all x into y splits [2 for j in 0 .. world - 1], [2 for j in 0 .. world - 1]\n", []),
    ("all_to_all x into y splits [j for j in 0 .. world - 1], [j for k in 0 .. world - 1]\n", [("N101", 4, 58)]),
    ("all_to_all x into y splits [x for j in 0 .. world - 1], [2 for j in 0 .. world - 1]\n", [("N103", 4, 29)]),
    ("all_to_all x into y splits [2 for rank in 0 .. 1], [2, 2]\n", [("N102", 4, 28)]),
])
def test_computed_splits_bind_their_variable_in_the_value_only(line, found):
    assert where(SPLITS + line) == found


# ---- groups made as steps (`new_group`) ---------------------------------------------------------------------------


def _findings(text: str) -> list[tuple[str, int]]:
    try:
        program = load(SourceFile("t.comm", "program t\n" + text))
    except CommdslError as e:
        return [(d.code, d.span.line) for d in e.diagnostics]
    return [(d.code, d.span.line) for d in check_program(program, CheckOptions(bound=8))]


def test_a_new_group_name_is_a_group_for_the_whole_program():
    text = X + "on rank == 0:\n    g = new_group [0, 1]\nelse:\n    g = new_group [0, 1]\nall_reduce x in g\n"
    assert _findings(text) == []
    assert _findings(X + "let g = 1\ng = new_group [0, 1]\n") == [("N102", 4)]  # the group name is program-wide
    assert _findings(X + "group g = [0, 1]\ng = new_group [0, 1]\n") == [("N102", 5)]
    assert _findings(X + "g = new_group [0, 1]\nsend x to g\n") == [("N103", 5)]


def test_new_group_cannot_be_part_of_a_batch():
    assert _findings(X + "batch:\n    g = new_group [0, 1]\n") == [("N111", 5)]


@pytest.mark.parametrize("body, column", [
    ("all_reduce x\n    broadcast x from 0\n", 5),  # torch runs it at once, not in the coalesced call
    ("all_reduce x\n    all_gather x into [y, y]\n", 5),  # the list form is not recorded either
    ("reduce_scatter [x, x] into y\n", 5),
    ("all_reduce x\n    all_reduce y in g\n", 18),  # another group than the first's
    ("h = all_reduce x\n", 5),  # its request's wait() raises
    ("all_reduce x\n    x = 1\n", 5),
    ("send x to 1\n", 5),
    ("for s in 0 .. 1:\n        all_reduce x\n", 5),
    ("batch:\n        send x to 1\n", 5),
])
def test_what_cannot_be_coalesced_is_n113(body, column):
    text = "program t\n" + X + "tensor y: float32[2]\ngroup g = [0, 1]\ncoalesced:\n    " + body
    with pytest.raises(CommdslError) as e:
        load(SourceFile("t.comm", text))
    found = [(d.code, d.span.column) for d in e.value.diagnostics if d.code == "N115"]
    assert found == [("N115", column)], [d.message for d in e.value.diagnostics]


def test_a_coalesced_block_of_one_kind_on_one_group_resolves():
    body = "coalesced:\n    all_reduce x in g\n    all_reduce y in g\n"
    assert _findings(X + "tensor y: float32[2]\ngroup g = [0, 1]\n" + body) == []


def test_a_group_used_before_a_rank_makes_it_is_n127_at_the_op():
    found = _findings(X + "all_reduce x in g\ng = new_group [0, 1]\n")
    assert found == [("N127", 4)]
    d = _diagnostics(X + "on rank == 0:\n    g = new_group [0, 1]\nbarrier in g\n")
    assert d.code == "N127" and d.message == "rank 1 uses group `g` before it makes it" and d.span.line == 6


def test_new_group_members_in_the_world_and_distinct():
    assert _findings(X + "g = new_group [0, 2]\n") == [("N127", 4)]
    assert _findings(X + "g = new_group [1, 1]\n") == [("N127", 4)]


def _diagnostics(text: str) -> Diagnostic:
    (d,) = check_program(load(SourceFile("t.comm", "program t\n" + text)), CheckOptions(bound=8))
    return d


def test_a_non_member_of_a_step_group_has_no_rank_or_size_there():
    text = X + "g = new_group [0]\non rank == 0:\n    let s = g.size + g.rank\n"
    assert _findings(text) == []
    d = _diagnostics(X + "g = new_group [0]\nlet s = g.size\n")
    assert (d.code, d.span.line, d.message) == ("N127", 5, "rank 1 is not in group `g`, so it has no `.size` there")
