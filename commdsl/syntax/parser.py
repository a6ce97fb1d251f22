"""Text → Lark tree, with every syntax error turned into a diagnostic (never Lark's own text).

The grammar is built once, lazily, LALR with position propagation and an indenter; Lark's error
objects name internal terminals (`_NL`, `$END`), so `_expected()` maps them to words a user knows.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import sys
from functools import cache, lru_cache
from pathlib import Path

import lark
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import Indenter

from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.rules import Rule
from commdsl.rules.syntax import (
    InconsistentDedent,
    MissingColon,
    ProgramTooLong,
    RecvWithoutSource,
    SendWithoutDestination,
    UnexpectedCharacter,
    UnexpectedEndOfFile,
)
from commdsl.rules.syntax import UnexpectedToken as UnexpectedTokenRule
from commdsl.source import SourceFile


class _IndentError(Exception):
    def __init__(self, token: Token):
        self.token = token


class _CommIndenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types: list[str] = []
    CLOSE_PAREN_types: list[str] = []
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8
    # NAME in every parser state's lexer: where no name may come, Lark's contextual lexer would otherwise
    # read `opp` as the keyword `op` then a name `p` (and accept `all_reduce x opmax`); with NAME there,
    # `opp` is one name and a keyword is still a keyword (Lark retypes a NAME that spells one)
    always_accept = ("_NL", "NAME")

    def handle_NL(self, token: Token):
        """Lark's version raises a position-less DedentError; ours keeps the token for the caret."""
        yield token
        indent_str = token.rsplit("\n", 1)[1]
        indent = indent_str.count(" ") + indent_str.count("\t") * self.tab_len
        if indent > self.indent_level[-1]:
            self.indent_level.append(indent)
            yield Token.new_borrow_pos(self.INDENT_type, indent_str, token)
        else:
            while indent < self.indent_level[-1]:
                self.indent_level.pop()
                yield Token.new_borrow_pos(self.DEDENT_type, indent_str, token)
            if indent != self.indent_level[-1]:
                raise _IndentError(token)


GRAMMAR_PATH = Path(__file__).resolve().parent.parent / "grammar" / "commdsl.lark"


def grammar_text() -> str:
    return GRAMMAR_PATH.read_text(encoding="utf-8")


@cache
def lark_parser(strict: bool = False) -> Lark:
    grammar = grammar_text()
    return Lark(
        grammar,
        parser="lalr",
        postlex=_CommIndenter(),
        propagate_positions=True,
        maybe_placeholders=True,
        cache=False if strict else cache_file(grammar),
        strict=strict,
    )


