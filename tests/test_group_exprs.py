"""Groups as values: `G.peer(k)` (a member's global rank), groups built by `[E for j in LO .. HI]`, and
`table`s of integers. Each is evaluated by the expansion and compared with a hand computation; each misuse
is a diagnostic with its code and the place it points at."""

from __future__ import annotations

import pytest

from commdsl.diagnostics import CommdslError
from commdsl.emit.fmt import format_source
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.schedule import Compute, Send
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.validation import validate


def program(text: str):
    return load(SourceFile("t.comm", text))


def fmt(text: str) -> str:
    return format_source(SourceFile("t.comm", text))


def values(text: str, world: int) -> dict[int, list]:
    """Each rank's assigned constants, in order: `x = EXPR` with EXPR per rank folds to ("c", value)."""
    s = expand(program(text), world)
    return {r: [op.value[1] for op in s.ops[r] if isinstance(op, Compute)] for r in range(world)}


def errors(text: str, world: int | None = None) -> list[tuple[str, int, int, str]]:
    """(code, line, column, message) of what loading and expanding the program reports."""
    try:
        p = program(text)
        for w in [world] if world else p.world_sizes():
            expand(p, w)
    except CommdslError as err:
        return [(d.code, d.span.line, d.span.column, d.message) for d in err.diagnostics]
    return []


# ---- g.peer(k) -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4, 6, 8])
def test_peer_is_the_global_rank_of_a_member_of_each_ranks_group(world):
    tp = world // 2
    text = (
        "mesh m = (dp=2, tp=world // 2)\ngroup pairs = split by rank % 2\ngroup ends = [world - 1, 0]\n"
        "tensor x: int64[1]\n"
        "x = m.tp.peer((m.tp.rank + 1) % m.tp.size)\n"
        "x = m.dp.peer(0)\n"
        "x = pairs.peer(pairs.size - 1)\n"
        "on rank == 0 or rank == world - 1:\n    x = ends.peer(1 - ends.rank)\n"
    )
    got = values(text, world)
    for r in range(world):
        dp, t = divmod(r, tp)
        want = [dp * tp + (t + 1) % tp, t, (world - 2) + r % 2]  # pairs: every other rank, the last one
        if r in (0, world - 1):
            want.append(world - 1 - r)  # the other end: members are ordered by rank, as torch orders them
        assert got[r] == want, f"rank {r}"


def test_peer_addresses_a_ring_inside_each_group():
    text = (
        "world 6\ngroup g = split by rank // 3\ntensor x: int64[1] = rank\n"
        "batch:\n    send x to g.peer((g.rank + 1) % g.size) in g\n    recv x from g.peer((g.rank - 1) % g.size) in g\n"
    )
    s = expand(program(text), 6)
    for r in range(6):
        base = r // 3 * 3
        (batch,) = s.ops[r]
        send = next(op for op in batch.ops if isinstance(op, Send))
        assert send.peer == base + (r - base + 1) % 3


def test_a_member_index_out_of_range_names_the_index_and_the_group_size():
    text = "world 4\nmesh m = (dp=2, tp=2)\nlet a = m.tp.peer(m.tp.rank + 1)\n"
    ((code, line, col, msg),) = errors(text)
    assert (code, line, col) == ("N127", 3, 9)
    assert msg == "member index 2 is outside group `m.tp[0]`, which has 2 members"
    ((code, _, _, msg),) = errors("world 3\ngroup g = [0, 2]\nlet a = g.peer(0 - 1)\n")
    assert (code, msg) == ("N127", "member index -1 is outside group `g`, which has 2 members")


def test_peer_on_a_rank_outside_the_group_is_an_error_as_in_torch():
    ((code, line, col, msg),) = errors("world 3\ngroup g = [0, 2]\non rank == 1:\n    let a = g.peer(0)\n")
    assert (code, line, col) == ("N127", 4, 13)
    assert msg == "rank 1 is not in group `g`, so it has no `.peer` there"


@pytest.mark.parametrize(
    ("line", "code", "col"),
    [
        ("let a = x.peer(1)", "N103", 9),  # a tensor is not a group
        ("let a = g.peer", "N107", 9),  # not called
        ("let a = m.peer(0)", "N103", 9),  # a mesh, not one of its dimensions
        ("let a = m.pp.peer(0)", "N103", 9),
        ("let a = g.peer(0, 1)", "N107", 9),
        ("x = g.peer(i)", "N103", 12),  # the index varies per element
        ("let a = h.peer(0)", "N101", 9),
    ],
)
def test_misused_peer_is_a_diagnostic(line, code, col):
    text = f"world 4\ngroup g = [0, 2]\nmesh m = (dp=2, tp=2)\ntensor x: int64[1]\n{line}\n"
    assert [(c, ln, cl) for c, ln, cl, _ in errors(text)] == [(code, 5, col)]


