"""Canonical `.comm` formatting: one layout for every program, comments kept, meaning never changed.

The AST holds what the program means but neither comments nor parentheses, so the printer re-derives
parentheses from operator precedence (the grammar's `?expr` ladder) and takes the comments back from
the source by line: the language has no strings, so a `#` always starts a comment that runs to the end
of its line. Numbers are kept as written. After printing, the result is parsed again and its AST
compared with the input's, as black does: a formatter bug becomes an error, never a changed program.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import lru_cache

from commdsl.collectives import KINDS
from commdsl.p2p import form
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import lark_parser, parse_tree
from commdsl.syntax.transform import to_ast

INDENT = "    "


class FormatError(Exception):
    """The formatted text would not mean what the input means: a bug in the formatter."""


# binding strength, loosest first, as in grammar/commdsl.lark
_OR, _AND, _NOT, _CMP, _BOR, _BXOR, _BAND, _SHIFT, _ADD, _MUL, _UNARY, _POW, _POSTFIX, _ATOM = range(1, 15)
_BINARY = {
    "or": _OR,
    "and": _AND,
    "|": _BOR,
    "^": _BXOR,
    "&": _BAND,
    "<<": _SHIFT,
    ">>": _SHIFT,
    "+": _ADD,
    "-": _ADD,
    "*": _MUL,
    "/": _MUL,
    "//": _MUL,
    "%": _MUL,
    "**": _POW,
}
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}


def format_source(source: SourceFile) -> str:
    """The canonical text of a program; raises CommdslError if it does not parse."""
    module = to_ast(parse_tree(source), source)
    text = _Printer(source).module(module)
    again = SourceFile(source.path, text)
    if _shape(to_ast(parse_tree(again), again)) != _shape(module):
        raise FormatError(f"{source.path}: formatting would change the program; please report this bug")
    return text


def _shape(node) -> object:
    """A node with every span dropped: two programs that mean the same have equal shapes."""
    if isinstance(node, n.Node):
        return (type(node).__name__,) + tuple(
            (f.name, _shape(getattr(node, f.name))) for f in fields(node) if f.name != "span"
        )
    if isinstance(node, tuple):
        return tuple(_shape(x) for x in node)
    return node


# ---- expressions ----------------------------------------------------------------------------------


class _Exprs:
    """Prints expressions, keeping the parentheses the program wrote (one pair where it wrote several)."""

    def __init__(self, source: SourceFile):
        self.text = source.text
        self.extent: dict[int, tuple[int, int, bool]] = {}

    def __call__(self, e, need: int = 0) -> str:
        """`e` as text, parenthesised if it binds more loosely than its position needs."""
        text, strength = self.expr(e)
        if self.full(e)[2]:
            text, strength = f"({text})", _ATOM
        return f"({text})" if strength < need else text

    def full(self, e) -> tuple[int, int, bool]:
        """Where `e` is written, parentheses included, and whether it is parenthesised. A binary node's
        span starts inside its left operand's parentheses, so its extent is built from its operands'."""
        got = self.extent.get(id(e))
        if got is not None:
            return got
        if isinstance(e, n.Binary):
            start, end = self.full(e.left)[0], self.full(e.right)[1]
        else:
            start, end = e.span.start, e.span.end
        wrapped = False
        while True:
            before = self.text[:start].rstrip()
            after = self.text[end:]
            stripped = after.lstrip()
            if not (before.endswith("(") and stripped.startswith(")") and self.grouping(len(before) - 1)):
                break
            start, end, wrapped = len(before) - 1, end + len(after) - len(stripped) + 1, True
        self.extent[id(e)] = (start, end, wrapped)
        return start, end, wrapped

    def grouping(self, at: int) -> bool:
        """Is the `(` at `at` a parenthesis round an expression, rather than a call's `f(`? A `(` that starts
        a logical line groups, whatever ends the line before (only a `\\` continuation joins them)."""
        end = at
        while True:
            before = self.text[:end].rstrip(" \t\f")
            if not before.endswith("\n"):
                break
            line = before[:-1].rstrip("\r").rstrip(" \t\f")
            if not line.endswith("\\"):
                return True
            end = len(line) - 1
        before = before.rstrip()
        if not before or before[-1] in ")]":
            return not before
        word = before[len(before.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")) :]
        return not word or word in _keywords()

    def expr(self, e) -> tuple[str, int]:
        match e:
            case n.IntLit() | n.FloatLit():
                return self.text[e.span.start : e.span.end], _ATOM
            case n.BoolLit():
                return ("true" if e.value else "false"), _ATOM
            case n.Name():
                return e.id, _ATOM
            case n.Attr():
                return f"{self(e.value, _POSTFIX)}.{e.attr}", _POSTFIX
            case n.Call():
                return f"{self(e.func, _POSTFIX)}({', '.join(self(a) for a in e.args)})", _POSTFIX
            case n.Index():
                return f"{self(e.value, _POSTFIX)}[{self(e.index)}]", _POSTFIX
            case n.Slice():
                lo = self(e.lo) if e.lo is not None else ""
                hi = self(e.hi) if e.hi is not None else ""
                simple = all(b is None or _simple(b) for b in (e.lo, e.hi))
                colon = ":" if simple else (" :" if not hi else ": " if not lo else " : ")
                return f"{self(e.value, _POSTFIX)}[{lo}{colon}{hi}]", _POSTFIX
            case n.ListFor():  # the one item of a `splits` list, whose brackets the collective prints
                return f"{self(e.value)} for {e.var} in {self(e.lo)} .. {self(e.hi)}", _OR
            case n.Unary(op="not"):
                return f"not {self(e.operand, _NOT)}", _NOT
            case n.Unary():
                return f"{e.op}{self(e.operand, _UNARY)}", _UNARY
            case n.Binary(op=op) if op in _COMPARISONS:
                return f"{self(e.left, _BOR)} {op} {self(e.right, _BOR)}", _CMP
            case n.Binary(op="**"):
                return f"{self(e.left, _POSTFIX)} ** {self(e.right, _UNARY)}", _POW
            case n.Binary(op=op):
                strength = _BINARY[op]
                right = _NOT if op == "and" else strength + 1
                return f"{self(e.left, strength)} {op} {self(e.right, right)}", strength
        raise TypeError(f"not an expression: {type(e).__name__}")  # pragma: no cover - the AST has no other kinds


@lru_cache(maxsize=1)
def _keywords() -> frozenset[str]:
    """The grammar's keywords (`to`, `from`, `print`...): a `(` after one opens a group, not a call."""
    return frozenset(
        t.pattern.value
        for t in lark_parser().terminals
        if t.pattern.type == "str" and t.pattern.value.replace("_", "").isalpha()
    )