def cache_file(grammar: str) -> str | bool:
    """Where Lark keeps the built parser between runs (loading it is 2–3× faster than building): a file named
    by the hash of the grammar, Lark's and Python's versions (so a changed grammar never loads a stale parser;
    Lark checks that hash inside the file too) in the user's own cache directory, made private. Lark's
    default is a predictable name in the shared temp directory, whose pickle another user could plant. False
    (no cache) when the directory cannot be made, or is not this user's alone."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "commdsl")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory)
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)  # POSIX: the directory must be ours, writable by nobody else
    if getuid is not None and (info.st_uid != getuid() or info.st_mode & 0o022):
        return False
    key = f"{grammar}\0{lark.__version__}\0{sys.version_info[:2]}".encode()
    return os.path.join(directory, f"grammar-{hashlib.sha256(key).hexdigest()[:20]}.lark")


_WORDS = {
    "_NL": "end of line",
    "_INDENT": "an indented block",
    "_DEDENT": "end of the block",
    "$END": "end of file",
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "COMP_OP": "a comparison",
    "ADD_OP": "`+`, `-`",
    "MUL_OP": "`*`, `/`, `//`, `%`",
    "AUG_OP": "`+=`, `-=`, `*=`, `/=`, `<<=`, `>>=`, `&=`, `|=`, `^=`",  # no "or": items of a longer list
    "SHIFT_OP": "`<<`, `>>`",
}
_STATEMENT_STARTERS = {"SEND", "RECV", "ISEND", "IRECV", "BROADCAST", "ALL_REDUCE", "WAIT", "FOR", "ON"}


_EXPRESSION_STARTERS = {"NAME", "INT", "FLOAT", "LPAR"}
_OPERATORS = {
    "ADD_OP",
    "MUL_OP",
    "COMP_OP",
    "SHIFT_OP",
    "BOR_OP",
    "XOR_OP",
    "BAND_OP",
    "__ANON_0",
    "AND",
    "OR",
    "DOT",
    "LSQB",
    "LPAR",
    "STAR",
    "SLASH",
}


def _expected(names: set[str]) -> str:
    if _STATEMENT_STARTERS <= names:
        return "a statement"
    parser = lark_parser()
    words = []
    comm_ops = {
        "SEND",
        "RECV",
        "ISEND",
        "IRECV",
        "BROADCAST",
        "ALL_REDUCE",
        "REDUCE",
        "ALL_GATHER",
        "GATHER",
        "SCATTER",
        "REDUCE_SCATTER",
        "ALL_TO_ALL",
        "BARRIER",
    }
    if comm_ops <= names:
        words.append("a communication op")
        names = names - comm_ops
    if _EXPRESSION_STARTERS <= names:
        words.append("an expression")
        names = {x for x in names if x not in _EXPRESSION_STARTERS | {"ADD_OP", "TRUE", "FALSE", "NOT"}}
    if {"ADD_OP", "MUL_OP"} <= names:
        words.append("an operator")
        names = {x for x in names if x not in _OPERATORS and not _is_operator(parser, x)}
    for name in sorted(names):
        if name in _WORDS:
            words.append(_WORDS[name])
            continue
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            continue
        words.append(f"`{pattern.value}`" if pattern.type == "str" else name.lower())
    words = sorted(set(words))
    if len(words) > 8:
        words = words[:7] + [f"{len(words) - 7} other items"]
    if len(words) <= 1:
        return words[0] if words else "something else"
    return ", ".join(words[:-1]) + " or " + words[-1]


def _is_operator(parser: Lark, name: str) -> bool:
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return False
    return pattern.type == "str" and pattern.value in ("**", "and", "or", ".", "[", "(")


def _found(token: Token) -> str:
    if token.type == "$END":
        return "end of file"
    if token.type == "_NL":
        return "end of line"
    if token.type == "_INDENT":
        return "an unexpected indent"
    if token.type == "_DEDENT":
        return "the end of the block"
    return f"`{token.value}`"


# Common mistakes named by LALR state (lark's match_examples): a few whole programs per rule.
_EXAMPLES: dict[type[Rule], list[str]] = {
    MissingColon: [
        "for s in 0 .. 3\n    barrier\n",
        "on rank == 0\n    barrier\n",
        "batch\n    send x to 1\n",
        "coalesced\n    all_reduce x\n",
        "while rank < 3\n    barrier\n",
        "on rank == 0:\n    barrier\nelse\n    barrier\n",
        "on rank == 0:\n    barrier\nelse on rank == 1\n    barrier\n",
        "def f()\n    barrier\n",
        "def f(x)\n    barrier\n",
        "def f(x, y)\n    barrier\n",
    ],
    # not `send x 1`: an INT after a NAME fails in the state every NAME shares, so it names nothing
    SendWithoutDestination: [f"{op} x{rest}\n" for op in ("send", "isend", "h = isend") for rest in ("", " tag 1")],
    RecvWithoutSource: [f"{op} x{rest}\n" for op in ("recv", "irecv", "h = irecv") for rest in ("", " tag 1")],
}
_EXAMPLE_TEXT = {
    MissingColon: ("expected `:` at the end of the block header", "a block header ends with `:`"),
    SendWithoutDestination: ("`send` needs a destination: `send VIEW to RANK`", "the destination rank goes after `to`"),
    RecvWithoutSource: ("`recv` needs a source: `recv VIEW from RANK`", "the source rank goes after `from`"),
}


@lru_cache(maxsize=1)
def _example_states() -> dict[tuple[int, str], type[Rule]]:
    """(LALR state, token type) where each example fails → its rule.

    Lark's own `match_examples` also compares the parser's stack depth, so an example written as a
    one-statement file would only match mistakes in a file's first statement; the top state and the
    offending token are what identify the mistake.
    """
    states: dict[tuple[int, str], type[Rule]] = {}
    for rule, examples in _EXAMPLES.items():
        for example in examples:
            try:
                lark_parser().parse(example)
            except UnexpectedToken as e:
                states.setdefault((e.state.position, e.token.type), rule)
    return states


MAX_LINES = 20_000
"""The most lines a program may have. Lark's newline regex keeps state per blank or comment line it
swallows (about 600 bytes each), so this bounds the parser's memory as the byte limit bounds the file."""


def _too_long(source: SourceFile) -> Diagnostic | None:
    """S008 at the first line past MAX_LINES, before any parsing."""
    from commdsl.files import MAX_PROGRAM_BYTES

    if source.text.count("\n", 0, len(source.text)) < MAX_LINES and len(source.text) <= 8 * MAX_PROGRAM_BYTES:
        return None
    lines = source.text.count("\n") + (not source.text.endswith("\n"))
    if lines > MAX_LINES:
        start = source._line_starts[MAX_LINES]
        return ProgramTooLong.diagnostic(
            f"the program has {lines} lines, more than the {MAX_LINES} commdsl reads",
            span=source.span(start, start),
            label=f"line {MAX_LINES + 1}",
            help="loops (`for`) and rank conditions (`on`) say in one line what repeats",
        )
    return ProgramTooLong.diagnostic(
        f"the program has {len(source.text)} characters, more than {8 * MAX_PROGRAM_BYTES} commdsl reads",
        span=source.span(0, 0),
        label="too long",
    )


