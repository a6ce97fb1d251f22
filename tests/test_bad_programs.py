"""Each programs/bad fixture yields exactly the codes its header names, at the lines its markers name.

Header: `# codes: P201, P202`. Markers: a trailing `# error[P201]` (or `# warning[L701]`) on each
line where a primary span must start (rustc's `//~ ERROR`). The rendered text sits beside each
fixture as `.out`; `pytest --bless` regenerates it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics.render import render_text
from commdsl.resolve import load
from commdsl.rules.registry import CODES
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
BAD = sorted((ROOT / "programs" / "bad").glob("*.comm"))
GOOD = sorted((ROOT / "programs").glob("*.comm"))
MARKER = re.compile(r"#\s*(error|warning)\[([A-Z]\d{3})\]")


def _expected(path: Path) -> tuple[list[str], set[tuple[int, str]]]:
    lines = path.read_text().splitlines()
    header = re.match(r"#\s*codes:\s*(.*)", lines[0])
    assert header, f"{path.name}: first line must be `# codes: ...`"
    codes = [c.strip() for c in header.group(1).split(",") if c.strip()]
    marks = {(i, m.group(2)) for i, line in enumerate(lines, 1) for m in MARKER.finditer(line)}
    return codes, marks


def _lint(path: Path):
    rel = path.relative_to(ROOT).as_posix()
    source = SourceFile(rel, path.read_text())
    program = load(source)
    return source, check_program(program, CheckOptions(lints=True))


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_program_yields_exactly_its_codes(path: Path, bless: bool):
    codes, marks = _expected(path)
    source, diags = _lint(path)
    found = {(d.span.line, d.code) for d in diags}
    assert found == marks, f"{path.name}: expected {sorted(marks)}, got {sorted(found)}"
    assert sorted({c for _, c in marks}) == sorted(set(codes)), "header and markers disagree"
    severities = {d.code: d.severity for d in diags}
    for line, code in marks:
        word = MARKER.search(path.read_text().splitlines()[line - 1]).group(1)
        assert severities[code] == word
    rendered = "\n".join(render_text(d, {source.path: source}).plain for d in diags)
    golden = path.with_suffix(".out")
    if bless or not golden.exists():
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"{golden.name} is stale: run `pytest --bless` and review the diff"


def test_every_checker_code_has_a_fixture():
    covered = {code for path in BAD for _, code in _expected(path)[1]}
    checker_codes = {c for c in CODES if c[0] in "PCDRBLV"}
    assert checker_codes - covered == set(), "codes without a programs/bad fixture"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_programs_are_clean(path: Path):
    _, diags = _lint(path)
    errors = [f"{d.code} {d.span.line if d.span else ''}: {d.message}" for d in diags if d.severity == "error"]
    assert errors == []