# ---- group g = [E for j in LO .. HI] -----------------------------------------------------------------------------


def test_a_computed_group_parses_to_one_list_for_member():
    (g,) = program("group g = [2 * j + 1 for j in 0 .. world // 2 - 1]\n").groups
    (m,) = g.members
    assert isinstance(m, n.ListFor) and m.var == "j" and g.split_key is None
    assert validate(g) == g  # a valid node, as the parser builds it unvalidated


@pytest.mark.parametrize("world", [2, 4, 8])
def test_a_computed_group_has_the_members_its_expression_gives(world):
    text = (
        "group odds = [world - 1 - 2 * j for j in 0 .. world // 2 - 1]\ntensor x: int64[1]\n"
        "on rank % 2 == 1:\n    x = odds.size\n    x = odds.rank\n    x = odds.peer(0)\n"
    )
    s = expand(program(text), world)
    odds = tuple(range(1, world, 2))  # written from the top down, ordered by rank as torch orders them
    assert [g.ranks for g in s.groups if g.name == "odds"] == [odds]
    for r in odds:
        assert [op.value[1] for op in s.ops[r] if isinstance(op, Compute)] == [len(odds), odds.index(r), 1]


@pytest.mark.parametrize(
    ("members", "code", "col", "message"),
    [
        ("[j for j in 0 .. world]", "N127", 1, "group `g` names 5 ranks, more than the world's 4"),
        ("[j for j in 0 .. 10 ** 12]", "N127", 1, "group `g` names 1000000000001 ranks, more than the world's 4"),
        ("[j % 2 for j in 0 .. 3]", "N127", 1, "group `g` names rank 0 twice"),
        ("[j + 1 for j in 0 .. 3]", "N127", 1, "group `g` names rank 4, outside world 4"),
        ("[rank for j in 0 .. 1]", "N103", 12, "`rank` has no value here"),
        ("[j / 2 for j in 0 .. 1]", "N121", 12, "a group member must be an integer, but it is 0.5"),
        ("[x for j in 0 .. 1]", "N103", 12, "tensor `x` used where an integer known per rank is expected"),
    ],
)
def test_a_bad_computed_group_is_a_diagnostic(members, code, col, message):
    text = f"world 4\ntensor x: int64[1]\ngroup g = {members}\n"
    assert errors(text) == [(code, 3, col, message)]


def test_a_computed_group_round_trips_through_fmt():
    assert fmt("group g=[ 2*j for j in 0..world//2-1 ]\n") == "group g = [2 * j for j in 0 .. world // 2 - 1]\n"


# ---- table NAME = [...] -----------------------------------------------------------------------------------------


def test_a_table_parses_to_its_entries_and_is_a_valid_node():
    p = program("table t = [3, 1, world]\ntable u = [t[j] * 2 for j in 0 .. 2]\n")
    t, u = p.tables
    assert (t.name, len(t.entries), u.name) == ("t", 3, "u") and isinstance(u.entries[0], n.ListFor)
    for node in (t, u):
        assert validate(node) == node


@pytest.mark.parametrize("world", [4, 8])
def test_table_entries_are_read_per_rank_in_every_context(world):
    text = (
        "table stage_of = [j * 2 // world for j in 0 .. world - 1]\ntable w = [3, 1, 2]\n"
        "table twice = [2 * w[j] for j in 0 .. 2]\n"
        "group picked = [w[j] for j in 0 .. 2]\n"  # tables size groups
        "tensor x: int64[w[rank % 3]] = stage_of[rank]\n"  # and tensor shapes, and element expressions
        "x = twice[rank % 3]\n"
        "on stage_of[rank] == 1:\n    x = stage_of[world - 1 - rank]\n"
    )
    p = program(text)
    got = values(text, world)
    s = expand(p, world)
    assert [g.ranks for g in s.groups if g.name == "picked"] == [(1, 2, 3)]
    for r in range(world):
        stage = r * 2 // world
        assert s.tensors[r]["x"].shape == ((3, 1, 2)[r % 3],)
        assert got[r] == [2 * (3, 1, 2)[r % 3]] + ([1 - stage] if stage == 1 else []), f"rank {r}"


