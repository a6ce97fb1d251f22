"""`commdsl.rules.idioms`: each idiom lint (L701-L705) on a true positive, and on the near misses that must stay
silent (issue 12, item 7: trees, scatters, neighbour exchanges and results read on one rank were reported).

A line a finding must start on is marked `# <-` in the program; the helpers compare (code, line, severity).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from annotated import pinned_lint

from commdsl.checker import CheckOptions, check_program
from commdsl.resolve import load
from commdsl.rules.registry import CODES
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
IDIOMS = ("L701", "L702", "L703", "L704", "L705")


def lint(text: str, worlds: tuple[int, ...] | None = None):
    """The idiom findings of `commdsl lint` on a program (at its declared sizes, or at `worlds`)."""
    program = load(SourceFile("t.comm", text))
    return [d for d in check_program(program, CheckOptions(lints=True, worlds=worlds)) if d.code in IDIOMS]


def found(text: str, worlds: tuple[int, ...] | None = None) -> list[tuple[str, int, str]]:
    return sorted((d.code, d.span.line, d.severity) for d in lint(text, worlds))


def marked(text: str, code: str) -> list[tuple[str, int, str]]:
    """The (code, line, "warning") that the `# <-` markers ask for."""
    return [(code, n, "warning") for n, line in enumerate(text.splitlines(), 1) if "# <-" in line]


def assert_clean_of_lints(text: str, worlds: tuple[int, ...] | None = None) -> None:
    program = load(SourceFile("t.comm", text))
    diags = check_program(program, CheckOptions(lints=True, worlds=worlds))
    assert [(d.code, d.span.line) for d in diags] == [], "a near miss must be a correct program with no finding"


# ---- L701: a send loop that is a broadcast ------------------------------------------------------------------

STAR = """program star
world 3..5
tensor t: float32[4] = rank
on rank == 0:
    for dst in 1 .. world - 1:
        send t to dst    # <-
else:
    recv t from 0
"""


def test_l701_a_root_sending_one_buffer_to_every_rank_that_receives_it_in_place():
    assert found(STAR) == marked(STAR, "L701")
    [d] = lint(STAR)
    assert d.worlds == (3, 4, 5)
    assert d.label == "`t` to each other rank in turn, received into `t`"
    assert d.help.startswith("use `broadcast t from 0`")


def test_l701_two_broadcast_loops_in_a_row_are_two_findings():
    text = STAR.replace("tensor t: float32[4] = rank\n", "tensor t: float32[4] = rank\ntensor u: float32[2] = 0\n")
    text = text.replace("        send t to dst    # <-\nelse:\n    recv t from 0\n",
                        "        send t to dst    # <-\n    for dst in 1 .. world - 1:\n"
                        "        send u to dst    # <-\nelse:\n    recv t from 0\n    recv u from 0\n")
    assert found(text) == marked(text, "L701")


L701_NEAR_MISSES = {
    # a different slice to each rank: a scatter
    "scatter_of_slices": """world 3..4
tensor t: float32[world] = rank
tensor mine: float32[1]
on rank == 0:
    for dst in 1 .. world - 1:
        send t[dst : dst + 1] to dst
else:
    recv mine from 0
""",
    # a different buffer to each rank
    "different_buffers": """world 3
tensor a: float32[2] = rank
tensor b: float32[2] = rank + 1
tensor r: float32[2]
on rank == 0:
    send a to 1
    send b to 2
else:
    recv r from 0
""",
    # the receivers do different things with it: not one buffer on every rank
    "receivers_differ": """world 3
tensor t: float32[2] = rank
tensor u: float32[2]
tensor v: float32[2]
on rank == 0:
    send t to 1
    send t to 2
else on rank == 1:
    recv u from 0
else:
    recv v from 0
""",
    # a pipeline's sends: the stages take the message into their own input, and one passes it on
    "pipeline": """world 3
tensor x: float32[2] = rank
tensor y: float32[2]
on rank == 0:
    send x to 1
    send x to 2
    recv y from 2
else on rank == 1:
    recv y from 0
else:
    recv y from 0
    send y to 0
""",
    # every rank sends its piece to every other rank: an all_gather (L702's business, not a broadcast)
    "everyone_sends_to_everyone": """world 3..4
tensor x: float32[2] = rank
tensor all: float32[world, 2]
all[rank] = x
for r in 0 .. world - 1:
    on rank == r:
        for d in 0 .. world - 1:
            on d != r:
                send x to d
    else:
        recv all[r] from r
