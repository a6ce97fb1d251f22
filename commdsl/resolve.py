"""AST → checked Program: names resolved, every expression used where its kind fits.

What can be decided without a world size is decided here (undefined names, a tensor where a rank
is needed, an unknown dtype or reduce op, a declaration inside a block). Everything that depends on
the world size or params (bounds, shapes) is checked by `expand`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

from commdsl.collectives import KINDS
from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.dtypes import DTYPES, REDUCE_OPS
from commdsl.p2p import form
from commdsl.rules import Rule
from commdsl.rules.names import (
    BadReduceOp,
    DuplicateDeclaration,
    InvalidBatch,
    InvalidCoalesced,
    InvalidExpect,
    InvalidView,
    InvalidWorld,
    MisplacedDeclaration,
    MisusedHandle,
    RecursiveFunction,
    UndefinedName,
    UnknownBackend,
    UnknownDtype,
    WrongArgumentCount,
    WrongKindOfName,
)
from commdsl.rules.sizes import InvalidTensorSize, NotAnInteger
from commdsl.source import SourceFile
from commdsl.syntax import nodes as n
from commdsl.syntax.parser import parse_tree
from commdsl.syntax.transform import to_ast
from commdsl.validation import FORBID_EXTRA
from commdsl.values import INTEGER_OPS

MAX_WORLD = 1 << 16
"""The largest world size a program may declare: every rank is expanded in memory."""
MAX_DIMS = 64
"""The most dimensions a tensor may have (NumPy's limit; the simulator holds tensors as ndarrays)."""
OPEN_WORLD_BOUND = 64
"""An open range `world 2..` is checked at every size up to this bound."""

BACKENDS = ("gloo", "nccl")
BUILTINS = {"rank": "static", "world": "static", "i": "index"}
ELEMENT_FUNCS = {"min": 2, "max": 2, "abs": 1}
INIT_FUNCS = {"rand": 1, "randn": 1}
INTEGER_FUNCS = {"log2": 1}
"""Functions of per-rank integers: in an element expression their arguments cannot vary per element."""
COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}
DATA_FUNC = "sum"
"""`sum(E)`: an integer read from tensor data (the only function that reads data into an integer)."""


@dataclass(frozen=True, kw_only=True)
class Program:
    """A program whose names and kinds are consistent; still parametric in world size and params."""

    __pydantic_config__ = {**FORBID_EXTRA, "arbitrary_types_allowed": True}  # its SourceFile is a plain class

    name: str
    path: str
    world: n.WorldDecl | None
    backends: tuple[str, ...]
    params: tuple[n.ParamDecl, ...]
    tensors: tuple[n.TensorDecl, ...]
    groups: tuple[n.GroupDecl | n.MeshDecl, ...]
    tables: tuple[n.TableDecl, ...]
    functions: tuple[n.FunctionDef, ...] = ()
    body: tuple[n.Stmt, ...]
    source: SourceFile
    reads_data: bool = False  # some integer is read from tensor data (`T[k]`, `sum(E)`): `expand` runs it

    # the public API's verbs as methods (commdsl/__init__.py holds them, with their documentation)
    def check(self, **options):
        import commdsl

        return commdsl.check(self, **options)

    def simulate(self, world: int, params=None):
        import commdsl

        return commdsl.simulate(commdsl.expand(self, world, params))

    def compile(self, world: int | None = None, **options) -> str:
        import commdsl

        return commdsl.compile(self, world, **options)

    def run(self, nproc: int, **options):
        import commdsl

        return commdsl.run(self, nproc, **options)

    def world_sizes(self, bound: int = OPEN_WORLD_BOUND) -> list[int]:
        """The sizes the program declares; an open range stops at `bound`; no `world` means 1..bound."""
        w = self.world
        if w is None:
            return list(range(1, bound + 1))
        if w.sizes:
            return list(w.sizes)
        hi = bound if w.open else w.hi
        return list(range(w.lo, max(w.lo, hi) + 1)) if w.open else list(range(w.lo, hi + 1))

    def accepts(self, world: int) -> bool:
        w = self.world
        if w is None:
            return world >= 1
        if w.sizes:
            return world in w.sizes
        return world >= w.lo and (w.open or world <= w.hi)

    def only_world(self) -> int | None:
        """The world size when the program declares exactly one (`world 2`, `world [8]`, `world 4..4`), else None:
        the size a command may assume when none is given."""
        if self.world is None or self.world.open:
            return None
        sizes = set(self.world_sizes())
        return sizes.pop() if len(sizes) == 1 else None

    def describe_world(self) -> str:
        w = self.world
        if w is None:
            return "any size"
        if w.sizes:
            return ", ".join(map(str, w.sizes))
        return f"{w.lo}.." if w.open else f"{w.lo}..{w.hi}"


@dataclass
class _Scope:
    names: dict[str, tuple[str, n.Node | None]] = field(default_factory=dict)
    parent: _Scope | None = None

    def lookup(self, name: str):
        scope = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def all_names(self) -> set[str]:
        out, scope = set(), self
        while scope is not None:
            out |= set(scope.names)
            scope = scope.parent
        return out


