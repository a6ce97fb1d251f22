"""The diagnostics reference: every rule's docstring complete, docs/diagnostics.md current, every example true.

As rustc does with its error-code docs, each `## Example` program is run through the checker and must
produce its code, and each `## Use instead` program must not. (The table itself: tests/test_rules.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commdsl.cli.main import main
from commdsl.rules import OPTIONAL_SECTIONS, REQUIRED_SECTIONS
from commdsl.rules import docs as E
from commdsl.rules.registry import CODES

LIVE = [code for code, rule in CODES.items() if not rule.removed]  # a retired rule's examples no longer hold
RUNNABLE = [code for code in LIVE if not CODES[code].example_too_large]  # the others' tests build their input
DOC = Path(__file__).resolve().parent.parent / "docs" / "diagnostics.md"


def section_problems(markdown: str, example_too_large: bool = False) -> list[str]:
    """What is wrong with one explanation's sections (empty when it is complete)."""
    found = E.sections(markdown)
    problems = [f"missing section `## {s}`" for s in REQUIRED_SECTIONS if not found.get(s)]
    problems += [f"unknown section `## {s}`" for s in found if s not in REQUIRED_SECTIONS + OPTIONAL_SECTIONS]
    for s in ("Example", "Use instead"):
        if found.get(s) and not (s == "Example" and example_too_large):
            try:
                E.program_and_args(found[s])
            except ValueError as e:
                problems.append(f"`## {s}`: {e}")
    return problems


def lint(program: str, args: list[str], tmp_path: Path, capsys) -> list[dict]:
    """`commdsl lint example.comm --format json ARGS`, in process; the diagnostics it prints."""
    path = tmp_path / E.EXAMPLE_FILE
    path.write_text(program, encoding="utf-8")
    capsys.readouterr()
    rc = main(["lint", str(path), "--format", "json", *args])
    out, err = capsys.readouterr()
    assert rc in (0, 1), f"exit {rc}: {err}"
    return json.loads(out)


@pytest.mark.parametrize("code", list(CODES))
def test_every_code_has_a_complete_explanation(code):
    rule = CODES[code]
    assert rule.docs(), f"{code}: the docstring of {rule.__module__}.{rule.__name__} has no sections"
    assert section_problems(rule.docs(), rule.example_too_large) == []


def test_section_check_finds_a_missing_section():
    text = CODES["P201"].docs().replace("## Why is this bad?", "## Why")
    assert section_problems(text) == ["missing section `## Why is this bad?`", "unknown section `## Why`"]


def test_docs_are_up_to_date():
    expected = E.render_docs()
    assert DOC.exists() and DOC.read_text(encoding="utf-8") == expected, (
        f"docs/diagnostics.md is stale: regenerate it with `{E.REGENERATE}`")


def test_docs_have_an_anchor_per_code():
    # the SARIF output links each rule to docs/diagnostics.md#<code lowercased>
    doc = E.render_docs()
    for code in CODES:
        assert f'<a id="{code.lower()}"></a>' in doc


@pytest.mark.parametrize("code", RUNNABLE)
def test_example_produces_its_code(code, tmp_path, capsys):
    program, args = E.program_and_args(CODES[code].sections()["Example"])
    found = [d["code"] for d in lint(program, args, tmp_path, capsys)]
    assert code in found


@pytest.mark.parametrize("code", LIVE)
def test_use_instead_does_not_produce_its_code(code, tmp_path, capsys):
    program, args = E.program_and_args(CODES[code].sections()["Use instead"])
    found = [d["code"] for d in lint(program, args, tmp_path, capsys)]
    assert code not in found


@pytest.mark.parametrize("code", LIVE)
def test_use_instead_is_clean(code, tmp_path, capsys):
    """A fixed program that trades one diagnostic for another would teach the wrong fix."""
    program, args = E.program_and_args(CODES[code].sections()["Use instead"])
    assert [(d["code"], d["message"]) for d in lint(program, args, tmp_path, capsys)] == []


def test_console_line_gives_the_flags():
    program, args = E.program_and_args(CODES["N124"].sections()["Example"])
    assert args == ["--world", "3"] and program.startswith("program ")


# ---- `commdsl explain` ---------------------------------------------------------------------------

def explain(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(["explain", *argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_explain_prints_the_markdown(capsys):
    rc, out, _ = explain(capsys, "P201")
    assert rc == 0
    assert out == E.explanation(CODES["P201"])
    assert out.startswith("# P201 `unmatched-send`\n") and "## Use instead" in out


@pytest.mark.parametrize("spelling", ["p201", "unmatched-send", "Unmatched-Send"])
def test_explain_accepts_the_code_or_the_name(capsys, spelling):
    assert explain(capsys, spelling)[:2] == explain(capsys, "P201")[:2]


def test_explain_unknown_code_exits_2(capsys):
    rc, out, err = explain(capsys, "P999")
    assert (rc, out) == (2, "")
    assert "unknown code `P999`" in err and "commdsl explain --list" in err


def test_explain_unknown_name_names_the_closest(capsys):
    rc, _, err = explain(capsys, "unmatched-sned")
    assert rc == 2 and "the closest is `unmatched-send`" in err


def test_explain_without_code_is_a_usage_error(capsys):
    rc, _, err = explain(capsys)
    assert rc == 2 and "give a code" in err


def test_explain_list_has_every_code(capsys):
    rc, out, _ = explain(capsys, "--list")
    rows = [line.split(None, 3) for line in out.splitlines()]
    assert rc == 0
    assert [r[0] for r in rows] == list(CODES)
    assert rows[0] == ["S001", CODES["S001"].name, CODES["S001"].severity, CODES["S001"].summary()]


def test_explain_all_is_the_docs_page(capsys):
    rc, out, _ = explain(capsys, "--all")
    assert rc == 0 and out == E.render_docs()


def test_explain_json(capsys):
    rc, out, _ = explain(capsys, "--format", "json", "L701")
    entry = json.loads(out)
    assert rc == 0
    assert (entry["code"], entry["name"], entry["severity"]) == ("L701", "send-loop-is-broadcast", "warning")
    assert entry["explanation"] == E.explanation(CODES["L701"])