""",
    # a binomial tree: at 3 ranks it is rank 0 sending to 1 and then 2, but not at 4 to 8
    "binomial_tree": """world 3..8
tensor t: float32[4] = rank
for k in 0 .. 2:
    let step = 2 ** k
    on rank < step and rank + step < world:
        send t to rank + step
    else on rank >= step and rank < 2 * step:
        recv t from rank - step
""",
    # tagged sends, and a world of 2 where one send is no loop
    "tagged": STAR.replace("send t to dst    # <-", "send t to dst tag 1").replace("recv t from 0", "recv t from 0 tag 1"),
    "two_ranks": STAR.replace("world 3..5", "world 2"),
}


@pytest.mark.parametrize("name", [n for n in L701_NEAR_MISSES if n != "everyone_sends_to_everyone"])
def test_l701_near_misses_stay_silent(name):
    assert_clean_of_lints(L701_NEAR_MISSES[name])


def test_l701_is_not_an_all_gather():
    assert [d.code for d in lint(L701_NEAR_MISSES["everyone_sends_to_everyone"])] == ["L702"]


def test_l701_at_a_single_size_a_tree_that_is_a_star_there_is_one():
    """Only the sizes checked can show a program's shape: at 3 ranks alone the tree is rank 0's two sends."""
    tree = L701_NEAR_MISSES["binomial_tree"]
    assert [(d.code, d.span.line) for d in lint(tree, worlds=(3,))] == [("L701", 6)]
    assert lint(tree.replace("world 3..8", "world 3")) != []
    assert lint(tree, worlds=(3, 4)) == []


def test_l701_a_receiver_whose_receive_takes_another_message_is_no_broadcast():
    # rank 2's first receive from rank 0 is into y, so rank 0's loop does not deliver t into t there
    text = """world 3
tensor t: float32[2] = rank
tensor y: float32[2]
on rank == 0:
    recv y from 2
    for dst in 1 .. world - 1:
        send t to dst
else on rank == 2:
    send t to 0
    recv y from 0
    recv t from 0
else:
    recv t from 0
"""
    assert [d.code for d in lint(text)] == []


# ---- L702: a receive loop that is a gather ------------------------------------------------------------------

GATHER = """program many_to_one
world 3..4
tensor piece: float32[2] = rank
tensor all: float32[world, 2] = 0
on rank == 0:
    all[0] = piece
    for src in 1 .. world - 1:
        recv all[src] from src    # <-
else:
    send piece to 0
"""


def test_l702_a_root_receiving_each_rank_s_piece_into_its_block():
    assert found(GATHER) == marked(GATHER, "L702")
    [d] = lint(GATHER)
    assert d.help.startswith("use `gather piece into all to 0`")


def test_l702_when_every_rank_gathers_it_suggests_all_gather():
    [d] = lint(L701_NEAR_MISSES["everyone_sends_to_everyone"])
    assert (d.code, d.span.line) == ("L702", 11)
    assert d.help == "every rank receives the others' pieces this way: use `all_gather x into all`"


L702_NEAR_MISSES = {
    # the pieces in other blocks than their senders' ranks
    "permuted_blocks": GATHER.replace("recv all[src] from src    # <-", "recv all[world - src] from src"),
    # into different buffers
    "different_buffers": """world 3
tensor a: float32[2]
tensor b: float32[2]
tensor piece: float32[2] = rank
on rank == 0:
    recv a from 1
    recv b from 2
else:
    send piece to 0
""",
    # the senders send from different buffers
    "different_pieces": """world 3
tensor all: float32[world, 2]
tensor p: float32[2] = rank
tensor q: float32[2] = rank
on rank == 0:
    recv all[1] from 1
    recv all[2] from 2
else on rank == 1:
    send p to 0
else:
    send q to 0
""",
    # a binomial gather tree: a star at 3 ranks only
    "binomial_tree": """world 3..8
tensor all: float32[world, 2] = 0
all[rank] = rank
for k in 0 .. 2:
    let step = 2 ** k
    on rank % (2 * step) == step:
        send all[rank : min(rank + step, world)] to rank - step
    else on rank % (2 * step) == 0 and rank + step < world:
        recv all[rank + step : min(rank + 2 * step, world)] from rank + step
""",
}


@pytest.mark.parametrize("name", list(L702_NEAR_MISSES))
def test_l702_near_misses_stay_silent(name):
    assert_clean_of_lints(L702_NEAR_MISSES[name])


# ---- L703: a batch that is an all_to_all ---------------------------------------------------------------------

EXCHANGE = """program exchange
world 3..4
tensor src: float32[world, 2] = rank
tensor dst: float32[world, 2] = 0
dst[rank] = src[rank]
batch:    # <-
    for peer in 0 .. world - 1:
        on peer != rank:
            send src[peer] to peer
            recv dst[peer] from peer