@pytest.mark.parametrize(
    ("line", "code", "col", "message"),
    [
        ("let a = w[rank]", "N120", 9, "index 3 is outside table `w`, which has 3 entries"),
        ("let a = w[0 - 1]", "N120", 9, "index -1 is outside table `w`, which has 3 entries"),
        ("let a = w[true]", "N121", 11, "a table index must be an integer, not a condition"),
        ("let a = w", "N103", 9, "`w` is a table, not a value"),
        ("x = w[i]", "N103", 7, "a table index works on integers known per rank, not on tensor elements"),
        ("table u = [rank]", "N103", 12, "`rank` has no value here"),
        ("table u = [j / 2 for j in 0 .. 1]", "N121", 12, "a table entry must be an integer, but it is 0.5"),
        ("table u = [j for j in 0 .. 100000]", "N133", 1, "table `u` has 100001 entries, over the limit of 65,536"),
        ("table w = [1]", "N102", 1, "`w` is declared twice"),
        ("param n = w[0]", "N103", 11, "a param's default cannot use a table"),
        ("table u = [m.tp.peer(0)]", "N103", 12, "params, tables and group members cannot use a group's attributes"),
        ("on rank == 0:\n    table u = [1]", "N106", 5, "`table` declarations belong at the top level"),
    ],
)
def test_a_misused_table_is_a_diagnostic(line, code, col, message):
    text = f"world 4\nmesh m = (dp=2, tp=2)\ntable w = [3, 1, 2]\ntensor x: int64[1]\n{line}\n"
    ((got_code, got_line, got_col, got_message),) = errors(text)
    assert (got_code, got_col, got_message) == (code, col, message)
    assert got_line == 5 + line.count("\n")


def test_a_table_round_trips_through_fmt():
    assert fmt("table  t=[3,1 ,2]\ntable u = [ t[j]*2 for j in 0..2 ]\n") == (
        "table t = [3, 1, 2]\ntable u = [t[j] * 2 for j in 0 .. 2]\n"
    )


# ---- compile: the script means what the simulator computed ------------------------------------------------------

RING_IN_PAIRS = """program ring_in_pairs
world 4
group pairs = split by rank // 2
group evens = [2 * j for j in 0 .. world // 2 - 1]
table bonus = [j * j for j in 0 .. world - 1]
tensor x: int64[1] = rank + bonus[rank]
tensor y: int64[1]
batch:
    send x to pairs.peer(1 - pairs.rank) in pairs
    recv y from pairs.peer(1 - pairs.rank) in pairs
expect y == (rank ^ 1) + bonus[rank ^ 1]
on rank % 2 == 0:
    all_reduce y in evens
    expect y == (1 + 1) + (3 + 9)                # what ranks 0 and 2 received
"""


@pytest.mark.gloo
@pytest.mark.timeout(300)
def test_compiled_peer_groups_and_tables_run_on_gloo(tmp_path, capfd, no_orphans):
    from test_compile import compile_to, run_script

    prog = tmp_path / "ring_in_pairs.comm"
    prog.write_text(RING_IN_PAIRS)
    code, text = compile_to(tmp_path, str(prog))
    assert code == 0
    assert "dist.get_global_rank(pairs, 1 - dist.get_rank(pairs))" in text
    assert "dist.new_group([2 * j for j in range(world // 2)])" in text
    assert "bonus = [j * j for j in range(world)]" in text
    proc = run_script(tmp_path / "out.py", 4, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("every expect holds") == 4
    # an index the checker would refuse fails in the script too, where Python alone would read t[-1]
    prog.write_text("program past_the_end\nworld 2\ntable t = [5]\nlet a = t[rank - 1]\n")
    code, text = compile_to(tmp_path, str(prog), "--no-check")
    assert code == 0 and "a = entry(t, rank - 1)" in text
    proc = run_script(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode != 0 and "index -1 is outside a table of 1 entries" in proc.stderr


def test_table_is_a_declaration_keyword_and_peer_an_attribute_when_highlighted():
    from pygments.token import Keyword, Name

    from commdsl.highlight import CommdslLexer

    tokens = {v: t for t, v in CommdslLexer().get_tokens("table t = [1]\nlet a = m.tp.peer(t[0])\n") if v.strip()}
    assert tokens["table"] is Keyword.Declaration and tokens["peer"] is Name.Attribute
