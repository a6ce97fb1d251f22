"""programs/real: communication bugs from public PyTorch, NCCL, DeepSpeed and Megatron-LM issues.

Each program re-expresses one reported bug and is annotated like programs/bad (tests/annotated.py),
with a header that also says where it comes from and where it breaks:

    # codes: D401
    # link: https://github.com/pytorch/pytorch/issues/109401
    # backend: nccl — hangs (...); Gloo completes
    # clean on: gloo            (optional: backends on which the pattern is correct)
    # What happened in the real system, in a line or two.

The tests check that `lint` reports exactly the header's codes at the marked lines, that each header
names its source and the backend the bug is about (which the program then declares), that the
pattern is clean on the backends the header says it is fine on, and that docs/real-bugs.md lists
every program. The rendered diagnostics sit beside each program as `.out` (`pytest --bless`
regenerates them); only their codes and locations are compared, so rewording a message does not
make them fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from annotated import ROOT, assert_marked, expected, lint, render
from commdsl.resolve import load
from commdsl.source import SourceFile

REAL = sorted((ROOT / "programs" / "real").glob("*.comm"))
DOC = ROOT / "docs" / "real-bugs.md"
LINK = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+")
BACKENDS = {"gloo", "nccl"}


def _header(path: Path) -> dict[str, str]:
    """The `# key: value` lines before `program`, plus `about`: the free description lines."""
    fields, about = {}, []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*(codes|link|backend|clean on):\s*(.*)", line)
        if m:
            fields[m.group(1)] = m.group(2).strip()
        else:
            about.append(line.lstrip("# ").strip())
    fields["about"] = " ".join(a for a in about if a)
    return fields


def _names(text: str) -> set[str]:
    """`nccl, gloo — anything` -> {"nccl", "gloo"}."""
    return {n.strip() for n in text.split("—")[0].split(",") if n.strip()}


def _headlines(text: str) -> list[tuple[str, str]]:
    """(severity[CODE], path:line:col) of each rendered diagnostic, ignoring its wording."""
    return re.findall(r"^((?:error|warning)\[[A-Z]\d{3}\]):.*\n\s*--> (\S+)", text, flags=re.M)


def test_the_corpus_has_at_least_twelve_bugs_from_distinct_reports():
    links = {_header(p).get("link") for p in REAL}
    assert len(REAL) >= 12 and len(links) == len(REAL), "each program re-expresses a different report"


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_lint_reports_exactly_the_marked_codes(path: Path, bless: bool):
    codes, _ = expected(path)
    assert codes, f"{path.name}: a real bug the checker catches names at least one code"
    source, diags = lint(path)
    assert_marked(path, diags)
    golden = path.with_suffix(".out")
    if bless or not golden.exists():
        golden.write_text(render(source, diags))
    assert _headlines(render(source, diags)) == _headlines(golden.read_text()), (
        f"{golden.name} names other codes or lines: run `pytest --bless` and review the diff")


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_header_names_its_source_and_backend(path: Path):
    fields = _header(path)
    assert LINK.fullmatch(fields.get("link", "")), f"{path.name}: `# link:` must be a GitHub issue or PR URL"
    named = _names(fields.get("backend", ""))
    assert named and named <= BACKENDS, f"{path.name}: `# backend:` must start with gloo and/or nccl"
    assert "—" in fields["backend"], f"{path.name}: `# backend:` must say what happens there, after ' — '"
    assert len(fields["about"]) >= 40, f"{path.name}: say in a line or two what happened in the real system"
    program = load(SourceFile(path.name, path.read_text()))
    assert named <= set(program.backends), (
        f"{path.name}: the program must declare the backend the bug is about ({sorted(named)})")


@pytest.mark.parametrize("path", [p for p in REAL if "clean on" in _header(p)], ids=lambda p: p.stem)
def test_backend_specific_bug_is_clean_where_the_pattern_is_correct(path: Path):
    clean = _names(_header(path)["clean on"])
    assert clean and clean <= BACKENDS
    assert not clean & _names(_header(path)["backend"]), f"{path.name}: a backend cannot be both"
    _, diags = lint(path, backends=tuple(sorted(clean)))
    assert [f"{d.code}:{d.span.line}" for d in diags if d.severity == "error"] == []


def test_docs_table_lists_every_program_with_its_link_and_codes():
    rows = [line for line in DOC.read_text().splitlines() if "programs/real/" in line and line.startswith("|")]
    listed = {re.search(r"programs/real/([\w-]+)\.comm", row).group(1): row for row in rows}
    assert sorted(listed) == sorted(p.stem for p in REAL), "docs/real-bugs.md and programs/real disagree"
    for path in REAL:
        row = listed[path.stem]
        assert _header(path)["link"] in row, f"{path.stem}: the docs row has another link"
        assert set(re.findall(r"\b[A-Z]\d{3}\b", row)) == set(expected(path)[0]), (
            f"{path.stem}: the docs row names other codes than the program's header")
