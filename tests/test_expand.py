"""`commdsl.expand`: each rank's concrete ops (`schedule.ops[rank]`) against what the program says for that rank,
computed by hand below (plain Python per rank), at world sizes 1–6; errors that stop some ranks only; the step
budget; per-rank tensor shapes and initialisers."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from commdsl.diagnostics import CommdslError
from commdsl.expand import expand
from commdsl.limits import MAX_COLLECTIVE_CALLS, MAX_OPS, MAX_WHILE_ITERATIONS
from commdsl.resolve import load
from commdsl.schedule import Batch, Collective, Compute, Recv, Send, Wait
from commdsl.simulate import initial_value, simulate
from commdsl.source import SourceFile

WORLDS = (1, 2, 3, 4, 5, 6)


def program(text: str):
    return load(SourceFile("t.comm", text))


def span_of(text: str, snippet: str):
    start = text.index(snippet)
    return SourceFile("t.comm", text).span(start, start + len(snippet))


def view(v) -> tuple:
    return (v.tensor, v.offset, v.shape)


def brief(op, rank_ops=None) -> tuple:
    """An op as the facts the tests compute by hand; a request id becomes the index of the op that posted it."""
    if isinstance(op, (Send, Recv)):
        word = ("send" if isinstance(op, Send) else "recv") if op.blocking or op.req is None else \
            ("isend" if isinstance(op, Send) else "irecv")
        group = None if op.group is None else op.group.ranks
        return (word, view(op.view), op.peer, op.tag, group)
    if isinstance(op, Batch):
        return ("batch",) + tuple(brief(o) for o in op.ops)
    if isinstance(op, Wait):
        posted = {getattr(o, "req", None): k for k, o in enumerate(rank_ops)}
        return ("wait all" if op.all else "wait",) + tuple(posted[q] for q in op.reqs)
    if isinstance(op, Collective):
        return (op.kind, op.group.ranks, tuple(map(view, op.inputs)), tuple(map(view, op.outputs)), op.root, op.redop)
    if isinstance(op, Compute):
        return ("=" if op.op == "=" else op.op, view(op.target), op.value)
    raise TypeError(op)


def ops_of(schedule, rank: int) -> list[tuple]:
    ops = schedule.ops[rank]
    return [brief(op, ops) for op in ops]


def split(rows: int, parts: int, k: int) -> tuple[int, int]:
    """torch.tensor_split's k-th of `parts` pieces of `rows` rows: (first row, row count)."""
    small, extra = divmod(rows, parts)
    return k * small + min(k, extra), small + (k < extra)


# ---- on / else on, loops with per-rank bounds, let, views ----------------------------------------------

BRANCHES = """\
world 1..6
tensor x: float32[6, 2] = rank
tensor y: float32[8]
let right = (rank + 1) % world
let left = (rank - 1) % world
on rank == 0:
    send x[1] to right tag 3
else on rank % 2 == 1:
    for s in 0 .. rank:
        recv y[s:s + 1] from left tag s
else:
    let k = world - 1 - rank
    send x.chunk(k, world) to 0
    x[rank:] = i + rank
"""


def branches_by_hand(world: int, r: int) -> list[tuple]:
    right, left = (r + 1) % world, (r - 1) % world
    if r == 0:
        return [("send", ("x", 2, (2,)), right, 3, None)]
    if r % 2 == 1:
        return [("recv", ("y", s, (1,)), left, s, None) for s in range(r + 1)]
    first, count = split(6, world, world - 1 - r)
    return [("send", ("x", 2 * first, (count, 2)), 0, 0, None),
            ("=", ("x", 2 * r, (6 - r, 2)), ("b", "+", ("i",), ("c", r), span_of(BRANCHES, "i + rank")))]


@pytest.mark.parametrize("world", WORLDS)
def test_on_branches_per_rank_loops_lets_and_views(world):
    s = expand(program(BRANCHES), world)
    for r in range(world):
        assert ops_of(s, r) == branches_by_hand(world, r), f"rank {r}"


