"""Highlighting: the Pygments lexer, diagnostics coloured by token on a colour terminal, and the VS Code
TextMate grammar — both kept in step with the keywords of grammar/commdsl.lark."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.token import Error, Keyword, Name, Operator
from rich.console import Console

from commdsl.diagnostics import CommdslError
from commdsl.diagnostics.render import emit, render_text
from commdsl.dtypes import DTYPES
from commdsl.highlight import CommdslLexer, highlight_line
from commdsl.resolve import load
from commdsl.source import SourceFile
from commdsl.syntax.parser import lark_parser

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").glob("*.comm")) + sorted((ROOT / "programs" / "bad").glob("*.comm"))
VSCODE = ROOT / "editors" / "vscode"


CONTEXT = {"all": "wait all", "any": "from any"}  # keywords only after `wait`, after `from`


def grammar_keywords() -> set[str]:
    return {t.pattern.value for t in lark_parser().terminals
            if t.pattern.type == "str" and t.pattern.value.replace("_", "").isalpha()}


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_program_lexes_without_errors(path):
    text = path.read_text()
    tokens = list(CommdslLexer().get_tokens(text))
    assert [v for t, v in tokens if t in Error] == []
    assert "".join(v for _, v in tokens) == text


def test_every_grammar_keyword_is_a_keyword():
    lexer = CommdslLexer()
    for word in sorted(grammar_keywords()):
        sample = CONTEXT.get(word, word)
        kinds = [t for t, v in lexer.get_tokens(sample) if v == word]
        assert kinds and (kinds[0] in Keyword or kinds[0] in Operator.Word), word


def test_context_decides_world_all_and_reduce_ops():
    tokens = [(t, v) for t, v in CommdslLexer().get_tokens("world 2\nrecv all[world] from 0 op sum\n") if v.strip()]
    anys = [t for t, v in CommdslLexer().get_tokens("let any = 1\nrecv x from any tag any\n") if v == "any"]
    assert anys == [Name, Keyword, Name]  # `any` is a keyword only right after `from`
    assert tokens[0] == (Keyword.Declaration, "world")
    kinds = dict((v, t) for t, v in tokens[2:])
    assert kinds["all"] == Name and kinds["world"] == Name.Builtin and kinds["sum"] == Name.Constant


def test_handles_slots_and_bound_batches():
    text = "wait all h\nb[k] = batch:\n    send x to 1\nwait h[j], b[k]\n"
    tokens = [(t, v) for t, v in CommdslLexer().get_tokens(text) if v.strip()]
    assert tokens[:3] == [(Keyword, "wait"), (Keyword, "all"), (Name, "h")]  # the array after `wait all` is a name
    assert (Keyword, "batch") in tokens and [v for t, v in tokens if t == Name] == ["h", "b", "k", "x", "h", "j", "b", "k"]


def test_registered_with_pygments():
    """Through the `pygments.lexers` entry point in pyproject.toml (the package must be installed)."""
    assert type(get_lexer_by_name("commdsl")).__name__ == "CommdslLexer"
    assert type(get_lexer_for_filename("ring.comm")).__name__ == "CommdslLexer"


def test_highlight_line_styles_tokens():
    text = highlight_line("    send x.chunk(0, world) to 1  # c")
    assert text.plain == "    send x.chunk(0, world) to 1  # c"
    styled = {text.plain[s.start:s.end]: str(s.style) for s in text.spans}
    assert styled["send"] == "bold magenta" and styled["to"] == "magenta" and styled["# c"] == "dim"


def diagnostics_of(path: Path):
    source = SourceFile.read(path)
    with pytest.raises(CommdslError) as e:
        load(source)
    return e.value.diagnostics, {str(path): source}


def test_diagnostics_are_highlighted_only_in_colour(tmp_path):
    path = tmp_path / "bad.comm"
    path.write_text("program t\nworld 2\ntensor x: float32[4]\nsend y to 1\n")
    diags, sources = diagnostics_of(path)
    plain, coloured = render_text(diags[0], sources), render_text(diags[0], sources, highlight=True)
    assert plain.plain == coloured.plain
    assert len(coloured.spans) > len(plain.spans)
    on, off = io.StringIO(), io.StringIO()
    emit(diags, sources, "text", Console(file=on, force_terminal=True, color_system="standard"))
    emit(diags, sources, "text", Console(file=off, force_terminal=False, no_color=True))
    assert "\x1b[1;35msend\x1b[0m" in on.getvalue()  # the communication op, bold magenta
    assert "\x1b[" not in off.getvalue() and "4 | send y to 1" in off.getvalue()


# ---- VS Code ------------------------------------------------------------------------------------


def test_vscode_extension_files_agree():
    package = json.loads((VSCODE / "package.json").read_text())
    [language] = package["contributes"]["languages"]
    [grammar] = package["contributes"]["grammars"]
    assert language["id"] == grammar["language"] == "commdsl" and language["extensions"] == [".comm"]
    config = json.loads((VSCODE / language["configuration"]).read_text())
    assert config["comments"]["lineComment"] == "#"
    increase = re.compile(config["indentationRules"]["increaseIndentPattern"])
    assert increase.match("    for s in 0 .. 3:  # loop") and not increase.match("send x to 1")
    assert increase.match("def exchange(out, into, peer):") and not increase.match("exchange(x, y, 1)")
    tm = json.loads((VSCODE / grammar["path"]).read_text())
    assert tm["scopeName"] == grammar["scopeName"] == "source.commdsl"


def textmate_rules(tm: dict):
    """Every (regex, scope names) in the grammar, patterns and repository alike."""
    def walk(rule):
        if "match" in rule:
            names = [rule.get("name", "")] + [c["name"] for c in rule.get("captures", {}).values()]
            yield rule["match"], names
        for sub in rule.get("patterns", []):
            yield from walk(sub)

    for rule in tm["repository"].values():
        yield from walk(rule)


def test_textmate_grammar_covers_the_language():
    tm = json.loads((VSCODE / "syntaxes" / "commdsl.tmLanguage.json").read_text())
    included = {p["include"].lstrip("#") for p in tm["patterns"]}
    assert included == set(tm["repository"])
    rules = list(textmate_rules(tm))
    for pattern, _ in rules:
        re.compile(pattern)  # simple enough for Python's engine too (VS Code uses Oniguruma)

    def scope_of(word: str) -> list[str]:
        line = CONTEXT.get(word, word)
        for pattern, names in rules:
            m = re.match(pattern, line)
            if m and word in m.group(0):
                return names
        return []

    for word in sorted(grammar_keywords()):
        assert any(s.startswith(("keyword.", "storage.", "support.function", "constant.language"))
                   for s in scope_of(word)), word
    for dtype in DTYPES:
        assert "support.type.dtype.commdsl" in scope_of(dtype)


def test_integer_operators_while_and_log2():
    text = "while mask < world:\n    mask <<= 1\n    let p = rank ^ 1 << log2(mask) | 2 & 3 >> 1\n"
    tokens = {v: t for t, v in CommdslLexer().get_tokens(text) if v.strip()}
    assert tokens["while"] in Keyword and tokens["log2"] == Name.Builtin
    assert all(tokens[op] in Operator for op in ("<<=", "^", "<<", "|", "&", ">>"))


def test_def_declares_a_function_name():
    text = "def exchange(out, peer):\n    send out to peer\n"
    tokens = {v: t for t, v in CommdslLexer().get_tokens(text) if v.strip()}
    assert tokens["def"] == Keyword.Declaration and tokens["exchange"] == Name.Function and tokens["out"] == Name


def test_new_group_is_a_declaring_keyword():
    tokens = {v: t for t, v in CommdslLexer().get_tokens("g = new_group [0, 1]\n") if v.strip()}
    assert tokens["new_group"] == Keyword.Declaration and tokens["g"] == Name
