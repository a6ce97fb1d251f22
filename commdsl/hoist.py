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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commdsl.syntax import nodes as n
from commdsl.values import Failure, is_vec

HOISTED_OPS = frozenset({"+", "-", "*", "//", "%"})
BLOCK_ELEMENTS = 1 << 16
"""Iterations × ranks per block (512 KiB of int64 per expression: within a core's cache): few Python calls."""


@dataclass(frozen=True)
class Plan:
    """What a loop body offers to hoist, in the order the expansion meets it: ("let", name, node) binds a name,
    ("expr", None, node) is an expression, ("open" | "close", None, None) a `batch`'s scope; each step ends
    with the names its node reads. `assigned`: the names the body reassigns anywhere (never hoisted, nor what
    reads them)."""

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
                        steps.extend(("expr", None, e) for e in _candidates(s.value))
                case n.Batch():
                    steps.extend(("expr", None, e) for e in _own_candidates(s))
                    steps.append(("open", None, None))
                    walk(s.body)
                    steps.append(("close", None, None))
                case n.For() | n.While() | n.On() | n.Coalesced() | n.CallStmt():
                    pass  # their blocks run on other ranks or bind names of their own
                case _:
                    steps.extend(("expr", None, e) for e in _own_candidates(s))

    walk(loop.body)
    if loop.var in assigned:
        return Plan((), frozenset(assigned))
    read = tuple((*step, frozenset() if step[2] is None else frozenset(n.names_read(step[2]))) for step in steps)
    return Plan(read, frozenset(assigned))


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
        self.first = 0
        self.at = 0
        self.tiled: dict[str, np.ndarray] = {}  # per-rank names and the ranks, over a whole block: made once

    def nodes(self) -> list[int]:
        """The ids of the expressions this loop may hoist (`Expander.value` looks them up)."""
        return [id(node) for kind, _, node, _ in self.plan.steps if node is not None and kind in ("let", "expr")]

    def enter(self, t: int) -> None:
        """Iteration t (from 0) is next: its block is computed when it starts one."""
        self.at = t
        if t == 0 or t - self.first >= self.block:
            self.first = t
            self.fill(min(self.block, self.count - t))

    def get(self, e, A: np.ndarray):
        """The value of expression `e` at this iteration on the ranks A, or None when it is not hoisted here."""
        if A is not self.A:
            return None
        rows = self.rows.get(id(e))
        return None if rows is None else rows[self.at - self.first]

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
        for kind, name, node, names in self.plan.steps:
            if kind == "open":
                scopes.append((dict(env), set(per_rank)))
                continue
            if kind == "close":
                env, per_rank = scopes.pop()
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


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _arithmetic(e) -> bool:
    """Integer arithmetic the hoist evaluates, on any names."""
    match e:
        case n.IntLit():
            return _integer(e.value)
        case n.Name():
            return True
        case n.Unary(op="-" | "+"):
            return _arithmetic(e.operand)
        case n.Binary(op=op) if op in HOISTED_OPS:
            return _arithmetic(e.left) and _arithmetic(e.right)
        case n.Call(func=n.Name(id="min" | "max" | "abs")):
            return all(_arithmetic(a) for a in e.args)
    return False


def _candidates(e):
    """The largest arithmetic sub-expressions of `e` worth hoisting (an operation, not a name or a literal);
    nothing inside a list comprehension, whose variable a name may mean."""
    if isinstance(e, n.ListFor):
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