def _simple(e) -> bool:
    """Slice bounds written without spaces round the colon (as black does): names and numbers."""
    if isinstance(e, n.Unary) and e.op == "-":
        e = e.operand
    return isinstance(e, (n.IntLit, n.FloatLit, n.Name))


# ---- statements and comments ----------------------------------------------------------------------


@dataclass
class _Source:
    """Where the comments and blank lines are, and which physical lines make one logical line."""

    full: dict[int, tuple[int, str]] = field(default_factory=dict)  # line → (column, text) of a comment line
    trailing: dict[int, tuple[int, str]] = field(default_factory=dict)  # line → (column, comment) after code
    blank: set[int] = field(default_factory=set)
    end_of: dict[int, int] = field(default_factory=dict)  # first line of a logical line → its last line
    code_starts: list[int] = field(default_factory=list)
    count: int = 0


def _scan(text: str, original: str | None = None) -> _Source:
    """`text` with tabs expanded gives the columns; `original` (as written) gives each comment's own text,
    tabs included, since a comment is the user's prose."""
    out = _Source()
    lines = text.split("\n")
    written = (original if original is not None else text).split("\n")
    out.count = len(lines)
    start = None
    for number, (raw, as_written) in enumerate(zip(lines, written, strict=True), 1):
        line = raw.rstrip("\r")
        code, hash_, _ = line.partition("#")
        comment = as_written.rstrip("\r").partition("#")[2]
        if not code.strip():
            if hash_:
                out.full[number] = (len(code) - len(code.lstrip()), _comment(comment))
            elif start is None:
                out.blank.add(number)
            continue
        if hash_:
            out.trailing[number] = (len(code), _comment(comment))
        if start is None:
            start = number
            out.code_starts.append(number)
        if not code.rstrip().endswith("\\"):
            out.end_of[start] = number
            start = None
    return out


def _comment(body: str) -> str:
    """`#text` → `# text`; `#!`, `##` and a tab after the `#` are kept as written."""
    body = body.rstrip()
    if not body or body[0] in " \t#!":
        return "#" + body
    return "# " + body


