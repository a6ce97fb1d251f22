"""The AST: what the user wrote, unevaluated, every node with its source span.

Expressions and statements are discriminated unions on `kind`. Children are tuples so frozen nodes
stay immutable and hashable.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Annotated, ClassVar, Literal

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10
    from typing_extensions import dataclass_transform

from commdsl.source import Span
from commdsl.validation import FORBID_EXTRA, after, tagged


@dataclass_transform(kw_only_default=True, frozen_default=True)
@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Node:
    """Every node is a frozen, keyword-only dataclass (each subclass is made one here). The parser builds
    nodes unvalidated; pydantic checks them against these annotations in tests/test_parser.py (every node
    of every example) and wherever `commdsl.validation.validate` is called (see that module for why).

    Equality (by kind and fields), hashing and repr are written once here, not generated for each class:
    Python 3.11's `dataclass` compiles every generated method on its own, and these three for 43 classes
    were 6 ms of each lint's start-up (docs/benchmarks.md)."""

    __pydantic_config__ = FORBID_EXTRA
    _names: ClassVar[tuple[str, ...]]
    span: Span

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True, kw_only=True, eq=False, repr=False)(cls)
        cls._names = tuple(f.name for f in fields(cls))

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self._names)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self._names)})"


class Ident(Node):
    """A name token worth pointing at (a dtype, a reduce op, a handle, a group)."""

    kind: Literal["ident"] = "ident"
    name: str


# ---- expressions ---------------------------------------------------------------------------------


class IntLit(Node):
    kind: Literal["int"] = "int"
    value: int


class FloatLit(Node):
    kind: Literal["float"] = "float"
    value: float


class BoolLit(Node):
    kind: Literal["bool"] = "bool"
    value: bool


class Name(Node):
    kind: Literal["name"] = "name"
    id: str


class Attr(Node):
    """`x.chunk`, `g.rank`, `m.tp.size`."""

    kind: Literal["attr"] = "attr"
    value: Expr
    attr: str


class Call(Node):
    """`min(a, b)`, `x.chunk(k, parts)`, `rand(seed)`."""

    kind: Literal["call"] = "call"
    func: Expr
    args: tuple[Expr, ...]


class Slice(Node):
    """`x[lo:hi]` along the first dimension."""

    kind: Literal["slice"] = "slice"
    value: Expr
    lo: Expr | None
    hi: Expr | None


class Index(Node):
    """`x[k]`: row k of the first dimension (the dimension is dropped, as in torch)."""

    kind: Literal["index"] = "index"
    value: Expr
    index: Expr


class ListFor(Node):
    """`[EXPR for j in LO .. HI]`: one value per j (split sizes, a group's members, a table's entries)."""

    kind: Literal["list_for"] = "list_for"
    value: Expr
    var: str
    lo: Expr
    hi: Expr


class Unary(Node):
    kind: Literal["unary"] = "unary"
    op: Literal["-", "+", "not"]
    operand: Expr


class Binary(Node):
    """Arithmetic, integer (`^ & | << >>`), comparison and boolean operators."""

    kind: Literal["binary"] = "binary"
    op: str
    left: Expr
    right: Expr


Expr = Annotated[
    IntLit | FloatLit | BoolLit | Name | Attr | Call | Slice | Index | Unary | Binary | ListFor,
    tagged("kind"),
]


class HandleRef(Node):
    """A request handle: `h`, or slot `h[i]` of an array of handles (any integer index, per rank)."""

    kind: Literal["handle"] = "handle"
    name: str
    index: Expr | None = None

    @property
    def is_array(self) -> bool:
        return self.index is not None


# ---- header and declarations ---------------------------------------------------------------------


class ProgramDecl(Node):
    kind: Literal["program"] = "program"
    name: str


class WorldDecl(Node):
    """`world 4`, `world 2..16`, `world 2..` (open: checked up to a bound) or `world [2, 4, 8]`."""

    kind: Literal["world"] = "world"
    sizes: tuple[int, ...] = ()
    lo: int | None = None
    hi: int | None = None
    open: bool = False


class BackendDecl(Node):
    kind: Literal["backend"] = "backend"
    names: tuple[Ident, ...]


class ParamDecl(Node):
    kind: Literal["param"] = "param"
    name: str
    default: Expr


class TensorDecl(Node):
    kind: Literal["tensor"] = "tensor"
    name: str
    dtype: Ident
    shape: tuple[Expr, ...]
    init: Expr | None


class GroupDecl(Node):
    """`group g = [0, 2]` or `group g = [2 * j for j in 0 .. 3]` (members: one `ListFor` when computed), or
    `group pairs = split by rank // 2` (one group per key)."""

    kind: Literal["group"] = "group"
    name: str
    members: tuple[Expr, ...] = ()
    split_key: Expr | None = None