def test_loop_bindings_are_each_ranks_own():
    s = expand(program(BRANCHES), 6)
    for r in (1, 3, 5):
        assert [op.bindings for op in s.ops[r]] == [(("s", k),) for k in range(r + 1)]


VIEWS = """\
world 1..6
tensor g: int64[world + 1, 3] = i
tensor v: float32[10]
let k = world - 1 - rank
let j = (rank * 2) % 3
recv g[rank][j:3] from (rank + 1) % world
send v.chunk(k, world)[0:1] to (rank + 1) % world tag rank
g[k + 1][j] = rank * 2
"""


@pytest.mark.parametrize("world", WORLDS)
def test_views_with_per_rank_indices(world):
    s = expand(program(VIEWS), world)
    for r in range(world):
        k, j = world - 1 - r, (r * 2) % 3
        first, count = split(10, world, k)
        want = [
            ("recv", ("g", 3 * r + j, (3 - j,)), (r + 1) % world, 0, None),
            ("send", ("v", first, (min(1, count),)), (r + 1) % world, r, None),
            ("=", ("g", 3 * (k + 1) + j, ()), ("c", r * 2)),
        ]
        assert ops_of(s, r) == want, f"rank {r}"


# ---- batches, handles, waits ----------------------------------------------------------------------------

BATCH = """\
world 1..6
tensor x: float32[4] = rank
tensor y: float32[4]
batch:
    on rank % 2 == 0:
        send x to (rank + 1) % world
    else:
        recv y from (rank - 1) % world
    for s in 0 .. rank % 3 - 1:
        irecv y[s] from 0 tag s
    send x[3] to 0 tag 9
"""


@pytest.mark.parametrize("world", WORLDS)
def test_batch_holds_each_ranks_own_ops_in_order(world):
    s = expand(program(BATCH), world)
    for r in range(world):
        first = ("send", ("x", 0, (4,)), (r + 1) % world, 0, None) if r % 2 == 0 else \
            ("recv", ("y", 0, (4,)), (r - 1) % world, 0, None)
        loop = [("recv", ("y", k, ()), 0, k, None) for k in range(r % 3)]  # irecv in a batch: posted with it
        assert ops_of(s, r) == [("batch", first, *loop, ("send", ("x", 3, ()), 0, 9, None))], f"rank {r}"


HANDLES = """\
world 1..6
tensor x: float32[2] = rank
tensor y: float32[2]
tensor z: float32[1]
h = isend x to (rank + 1) % world
on rank > 0:
    for s in 0 .. rank % 2:
        irecv y[s] from (rank - 1) % world tag s
    a = all_reduce z
wait h
isend x[0] to 0
wait all
"""


@pytest.mark.parametrize("world", WORLDS)
def test_handles_and_wait_all_name_each_ranks_own_requests(world):
    s = expand(program(HANDLES), world)
    for r in range(world):
        right, left = (r + 1) % world, (r - 1) % world
        want = [("isend", ("x", 0, (2,)), right, 0, None)]
        if r > 0:
            want += [("irecv", ("y", k, ()), left, k, None) for k in range(r % 2 + 1)]
            want += [("all_reduce", tuple(range(world)), (("z", 0, (1,)),), (("z", 0, (1,)),), None, "sum")]
        want += [("wait", 0), ("isend", ("x", 0, ()), 0, 0, None)]
        want += [("wait all",) + tuple(range(1, len(want) - 2)) + (len(want) - 1,)]
        assert ops_of(s, r) == want, f"rank {r}"
    req = s.requests
    for r in range(world):
        mine = [op.req for op in s.ops[r] if getattr(op, "req", None) is not None]
        assert sorted(np.flatnonzero(req.rank == r).tolist()) == sorted(mine)


# ---- groups: split by, mesh ----------------------------------------------------------------------------