class _Resolver:
    def __init__(self, module: n.Module, source: SourceFile):
        self.module = module
        self.source = source
        self.diags: list[Diagnostic] = []
        self.in_body = False
        self.reads_data = False
        self.top = _Scope(names={k: (v, None) for k, v in BUILTINS.items()})
        self.functions: dict[str, n.FunctionDef] = {}
        # (function, its arguments' kinds, in a batch) → what checking the body with those kinds found there
        self.checked_calls: dict[tuple, set[tuple]] = {}
        self.calling: list[n.CallStmt] = []  # the calls whose bodies are being checked, outermost first

    def error(self, rule: type[Rule], message: str, node: n.Node, label: str = "", help: str | None = None, notes=()):
        self.diags.append(rule.diagnostic(message, span=node.span, label=label, help=help, notes=notes))

    # declarations --------------------------------------------------------------------------------
    def declare(self, scope: _Scope, name: str, kind: str, node: n.Node):
        existing = scope.lookup(name)
        if existing is not None and not (kind == "let" and existing[0] == "let" and name not in scope.names):
            what, where = existing
            label = "already declared" if where is None else f"already declared as a {what}"
            notes = [] if where is None else [n_note("first declared here", where)]
            msg = f"`{name}` is a built-in name" if where is None else f"`{name}` is declared twice"
            self.error(
                DuplicateDeclaration,
                msg,
                node,
                label=label,
                notes=notes,
                help=None if where else f"`{name}` always means the built-in; choose another name",
            )
            return
        scope.names[name] = (kind, node)

    def check_header(self, stmt: n.ProgramDecl | n.WorldDecl | n.BackendDecl, header: dict, seen_statement: bool):
        """A header line (`program`, `world`, `backend`): once each, before any statement; recorded in `header`."""
        key = stmt.kind
        if key in header:
            self.error(
                DuplicateDeclaration,
                f"`{key}` is declared twice",
                stmt,
                label="second declaration",
                notes=[n_note("first declared here", header[key])],
            )
            return
        if seen_statement:
            self.error(
                MisplacedDeclaration,
                f"`{key}` must come before the program's statements",
                stmt,
                label="header line after a statement",
                help="move the header (program, world, backend, param) to the top",
            )
        header[key] = stmt
        if isinstance(stmt, n.WorldDecl):
            self.check_world(stmt)
        if isinstance(stmt, n.BackendDecl):
            for ident in stmt.names:
                if ident.name not in BACKENDS:
                    self.error(
                        UnknownBackend,
                        f"unknown backend `{ident.name}`",
                        ident,
                        label="not a backend",
                        help="backends are `gloo` and `nccl`",
                    )

    def run(self) -> Program:
        header: dict[str, n.Node] = {}
        params, tensors, groups, tables, body = [], [], [], [], []
        handles = self.collect_handles(self.module.body)
        seen_statement = False
        for stmt in self.module.body:
            if isinstance(stmt, (n.ProgramDecl, n.WorldDecl, n.BackendDecl)):
                self.check_header(stmt, header, seen_statement)
                continue
            if isinstance(stmt, n.ParamDecl):
                self.check_expr(stmt.default, "static", self.top)
                self.declare(self.top, stmt.name, "param", stmt)
                params.append(stmt)
                continue
            if isinstance(stmt, n.TensorDecl):
                self.check_tensor(stmt)
                tensors.append(stmt)
                continue
            if isinstance(stmt, (n.GroupDecl, n.MeshDecl)):
                self.check_group(stmt)
                groups.append(stmt)
                continue
            if isinstance(stmt, n.TableDecl):
                self.check_table(stmt)
                tables.append(stmt)
                continue
            if isinstance(stmt, n.FunctionDef):
                self.declare(self.top, stmt.name.name, "function", stmt.name)
                self.functions.setdefault(stmt.name.name, stmt)
                continue
            seen_statement = True
            body.append(stmt)
        self.in_body = True  # data reads (`T[k]`, `sum(E)`) give integers in statements (bodies included) only
        for f in self.functions.values():
            self.check_def(f)
        self.check_recursion()
        main = _Scope(parent=self.top)  # a function's body sees `self.top` only, not these
        for name, node in handles.items():
            self.declare(main, name, "handle array" if node.is_array else "handle", node)
        for name, node in step_group_names(self.module.body).items():
            self.declare(main, name, "group", node)  # the program's name for the group a rank made last
        self.check_block(tuple(body), _Scope(parent=main), in_batch=False)
        if self.diags:
            raise CommdslError(self.diags)
        prog = header.get("program")
        world = header.get("world")
        backend = header.get("backend")
        return Program(
            name=prog.name if prog else "program",
            path=self.module.span.path,
            world=world,
            backends=tuple(i.name for i in backend.names) if backend else ("gloo",),
            params=tuple(params),
            tensors=tuple(tensors),
            groups=tuple(groups),
            tables=tuple(tables),
            functions=tuple(self.functions.values()),
            body=tuple(body),
            source=self.source,
            reads_data=self.reads_data,
        )

    def check_world(self, w: n.WorldDecl):
        sizes = list(w.sizes) + [x for x in (w.lo, w.hi) if x is not None]
        if any(s < 1 for s in sizes):
            self.error(InvalidWorld, "a world size must be at least 1", w, label="world size 0")
        elif w.hi is not None and w.lo > w.hi:
            self.error(
                InvalidWorld,
                f"empty world range `{w.lo}..{w.hi}`",
                w,
                label="the range is empty",
                help=f"write `world {w.hi}..{w.lo}`",
            )
        elif len(set(w.sizes)) != len(w.sizes):
            self.error(InvalidWorld, "a world size is listed twice", w, label="duplicate size")
        elif max(sizes) > MAX_WORLD:
            self.error(InvalidWorld, f"a world size must be at most {MAX_WORLD}", w, label=f"world size {max(sizes)}")

    def check_tensor(self, t: n.TensorDecl):
        if t.dtype.name not in DTYPES:
            self.error(
                UnknownDtype,
                f"unknown dtype `{t.dtype.name}`",
                t.dtype,
                label="not a dtype",
                help=_suggest(t.dtype.name, DTYPES, "dtypes are " + ", ".join(DTYPES)),
            )
        if len(t.shape) > MAX_DIMS:
            self.error(
                InvalidTensorSize,
                f"tensor `{t.name}` has {len(t.shape)} dimensions, more than {MAX_DIMS}",
                t.shape[MAX_DIMS],
                label=f"dimension {MAX_DIMS + 1}",
                help=f"declare it with at most {MAX_DIMS} dimensions (merge some of them)",
            )
        for dim in t.shape:
            self.check_expr(dim, "static", self.top)
        self.check_no_tensor_sizes(t.shape, "a tensor's shape")
        if t.init is not None:
            self.check_expr(t.init, "init", self.top)
            for call in _random_calls(t.init) if not _random_calls(t.init, top=True) else ():
                self.error(
                    WrongKindOfName,
                    f"`{call.func.id}` must be the whole initialiser",
                    call,
                    label="combined with other values",
                    help=f"write `= {call.func.id}(seed)` alone, then scale it with an assignment",
                )
        self.declare(self.top, t.name, "tensor", t)

    def check_group(self, g: n.GroupDecl | n.MeshDecl):
        if isinstance(g, n.MeshDecl):
            dims = set()
            self.check_no_tensor_sizes(tuple(d.size for d in g.dims), "a mesh")
            for d in g.dims:
                self.check_expr(d.size, "static", self.top)
                if d.name in dims:
                    self.error(
                        DuplicateDeclaration, f"mesh dimension `{d.name}` is declared twice", d, label="duplicate"
                    )
                dims.add(d.name)
            self.declare(self.top, g.name, "mesh", g)
            return
        for m in g.members:
            self.check_expr(m, "static", self.top)
        if g.split_key is not None:
            self.check_expr(g.split_key, "static", self.top)
        self.check_no_tensor_sizes(g.members + ((g.split_key,) if g.split_key is not None else ()), "a group")
        self.declare(self.top, g.name, "group", g)

    def check_table(self, t: n.TableDecl):
        """A table's entries: integer expressions the same on every rank (`rank` is refused at expansion)."""
        for x in t.entries:
            self.check_expr(x, "static", self.top)
        self.check_no_tensor_sizes(t.entries, "a table")
        self.declare(self.top, t.name, "table", t)

    def check_no_tensor_sizes(self, exprs, what: str):
        """Groups, meshes and shapes are settled before any tensor exists: no `VIEW.size`/`.rows` in them."""
        for e in exprs:
            for sub in _walk(e):
                if isinstance(sub, n.Attr) and sub.attr in ("size", "rows") and _is_view_syntax(sub.value, self.top):
                    self.error(
                        WrongKindOfName,
                        f"{what} cannot depend on a tensor's `.{sub.attr}`",
                        sub,
                        label="not known before the tensors are made",
                        help="use a param instead",
                    )

    # statements ----------------------------------------------------------------------------------
    def check_block(self, stmts: tuple, scope: _Scope, in_batch: bool):
        for stmt in stmts:
            self.check_stmt(stmt, scope, in_batch)

    def check_stmt(self, s, scope: _Scope, in_batch: bool):
        if (
            isinstance(s, n.Assign)
            and isinstance(s.target, n.Name)
            and (scope.lookup(s.target.id) or ("",))[0] == "let"
        ):
            self.check_expr(s.value, "static", scope)  # a `let`'s new value, on the ranks that run this line
            return
        if in_batch and isinstance(s, (n.Assign, n.Expect, n.Print)):  # also under a `for` or `on` in the batch
            word = {"assign": "an assignment", "expect": "`expect`", "print": "`print`"}[s.kind]
            self.error(
                InvalidBatch,
                f"{word} cannot be part of a `batch`",
                s,
                label="only send, recv, isend and irecv batch together",
                help="move it after the `batch:` block, which waits for its ops at its end",
            )
        match s:
            case (
                n.ProgramDecl()
                | n.WorldDecl()
                | n.BackendDecl()
                | n.ParamDecl()
                | n.TensorDecl()
                | n.GroupDecl()
                | n.MeshDecl()
                | n.TableDecl()
                | n.FunctionDef()
            ):
                self.error(
                    MisplacedDeclaration,
                    f"`{s.kind}` declarations belong at the top level",
                    s,
                    label="declared inside a block",
                    help="declare tensors, groups, tables, params, functions and the header at the top of the file",
                )
            case n.Let():
                self.check_expr(s.value, "static", scope)
                self.declare(scope, s.name, "let", s)
            case n.NewGroup():
                self.check_new_group(s, scope, in_batch)
            case n.Assign():
                self.check_view(s.target, scope)
                self.check_expr(s.value, "elem", scope)
                if s.op[:-1] in INTEGER_OPS:
                    self.error(
                        WrongKindOfName,
                        f"`{s.op}` works on integer `let`s, not on tensor elements",
                        s,
                        label="element-wise integer operators are not in the language",
                        help="element expressions use `+ - * / // % **`, `min`, `max` and `abs`",
                    )
            case n.Send() | n.Recv():
                self.check_p2p(s, scope, in_batch)
            case n.Collective():
                self.check_collective(s, scope, in_batch)
            case n.Wait():
                if in_batch:
                    self.error(InvalidBatch, "`wait` inside `batch`", s, label="the batch waits at its end by itself")
                self.check_wait(s, scope)
            case n.Expect():
                self.check_expect(s, scope)
            case n.Print():
                self.check_views(s.views, scope)
            case n.For() | n.While() | n.On() | n.Batch() | n.Coalesced() | n.CallStmt():
                self.check_compound(s, scope, in_batch)

    # functions -----------------------------------------------------------------------------------
    def check_def(self, f: n.FunctionDef):
        """What a definition shows without a call: parameters named once each, no clash with a declaration,
        and no `new_group` (its name would be the program's, made by whichever call ran last)."""
        seen: dict[str, n.Ident] = {}
        for p in f.params:
            found = self.top.lookup(p.name)
            if p.name in seen or found is not None:
                where = seen.get(p.name) or (found[1] if found else None)
                self.error(
                    DuplicateDeclaration,
                    f"`{p.name}` is a built-in name" if found and found[1] is None else f"`{p.name}` is declared twice",
                    p,
                    label="a parameter of `" + f.name.name + "`",
                    notes=[n_note("first declared here", where)] if where is not None else [],
                    help="a function's parameters are new names: choose one no declaration uses",
                )
            seen.setdefault(p.name, p)
        self.collect_handles(f.body)
        for node in step_group_names(f.body).values():
            self.error(
                MisplacedDeclaration,
                "`new_group` cannot be inside a function",
                node,
                label=f"inside `def {f.name.name}`",
                help="make the group in the program's body and pass it to the function",
            )

    def check_recursion(self):
        """N113 once per cycle of calls between functions, at the call that closes it in the first function."""
        reported: set[frozenset] = set()
        for start in self.functions:
            path = [start]
            calls = [_calls(self.functions[start].body)]
            while calls:
                if not calls[-1]:
                    calls.pop()
                    path.pop()
                    continue
                call = calls[-1].pop(0)
                callee = call.name.name
                if callee == start:
                    cycle = frozenset(path)
                    if cycle not in reported:
                        reported.add(cycle)
                        chain = " → ".join(f"`{name}`" for name in path + [start])
                        through = ", ".join(f"`{name}`" for name in path[1:])
                        self.error(
                            RecursiveFunction,
                            f"`{start}` calls itself" + (f" through {through} ({chain})" if len(path) > 1 else ""),
                            call,
                            label="a recursive call",
                            help="a function is inlined at each call: repeat with `for` or `while` instead",
                        )
                elif callee in self.functions and callee not in path:
                    path.append(callee)
                    calls.append(_calls(self.functions[callee].body))

    def check_call(self, s: n.CallStmt, scope: _Scope, in_batch: bool):
        """A call: a function, as many arguments as it has parameters, and each argument a view, a group or an
        integer. Its body is checked with each parameter of its argument's kind, once per distinct set of kinds
        (errors found there carry a note naming this call)."""
        name = s.name.name
        found = scope.lookup(name)
        if found is None or found[0] != "function":
            if found is None:
                close = difflib.get_close_matches(name, sorted(self.functions), n=1)
                known = ", ".join(f"`{f}`" for f in self.functions)
                help = f"a function `{close[0]}` exists" if close else (f"functions: {known}" if known else None)
                self.error(UndefinedName, f"undefined function `{name}`", s.name, label="not defined", help=help)
            else:
                self.error(WrongKindOfName, f"`{name}` is a {found[0]}, not a function", s.name, label="not a function")
            for a in s.args:
                self.check_argument(a, scope)
            return
        f = self.functions[name]
        kinds = tuple(self.check_argument(a, scope) for a in s.args)
        if len(s.args) != len(f.params):
            wanted = ", ".join(p.name for p in f.params)
            self.error(
                WrongArgumentCount,
                f"`{name}` takes {len(f.params)} argument{'s' * (len(f.params) != 1)}, {len(s.args)} given",
                s,
                label=f"expected `{name}({wanted})`",
                notes=[n_note("defined here", f.name)],
            )
            return
        key = (name, tuple((k, id(d)) for k, d in kinds), in_batch)
        note = call_note((*self.calling, s))
        if key in self.checked_calls:  # checked with these kinds already: what it found there, this call reaches too
            found = self.checked_calls[key]
            self.diags = [_noted(d, note) if (d.code, d.span, d.message) in found else d for d in self.diags]
            return
        if None in [k for k, _ in kinds] or any(c.name.name == name for c in self.calling):
            return  # a bad argument (reported), or a recursive call (N113)
        body = _Scope(names={p.name: kind for p, kind in zip(f.params, kinds, strict=True)}, parent=self.top)
        for h in n.handles_bound(f.body):  # local to each call (`check_def` reported a name bound both ways)
            body.names.setdefault(h.name, ("handle array" if h.is_array else "handle", h))
        before = len(self.diags)
        self.calling.append(s)
        try:
            self.check_block(f.body, _Scope(parent=body), in_batch)
        finally:
            self.calling.pop()
        new, self.diags = self.diags[before:], self.diags[:before]
        found = self.checked_calls[key] = set()
        for d in new:
            if d.span is None or not f.span.start <= d.span.start < f.span.end:
                self.diags.append(d)  # in a function this one calls: that call's note is on it
                continue
            found.add((d.code, d.span, d.message))
            same = next(
                (k for k, o in enumerate(self.diags) if (o.code, o.span, o.message) == (d.code, d.span, d.message)),
                None,
            )
            if same is None:
                self.diags.append(_noted(d, note))
            else:  # the same mistake, found with other kinds too
                self.diags[same] = _noted(self.diags[same], note)

    def check_argument(self, a, scope: _Scope) -> tuple[str | None, n.Node | None]:
        """The kind an argument gives its parameter: a view (`tensor`), a group or mesh (as the name it
        passes), or an integer known per rank; None when it is none of those (reported)."""
        if _is_view_syntax(a, scope):
            self.check_view(a, scope)
            return scope.lookup(n.view_tensor(a))  # the tensor viewed: its dtype decides what the body may do
        base = a.value if isinstance(a, n.Attr) and isinstance(a.value, n.Name) else a
        found = scope.lookup(base.id) if isinstance(base, n.Name) else None
        if found is not None and found[0] in ("group", "mesh"):
            if base is a:
                return found
            if found[0] == "mesh" and a.attr in [d.name for d in found[1].dims]:
                return ("group", None)
        if found is not None and found[0] in ("handle", "handle array", "table", "function") and base is a:
            self.error(
                WrongKindOfName,
                f"a {found[0]} cannot be passed to a function",
                a,
                label=f"`{a.id}` is a {found[0]}",
                help="arguments are views, groups and integers; a function's body can read tables directly"
                if found[0] == "table"
                else "arguments are views, groups and integers; wait for a request where it was made",
            )
            return (None, None)
        count = len(self.diags)
        self.check_expr(a, "static", scope)
        return ("function parameter", None) if len(self.diags) == count else (None, None)

    def collect_handles(self, stmts) -> dict[str, n.HandleRef]:
        """Every handle name bound anywhere, by its first binding: one name is a handle or an array of
        handles (`h[i] = ...`), never both (N108)."""
        first: dict[str, n.HandleRef] = {}
        for h in n.handles_bound(stmts):
            if h.name in BUILTINS:
                self.error(DuplicateDeclaration, f"`{h.name}` is a built-in name", h, label="cannot name a handle")
                continue
            seen = first.setdefault(h.name, h)
            if seen.is_array != h.is_array:
                self.error(
                    MisusedHandle,
                    f"`{h.name}` is bound both as a handle and as an array of handles",
                    h,
                    label="an array slot" if h.is_array else "a single handle",
                    notes=[n_note("first bound here", seen)],
                    help=f"give the array of handles its own name, or write `{h.name}[k]` everywhere",
                )
        return first

    def check_wait(self, s: n.Wait, scope: _Scope):
        """Each waited handle used as it was bound: `h` for a handle, `h[j]` or `wait all h` for an array."""
        for h in s.handles:
            found = scope.lookup(h.name)
            if h.index is not None:
                self.check_expr(h.index, "static", scope)
            if found is None or found[0] not in ("handle", "handle array"):
                continue  # never bound: N129 on the ranks that wait (expand), as for a handle bound elsewhere
            if found[0] == "handle array" and h.index is None:
                self.error(
                    MisusedHandle,
                    f"`{h.name}` is an array of handles",
                    h,
                    label="wait one slot, or all of them",
                    help=f"write `wait {h.name}[k]` or `wait all {h.name}`",
                )
            elif found[0] == "handle" and h.index is not None:
                self.error(MisusedHandle, f"`{h.name}` is a single handle, not an array", h, label="no slots")
        if s.array is not None:
            found = scope.lookup(s.array.name)
            if found is None:
                self.undefined(s.array.name, s.array, scope, "array of handles")
            elif found[0] != "handle array":
                self.error(
                    MisusedHandle,
                    f"`wait all {s.array.name}` needs an array of handles",
                    s.array,
                    label=f"`{s.array.name}` is a {found[0]}",
                    help=f"write `wait {s.array.name}`" if found[0] == "handle" else None,
                )

    def check_binding(self, h: n.HandleRef | None, scope: _Scope):
        if h is not None and h.index is not None:
            self.check_expr(h.index, "static", scope)

    def check_views(self, views, scope: _Scope):
        for v in views:
            self.check_view(v, scope)

    def check_new_group(self, s: n.NewGroup, scope: _Scope, in_batch: bool):
        for m in s.members:
            self.check_expr(m, "static", scope)
        if in_batch:
            self.error(
                InvalidBatch,
                "`new_group` cannot be part of a `batch`",
                s,
                label="only send, recv, isend and irecv batch together",
                help="make the group before the `batch:` block",
            )

    def check_p2p(self, s: n.Send | n.Recv, scope: _Scope, in_batch: bool):
        self.check_binding(s.handle, scope)
        self.check_view(s.buffer, scope)
        if s.peer is not None:
            self.check_expr(s.peer, "static", scope)
        if s.tag is not None:
            self.check_expr(s.tag, "static", scope)
        self.check_group_ref(s.group, scope)
        if in_batch and s.peer is None:
            self.error(
                InvalidBatch,
                "a receive from any source cannot be in `batch`",
                s,
                label="`batch_isend_irecv` needs each op's peer",
            )
        if in_batch and s.handle is not None:
            self.error(
                InvalidBatch,
                "a P2P op inside `batch` has no handle of its own",
                s,
                label="the batch waits for all its ops at its end",
            )

    def check_collective(self, s: n.Collective, scope: _Scope, in_batch: bool):
        if in_batch:
            self.error(
                InvalidBatch,
                f"`{s.op}` cannot be part of a `batch`",
                s,
                label="only send, recv, isend and irecv batch together",
                help="move the collective out of the `batch:` block",
            )
        self.check_binding(s.handle, scope)
        for v in s.inputs + s.outputs:
            self.check_view(v, scope)
        if s.root is not None:
            self.check_expr(s.root, "static", scope)
        for e in s.in_splits + s.out_splits:
            self.check_expr(e, "static", scope)
        if s.redop is not None:
            self.check_redop(s.redop, scope)
        self.check_group_ref(s.group, scope)

    def check_redop(self, redop: n.RedOp, scope: _Scope):
        """A known reduce op; a scale for `premul_sum` and for it only."""
        name = redop.name.name
        if name not in REDUCE_OPS:
            self.error(
                BadReduceOp,
                f"unknown reduce op `{name}`",
                redop.name,
                label="not a reduce op",
                help=_suggest(name, REDUCE_OPS, "reduce ops are " + ", ".join(REDUCE_OPS)),
            )
        elif name == "premul_sum" and redop.scale is None:
            self.error(BadReduceOp, "`premul_sum` needs a scale factor", redop, label="write `op premul_sum(0.5)`")
        elif redop.scale is not None and name != "premul_sum":
            self.error(BadReduceOp, f"`{name}` takes no argument", redop.scale, label="only `premul_sum` takes a scale")
        if redop.scale is not None:
            self.check_expr(redop.scale, "static", scope)

    def check_compound(
        self, s: n.For | n.While | n.On | n.Batch | n.Coalesced | n.CallStmt, scope: _Scope, in_batch: bool
    ):
        """A block statement: its header's expressions, then its body in a scope of its own; or a call, which
        checks its function's body."""
        match s:
            case n.For():
                self.check_expr(s.lo, "static", scope)
                self.check_expr(s.hi, "static", scope)
                inner = _Scope(parent=scope)
                self.declare(inner, s.var, "loop", s)
                self.check_block(s.body, inner, in_batch)
            case n.While():
                self.check_expr(s.cond, "static", scope)
                self.check_block(s.body, _Scope(parent=scope), in_batch)
            case n.On():
                for br in s.branches:
                    self.check_expr(br.cond, "static", scope)
                    self.check_block(br.body, _Scope(parent=scope), in_batch)
                self.check_block(s.orelse, _Scope(parent=scope), in_batch)
            case n.Batch():
                if in_batch:
                    self.error(InvalidBatch, "`batch` blocks do not nest", s, label="inside another batch")
                self.check_binding(s.handle, scope)
                self.check_block(s.body, _Scope(parent=scope), True)
            case n.CallStmt():
                self.check_call(s, scope, in_batch)
            case n.Coalesced():
                self.check_coalesced(s, scope, in_batch)

    def check_coalesced(self, s: n.Coalesced, scope: _Scope, in_batch: bool):
        """Only what torch's `_coalescing_manager` records stands in the block: blocking `all_reduce`,
        `all_gather` into one tensor and `reduce_scatter` from one tensor, all on the first one's group."""
        self.check_binding(s.handle, scope)
        first = None
        for stmt in s.body:
            if not isinstance(stmt, n.Collective):
                self.error(
                    InvalidCoalesced,
                    f"{_stmt_words(stmt)} cannot be part of a `coalesced` block",
                    stmt,
                    label="only collectives coalesce",
                    help="move it before or after the `coalesced:` block",
                )
                self.check_stmt(stmt, _Scope(parent=scope), in_batch)
                continue
            self.check_collective(stmt, scope, in_batch)
            why = coalescing_refused(stmt)
            if why is not None:
                self.error(
                    InvalidCoalesced,
                    f"`{stmt.op}` {why}",
                    stmt,
                    label="torch would run it on its own, not in the coalesced call",
                    help="coalesce `all_reduce x`, `all_gather x into y` and `reduce_scatter x into y` only",
                )
            elif stmt.handle is not None:
                self.error(
                    InvalidCoalesced,
                    "a collective inside `coalesced` has no handle of its own",
                    stmt.handle,
                    label="torch returns a request whose `wait()` raises `ValueError`",
                    help="drop the handle: the block waits for all its collectives at its end",
                )
            elif first is None:
                first = stmt
            elif _group_text(stmt.group) != _group_text(first.group):
                self.error(
                    InvalidCoalesced,
                    f"`{stmt.op}` on `{_group_text(stmt.group)}` in a block coalescing `{_group_text(first.group)}`",
                    stmt.group or stmt,
                    label="another group: torch runs it on its own",
                    help="coalesce the collectives of one group per block",
                    notes=[n_note(f"the block's first collective, on `{_group_text(first.group)}`", first)],
                )

    def check_expect(self, s: n.Expect, scope: _Scope):
        c = s.cond
        if not (isinstance(c, n.Binary) and c.op in COMPARISONS):
            self.error(
                InvalidExpect,
                "`expect` takes a comparison `VIEW == VALUE`",
                c,
                label="not a comparison",
                help="write e.g. `expect x == world * (world - 1) / 2`",
            )
            return
        self.check_view(c.left, scope)
        self.check_expr(c.right, "elem", scope)

    def check_group_ref(self, g: n.GroupRef | None, scope: _Scope):
        if g is None:
            return
        found = scope.lookup(g.name)
        if found is None:
            self.undefined(g.name, g, scope, "group")
            return
        kind, decl = found
        if kind == "group" and g.dim is None:
            return
        if kind == "mesh":
            dims = [d.name for d in decl.dims]
            if g.dim is None:
                self.error(
                    WrongKindOfName,
                    f"`{g.name}` is a mesh; name one of its dimensions",
                    g,
                    label="a mesh is not a group",
                    help=f"write `in {g.name}.{dims[0]}`",
                )
            elif g.dim not in dims:
                self.error(
                    UndefinedName,
                    f"mesh `{g.name}` has no dimension `{g.dim}`",
                    g,
                    label="unknown dimension",
                    help=f"its dimensions are {', '.join(dims)}",
                )
            return
        self.error(WrongKindOfName, f"`{g.text}` is not a group", g, label=f"`{g.name}` is a {kind}")

    # expressions ---------------------------------------------------------------------------------
    def undefined(self, name: str, node: n.Node, scope: _Scope, what: str = "name"):
        close = difflib.get_close_matches(name, sorted(scope.all_names()), n=1)
        help = f"a name `{close[0]}` exists" if close else None
        self.error(UndefinedName, f"undefined {what} `{name}`", node, label="not declared", help=help)

    def check_view(self, e, scope: _Scope):
        """A view: a tensor name, optionally followed by `[lo:hi]`, `[k]` and `.chunk(k, parts)`."""
        match e:
            case n.Name():
                found = scope.lookup(e.id)
                if found is None:
                    self.undefined(e.id, e, scope, "tensor")
                elif found[0] != "tensor":
                    self.error(
                        WrongKindOfName,
                        f"`{e.id}` is not a tensor",
                        e,
                        label=f"`{e.id}` is a {found[0]}",
                        help="communication ops and assignments work on declared tensors",
                    )
            case n.Slice():
                self.check_view(e.value, scope)
                for b in (e.lo, e.hi):
                    if b is not None:
                        self.check_expr(b, "static", scope)
            case n.Index():
                self.check_view(e.value, scope)
                self.check_expr(e.index, "static", scope)
            case n.Call(func=n.Attr(attr="chunk") as f):
                self.check_view(f.value, scope)
                if len(e.args) != 2:
                    self.error(
                        InvalidView, "`chunk` takes two arguments: `chunk(k, parts)`", e, label=f"{len(e.args)} given"
                    )
                for a in e.args:
                    self.check_expr(a, "static", scope)
            case _:
                self.error(
                    InvalidView,
                    "expected a tensor view",
                    e,
                    label="not a tensor or a view of one",
                    help="a view is `x`, `x[lo:hi]`, `x[k]` or `x.chunk(k, parts)`",
                )

    def check_expr(self, e, ctx: str, scope: _Scope):
        """ctx: "static" (ints per rank), "elem" (elementwise, may read views), "init" (elementwise, no views)."""
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return
            case n.Name():
                self.check_name(e, ctx, scope)
            case n.Attr():
                self.check_attr(e, scope)
            case n.Call(func=n.Name(id=fname)) if (
                fname in ELEMENT_FUNCS or fname in INIT_FUNCS or fname in INTEGER_FUNCS
            ):
                self.check_function_call(e, fname, ctx, scope)
            case n.Call(func=n.Attr(attr="peer")) | n.Index(value=n.Name()) if _is_lookup(e, scope):
                self.check_lookup(e, ctx, scope)
            case n.Call(func=n.Name(id="sum")) | n.Index() if isinstance(e, n.Call) or (
                ctx == "static" and self.in_body and _is_view_syntax(e.value, scope)
            ):
                self.check_data_read(e, ctx, scope)
            case n.Call(func=n.Attr(attr="chunk")) | n.Slice() | n.Index():
                if ctx != "elem":
                    self.error(WrongKindOfName, "a tensor view is not allowed here", e, label="expected a number")
                    return
                self.check_view(e, scope)
            case n.Call():
                self.check_unknown_call(e)
            case n.Unary(op="not") | n.Binary(op="and" | "or") if ctx != "static":
                word = e.op
                self.error(
                    WrongKindOfName,
                    f"`{word}` is not an element-wise operator",
                    e,
                    label="conditions are for `on`, per rank",
                    help="compare element-wise with `==`, `<`, ... and combine with `*` (and) or `max` (or)",
                )
            case n.Unary():
                self.check_expr(e.operand, ctx, scope)
            case n.ListFor():  # split sizes: the variable is bound in the value only
                self.check_expr(e.lo, ctx, scope)
                self.check_expr(e.hi, ctx, scope)
                inner = _Scope(parent=scope)
                self.declare(inner, e.var, "loop", e)
                self.check_expr(e.value, ctx, inner)
            case n.Binary():
                self.check_expr(e.left, ctx, scope)
                self.check_expr(e.right, ctx, scope)
                if e.op in INTEGER_OPS and ctx != "static":
                    self.check_per_rank(e, (e.left, e.right), f"`{e.op}`", scope)

    def check_data_read(self, e: n.Call | n.Index, ctx: str, scope: _Scope):
        """`T[k]` (one element, in an integer context) or `sum(E)` (E an element expression over views; also a
        per-rank constant in an element expression) in the body: the rank's value at that point of its program,
        read as the schedule runs (`expand.expand`).
        torch reads them with `int(t[k])` and `int(E.sum())`; a float read is N121, as `int()` would truncate."""
        if ctx == "init" or not self.in_body:
            self.error(
                WrongKindOfName,
                "a declaration cannot read tensor data",
                e,
                label="an integer read from data",
                help="read data in the program's body: a `let`, a size, a bound, a peer, an assignment",
            )
            return
        before = len(self.diags)
        self.reads_data = True
        if isinstance(e, n.Index):
            self.check_view(e, scope)
            arg = e
        else:
            if len(e.args) != 1:
                self.error(InvalidView, "`sum` takes one argument", e, label=f"{len(e.args)} given")
                return
            arg = e.args[0]
            self.check_expr(arg, "elem", scope)
            if len(self.diags) == before and not any(_is_view_syntax(x, scope) for x in _walk(arg)):
                self.error(
                    WrongKindOfName,
                    "`sum` reads a tensor, and this reads none",
                    arg,
                    label="one number per rank already",
                    help="sum a view or an element expression over views: `sum(x)`, `sum(expert == j)`",
                )
        if len(self.diags) > before:
            return
        bad = _float_part(arg, scope)
        if bad is not None:
            self.error(
                NotAnInteger,
                "an integer read from data must come from an integer or bool tensor",
                bad,
                label="a float here",
                help="compare first (`sum(x > 0.5)` counts elements) or keep counts in an int64 tensor",
            )

    def check_per_rank(self, e, operands, what: str, scope: _Scope):
        """An integer operator or function in an element expression takes values known per rank only: it is
        folded to a per-rank constant before the element-wise part runs."""
        varying = next((found for x in operands if (found := _per_element(x, scope)) is not None), None)
        if varying is not None and not any(
            d.span == varying.span and d.code == WrongKindOfName.code for d in self.diags
        ):
            self.error(
                WrongKindOfName,
                f"{what} works on integers known per rank, not on tensor elements",
                varying,
                label="varies per element",
                help="compute it in a `let` from `rank`, `world` and params; element expressions use "
                "`+ - * / // % **`, `min`, `max` and `abs`",
            )

    def check_name(self, e: n.Name, ctx: str, scope: _Scope):
        """A name used as a value: declared, and of a kind the context takes."""
        found = scope.lookup(e.id)
        if found is None:
            self.undefined(e.id, e, scope)
            return
        kind = found[0]
        if kind == "index" and ctx == "static":
            self.error(
                WrongKindOfName,
                "`i` (the element index) is only defined in element expressions",
                e,
                label="not an integer known per rank",
                help="use `i` in tensor initialisers, assignments and `expect`",
            )
        elif kind == "tensor" and ctx != "elem":
            where = "an integer known per rank" if ctx == "static" else "a tensor initialiser"
            self.error(
                WrongKindOfName,
                f"tensor `{e.id}` used where {where} is expected",
                e,
                label="a tensor, not a number",
            )
        elif kind == "table":
            self.error(
                WrongKindOfName,
                f"`{e.id}` is a table, not a value",
                e,
                label="a table",
                help=f"read one entry: `{e.id}[k]`",
            )
        elif kind in ("group", "mesh", "handle", "handle array", "function"):
            self.error(WrongKindOfName, f"`{e.id}` is a {kind}, not a value", e, label=f"a {kind}")

    def check_function_call(self, e: n.Call, fname: str, ctx: str, scope: _Scope):
        """min, max, abs anywhere values are; rand, randn only in initialisers; each with its arity."""
        arity = ELEMENT_FUNCS.get(fname) or INTEGER_FUNCS.get(fname) or INIT_FUNCS[fname]
        if fname in INIT_FUNCS and ctx != "init":
            self.error(
                WrongKindOfName,
                f"`{fname}` is only allowed in tensor initialisers",
                e,
                label="random values come from the initialiser",
            )
        if len(e.args) != arity:
            self.error(
                InvalidView,
                f"`{fname}` takes {arity} argument{'s' * (arity > 1)}",
                e,
                label=f"{len(e.args)} given",
            )
        for a in e.args:
            self.check_expr(a, "static" if fname in INIT_FUNCS else ctx, scope)
        if fname in INTEGER_FUNCS and ctx != "static":
            self.check_per_rank(e, e.args, f"`{fname}`", scope)

    def check_unknown_call(self, e: n.Call):
        if isinstance(e.func, n.Name):
            self.error(
                UndefinedName,
                f"unknown function `{e.func.id}`",
                e.func,
                label="not a function",
                help="functions are min, max, abs, log2, sum (and rand, randn in initialisers)",
            )
        else:
            self.error(InvalidView, "this cannot be called", e, label="not a function")

    def check_lookup(self, e: n.Call | n.Index, ctx: str, scope: _Scope):
        """`TABLE[k]` or `G.peer(k)`: an integer per rank looked up by an index (its range: at expansion)."""
        if isinstance(e, n.Call):
            self.check_peer(e, e.func, ctx, scope)
            return
        self.check_expr(e.index, ctx, scope)
        if ctx != "static":
            self.check_per_rank(e, (e.index,), "a table index", scope)

    def check_peer(self, e: n.Call, f: n.Attr, ctx: str, scope: _Scope):
        """`G.peer(k)`: the global rank of member k of a group or mesh dimension."""
        if len(e.args) != 1:
            self.error(
                InvalidView,
                "`peer` takes one argument: `GROUP.peer(k)`",
                e,
                label=f"{len(e.args)} given",
                help="`g.peer(k)` is the global rank of the k-th member of `g`",
            )
        self.check_group_attr(f, scope)
        for a in e.args:
            self.check_expr(a, ctx, scope)
        if ctx != "static":
            self.check_per_rank(e, e.args, "`peer`", scope)

    def check_attr(self, e: n.Attr, scope: _Scope):
        """`g.rank`, `g.size`, `m.dp.rank`, `m.dp.size`, and `VIEW.size` / `VIEW.rows` of a tensor view."""
        if e.attr in ("size", "rows") and _is_view_syntax(e.value, scope):
            self.check_view(e.value, scope)
            return
        if e.attr == "peer":
            self.error(
                InvalidView,
                "`peer` is called with a member's index",
                e,
                label="expected `GROUP.peer(k)`",
                help=f"write `{_text(e.value, self.source)}.peer(k)` for the global rank of member k",
            )
            return
        self.check_group_attr(e, scope)

    def check_group_attr(self, e: n.Attr, scope: _Scope):
        """`G.rank`, `G.size`, `G.peer`: `G` a group or a mesh dimension."""
        base, dim = e.value, None
        if isinstance(base, n.Attr) and isinstance(base.value, n.Name):
            base, dim = base.value, base.attr
        if not isinstance(base, n.Name):
            self.error(InvalidView, "unexpected attribute", e, label="expected `GROUP.rank` or `GROUP.size`")
            return
        found = scope.lookup(base.id)
        if found is None:
            self.undefined(base.id, base, scope)
            return
        kind, decl = found
        if e.attr not in ("rank", "size", "peer"):
            extra = " (a tensor has `.size`, `.rows` and `.chunk(k, parts)`)" if kind == "tensor" else ""
            self.error(
                InvalidView, f"unknown attribute `{e.attr}`{extra}", e, label="expected `.rank`, `.size` or `.peer(k)`"
            )
            return
        if kind == "group" and dim is None:
            return
        if kind == "mesh" and dim is not None and dim in [d.name for d in decl.dims]:
            return
        self.error(
            WrongKindOfName,
            f"`.{e.attr}` needs a group or a mesh dimension",
            e,
            label=f"`{base.id}` is a {kind}" if dim is None or kind != "mesh" else f"no dimension `{dim}`",
        )