"""


def test_l703_every_rank_sends_block_p_to_and_receives_block_p_from_each_rank_p():
    assert found(EXCHANGE) == marked(EXCHANGE, "L703")
    [d] = lint(EXCHANGE)
    assert d.help.startswith("use `all_to_all src into dst`")
    assert d.label == "block p of `src` to each other rank p, block p of `dst` from it"


L703_NEAR_MISSES = {
    # a halo exchange with both neighbours: every other rank at 3 ranks, never at more
    "halo_exchange": """world 3..6
tensor u: float32[4] = rank
tensor left_halo: float32[1]
tensor right_halo: float32[1]
let left = (rank - 1) % world
let right = (rank + 1) % world
batch:
    send u[0:1] to left
    send u[3:4] to right
    recv left_halo from left
    recv right_halo from right
""",
    # the same at 3 ranks only: its pieces are the edges of one buffer, not blocks by peer
    "halo_exchange_at_3": """world 3
tensor u: float32[3] = rank
tensor ghost: float32[3]
let left = (rank - 1) % world
let right = (rank + 1) % world
batch:
    send u[0:1] to left
    send u[2:3] to right
    recv ghost[0:1] from left
    recv ghost[2:3] from right
""",
    # the whole buffer to everyone: an all_gather
    "whole_buffer": """world 3..4
tensor x: float32[2] = rank
tensor all: float32[world, 2]
all[rank] = x
batch:
    for p in 0 .. world - 1:
        on p != rank:
            send x to p
            recv all[p] from p
""",
    # blocks that are not the peer's
    "shifted_blocks": EXCHANGE.replace("send src[peer] to peer", "send src[(peer + 1) % world] to peer")
                              .replace("batch:    # <-", "batch:"),
    # the receives into separate buffers
    "separate_buffers": """world 3
tensor src: float32[world, 2] = rank
tensor a: float32[2]
tensor b: float32[2]
let p = (rank + 1) % world
let q = (rank + 2) % world
batch:
    send src[p] to p
    send src[q] to q
    recv a from p
    recv b from q
""",
}


@pytest.mark.parametrize("name", list(L703_NEAR_MISSES))
def test_l703_near_misses_stay_silent(name):
    assert_clean_of_lints(L703_NEAR_MISSES[name])


# ---- L704: reduce then broadcast ------------------------------------------------------------------------------

def test_l704_reduce_then_broadcast_of_the_same_buffer_from_the_same_root():
    text = "world 2..4\ntensor x: float32[4] = rank\nreduce x to 0    # <-\nbroadcast x from 0\n"
    assert found(text) == marked(text, "L704")


def test_l704_names_the_reduce_op_and_group_in_its_rewrite():
    text = ("world 4\ngroup pairs = split by rank // 2\ntensor x: float32[4] = rank\n"
            "reduce x to rank - rank % 2 op max in pairs    # <-\nbroadcast x from rank - rank % 2 in pairs\n")
    assert found(text) == marked(text, "L704")
    assert lint(text)[0].help.startswith("use `all_reduce x op max in pairs`")


L704_NEAR_MISSES = {
    "another_buffer": "reduce x to 0\nbroadcast y from 0\n",
    # the root divides between the two: an average, which a bare `all_reduce x` is not
    "a_step_between": "reduce x to 0\non rank == 0:\n    x /= world\nbroadcast x from 0\n",
    "the_other_order": "broadcast x from 0\nreduce x to 0\n",
    "another_group": "reduce x to 0\non rank < 2:\n    broadcast x from 0 in low\n",
}


@pytest.mark.parametrize("name", list(L704_NEAR_MISSES))
def test_l704_near_misses_stay_silent(name):
    head = "world 4\ngroup low = [0, 1]\ntensor x: float32[4] = rank\ntensor y: float32[4] = rank\n"
    assert_clean_of_lints(head + L704_NEAR_MISSES[name])


# ---- L705: a collective's result overwritten unread -------------------------------------------------------------

def test_l705_a_result_no_rank_reads():
    text = "world 2..4\ntensor x: float32[4] = rank\nall_reduce x    # <-\nx = rank\n"
    assert found(text) == marked(text, "L705")
    [d] = lint(text)
    assert d.message == "the result of `all_reduce` is overwritten before it is read, on every rank"
    assert [(lab.span.line, lab.message) for lab in d.labels] == [(4, "overwritten here")]


def test_l705_a_reduce_whose_root_overwrites_its_result():
    text = "world 2..4\ntensor x: float32[4] = rank\nreduce x to 0    # <-\nx = rank\n"
    assert found(text) == marked(text, "L705")
    assert lint(text)[0].message == "the result of `reduce` on rank 0 is overwritten before it is read"


L705_NEAR_MISSES = {
    # a loss all-reduced every step and printed by rank 0 only: the others overwrite theirs, by design
    "read_on_one_rank": """world 2..4
