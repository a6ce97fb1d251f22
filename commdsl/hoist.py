"""A loop's integer expressions, computed for a block of its iterations at once.

A ring's loop body computes the same few integer expressions at every iteration (`(rank - s) % world`, a
chunk index, a peer): one NumPy call per operator on an array of the ranks, a few microseconds of work behind
tens of microseconds of Python, thousands of iterations at world 4096. `Hoist` evaluates them for a block of
iterations at once, on the iterations × ranks flattened, with the expansion's own evaluator (`Expander.value`:
the same operators, overflow checks and failures), and each iteration reads its row.

Hoisted is what is the same function of the loop variable at every iteration: integer arithmetic (`+ - * //
%`, unary minus, `min`, `max`, `abs`) on integer literals, the loop variable, names bound outside the loop
that the body never reassigns, and the body's own `let`s (at its top level or in a `batch`, in order, scoped
as the expansion scopes them); nothing inside a nested loop, `on`, call or list. An expression is hoisted only
where its value at one iteration is per rank (it reads `rank` or another per-rank name): one the same on
every rank stays the Python int the expansion makes of it. A block whose evaluation fails (a division by
zero at some iteration) or leaves int64 is not used for that expression: the iteration computes it as
before, and reports the failure where it happens.

Views are hoisted the same way: a chunk, slice or index of a tensor whose bounds are such arithmetic (or a
`.size`/`.rows` of another such view), `x.chunk((rank - s) % world, world)`, is made by the expansion's own
`make_view` on the block, and each iteration gets its row as the view it would have made (a field the same
on every rank a Python int, as `uniform` makes it; views of equal text and equal names one object, as the
expansion's view cache gives). Their int64 rows come with the copy `Expander.compact` would store (`small`:
the smallest type that holds the block), so that too is made once per block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commdsl.schedule import VView
from commdsl.syntax import nodes as n
from commdsl.values import Failure, is_vec, uniform

HOISTED_OPS = frozenset({"+", "-", "*", "//", "%"})
BLOCK_ELEMENTS = 1 << 16
"""Iterations × ranks per block (512 KiB of int64 per expression: within a core's cache): few Python calls."""


@dataclass(frozen=True)
class Plan:
    """What a loop body offers to hoist, in the order the expansion meets it: ("let", name, node) binds a name,
    ("expr", None, node) is an integer expression, ("view", None, node) a view, ("open" | "close", None, None)
    a `batch`'s scope; each step ends with the names its node reads. `assigned`: the names the body reassigns
    anywhere (never hoisted, nor what reads them)."""

    steps: tuple[tuple[str, str | None, n.Node | None, frozenset[str]], ...]
    assigned: frozenset[str]


def plan(loop: n.For) -> Plan:
    """The loop body's candidates; none when the body reassigns the loop variable itself."""
    steps: list = []
    assigned: set[str] = set()

    def walk(block) -> None:
        for s in block:
            _assigned(s, assigned)
            match s:
                case n.Let():
                    if _arithmetic(s.value):
                        steps.append(("let", s.name, s.value))
                    else:
                        steps.append(("let", s.name, None))  # the name is not known to the hoist from here
                        steps.extend(_steps(_candidates(s.value)))
                case n.Batch():
                    steps.extend(_steps(_own_candidates(s)))
                    steps.append(("open", None, None))
                    walk(s.body)
                    steps.append(("close", None, None))
                case n.For() | n.While() | n.On() | n.Coalesced() | n.CallStmt():
                    pass  # their blocks run on other ranks or bind names of their own
                case _:
                    steps.extend(_steps(_own_candidates(s)))

    walk(loop.body)
    if loop.var in assigned:
        return Plan((), frozenset(assigned))
    read = tuple((*step, frozenset() if step[2] is None else frozenset(n.names_read(step[2]))) for step in steps)
    return Plan(read, frozenset(assigned))


def _steps(candidates):
    return (("view" if _view(e) else "expr", None, e) for e in candidates)


class Hoist:
    """The hoisted values of one run of a loop on the ranks `A` (`rows`: node id → block of iterations × ranks),
    for iterations `first` on; `at` is the iteration the body runs."""

    def __init__(self, expander, p: Plan, A: np.ndarray, env: dict, var: str, lo: int, count: int):
        self.expander, self.plan, self.A, self.var, self.lo, self.count = expander, p, A, var, lo, count
        self.block = max(1, BLOCK_ELEMENTS // max(1, A.size))
        self.outer = {
            k: v
            for k, v in env.items()
            if k not in p.assigned and (_integer(v) or (is_vec(v) and v.dtype == np.int64 and v.size == A.size))
        }
        self.rows: dict[int, np.ndarray] = {}
        # view node id → (key, tensor, fields): a field is a scalar, or (int64 block, its compact copy)
        self.views: dict[int, tuple] = {}
        self.made: dict[tuple, VView] = {}  # this iteration's views by key: equal views are one object
        self.first = 0
        self.at = 0
        self.tiled: dict[str, np.ndarray] = {}  # per-rank names and the ranks, over a whole block: made once

    def nodes(self) -> list[int]:
        """The ids of the expressions this loop may hoist (`Expander.value` looks them up)."""
        return [id(node) for kind, _, node, _ in self.plan.steps if node is not None and kind != "open"]

    def enter(self, t: int) -> None:
        """Iteration t (from 0) is next: its block is computed when it starts one."""
        self.at = t
        self.made = {}
        if t == 0 or t - self.first >= self.block:
            self.first = t
            self.fill(min(self.block, self.count - t))

    def get(self, e, A: np.ndarray):
        """The value of expression `e` at this iteration on the ranks A, or None when it is not hoisted here."""
        if A is not self.A:
            return None
        rows = self.rows.get(id(e))
        return None if rows is None else rows[self.at - self.first]

    def view(self, e, A: np.ndarray) -> VView | None:
        """The view `e` names at this iteration on the ranks A, or None when it is not hoisted here."""
        got = self.views.get(id(e)) if A is self.A else None
        if got is None:
            return None
        key, tensor, fields = got
        v = self.made.get(key)
        if v is None:
            t = self.at - self.first
            values = []
            for f in fields:
                if isinstance(f, tuple):
                    row = f[0][t]
                    value = uniform(row)
                    if value is row:
                        self.expander.remember_small(row, f[1][t])
                    values.append(value)
                else:
                    values.append(f)
            v = self.made[key] = VView(tensor, values[0], tuple(values[1:]))
        return v

    def fill(self, T: int) -> None:
        """Every hoisted expression for iterations first .. first + T - 1."""
        size = self.A.size
        if not self.tiled:
            whole = {**self.outer, "": self.A, self.var: np.arange(self.block, dtype=np.int64)}
            self.tiled = {k: np.tile(v, self.block) for k, v in whole.items() if is_vec(v) and k != self.var}
            self.tiled[self.var] = np.repeat(whole[self.var], size)
            for a in self.tiled.values():
                a.flags.writeable = False
        env: dict = {k: self.tiled[k][: T * size] if is_vec(v) else v for k, v in self.outer.items()}
        flat_A = self.tiled[""][: T * size]
        env[self.var] = self.tiled[self.var][: T * size] + (self.lo + self.first)
        per_rank = {k for k, v in self.outer.items() if is_vec(v)}  # names whose value differs by rank
        scopes: list[tuple[dict, set]] = []
        self.rows = {}
        self.views = {}
        blocks: dict[tuple, tuple] = {}  # views by text and the values of the names they read: made once
        tensors = self.expander.tensor_names  # no other name may be a tensor's (N102)
        for kind, name, node, names in self.plan.steps:
            if kind == "open":
                scopes.append((dict(env), set(per_rank)))
                continue
            if kind == "close":
                env, per_rank = scopes.pop()
                continue
            if kind == "view":
                if names & per_rank and all(k in env or k in tensors for k in names):
                    self.hoist_view(node, names, flat_A, env, T, blocks)
                continue
            value = None
            if node is not None and names <= env.keys():
                try:
                    value = self.expander.value(node, flat_A, env)
                except Failure:
                    value = None
                if not (isinstance(value, np.ndarray) and value.dtype == np.int64):
                    value = None
            differs = bool(names & per_rank)
            if kind == "let":
                env.pop(name, None)
                per_rank.discard(name)
                if value is not None:
                    env[name] = value
                    if differs:
                        per_rank.add(name)
            if value is not None and differs:
                block = value.reshape(T, size)
                block.flags.writeable = False  # rows are shared: a reader that wrote into one would be a bug
                self.rows[id(node)] = block

    def hoist_view(self, node, names: frozenset[str], flat_A: np.ndarray, env: dict, T: int, blocks: dict) -> None:
        """View `node` over the block, made once for every view of its text and names' values (`blocks`)."""
        key = (self.expander.text(node),) + tuple(id(env[k]) for k in sorted(names) if k in env)
        if key not in blocks:
            blocks[key] = self.view_block(node, flat_A, env, T)
        if blocks[key] is not None:
            self.views[id(node)] = (key, *blocks[key])

    def view_block(self, node, flat_A: np.ndarray, env: dict, T: int) -> tuple[str, list] | None:
        """(tensor, fields) of view `node` over the block, each field a scalar or (rows, their compact copy);
        None where making it fails. One the same at every iteration is kept too (`tmp[0 : x.chunk(k, w).size]`
        reads a per-rank `k`, which would make the expansion's view cache miss at each)."""
        try:
            v = self.expander.make_view(node, flat_A, env)
        except Failure:
            return None
        fields: list = []
        for f in (v.offset, *v.shape):
            if not is_vec(f):
                fields.append(f)
                continue
            if f.dtype != np.int64 or f.size != flat_A.size:
                return None
            block = f.reshape(T, self.A.size)
            block.flags.writeable = False
            compact = self.expander.small(block)
            compact.flags.writeable = False
            fields.append((block, compact))
        return v.tensor, fields


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _arithmetic(e, sizes: bool = False) -> bool:
    """Integer arithmetic the hoist evaluates, on any names (and, with `sizes`, on the `.size` or `.rows` of a
    view it makes)."""
    match e:
        case n.IntLit():
            return _integer(e.value)
        case n.Name():
            return True
        case n.Attr(attr="size" | "rows") if sizes:
            return _view(e.value)
        case n.Unary(op="-" | "+"):
            return _arithmetic(e.operand, sizes)
        case n.Binary(op=op) if op in HOISTED_OPS:
            return _arithmetic(e.left, sizes) and _arithmetic(e.right, sizes)
        case n.Call(func=n.Name(id="min" | "max" | "abs")):
            return all(_arithmetic(a, sizes) for a in e.args)
    return False


def _view(e) -> bool:
    """A view the hoist makes: a chunk, slice or index (of a tensor, or of such a view) whose integers are
    `_arithmetic` or the `.size`/`.rows` of such a view. Which names are tensors is known when it is filled."""
    match e:
        case n.Call(func=n.Attr(attr="chunk") as f):
            return len(e.args) == 2 and _viewed(f.value) and all(_arithmetic(a, sizes=True) for a in e.args)
        case n.Slice():
            return _viewed(e.value) and all(b is None or _arithmetic(b, sizes=True) for b in (e.lo, e.hi))
        case n.Index():
            return _viewed(e.value) and _arithmetic(e.index, sizes=True)
    return False


def _viewed(e) -> bool:
    """What a hoisted view may be taken of: a name (a tensor, when filled) or another hoisted view."""
    return isinstance(e, n.Name) or _view(e)


def _candidates(e):
    """The largest arithmetic sub-expressions and views of `e` worth hoisting (an operation, not a name or a
    literal); nothing inside a list comprehension, whose variable a name may mean."""
    if isinstance(e, n.ListFor):
        return
    if _view(e):
        yield e
        return
    if _arithmetic(e):
        if not isinstance(e, (n.Name, n.IntLit)):
            yield e
        return
    for c in n.children(e):
        yield from _candidates(c)


def _own_candidates(s):
    """The candidates of a statement's own expressions (not those of a block inside it)."""
    for name in s._names:
        if name in ("body", "orelse", "branches", "span"):
            continue
        value = getattr(s, name)
        for x in value if isinstance(value, tuple) else (value,):
            if isinstance(x, n.HandleRef):
                if x.index is not None:
                    yield from _candidates(x.index)
            elif isinstance(x, n.RedOp):
                if x.scale is not None:
                    yield from _candidates(x.scale)
            elif isinstance(x, n.Node) and not isinstance(x, (n.Ident, n.GroupRef)):
                yield from _candidates(x)


def _assigned(s, out: set[str]) -> None:
    """Add the names statement `s` (and any block inside it) assigns to a `let` of an enclosing block, or binds as
    a loop variable."""
    if isinstance(s, n.Assign) and isinstance(s.target, n.Name):
        out.add(s.target.id)
    if isinstance(s, n.For):
        out.add(s.var)
    for block in _blocks(s):
        for inner in block:
            _assigned(inner, out)


def _blocks(s) -> list:
    match s:
        case n.For() | n.While() | n.Batch() | n.Coalesced():
            return [s.body]
        case n.On():
            return [b.body for b in s.branches] + [s.orelse]
    return []
