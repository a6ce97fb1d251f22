"""docs/language.md stays true: every ```comm example parses, every complete program in it passes
`commdsl check`, its grammar section is grammar/commdsl.lark verbatim, every keyword of the grammar
appears in an example, and every S and N code is in its diagnostics table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics import CommdslError
from commdsl.resolve import load
from commdsl.rules.registry import CODES
from commdsl.source import SourceFile
from commdsl.syntax.parser import grammar_text, parse_tree
from commdsl.syntax.transform import to_ast

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")


def fenced(language: str) -> list[tuple[int, str]]:
    """(line number, text) of every ```LANGUAGE block of the doc."""
    blocks = []
    for m in re.finditer(rf"^```{language}\n(.*?)^```$", DOC, flags=re.S | re.M):
        blocks.append((DOC.count("\n", 0, m.start()) + 1, m.group(1)))
    return blocks


EXAMPLES = fenced("comm")


def is_program(text: str) -> bool:
    """A complete program starts (after comments) with its `program` line."""
    code = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(code) and code[0].startswith("program ")


def test_the_doc_has_examples_and_programs():
    assert len(EXAMPLES) >= 15 and sum(is_program(t) for _, t in EXAMPLES) >= 3


@pytest.mark.parametrize("line, text", EXAMPLES, ids=[f"line{line}" for line, _ in EXAMPLES])
def test_every_example_parses(line, text):
    source = SourceFile(f"docs/language.md:{line}", text)
    try:
        module = to_ast(parse_tree(source), source)
    except CommdslError as e:
        pytest.fail(f"the example at docs/language.md line {line} does not parse: "
                    + "; ".join(f"{d.code} {d.message} (line {d.span.line})" for d in e.diagnostics))
    assert module.body


@pytest.mark.parametrize("line, text", [x for x in EXAMPLES if is_program(x[1])],
                         ids=[f"line{line}" for line, t in EXAMPLES if is_program(t)])
def test_every_complete_program_passes_check(line, text):
    program = load(SourceFile(f"language.md:{line}", text))
    found = check_program(program, CheckOptions(bound=8))  # `check` (lints are not errors), open ranges to 8
    assert [(d.code, d.span.line if d.span else None, d.message) for d in found] == []


def test_the_grammar_section_is_the_grammar_file():
    (grammar,) = [text for _, text in fenced("lark")]
    assert grammar == grammar_text(), "copy grammar/commdsl.lark into the Grammar section of docs/language.md"


def test_every_keyword_has_an_example():
    keywords = set(re.findall(r'"([a-z_]+)"', grammar_text()))
    examples = "\n".join(text for _, text in EXAMPLES)
    missing = sorted(k for k in keywords if not re.search(rf"(?<![\w.]){k}(?!\w)", examples))
    assert missing == []


def test_every_front_end_code_is_in_the_table():
    table = set(re.findall(r"^\| ([SN]\d{3}) \| ([a-z-]+) \|", DOC, flags=re.M))
    assert table == {(c.code, c.name) for c in CODES.values() if c.code[0] in "SN"}


def test_every_dtype_and_reduce_op_is_documented():
    from commdsl.dtypes import DTYPES, REDUCE_OPS

    assert all(f"`{d}`" in DOC for d in DTYPES)
    assert all(f"`{op}" in DOC for op in REDUCE_OPS)