def _text(node: n.Node, source: SourceFile) -> str:
    return source.text[node.span.start : node.span.end]


def _is_lookup(e, scope: _Scope) -> bool:
    """`G.peer(k)`, or `T[k]` with `T` a table."""
    if isinstance(e, n.Call):
        return True
    return (scope.lookup(e.value.id) or ("",))[0] == "table"


def _is_view_syntax(e, scope: _Scope) -> bool:
    """Is `e` a tensor view (name, slice, index or chunk of a tensor)?"""
    name = n.view_tensor(e)
    found = scope.lookup(name) if name is not None else None
    return found is not None and found[0] == "tensor"


def _per_element(e, scope: _Scope):
    """The part of `e` that differs between a tensor's elements (`i`, a tensor, a view, a random value), or
    None; `x.size` and `x.rows` read a tensor but are one number per rank."""
    match e:
        case n.Attr(attr="size" | "rows"):
            return None
        case n.Name():
            found = scope.lookup(e.id)
            return e if found is not None and found[0] in ("index", "tensor") else None
        case n.Call(func=n.Name(id=fname)) if fname in INIT_FUNCS:
            return e
    return next((found for c in n.children(e) if (found := _per_element(c, scope)) is not None), None)


def _float_part(e, scope: _Scope):
    """The part of an element expression that makes its value a float (a float tensor or literal, `/`), or None;
    a comparison gives bools whatever it compares."""
    match e:
        case n.Binary(op=op) if op in COMPARISONS:
            return None
        case n.Binary(op="/") | n.FloatLit():
            return e
        case n.Name():
            found = scope.lookup(e.id)
            if found is not None and found[0] == "tensor":
                dtype = DTYPES.get(found[1].dtype.name)
                return e if dtype is not None and dtype.is_float else None
            return None
        case n.Slice() | n.Index():
            return _float_part(e.value, scope)
        case n.Call(func=n.Attr(attr="chunk") as f):
            return _float_part(f.value, scope)
    return next((found for c in n.children(e) if (found := _float_part(c, scope)) is not None), None)