class _Printer:
    def __init__(self, source: SourceFile):
        self.source = source
        self.e = _Exprs(source)
        self.src = _scan(source.text, source.original)
        self.out: list[str] = []
        self.done = 0  # last source line accounted for
        self.columns: list[int] = []  # original indentation (0-based column) of each open depth
        self.fresh = True  # nothing emitted yet in the current block (no blank line before the first item)
        self.pending_blank = False  # the source had a blank line before the next item

    def module(self, m: n.Module) -> str:
        self.block(m.body, 0)
        self.comments_until(self.src.count + 1, 0)
        return "\n".join(self.out).rstrip("\n") + "\n"

    # layout --------------------------------------------------------------------------------------
    def comments_until(self, line: int, depth: int, column: int | None = None) -> None:
        """Emit the comment lines before source line `line`, where the next item sits at `depth` (written at
        `column`). A comment goes to the open depth whose original indentation is nearest its own: after a
        block's last statement it may belong to that block or to what follows."""

        def written_at(d: int) -> int:
            if d == depth and column is not None:
                return column
            return self.columns[d] if d < len(self.columns) else 4 * d

        blank = False
        for k in range(self.done + 1, line):
            if k in self.src.blank:
                blank = True
            elif k in self.src.full:
                indent, text = self.src.full[k]
                deepest = max(depth, len(self.columns) - 1)
                at = min(range(depth, deepest + 1), key=lambda d: (abs(written_at(d) - indent), -d))
                self.emit(text, at, blank)
                blank = False
        self.pending_blank = blank
        self.done = max(self.done, line - 1)

    def emit(self, text: str, depth: int, blank: bool) -> None:
        if blank and not self.fresh:
            self.out.append("")
        self.out.append(INDENT * depth + text)
        self.fresh = False

    def line(self, first: int, column: int, text: str, depth: int) -> None:
        """Emit one logical line that starts at source line `first` (at 0-based `column`), with its
        trailing comment."""
        self.comments_until(first, depth, column)
        del self.columns[depth:]
        self.columns.append(column)
        last = self.src.end_of.get(first, first)
        if last in self.src.trailing:  # aligned comment columns survive where the code leaves room
            column, comment = self.src.trailing[last]
            code = INDENT * depth + text
            text += " " * max(2, column - len(code)) + comment
        self.emit(text, depth, self.pending_blank)
        self.done = max(self.done, last)

    def block(self, stmts, depth: int) -> None:
        for s in stmts:
            self.stmt(s, depth)

    def suite(self, header_line: int, column: int, text: str, body, depth: int) -> None:
        self.line(header_line, column, text + ":", depth)
        self.fresh = True
        self.block(body, depth + 1)

    def header_before(self, line: int) -> int:
        """The logical line just before `line` (the `else:` that owns a block starting there)."""
        return max(k for k in self.src.code_starts if k < line)

    # statements ----------------------------------------------------------------------------------
    def stmt(self, s, depth: int) -> None:
        e = self.e
        match s:
            case n.For():
                self.suite(s.span.line, s.span.column - 1, f"for {s.var} in {e(s.lo)} .. {e(s.hi)}", s.body, depth)
            case n.While():
                self.suite(s.span.line, s.span.column - 1, f"while {e(s.cond)}", s.body, depth)
            case n.On():
                for k, br in enumerate(s.branches):
                    word = "on" if k == 0 else "else on"
                    self.suite(br.span.line, br.span.column - 1, f"{word} {e(br.cond)}", br.body, depth)
                if s.orelse:
                    head = self.header_before(s.orelse[0].span.line)
                    self.suite(head, self._column_of(head), "else", s.orelse, depth)
            case n.Batch():
                self.suite(s.span.line, s.span.column - 1, self.handle(s) + "batch", s.body, depth)
            case n.Coalesced():
                self.suite(s.span.line, s.span.column - 1, self.handle(s) + "coalesced", s.body, depth)
            case n.FunctionDef():
                params = ", ".join(p.name for p in s.params)
                self.suite(s.span.line, s.span.column - 1, f"def {s.name.name}({params})", s.body, depth)
            case _:
                self.line(s.span.line, s.span.column - 1, self.simple(s), depth)

    def _column_of(self, line: int) -> int:
        text = self.source.line_text(line)
        return len(text) - len(text.lstrip())

    def simple(self, s) -> str:
        e = self.e
        match s:
            case n.ProgramDecl() | n.WorldDecl() | n.BackendDecl() | n.ParamDecl() | n.TensorDecl() | n.GroupDecl():
                return self.declaration(s)
            case n.TableDecl():
                return f"table {s.name} = [{', '.join(e(x) for x in s.entries)}]"
            case n.MeshDecl():
                return f"mesh {s.name} = ({', '.join(f'{d.name}={e(d.size)}' for d in s.dims)})"
            case n.Let():
                return f"let {s.name} = {e(s.value)}"
            case n.NewGroup():
                return f"{s.name.name} = new_group [{', '.join(e(m) for m in s.members)}]"
            case n.Assign():
                return f"{e(s.target, _POSTFIX)} {s.op} {e(s.value)}"
            case n.Send() | n.Recv():
                return self.handle(s) + self.p2p(s)
            case n.Collective():
                return self.handle(s) + self.collective(s)
            case n.Wait():
                if s.all:
                    return "wait all" + (f" {s.array.name}" if s.array is not None else "")
                return "wait " + ", ".join(self.handle_ref(h) for h in s.handles)
            case n.Expect():
                return f"expect {e(s.cond)}"
            case n.Print():
                return "print " + ", ".join(e(v, _POSTFIX) for v in s.views)
            case n.CallStmt():
                return f"{s.name.name}({', '.join(e(a) for a in s.args)})"
        raise TypeError(f"not a statement: {type(s).__name__}")  # pragma: no cover - the AST has no other kinds

    def declaration(self, s) -> str:
        """A header line, a param, a tensor or a group declaration."""
        e = self.e
        match s:
            case n.ProgramDecl():
                return f"program {s.name}"
            case n.WorldDecl():
                if len(s.sizes) == 1:
                    return f"world {s.sizes[0]}"
                if s.sizes:
                    return f"world [{', '.join(map(str, s.sizes))}]"
                return f"world {s.lo}.." + ("" if s.open else str(s.hi))
            case n.BackendDecl():
                return "backend " + ", ".join(b.name for b in s.names)
            case n.ParamDecl():
                return f"param {s.name} = {e(s.default)}"
            case n.TensorDecl():
                init = f" = {e(s.init)}" if s.init is not None else ""
                return f"tensor {s.name}: {s.dtype.name}[{', '.join(e(d) for d in s.shape)}]{init}"
            case n.GroupDecl():
                if s.split_key is not None:
                    return f"group {s.name} = split by {e(s.split_key)}"
                return f"group {s.name} = [{', '.join(e(m) for m in s.members)}]"
        raise TypeError(f"not a declaration: {type(s).__name__}")  # pragma: no cover - `simple` sends only these

    def handle(self, s) -> str:
        return f"{self.handle_ref(s.handle)} = " if s.handle is not None else ""

    def handle_ref(self, h: n.HandleRef) -> str:
        return h.name if h.index is None else f"{h.name}[{self.e(h.index)}]"

    def tail(self, s) -> str:
        """The optional `tag T` and `in GROUP[.DIM]` that end P2P ops and collectives."""
        tag = f" tag {self.e(s.tag)}" if getattr(s, "tag", None) is not None else ""
        return tag + (f" in {s.group.text}" if s.group is not None else "")

    def p2p(self, s: n.Send | n.Recv) -> str:
        word, prep = form(isinstance(s, n.Send), s.blocking).word, "to" if isinstance(s, n.Send) else "from"
        peer = "any" if s.peer is None else self.e(s.peer)
        return f"{word} {self.e(s.buffer, _POSTFIX)} {prep} {peer}{self.tail(s)}"

    def collective(self, s: n.Collective) -> str:
        e = self.e

        def views(items, listed: bool) -> str:
            return "[" + ", ".join(e(v, _POSTFIX) for v in items) + "]" if listed else e(items[0], _POSTFIX)

        redop = ""
        if s.redop is not None:
            redop = f" op {s.redop.name.name}" + (f"({e(s.redop.scale)})" if s.redop.scale is not None else "")
        ins = views(s.inputs, s.inputs_listed) if s.inputs else ""
        outs = views(s.outputs, s.outputs_listed) if s.outputs else ""
        root = e(s.root) if s.root is not None else ""
        splits = ""
        if s.in_splits:
            splits = f" splits [{', '.join(e(x) for x in s.in_splits)}], [{', '.join(e(x) for x in s.out_splits)}]"
        body = KINDS[s.op].form.format(ins=ins, outs=outs, root=root, redop=redop, splits=splits)
        return body + self.tail(s)
