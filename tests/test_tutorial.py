"""docs/tutorial.md stays true: every program on the page is checked with lints on, and finds exactly the
codes of the ```text block that comes next (none where the next block is a program); its message lines are quoted
from what the checker prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics.render import render_plain
from commdsl.resolve import load
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", flags=re.S | re.M)


def programs() -> list[tuple[int, str, str]]:
    """(line, program, the ```text block that is the next block after it, or "") for every ```comm block."""
    blocks = [(m.group(1), DOC.count("\n", 0, m.start()) + 1, m.group(2)) for m in BLOCK.finditer(DOC)]
    found = []
    for k, (lang, line, text) in enumerate(blocks):
        if lang != "comm":
            continue
        after = blocks[k + 1] if k + 1 < len(blocks) else None
        found.append((line, text, after[2] if after is not None and after[0] == "text" else ""))
    return found


PROGRAMS = programs()


def test_the_page_walks_from_the_loop_to_the_ring_and_the_tree():
    names = [re.search(r"^program (\w+)", text, flags=re.M).group(1) for _, text, _ in PROGRAMS]
    assert names[0] == "one_to_many" and "ring_allreduce" in names and names[-1] == "tree_broadcast"


@pytest.mark.parametrize(("line", "text", "expected"), PROGRAMS, ids=[f"line{p[0]}" for p in PROGRAMS])
def test_every_program_finds_what_the_page_says(line, text, expected):
    program = load(SourceFile(f"tutorial.md:{line}", text))
    found = check_program(program, CheckOptions(bound=16, lints=True))
    assert sorted({d.code for d in found}) == sorted(set(re.findall(r"^\w+\[(\w+)\]", expected, flags=re.M)))
    printed = "\n".join(render_plain(d, {program.source.path: program.source}) for d in found)
    for quoted in expected.splitlines():
        if quoted.startswith(("error[", "warning[")) or quoted.strip().startswith(("= note", "= help")):
            assert quoted.strip() in printed