def _walk(e):
    """`e` and every expression inside it."""
    yield e
    for c in n.children(e):
        yield from _walk(c)


def _random_calls(e, top: bool = False) -> list[n.Call]:
    """The `rand(...)`/`randn(...)` calls in an expression (only `e` itself when `top`)."""
    if isinstance(e, n.Call) and isinstance(e.func, n.Name) and e.func.id in INIT_FUNCS:
        return [e]
    if top:
        return []
    return [call for c in n.children(e) for call in _random_calls(c)]


def n_note(message: str, node: n.Node):
    from commdsl.diagnostics import Note

    return Note(message=message, span=node.span)


def _suggest(name: str, choices, fallback: str) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"the closest is `{close[0]}`" if close else fallback


def coalescing_refused(s: n.Collective) -> str | None:
    """Why torch's coalescing manager would not record this collective, or None when it does."""
    if not KINDS[s.op].coalescable:
        return "cannot be coalesced"
    if s.outputs_listed or s.inputs_listed:
        return "into a list of tensors cannot be coalesced"
    return None


def _group_text(ref: n.GroupRef | None) -> str:
    return "world" if ref is None else ref.text


def _stmt_words(s) -> str:
    """A statement as a message names it: `send`, an assignment, `for`."""
    match s:
        case n.Send() | n.Recv():
            return f"`{form(isinstance(s, n.Send), s.blocking).word}`"
        case n.Assign():
            return "an assignment"
        case n.CallStmt():
            return f"a call of `{s.name.name}`"
    return f"`{s.kind}`"