def parse_tree(source: SourceFile) -> Tree:
    """Parse a file into a Lark tree; raise CommdslError with one syntax diagnostic on failure."""
    long = _too_long(source)
    if long is not None:
        raise CommdslError([long])
    text = source.text if source.text.endswith("\n") else source.text + "\n"
    first = text.split("\n", 1)[0]
    code = first.lstrip(" \t\f")
    if code != first and code.strip() and not code.startswith("#"):  # the indenter only sees indents after a newline
        col = len(first) - len(code)
        raise CommdslError(
            [
                UnexpectedTokenRule.diagnostic(
                    "expected a statement, found an unexpected indent",
                    span=source.span(col, col),
                    label="unexpected here",
                    help="a file's first statement starts in column 1",
                )
            ]
        )
    try:
        return lark_parser().parse(text)
    except _IndentError as err:
        tok = err.token
        end = tok.end_pos
        sp = source.span(end - len(tok.rsplit("\n", 1)[1]), end)
        raise CommdslError(
            [
                InconsistentDedent.diagnostic(
                    "unindent does not match any outer indentation level",
                    span=sp,
                    label="this line's indentation matches no enclosing block",
                    help="indent the line exactly as the block it belongs to",
                )
            ]
        ) from None
    except UnexpectedInput as err:
        raise CommdslError([_syntax_diagnostic(source, text, err)]) from None


def _syntax_diagnostic(source: SourceFile, text: str, err: UnexpectedInput) -> Diagnostic:
    if isinstance(err, UnexpectedCharacters):
        sp = source.span(err.pos_in_stream, err.pos_in_stream + 1)
        char = text[err.pos_in_stream]
        return UnexpectedCharacter.diagnostic(
            f"unexpected character `{char}`",
            span=sp,
            label="not part of the language",
            help=f"expected {_expected(set(err.allowed))}",
        )
    token = getattr(err, "token", None)
    if isinstance(err, UnexpectedEOF) or token is None or token.type == "$END":
        end = len(source.text.rstrip())
        return UnexpectedEndOfFile.diagnostic(
            "unexpected end of file",
            span=source.span(end, end),
            label=f"expected {_expected(set(getattr(err, 'expected', ()) or ()))}",
        )
    assert isinstance(err, UnexpectedToken)
    matched = _example_states().get((err.state.position, token.type))
    start = token.start_pos if token.start_pos is not None else len(text)
    if token.type == "_NL":  # the caret goes just after the line's last character
        end = start
    elif token.type in ("_DEDENT", "_INDENT"):  # these borrow the newline's position: point at the line
        start = end = token.end_pos
    else:
        end = token.end_pos
    accepts = set(err.accepts or err.expected)
    expected = _expected(accepts)
    sp = source.span(start, end if end > start else start)
    if matched:
        message, help_text = _EXAMPLE_TEXT[matched]
        return matched.diagnostic(message, span=sp, label=f"found {_found(token)}", help=help_text)
    return UnexpectedTokenRule.diagnostic(
        f"expected {expected}, found {_found(token)}",
        span=sp,
        label="unexpected here",
        help=_did_you_mean(source, token, accepts),
    )


@cache
def keywords() -> dict[str, str]:
    """The language's words (`broadcast`, `from`, `op`...) by terminal name, from the grammar itself."""
    parser = lark_parser()
    return {
        t.name: t.pattern.value
        for t in parser.terminals
        if t.pattern.type == "str" and re.fullmatch(r"[a-z_][a-z0-9_]*", t.pattern.value)
    }


def _did_you_mean(source: SourceFile, token, accepts: set[str]) -> str | None:
    """A keyword the user probably meant: the unexpected name is close to a word the parser wanted here
    (`opp` for `op`), or the line starts with a name close to a statement's word (`brodcast x from 0`
    parses `brodcast` as a name and fails at `x`)."""
    words = keywords()
    if token.type == "NAME":
        close = difflib.get_close_matches(str(token), [words[n] for n in accepts if n in words], n=1, cutoff=0.7)
        if close:
            return f"did you mean `{close[0]}`?"
    line = source.line_text(token.line) if token.line else ""
    first = re.match(r"\s*([A-Za-z_]\w*)", line)
    if first and first.group(1) not in words.values():
        close = difflib.get_close_matches(first.group(1), sorted(set(words.values())), n=1, cutoff=0.75)
        if close:
            return f"did you mean `{close[0]}`? (`{first.group(1)}` is not a word of the language)"
    return None