class MeshDim(Node):
    kind: Literal["mesh_dim"] = "mesh_dim"
    name: str
    size: Expr


class MeshDecl(Node):
    """`mesh m = (dp=2, tp=world // 2)`: ranks laid out row-major; `m.tp` groups ranks sharing dp."""

    kind: Literal["mesh"] = "mesh"
    name: str
    dims: tuple[MeshDim, ...]


class NewGroup(Node):
    """`g = new_group [0, 2]`: a group made as a step, by the ranks that run it, when they run it
    (torch's `new_group`, which every rank of the world must call in the same order with the same ranks)."""

    kind: Literal["new_group"] = "new_group"
    name: Ident
    members: tuple[Expr, ...]


class TableDecl(Node):
    """`table stage_of = [0, 0, 1, 1]` or `table t = [E for j in LO .. HI]` (one `ListFor` entry): integers,
    the same on every rank, read as `stage_of[k]` in integer expressions."""

    kind: Literal["table"] = "table"
    name: str
    entries: tuple[Expr, ...]


class Let(Node):
    kind: Literal["let"] = "let"
    name: str
    value: Expr


# ---- statements ----------------------------------------------------------------------------------


class Assign(Node):
    """Local compute: `x = expr`, `x.chunk(k, p) += tmp`; or, when `target` names a `let`, its new value."""

    kind: Literal["assign"] = "assign"
    target: Expr
    op: Literal["=", "+=", "-=", "*=", "/=", "<<=", ">>=", "&=", "|=", "^="]
    value: Expr


class GroupRef(Node):
    kind: Literal["group_ref"] = "group_ref"
    name: str
    dim: str | None = None

    @property
    def text(self) -> str:
        return f"{self.name}.{self.dim}" if self.dim else self.name


class RedOp(Node):
    kind: Literal["redop"] = "redop"
    name: Ident
    scale: Expr | None = None


class Send(Node):
    """`send`, or `isend` when `blocking` is false (then `handle` names its request, if any)."""

    kind: Literal["send"] = "send"
    buffer: Expr
    peer: Expr
    tag: Expr | None = None
    group: GroupRef | None = None
    blocking: bool = True
    handle: HandleRef | None = None


class Recv(Node):
    """`recv`, or `irecv` when `blocking` is false; `peer` None is `from any` (torch's `src=None`)."""

    kind: Literal["recv"] = "recv"
    buffer: Expr
    peer: Expr | None
    tag: Expr | None = None
    group: GroupRef | None = None
    blocking: bool = True
    handle: HandleRef | None = None


def _collective_kind(name: str) -> str:
    """A collective's name must be one of `commdsl.collectives.KINDS` (each kind's module defines it)."""
    from commdsl.collectives import KINDS  # late: the kinds import values, which import these nodes

    if name not in KINDS:
        raise ValueError(f"unknown collective {name!r}")
    return name


CollectiveKind = Annotated[str, after(_collective_kind)]


class Collective(Node):
    """Every collective. `inputs`/`outputs` are views; `*_list` marks the list forms (`into [a, b]`)."""

    kind: Literal["collective"] = "collective"
    op: CollectiveKind
    inputs: tuple[Expr, ...] = ()
    outputs: tuple[Expr, ...] = ()
    inputs_listed: bool = False
    outputs_listed: bool = False
    root: Expr | None = None
    redop: RedOp | None = None
    in_splits: tuple[Expr, ...] = ()
    out_splits: tuple[Expr, ...] = ()
    group: GroupRef | None = None
    handle: HandleRef | None = None

    @property
    def blocking(self) -> bool:
        return self.handle is None


class Wait(Node):
    """`wait h1, h[j]`, `wait all` (every request this rank has not waited for), or `wait all h` (those of
    the array of handles `h`)."""

    kind: Literal["wait"] = "wait"
    handles: tuple[HandleRef, ...] = ()
    all: bool = False
    array: Ident | None = None


class Expect(Node):
    kind: Literal["expect"] = "expect"
    cond: Expr


class Print(Node):
    kind: Literal["print"] = "print"
    views: tuple[Expr, ...]


class For(Node):
    """`for s in lo .. hi:` (inclusive)."""

    kind: Literal["for"] = "for"
    var: str
    lo: Expr
    hi: Expr
    body: tuple[Stmt, ...]


class While(Node):
    """`while cond:` — repeats while `cond` holds on a rank; the body advances it by reassigning a `let`."""

    kind: Literal["while"] = "while"
    cond: Expr
    body: tuple[Stmt, ...]


