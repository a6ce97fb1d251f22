"""Syntax highlighting for `.comm`: a Pygments lexer, and the source lines of diagnostics on a terminal.

Registered through the `pygments.lexers` entry point, so `pygmentize -l commdsl`, Sphinx and MkDocs
pick it up once commdsl is installed. The token classes follow the grammar (grammar/commdsl.lark):
header and control keywords, the communication ops, dtypes, reduce ops and built-in names. Keywords
are contextual in the grammar (`recv all[k]` names a tensor `all`), so the lexer marks `all` as a
keyword only after `wait`.
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, Text, Whitespace

from commdsl.collectives import KINDS
from commdsl.dtypes import DTYPES
from commdsl.p2p import FORMS

# `world` is a keyword only at the start of its header line; elsewhere it is the built-in world size.
KEYWORDS = (
    "program",
    "def",
    "backend",
    "param",
    "tensor",
    "group",
    "mesh",
    "new_group",
    "table",
    "let",
    "split",
    "by",
    "for",
    "while",
    "in",
    "on",
    "else",
    "batch",
    "coalesced",
    "to",
    "from",
    "tag",
    "op",
    "into",
    "splits",
    "wait",
    "expect",
    "print",
)
COMM_OPS = tuple(f.word for f in FORMS.values()) + tuple(KINDS)
BUILTINS = ("rank", "world", "i", "min", "max", "abs", "log2", "sum", "rand", "randn")


class CommdslLexer(RegexLexer):
    """Lexer for commdsl `.comm` programs (torch.distributed communication patterns)."""

    name = "commdsl"
    aliases = ["commdsl", "comm"]
    filenames = ["*.comm"]
    mimetypes = ["text/x-commdsl"]
    url = "https://github.com/commdsl/commdsl"

    tokens = {
        "root": [
            (r"\n", Whitespace),
            (r"[\t \f]+", Whitespace),
            (r"\\[\t \f]*\r?\n", Text),  # line continuation
            (r"#.*$", Comment.Single),
            (r"^(world)\b", Keyword.Declaration),
            (r"(wait)(\s+)(all)\b", bygroups(Keyword, Whitespace, Keyword)),
            (r"(from)(\s+)(any)\b", bygroups(Keyword, Whitespace, Keyword)),  # `any` is a keyword only there
            (r"(op)(\s+)([A-Za-z_]\w*)", bygroups(Keyword, Whitespace, Name.Constant)),
            (r"(\.)(\s*)([A-Za-z_]\w*)", bygroups(Punctuation, Whitespace, Name.Attribute)),
            (r"(def)(\s+)([A-Za-z_]\w*)", bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            (
                words(
                    ("program", "backend", "param", "tensor", "group", "mesh", "new_group", "table", "let", "def"),
                    suffix=r"\b",
                ),
                Keyword.Declaration,
            ),
            (words(COMM_OPS, suffix=r"\b"), Keyword.Reserved),
            (words(KEYWORDS, suffix=r"\b"), Keyword),
            (words(("and", "or", "not"), suffix=r"\b"), Operator.Word),
            (words(("true", "false"), suffix=r"\b"), Keyword.Constant),
            (words(tuple(DTYPES), suffix=r"\b"), Keyword.Type),
            (words(BUILTINS, suffix=r"\b"), Name.Builtin),
            (r"[0-9]+\.[0-9]+([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+", Number.Float),
            (r"[0-9]+", Number.Integer),
            (r"\.\.|\*\*|<<=|>>=|<<|>>|//|==|!=|<=|>=|[-+*/&|^]=|[-+*/%<>=&|^]", Operator),
            (r"[()\[\],:]", Punctuation),
            (r"[A-Za-z_]\w*", Name),
        ],
    }


# Terminal styles (rich) per token class: the plain ANSI colours, so they follow the user's terminal theme.
_STYLES = (
    (Comment, "dim"),
    (Keyword.Reserved, "bold magenta"),
    (Keyword.Type, "cyan"),
    (Keyword.Constant, "yellow"),
    (Keyword, "magenta"),
    (Operator.Word, "magenta"),
    (Name.Builtin, "cyan"),
    (Name.Constant, "yellow"),
    (Number, "yellow"),
)


def _style(token) -> str:
    for kind, style in _STYLES:
        if token in kind:
            return style
    return ""


def highlight_line(line: str):
    """One source line as a rich `Text` with a style per token (for diagnostics on a colour terminal)."""
    from rich.text import Text

    out = Text()
    for token, value in CommdslLexer(stripnl=False, ensurenl=False).get_tokens(line):
        out.append(value, style=_style(token) or None)
    return out