def call_note(chain: tuple[n.CallStmt, ...]):
    """The note a finding inside a function's body carries for the chain of calls (outermost first) that
    reached it: it points at the innermost call and names the calls around it."""
    from commdsl.diagnostics import Note

    *outer, call = chain
    around = "".join(f", inside the call of `{c.name.name}` at line {c.span.line}" for c in reversed(outer))
    return Note(message=f"in the call of `{call.name.name}` at line {call.span.line}{around}", span=call.span)


def _noted(d: Diagnostic, note) -> Diagnostic:
    return d if note in d.notes else replace(d, notes=d.notes + (note,))


def bound_handle_names(stmts) -> frozenset[str]:
    """The names of the handles a block binds (a function's: local to each call)."""
    return frozenset(h.name for h in n.handles_bound(stmts))


def _calls(stmts) -> list[n.CallStmt]:
    """The calls in a block, in program order, inside loops, branches and batches too."""
    out = []
    for s in stmts:
        if isinstance(s, n.CallStmt):
            out.append(s)
        for child in n.blocks(s):
            out.extend(_calls(child))
    return out


def step_group_names(stmts) -> dict[str, n.Node]:
    """Each name `g = new_group [...]` binds anywhere in the program (several statements may bind one name,
    as the branches of an `on` do), with its first binding."""
    out: dict[str, n.Node] = {}
    for s in stmts:
        if isinstance(s, n.NewGroup):
            out.setdefault(s.name.name, s.name)
        for child in n.blocks(s):
            out.update({k: v for k, v in step_group_names(child).items() if k not in out})
    return out


def resolve(module: n.Module, source: SourceFile) -> Program:
    return _Resolver(module, source).run()


def load(source: SourceFile) -> Program:
    """Parse and resolve one file; raises CommdslError with the diagnostics that stop it."""
    return resolve(to_ast(parse_tree(source), source), source)