class Branch(Node):
    kind: Literal["branch"] = "branch"
    cond: Expr
    body: tuple[Stmt, ...]


class On(Node):
    """`on cond: ... else on cond: ... else: ...` — per-rank control flow on static conditions."""

    kind: Literal["on"] = "on"
    branches: tuple[Branch, ...]
    orelse: tuple[Stmt, ...] = ()


class Batch(Node):
    """`batch:` — the P2P ops inside are posted together (batch_isend_irecv) and waited at the end; bound to
    a handle (`b = batch:`) it does not wait, and `wait b` waits for all its ops later."""

    kind: Literal["batch"] = "batch"
    body: tuple[Stmt, ...]
    handle: HandleRef | None = None


class Coalesced(Node):
    """`coalesced:` — the collectives inside, all of one group, issued as one backend call at the block's end
    (torch's `_coalescing_manager`, as DDP and FSDP bucket gradients) and waited there; bound to a handle
    (`h = coalesced:`) the call is async, and `wait h` waits for it later."""

    kind: Literal["coalesced"] = "coalesced"
    body: tuple[Stmt, ...]
    handle: HandleRef | None = None


class CallStmt(Node):
    """`exchange(x.chunk(k, world), right)`: a call of a `def`, inlined where it stands."""

    kind: Literal["call_stmt"] = "call_stmt"
    name: Ident
    args: tuple[Expr, ...]


class FunctionDef(Node):
    """`def exchange(buf, peer):` — a macro: its body is inlined at each call, each parameter bound to the
    call's argument (a view, an integer or a group: the argument decides, per call)."""

    kind: Literal["def"] = "def"
    name: Ident
    params: tuple[Ident, ...]
    body: tuple[Stmt, ...]


Stmt = Annotated[
    ProgramDecl
    | WorldDecl
    | BackendDecl
    | ParamDecl
    | TensorDecl
    | GroupDecl
    | MeshDecl
    | NewGroup
    | TableDecl
    | Let
    | Assign
    | Send
    | Recv
    | Collective
    | Wait
    | Expect
    | Print
    | For
    | While
    | On
    | Batch
    | Coalesced
    | CallStmt
    | FunctionDef,
    tagged("kind"),
]


class Module(Node):
    """A parsed file: its statements in order."""

    kind: Literal["module"] = "module"
    body: tuple[Stmt, ...]


def view_tensor(e) -> str | None:
    """The name at the root of view syntax (`x`, `x[a:b]`, `x[k]`, `x.chunk(k, n)`), or None for any other
    expression; whether that name is a tensor is the caller's scope to say."""
    match e:
        case Name():
            return e.id
        case Slice() | Index():
            return view_tensor(e.value)
        case Call(func=Attr(attr="chunk") as f):
            return view_tensor(f.value)
    return None


def blocks(s) -> list[tuple]:
    """The blocks of statements directly inside a statement: a loop's, a `batch:`'s or `coalesced:`'s body, each
    branch of an `on` and its `else` (none for a simple statement; a function's body is its definition's)."""
    match s:
        case For() | While() | Batch() | Coalesced():
            return [s.body]
        case On():
            return [br.body for br in s.branches] + [s.orelse]
    return []


def statements(stmts: Iterable) -> Iterator:
    """Every statement of a block, each followed by the statements nested in it (`blocks`), in program order."""
    for s in stmts:
        yield s
        for block in blocks(s):
            yield from statements(block)


def bound(stmts: Iterable) -> Iterator:
    """Every op and batch of a block (nested ones too, in program order) bound to a handle (`h = isend ...`,
    `h = batch:`), which a `wait` may name."""
    for s in statements(stmts):
        if isinstance(s, (Send, Recv, Collective, Batch, Coalesced)) and s.handle is not None:
            yield s


def handles_bound(stmts: Iterable) -> Iterator:
    """The handles of `bound`, in program order."""
    return (s.handle for s in bound(stmts))


def children(e) -> list:
    """The sub-expressions of an expression node (none for literals and names)."""
    match e:
        case Attr():
            return [e.value]
        case Call():
            return [e.func, *e.args]
        case Slice():
            return [x for x in (e.value, e.lo, e.hi) if x is not None]
        case Index():
            return [e.value, e.index]
        case Unary():
            return [e.operand]
        case Binary():
            return [e.left, e.right]
        case ListFor():
            return [e.value, e.lo, e.hi]
    return []


def names_read(e) -> set[str]:
    """The names an expression reads (a `ListFor`'s own variable among them)."""
    if isinstance(e, Name):
        return {e.id}
    out: set[str] = set()
    for child in children(e):
        out |= names_read(child)
    return out
