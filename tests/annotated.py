"""Annotated `.comm` fixtures: the diagnostics a program must yield, written into the program itself.

Used by programs/bad (one fixture per checker code) and programs/real (bugs from public issues).

Header: the first line is `# codes: P201, P202`. Markers: a trailing `# error[P201]` (or
`# warning[L701]`) on each line where a primary span must start (rustc's `//~ ERROR`); a line that
carries two findings carries two markers (`# error[C301] # error[C307]`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics.render import render_text
from commdsl.resolve import load
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"#\s*(error|warning)\[([A-Z]\d{3})\]")


def pinned_lint(path: Path) -> list[dict]:
    """The lint findings of a shipped program (programs/*.comm) as JSON, pinned in tests/golden/lint, which
    test_golden keeps equal to the checker's output: a test of a property of every shipped program's verdict
    reads them there rather than checking every program again (40-50 s each on a 2-core machine)."""
    return json.loads((ROOT / "tests" / "golden" / "lint" / f"{path.stem}.json").read_text())


def expected(path: Path) -> tuple[list[str], set[tuple[int, str]]]:
    """The header's codes and the (line, code) pairs the markers name."""
    lines = path.read_text().splitlines()
    header = re.match(r"#\s*codes:\s*(.*)", lines[0])
    assert header, f"{path.name}: first line must be `# codes: ...`"
    codes = [c.strip() for c in header.group(1).split(",") if c.strip()]
    marks = {(i, m.group(2)) for i, line in enumerate(lines, 1) for m in MARKER.finditer(line)}
    return codes, marks


def lint(path: Path, backends: tuple[str, ...] | None = None):
    """`commdsl lint` of one file, as (source, diagnostics); `backends` overrides the program's."""
    rel = path.relative_to(ROOT).as_posix()
    source = SourceFile(rel, path.read_text())
    program = load(source)
    return source, check_program(program, CheckOptions(lints=True, backends=backends))


def assert_marked(path: Path, diags) -> None:
    """The diagnostics are exactly the marked (line, code) pairs, with the marked severities, and the
    header names the same codes as the markers."""
    codes, marks = expected(path)
    found = {(d.span.line, d.code) for d in diags}
    assert found == marks, f"{path.name}: expected {sorted(marks)}, got {sorted(found)}"
    assert sorted({c for _, c in marks}) == sorted(set(codes)), f"{path.name}: header and markers disagree"
    lines = path.read_text().splitlines()
    for d in diags:
        words = {m.group(1) for m in MARKER.finditer(lines[d.span.line - 1]) if m.group(2) == d.code}
        assert words == {d.severity}, f"{path.name}:{d.span.line}: {d.code} is {d.severity}, marked {words}"


def render(source: SourceFile, diags) -> str:
    """The plain rendered text of `diags`, as the `.out` files beside the fixtures hold it."""
    return "\n".join(render_text(d, {source.path: source}).plain for d in diags)
