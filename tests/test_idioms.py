"""`commdsl.rules.idioms`: each idiom lint (L701-L705) on a true positive, and on the near misses that must stay
silent (issue 12, item 7: trees, scatters, neighbour exchanges and results read on one rank were reported).

A line a finding must start on is marked `# <-` in the program; the helpers compare (code, line, severity).
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
tensor x: float32[2] = rank
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
