"""Each programs/bad fixture yields exactly the codes its header names, at the lines its markers name.

The header and marker conventions are in tests/annotated.py. The rendered text sits beside each
fixture as `.out`; `pytest --bless` regenerates it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from annotated import ROOT, assert_marked, expected, lint, pinned_lint, render
from commdsl.rules.registry import CODES

BAD = sorted((ROOT / "programs" / "bad").glob("*.comm"))
GOOD = sorted((ROOT / "programs").glob("*.comm"))


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_program_yields_exactly_its_codes(path: Path, bless: bool):
    source, diags = lint(path)
    assert_marked(path, diags)
    rendered = render(source, diags)
    golden = path.with_suffix(".out")
    if bless or not golden.exists():
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"{golden.name} is stale: run `pytest --bless` and review the diff"


def test_every_checker_code_has_a_fixture():
    covered = {code for path in BAD for _, code in expected(path)[1]}
    checker_codes = {c for c in CODES if c[0] in "PCDRBLV"}
    assert checker_codes - covered == set(), "codes without a programs/bad fixture"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_programs_are_clean(path: Path):
    errors = [f"{d['code']} {d['line']}: {d['message']}" for d in pinned_lint(path) if d["severity"] == "error"]
    assert errors == []