GROUPS = """\
world [2, 4, 6]
tensor x: float32[6]
tensor t: int64[3]
group pairs = split by rank // 2
group firsts = [world - 1, 0]
mesh m = (dp=2, tp=world // 2)
all_reduce x in pairs
barrier in m.tp
all_reduce x op max in m.dp
t[m.tp.rank] = m.dp.rank + pairs.size
on rank == 0 or rank == world - 1:
    broadcast x[0:2] from world - 1 in firsts
send x[m.tp.rank] to (rank + 1) % world in m.dp
"""


@pytest.mark.parametrize("world", [2, 4, 6])
def test_groups_from_split_by_and_meshes(world):
    s = expand(program(GROUPS), world)
    tp = world // 2
    for r in range(world):
        pair = (2 * (r // 2), 2 * (r // 2) + 1)
        dp_i, tp_i = divmod(r, tp)
        tp_group = tuple(dp_i * tp + j for j in range(tp))
        dp_group = (tp_i, tp + tp_i)
        want = [
            ("all_reduce", pair, (("x", 0, (6,)),), (("x", 0, (6,)),), None, "sum"),  # in place: x is both
            ("barrier", tp_group, (), (), None, None),
            ("all_reduce", dp_group, (("x", 0, (6,)),), (("x", 0, (6,)),), None, "max"),
            ("=", ("t", tp_i, ()), ("c", dp_i + 2)),
        ]
        if r in (0, world - 1):
            want.append(("broadcast", (0, world - 1), (("x", 0, (2,)),), (("x", 0, (2,)),), world - 1, None))
        want.append(("send", ("x", tp_i, ()), (r + 1) % world, 0, dp_group))
        assert ops_of(s, r) == want, f"rank {r}"


@pytest.mark.parametrize("world", [1, 3, 5])
def test_split_by_at_odd_worlds_leaves_a_singleton(world):
    s = expand(program("tensor x: float32[1]\ngroup pairs = split by rank // 2\nall_reduce x in pairs\n"), world)
    assert s.ops[world - 1][0].group.ranks == (world - 1,)
    assert {op.group.ranks for ops in s.ops for op in ops} == {tuple(r for r in range(world) if r // 2 == k)
                                                             for k in range((world + 1) // 2)}


# ---- errors on some ranks ------------------------------------------------------------------------------

SOME_RANKS = """\
world 4
tensor x: float32[2]
send x[rank] to (rank + 1) % world
let q = 1 // rank
let z = 1 // (3 - rank)
"""


def test_an_error_on_some_ranks_stops_them_and_the_others_go_on():
    with pytest.raises(CommdslError) as e:
        expand(program(SOME_RANKS), 4)
    found = sorted((d.code, d.span, tuple(n.message for n in d.notes), d.worlds) for d in e.value.diagnostics)
    assert found == [
        # x[2] and x[3] are out of bounds: the note names the lowest failing rank
        ("N120", span_of(SOME_RANKS, "x[rank]"), ("on rank 2",), (4,)),
        # rank 0 went on, and fails at the next statement
        ("N122", span_of(SOME_RANKS, "1 // rank"), ("on rank 0",), (4,)),
        # `1 // (3 - rank)` fails on rank 3 only, which stopped at the first statement: no third error
    ]


def test_an_error_inside_a_loop_names_the_lowest_rank_it_stops_once():
    text = "world 5\ntensor x: float32[3]\nfor s in 0 .. 2:\n    send x[s + rank // 2] to 0\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 5)
    [d] = e.value.diagnostics
    # s = 1 stops rank 4 (index 3), then s = 2 stops ranks 2 and 3 (index 3): one diagnostic, the lowest rank
    assert (d.code, d.span, d.notes) == ("N120", span_of(text, "x[s + rank // 2]"), (d.notes[0],))
    assert d.notes[0].message == "on rank 2"


def test_a_schedule_without_errors_keeps_every_rank():
    s = expand(program(SOME_RANKS.replace("x[rank]", "x[rank % 2]").replace("1 // rank", "1 // (rank + 1)")
                       .replace("1 // (3 - rank)", "1 // (4 - rank)")), 4)
    assert [len(s.ops[r]) for r in range(4)] == [1, 1, 1, 1]


# ---- the step budget -----------------------------------------------------------------------------------

@pytest.mark.timeout(20)
@pytest.mark.parametrize("bound", ["1000000000", "rank * 1000000000"])
def test_the_step_budget_stops_a_huge_loop_at_its_span(bound):
    text = f"world 2\ntensor x: float32[1]\nfor s in 0 .. {bound}:\n    x = s\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 2)
    [d] = e.value.diagnostics
    loop = text[text.index("for"):]
    assert d.code == "N133" and d.span == span_of(text, loop.rstrip("\n"))
    assert f"{MAX_OPS:,}" in d.message and "at world 2" in d.message


def test_the_documented_step_budget_is_the_one_enforced():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text()
    stated = {int(x.replace(",", "")) for x in re.findall(r"more than ([\d,]+)\s+loop\s+steps", doc)}
    assert stated == {MAX_OPS}
    calls = {int(x.replace(",", "")) for x in re.findall(r"more than ([\d,]+)\s+calls\s+of\s+collectives", doc)}
    assert calls == {MAX_COLLECTIVE_CALLS}


@pytest.mark.timeout(30)
def test_the_collective_call_budget_stops_at_the_collective_before_any_simulation():
    # 65 all_reduces at world 65536: 4.3 M calls the simulator computes one member at a time (minutes)
    text = "world 65536\ntensor x: float32[4] = rank\nfor k in 0 .. 64:\n    all_reduce x op max\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 65536)
    [d] = e.value.diagnostics
    assert d.code == "N133" and d.span == span_of(text, "all_reduce x op max")
    assert f"over {MAX_COLLECTIVE_CALLS:,} collective calls at world 65536" in d.message
    # barriers move no data and cost the engine little: they do not count
    assert expand(program("world 65536\nfor k in 0 .. 64:\n    barrier\n"), 65536).num_ops == 65 * 65536


# ---- tensors: per-rank shapes and initialisers -------------------------------------------------------------

TENSORS = """\
world [2, 4, 6]
mesh m = (dp=2, tp=world // 2)
tensor a: float32[rank + 1] = m.tp.rank * 10 + i
tensor b: int64[m.tp.size, 2] = m.dp.rank - rank * i
tensor c: int32[3] = 7
"""


@pytest.mark.parametrize("world", [2, 4, 6])
def test_per_rank_shapes_and_initialisers_give_each_rank_its_own_values(world):
    s = expand(program(TENSORS), world)
    sim = simulate(s)
    tp = world // 2
    for r in range(world):
        want = {"a": (r % tp) * 10 + np.arange(r + 1), "b": (r // tp - r * np.arange(2 * tp)).reshape(tp, 2),
                "c": np.full(3, 7)}
        for name, values in want.items():
            spec = s.tensors[r][name]
            assert spec.shape == values.shape and spec.numel == values.size
            np.testing.assert_array_equal(sim.tensors[r][name], values)  # the simulator's path
            np.testing.assert_array_equal(initial_value(spec, r, world).reshape(values.shape), values)  # the runtime's


def test_a_failure_on_the_right_of_and_names_the_rank_it_fails_on():
    """Regression (found by ruff's F821): the failure's diagnostic was built after Python had unbound the
    `except ... as` name, so `commdsl check` crashed with a NameError."""
    text = "world 3\ntensor x: float32[1]\non rank > 0 and 4 // (rank - 1) == 0:\n    x = 1\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 3)
    [d] = e.value.diagnostics
    assert d.code == "N122" and d.span == span_of(text, "4 // (rank - 1)") and "on rank 1" in str(d.notes)


def test_slots_of_an_array_of_handles_differ_by_rank():
    """`h[(rank + k) % 3]`: each rank fills the slots in its own order; `wait h[j]` takes, on every rank, the
    request its slot j holds, and `wait all h` what is left of them."""
    text = ("world 3\ntensor x: float32[3, 2] = rank\ntensor y: float32[3, 2]\nfor k in 0 .. 2:\n"
            "    h[(rank + k) % 3] = isend x[k] to (rank + 1) % world tag k\n"
            "    recv y[k] from (rank - 1) % world tag k\nwait h[0]\nwait all h\n")
    s = expand(program(text), 3)
    for rank in range(3):
        ops = s.ops[rank]
        sends = [op for op in ops if isinstance(op, Send)]
        first, rest = [op for op in ops if isinstance(op, Wait)]
        k = (0 - rank) % 3  # the step that bound slot 0 on this rank
        assert first.reqs == (sends[k].req,)
        assert sorted(rest.reqs) == sorted(op.req for j, op in enumerate(sends) if j != k)


# ---- integer operators, log2, while (issue 13) --------------------------------------------------------------

BINOMIAL = """\
world 1..6
tensor x: float32[2]
let mask = 1
while mask < world:
    on rank < mask and rank + mask < world:
        send x to rank ^ mask tag log2(mask)
    else on rank >= mask and rank < 2 * mask:
        recv x from rank ^ mask tag log2(mask)
    mask <<= 1
let rounds = 0
let d = rank
while d > 0:                                  # a per-rank number of iterations: the bits of `rank`
    rounds += d & 1
    d >>= 1
x = rounds
"""


def binomial_by_hand(world: int, r: int) -> list[tuple]:
    ops, mask = [], 1
    while mask < world:
        if r < mask and r + mask < world:
            ops.append(("send", ("x", 0, (2,)), r ^ mask, mask.bit_length() - 1, None))
        elif mask <= r < 2 * mask:
            ops.append(("recv", ("x", 0, (2,)), r ^ mask, mask.bit_length() - 1, None))
        mask <<= 1
    return ops + [("=", ("x", 0, (2,)), ("c", bin(r).count("1")))]


@pytest.mark.parametrize("world", WORLDS)
def test_while_runs_each_ranks_own_iterations_and_carries_its_lets(world):
    s = expand(program(BINOMIAL), world)
    for r in range(world):
        assert ops_of(s, r) == binomial_by_hand(world, r), f"rank {r}"


@pytest.mark.timeout(60)
def test_a_while_that_never_ends_is_n133_at_its_condition():
    text = "world 2\ntensor x: float32[1]\nlet n = 0\nwhile n >= 0:\n    n += 1\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 2)
    [d] = e.value.diagnostics
    assert d.code == "N133" and d.span == span_of(text, "n >= 0")
    assert f"{MAX_WHILE_ITERATIONS:,} iterations" in d.message


@pytest.mark.parametrize("text, named", [
    ("let k = 0\nwhile k < 10:\n    x = 1\n", "an iteration left `k` as it was"),  # the body never moves `k`
    ("let k = 0\nwhile k < rank + 1:\n    k = k * 1\n", "an iteration left `k` as it was"),
    ("while 2:\n    barrier\n", "its condition reads no `let`"),
])
def test_a_while_whose_iteration_changes_nothing_stops_at_once(text, named):
    """The condition reads only its `let`s and constants: an iteration that leaves them as they were repeats
    forever, which is N133 after that one iteration, not after MAX_WHILE_ITERATIONS of them."""
    text = "world 2\ntensor x: float32[1]\n" + text
    with pytest.raises(CommdslError) as e:
        expand(program(text), 2)
    [d] = e.value.diagnostics
    assert d.code == "N133" and "never ends on rank 0 at world 2" in d.message and named in d.message
    assert d.span.line == text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith("while"))) + 1


@pytest.mark.parametrize("text, code, snippet, rank", [
    ("let s = 1 << (rank - 2)\n", "N121", "rank - 2", 0),          # a negative shift count, named
    ("let s = log2(rank + 1)\n", "N121", "log2(rank + 1)", 2),     # 3 is not a power of two
    ("let s = log2(rank - 1)\n", "N121", "log2(rank - 1)", 0),     # nor is -1
    ("let s = (rank / 2) ^ 1\n", "N121", "rank / 2", 1),           # 0.5: not an integer
])
def test_integer_operator_errors_name_the_value_and_the_rank(text, code, snippet, rank):
    full = "world 4\ntensor x: float32[1]\n" + text
    with pytest.raises(CommdslError) as e:
        expand(program(full), 4)
    [d] = e.value.diagnostics
    assert (d.code, d.span, d.notes[0].message) == (code, span_of(full, snippet), f"on rank {rank}")


def test_a_let_that_stops_some_ranks_keeps_its_value_for_the_rest():
    """Once a spurious N103 (`a` has no value here) on the ranks that went on."""
    text = "world 4\ntensor x: float32[1]\nlet a = 6 // (rank - 1)\nx = a\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 4)
    assert [(d.code, d.notes[0].message) for d in e.value.diagnostics] == [("N122", "on rank 1")]


CARRIED = """\
world 1..6
tensor x: int64[1]
let lo = 0
let acc = 0
for s in 0 .. rank:                            # per-rank bounds: rank + 1 iterations
    acc += s
on rank % 2 == 1:
    lo = 10 + rank
else on rank == 2:
    let lo = 99                                # a new `let`: the outer `lo` stays 0
    lo += 1
batch:
    acc *= 2
for s in 0 .. 1:                               # uniform bounds
    on s == 1:
        acc += 1
x = lo * 1000 + acc
"""


@pytest.mark.parametrize("world", WORLDS)
def test_a_reassigned_let_keeps_each_ranks_own_value_out_of_every_block(world):
    s = expand(program(CARRIED), world)
    for r in range(world):
        lo = 10 + r if r % 2 == 1 else 0
        acc = r * (r + 1) // 2 * 2 + 1
        assert ops_of(s, r) == [("=", ("x", 0, (1,)), ("c", lo * 1000 + acc))], f"rank {r}"


UNEVEN = """\
world 1..6
tensor x: float32[world * (world + 1) / 2]
tensor y: float32[world * (rank + 1)]
all_to_all x into y splits [j + 1 for j in 0 .. world - 1], [rank + 1 for j in 0 .. world - 1]
"""


@pytest.mark.parametrize("world", WORLDS)
def test_computed_splits_give_one_size_per_value_on_each_rank(world):
    s = expand(program(UNEVEN), world)
    for r in range(world):
        (op,) = s.ops[r]
        assert op.in_splits == tuple(range(1, world + 1)) and op.out_splits == (r + 1,) * world


@pytest.mark.parametrize("splits, snippet, label", [
    ("[1 for j in 0 .. world - 1], [1 for j in 0 .. world]", "all_to_all", "4 input sizes, 5 output sizes"),
    ("[1 for j in 0 .. rank], [1, 1, 1, 1]", "[1 for j in 0 .. rank]", "its bounds differ between ranks"),
])
def test_computed_splits_of_the_wrong_length_are_n107(splits, snippet, label):
    text = f"world 4\ntensor x: float32[4]\ntensor y: float32[4]\nall_to_all x into y splits {splits}\n"
    with pytest.raises(CommdslError) as e:
        expand(program(text), 4)
    [d] = e.value.diagnostics
    assert d.code == "N107" and text[d.span.start:].startswith(snippet) and label in d.label


def test_ops_in_a_while_loop_are_bound_to_the_lets_its_condition_reads():
    s = expand(program(BINOMIAL), 6)
    for r in range(6):
        sends = [op for op in s.ops[r] if isinstance(op, (Send, Recv))]
        assert [op.bindings for op in sends] == [(("mask", 1 << op.tag),) for op in sends]  # tag = log2(mask)