tensor loss: float32[1] = 0
for step in 0 .. 2:
    loss = rank + step
    all_reduce loss
    on rank == 0:
        print loss
""",
    "all_gather_read_on_one_rank": """world 2..4
tensor x: float32[1, 2] = rank
tensor all: float32[world, 2]
for step in 0 .. 2:
    x = rank + step
    all_gather x into all
    on rank == 0:
        expect all[1] == 1 + step
""",
    # broadcast's root reads the all_reduce's result, the others' is replaced by the same value
    "broadcast_after": """world 2..4
tensor x: float32[4] = rank
all_reduce x
broadcast x from 0
expect x == world * (world - 1) / 2
""",
    # scatter's root never reads its own block; the others do
    "scatter_root": """world 2..4
tensor all: float32[world, 2] = i
tensor mine: float32[2]
for step in 0 .. 1:
    scatter all into mine from 0
    on rank != 0:
        expect mine[0] == rank * 2
""",
    # a reduce leaves no result off its root, a gather none off its root, a broadcast none on its root
    "reduce_non_root": """world 2..4
tensor x: float32[4] = rank
reduce x to 0
on rank == 0:
    expect x == world * (world - 1) / 2
else:
    x = 0
""",
    "gather_non_root": """world 2..4
tensor x: float32[2] = rank
tensor all: float32[world, 2] = 0
gather x into all to 0
on rank == 0:
    expect all[1] == 1
else:
    all = 0
""",
    "broadcast_root": "world 2..4\ntensor x: float32[4] = rank\nbroadcast x from 0\non rank != 0:\n    expect x == 0\nelse:\n    x = 5\n",
    # read by a later collective, an expect, a slice, a send; overwritten in part only
    "read_by_a_collective": "world 2..4\ntensor x: float32[4] = rank\nall_reduce x\nall_reduce x\nexpect x >= 0\n",
    "read_by_an_expect": "world 2..4\ntensor x: float32[4] = rank\nall_reduce x\nexpect x >= 0\nx = rank\n",
    "read_through_a_slice": ("world 2..4\ntensor x: float32[4] = rank\ntensor y: float32[1]\nall_reduce x\n"
                             "y = x[3:4]\nx = rank\nexpect y >= 0\n"),
    "read_by_a_send": ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4]\nall_reduce x\n"
                       "batch:\n    send x to 1 - rank\n    recv y from 1 - rank\nx = rank\nexpect y >= 0\n"),
    "overwritten_in_part": "world 2..4\ntensor x: float32[4] = rank\nall_reduce x\nx[0:2] = rank\nexpect x >= 0\n",
}


@pytest.mark.parametrize("name", list(L705_NEAR_MISSES))
def test_l705_near_misses_stay_silent(name):
    assert_clean_of_lints(L705_NEAR_MISSES[name])


# ---- the shipped programs ---------------------------------------------------------------------------------------

def test_shipped_programs_are_free_of_idiom_lints_but_the_tutorial_one():
    """programs/one_to_many.comm is the tutorial send loop that L701 exists for (its comment says so)."""
    hits = {}
    for path in sorted((ROOT / "programs").glob("*.comm")):  # their verdicts as tests/golden/lint pins them
        codes = sorted({d["code"] for d in pinned_lint(path) if d["code"] in IDIOMS})
        if codes:
            hits[path.name] = codes
    for path in sorted((ROOT / "programs" / "real").glob("*.comm")):
        source = SourceFile(path.relative_to(ROOT).as_posix(), path.read_text())
        codes = sorted({d.code for d in check_program(load(source), CheckOptions(lints=True)) if d.code in IDIOMS})
        if codes:
            hits[path.name] = codes
    assert hits == {"one_to_many.comm": ["L701"]}


def test_shape_lints_must_hold_at_every_size():
    assert [c for c in IDIOMS if CODES[c].every_world_from is not None] == ["L701", "L702", "L703"]
