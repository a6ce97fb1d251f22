"""Executes a Schedule with data (NumPy) on the checker's engine: the tensors every rank should end with.

Every tensor of every rank lives in one flat array per tensor (rank r's elements start at
`base[r]`), so a record's local op, a round's matched messages and a complete collective each move
data for all their ranks with a few array operations.

Element expressions compute exactly as the runtime's torch does rank by rank: a view's values are
`TensorValues`, which compute each operation in torch's dtype (`commdsl.elementwise`), and a per-rank
constant is the Python number it is on each rank (`Weak`). A reduce leaves non-root buffers undefined
(Gloo writes partial sums there); a per-element mask keeps them from ever being compared or trusted. A
floating-point sum of three or more members whose result depends on the order of addition beyond the
dtype's tolerance is kept in rank order and marked (`order_found`, `SimResult.order_dependent`): no
backend promises an order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from commdsl.collectives import Instance as InstanceData
from commdsl.dtypes import DTYPES, TOLERANCE
from commdsl.elementwise import (
    FLOAT_DTYPES,
    NUMPY,
    UFUNC,
    TensorValues,
    as_dtype,
    bfloat16_round,
    evaluate,
    random_init,
    result_type,
    tensor_values,
    torch_binary,
)
from commdsl.engine import Calls, Observer, Outcome, Posts, run_engine
from commdsl.p2p import delivered
from commdsl.schedule import (
    ComputeRec,
    ExpectRec,
    Print,
    PrintRec,
    ReadRec,
    Schedule,
    TensorSpec,
    View,
    split_table,
)
from commdsl.source import Span
from commdsl.values import at, distinct, is_vec


@dataclass
class ExpectResult:
    rank: int
    op: object  # the expect's record (its span is the statement)
    ok: bool
    detail: str = ""


@dataclass
class SimResult:
    schedule: Schedule
    engine: Outcome
    data: Data

    @property
    def ok(self) -> bool:
        return self.engine.completed and all(e.ok for e in self.expects)

    @cached_property
    def tensors(self) -> list[dict[str, np.ndarray]]:
        return [
            {name: self.data.rank_values(name, r) for name in self.schedule.infos} for r in range(self.schedule.world)
        ]

    @cached_property
    def undefined(self) -> list[dict[str, np.ndarray]]:
        """Per rank and tensor, the elements `reduce` left undefined."""
        return [
            {name: self.data.rank_marked(self.data.undef, name, r) for name in self.schedule.infos}
            for r in range(self.schedule.world)
        ]

    @cached_property
    def order_dependent(self) -> list[dict[str, np.ndarray]]:
        """Per rank and tensor, the elements whose value depends on the order a backend sums in."""
        return [
            {name: self.data.rank_marked(self.data.order, name, r) for name in self.schedule.infos}
            for r in range(self.schedule.world)
        ]

    @property
    def expects(self) -> list[ExpectResult]:
        return self.data.expect_results()

    @cached_property
    def prints(self) -> list[list[tuple[Print, list[np.ndarray]]]]:
        out: list[list] = [[] for _ in range(self.schedule.world)]
        for rec, rank, values in self.data.printed:
            k = int(np.searchsorted(rec.ranks, rank))
            out[rank].append((rec.at(k), values))
        return out


# ---- values, shared with the runtime -------------------------------------------------------------


def initial_value(spec: TensorSpec, rank: int, world: int) -> np.ndarray:
    """One rank's tensor's initial contents (flat): what the runtime allocates. The simulator computes
    every rank's at once (`Data.initial`), with the same result."""
    np_dtype = DTYPES[spec.dtype].numpy
    if spec.init is None:
        return np.zeros(spec.numel, dtype=np_dtype)
    if spec.init[0] == "rand":
        values = random_init(spec.init[1], rank, spec.numel, spec.init[2])
    else:
        with np.errstate(all="ignore"):
            values = evaluate(spec.init, _no_views, spec.shape, NUMPY)
        values = np.broadcast_to(np.asarray(values), spec.shape).reshape(-1)
    return cast(np.asarray(values), spec.dtype)


def _no_views(view: View):  # pragma: no cover - `resolve` forbids tensors in initialisers
    raise ValueError("an initialiser cannot read a tensor")


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """Store values in a tensor of `dtype` as torch's copy does on a CPU: floats truncate toward zero into
    integers, and a float the integer dtype cannot hold becomes what torch makes of it (`_float_to_int`)."""
    d = DTYPES[dtype]
    if d.is_bool:
        return values.astype(bool)
    if d.is_int and values.dtype.kind == "f":
        return _float_to_int(values, dtype)[0]
    with np.errstate(over="ignore"):  # a value beyond the dtype's range is inf, as torch's copy makes it, silently
        out = values.astype(d.numpy)
    return bfloat16_round(out) if dtype == "bfloat16" else out


def _float_to_int(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(the integers torch stores, whether `dtype` holds each value). A NaN, an infinity or a value beyond the
    dtype's range is C++'s undefined float-to-integer conversion, which torch's CPU copy leaves to the machine:
    on x86 it converts through int32 (through int64 into int64, and from float64 into uint8), whose
    instruction gives the lowest int32 (int64) for anything that type cannot hold, then keeps the low bits.
    So 300.7 becomes 44 in int8, 3e9 becomes 0 in int8 and -2147483648 in int32, NaN becomes -2**63 in
    int64 (torch 2.13, every source float dtype, 200,000 values: exact). Other machines may differ (`V804`)."""
    d = DTYPES[dtype]
    through64 = dtype == "int64" or (dtype == "uint8" and values.dtype == np.float64)
    limit = 2.0**63 if through64 else 2.0**31
    whole = np.trunc(values.astype(np.float64))  # exact: every float16/float32 is a float64
    info = np.iinfo(d.numpy)
    held = (whole >= info.min) & (whole <= info.max)  # False for NaN
    converted = np.where((whole >= -limit) & (whole < limit), whole, -limit)  # False for NaN and ±inf too
    return converted.astype(np.int64).astype(d.numpy), held


UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
"""Half the distance between 1 and the next number of each float dtype: the largest relative error of a
rounding."""

ORDERED_REDOPS = ("sum", "avg", "premul_sum", "product")
"""The reductions whose floating-point result depends on the order the members are combined in (V803)."""

CLOSE_CHUNK = 1 << 20
"""Elements `close` compares at a time: NumPy's isclose makes about five float64 temporaries of its
inputs' size (40 bytes an element, ten times a float32 tensor)."""


def close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """Elementwise equality: exact for integers and bool, torch.testing's tolerance for floats."""
    if dtype not in TOLERANCE:
        return actual == expected
    rtol, atol = TOLERANCE[dtype]
    actual, expected = np.broadcast_arrays(np.asarray(actual), np.asarray(expected))
    if actual.ndim != 1:
        return close(actual.reshape(-1), expected.reshape(-1), dtype).reshape(actual.shape)
    out = np.empty(actual.shape, dtype=bool)
    for lo in range(0, actual.size, CLOSE_CHUNK):
        hi = lo + CLOSE_CHUNK
        out[lo:hi] = np.isclose(
            actual[lo:hi].astype(np.float64), expected[lo:hi].astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
        )
    return out


def compare(actual: np.ndarray, expected, cmp: str, dtype: str) -> np.ndarray:
    """`actual CMP expected`, element by element."""
    match cmp:
        case "==":
            return np.asarray(close(actual, expected, dtype))
        case "!=":
            return ~np.asarray(close(actual, expected, dtype))
        case "<":
            return np.asarray(actual < expected)
        case "<=":
            return np.asarray(actual <= expected)
        case ">":
            return np.asarray(actual > expected)
    return np.asarray(actual >= expected)


def judge(actual: np.ndarray, expected, cmp: str, dtype: str) -> tuple[bool, str]:
    """Whether `actual CMP expected` holds at every element, and the first failing one if not.

    Shared with the runtime, which judges each `expect` on the real tensors the same way.
    """
    good = compare(actual, expected, cmp, dtype)
    if good.all():
        return True, ""
    bad = int(np.argmin(good.reshape(-1)))
    return False, (
        f"element {bad}: got {actual.reshape(-1)[bad].item()!r}, expected {cmp} "
        f"{np.broadcast_to(np.asarray(expected), actual.shape).reshape(-1)[bad].item()!r}"
    )


def format_tensor(values: np.ndarray, dtype: str) -> str:
    """`tensor([1., 2.])` exactly as torch prints it (torch is imported only when printing)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(values))
    return repr(t.to(getattr(torch, dtype)))


# ---- vectorised element expressions ---------------------------------------------------------------


class Weak:
    """A per-rank constant spread over elements: the Python number it is on each rank, one per element. Next to
    a tensor (`TensorValues`) it is a Python number in torch's type promotion; with another it computes as
    Python does."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray):
        self.a = a


def combine(op: str, x, y):
    """`x OP y` on element values as one rank computes it: torch's arithmetic where a tensor takes part, Python's
    between per-rank numbers."""
    a, b = (v.a if isinstance(v, Weak) else v for v in (x, y))
    if isinstance(a, TensorValues) or isinstance(b, TensorValues):
        return torch_binary(op, a, b)
    if isinstance(x, Weak) or isinstance(y, Weak):
        with np.errstate(all="ignore"):
            return Weak(UFUNC[op](a, b))
    from commdsl.values import BINARY

    return BINARY[op](a, b) if op in BINARY else (min(a, b) if op == "min" else max(a, b))


class _Elements:
    """The elements a record's expression is evaluated on: `count` per rank of its positions. A window
    (`lo`, set for one rank whose view is too large to evaluate at once) is `count` elements from `lo` of
    that rank's `full` ones: views as large as the target are read from `lo`, one-element views whole."""

    def __init__(self, pos, n: int, count, lo: int | None = None, full=None):
        self.pos, self.n, self.count, self.lo = pos, n, count, lo
        self.full = count if full is None else full

    @cached_property
    def rep(self) -> np.ndarray:
        """The position (in the record) of each element's rank."""
        return np.repeat(np.arange(self.n), np.broadcast_to(np.asarray(self.count, dtype=np.int64), (self.n,)))

    @cached_property
    def i(self) -> np.ndarray:
        """Each element's index within its rank's view (`i` in the language)."""
        counts = np.broadcast_to(np.asarray(self.count, dtype=np.int64), (self.n,))
        first = np.cumsum(counts) - counts
        return np.arange(int(counts.sum()), dtype=np.int64) - first[self.rep] + (self.lo or 0)

    def const(self, v):
        if is_vec(v):
            return Weak(at(v, self.pos, self.n)[self.rep])
        return v


@dataclass
class Failed:
    """How an `expect` failed on the ranks of its record, worded only for the ranks a message shows."""

    cmp: str
    undefined: np.ndarray
    element: dict = field(default_factory=dict)  # position in the record → first failing element
    got: dict = field(default_factory=dict)
    want: dict = field(default_factory=dict)

    def detail(self, k: int) -> str:
        if self.undefined[k]:
            return "reads elements left undefined by `reduce` on a non-root rank"
        return f"element {self.element[k]}: got {self.got[k]!r}, expected {self.cmp} {self.want[k]!r}"


# ---- the data ---------------------------------------------------------------------------------------


class Marks:
    """The elements of every rank's tensors that carry one property, in flat buffers like the data's, kept
    only for tensors where some element ever had it: left undefined by `reduce`, or a value that depends on
    the order the backend sums in. The property travels with the values: through messages, collectives and
    computations."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.of: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray | None:
        return self.of.get(name)

    def set(self, name: str, idx, flags) -> None:
        """Mark elements `idx` of tensor `name` with `flags` (a bool per index, or one for all)."""
        m = self.of.get(name)
        if m is None:
            if not np.any(flags):
                return
            m = self.of[name] = np.zeros(self.sizes[name], dtype=bool)
        m[idx] = flags

    def any_at(self, name: str, idx) -> bool:
        m = self.of.get(name)
        return m is not None and bool(m[idx].any())

    def per_rank(self, views, data: Data, G: np.ndarray, pos) -> np.ndarray | None:
        """For each rank of G, whether any element it reads through `views` is marked (None: none is)."""
        out = None
        for v in views:
            m = self.of.get(v.tensor)
            if m is not None:
                vi, vc = data.indices(v, G, pos)
                per_rank = _any_per_rank(m[vi], vc, G.size)
                out = per_rank if out is None else out | per_rank
        return out

    def rank(self, name: str, b: int, n: int) -> np.ndarray | None:
        m = self.of.get(name)
        return None if m is None else m[b : b + n]


class Data(Observer):
    """Every rank's tensors, changed as the engine runs the schedule."""

    def __init__(self, schedule: Schedule, initial: dict[str, np.ndarray] | None = None, backend: str = "gloo"):
        self.s = schedule
        self.backend = backend
        W = schedule.world
        self.numel = {name: info.numel_array(W) for name, info in schedule.infos.items()}
        self.base = {
            name: np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64) if W else np.zeros(0, np.int64)
            for name, n in self.numel.items()
        }
        self.dtype = {name: info.dtype for name, info in schedule.infos.items()}
        self.names = list(schedule.infos)
        # (statement, tensor, ranks, element, value): a float stored into an integer tensor that cannot hold it
        self.unheld: list[tuple[Span, str, np.ndarray, np.ndarray, np.ndarray]] = []
        self.buf = {name: (initial[name] if initial and name in initial else self.initial(name)) for name in self.names}
        sizes = {name: self.buf[name].size for name in self.names}
        self.undef = Marks(sizes)  # left undefined by `reduce` on non-root ranks
        self.order = Marks(sizes)  # depends on the order the backend sums in, beyond the dtype's tolerance
        self.order_found: list[tuple] = []  # (collective record, position, rank, flags, rank-order values, exact)
        self.order_read: list[ExpectRec] = []  # expects that read order-dependent elements
        self.expect_recs: list[tuple[ExpectRec, np.ndarray, np.ndarray, list[str]]] = []
        # op id → inputs as they were when read: a member that left a collective early, a later collective of a
        # `coalesced:` block
        self.sent: dict[int, list[np.ndarray]] = {}
        self.printed: list[tuple[PrintRec, int, list[np.ndarray]]] = []
        self.faults: list[tuple[Span, np.ndarray, np.ndarray]] = []  # (`//` or `%`, ranks, element) torch refuses
        self.read_values: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # reads: (ranks, ordinals, values)

    # ---- set-up -----------------------------------------------------------------------------------
    def initial(self, name: str) -> np.ndarray:
        info, W = self.s.infos[name], self.s.world
        np_dtype = DTYPES[info.dtype].numpy
        counts = self.numel[name]
        if info.init is None:
            return np.zeros(int(counts.sum()), dtype=np_dtype)
        if info.init[0] == "rand":
            parts = [
                cast(random_init(int(at(info.init[1], None, W)[r]), r, int(counts[r]), info.init[2]), info.dtype)
                for r in range(W)
            ]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np_dtype)
        total = int(counts.sum())
        out = None
        for ks, window in _chunks(counts, W):
            if ks is None:
                el, G = _Elements(None, W, counts), np.arange(W)
            elif window is None:
                el, G = _Elements(ks, ks.size, counts[ks]), ks
            else:
                el, G = _Elements(ks, 1, window[1] - window[0], window[0], counts[ks]), ks
            with np.errstate(all="ignore"):
                value = self.ev(info.init, el, el.pos, G)
            part = self.store(self.flat(value, int(np.sum(_segments(el.count, G.size)))), name, info.span, el, G)
            if ks is None:
                return part.copy()
            if out is None:
                out = np.empty(total, dtype=part.dtype)
            first = int(self.base[name][ks[0]]) + (window[0] if window else 0)
            out[first : first + part.size] = part
        return out

    # ---- reading and writing ----------------------------------------------------------------------
    def indices(self, v, G: np.ndarray, pos, el: _Elements | None = None):
        """Flat indices of view `v` on ranks G (a record's positions `pos`), and the count per rank; within
        `el`'s window when it has one (a one-element view stays whole: it is broadcast)."""
        n = G.size
        count = at(v.numel, pos, n) if is_vec(v.numel) else v.numel
        start = self.base[v.tensor][G] + (at(v.offset, pos, n) if is_vec(v.offset) else v.offset)
        if el is not None and el.lo is not None and not np.all(np.asarray(count) == 1):
            return _ragged(start + el.lo, el.count, n), el.count
        return _ragged(start, count, n), count

    def rank_values(self, name: str, rank: int) -> np.ndarray:
        b, n = int(self.base[name][rank]), int(self.numel[name][rank])
        shape = self.s.infos[name].spec(rank).shape
        return self.buf[name][b : b + n].reshape(shape)

    def rank_marked(self, marks: Marks, name: str, rank: int) -> np.ndarray:
        b, n = int(self.base[name][rank]), int(self.numel[name][rank])
        shape = self.s.infos[name].spec(rank).shape
        m = marks.rank(name, b, n)
        return m.reshape(shape) if m is not None else np.zeros(shape, dtype=bool)

    @staticmethod
    def flat(value, size: int) -> np.ndarray:
        if isinstance(value, Weak):
            return value.a
        if isinstance(value, TensorValues):
            value = value.a
        if isinstance(value, np.ndarray) and value.size == size:
            return value.reshape(-1)
        return np.broadcast_to(np.asarray(value), (size,))

    # ---- element expressions ----------------------------------------------------------------------
    def ev(self, e, el: _Elements, pos, G: np.ndarray):
        tag = e[0]
        if tag == "c":
            return el.const(e[1])
        if tag == "i":
            return TensorValues(el.i, "int64")
        if tag == "v":
            v = e[1]
            idx, count = self.indices(v, G, pos, el)
            values = self.buf[v.tensor][idx]
            per_rank = np.broadcast_to(np.asarray(count), (G.size,))
            if (per_rank == 1).all() and not (np.broadcast_to(np.asarray(el.full), (G.size,)) == 1).all():
                values = values[el.rep]  # one element, broadcast over the target
            return tensor_values(values, self.dtype[v.tensor], v.shape)
        if tag == "u":
            inner = self.ev(e[2], el, pos, G)
            if e[1] == "-":
                return Weak(-inner.a) if isinstance(inner, Weak) else -inner
            if e[1] == "+":
                return inner
            return Weak(~inner.a) if isinstance(inner, Weak) else ~inner
        if tag == "b":
            x, y = self.ev(e[2], el, pos, G), self.ev(e[3], el, pos, G)
            if e[1] in ("//", "%"):
                self.divisors(e, x, y, el, G)
            return combine(e[1], x, y)
        if tag == "f":
            args = [self.ev(a, el, pos, G) for a in e[2]]
            if e[1] == "abs":
                a = args[0]
                return Weak(np.abs(a.a)) if isinstance(a, Weak) else abs(a)
            return combine(e[1], args[0], args[1])
        raise ValueError(f"element expression {tag!r} is not allowed here")

    def divisors(self, e, x, y, el: _Elements, G: np.ndarray) -> None:
        """Note the ranks whose integer `//` or `%` meets a zero divisor: one read from a tensor, or a number that
        wraps to 0 in the tensor's dtype (`d // 2147483648` of an int8 `d`). torch stops them with
        ZeroDivisionError, where NumPy would go on with 0 (a number that is 0 is refused before, N122)."""
        if not (isinstance(x, TensorValues) or isinstance(y, TensorValues)):
            return  # Python numbers: Python's arithmetic, checked when expanded
        x, y = (v.a if isinstance(v, Weak) else v for v in (x, y))
        dtype = result_type(x, y)
        if dtype in FLOAT_DTYPES:
            return
        divisor = np.broadcast_to(as_dtype(y.a if isinstance(y, TensorValues) else y, dtype), el.rep.shape)
        zero = np.flatnonzero(divisor == 0)
        if zero.size:
            owners, first = np.unique(el.rep[zero], return_index=True)
            self.faults.append((e[4], G[owners].copy(), el.i[zero[first]].copy()))

    # ---- the engine's events -------------------------------------------------------------------------
    def local(self, rec, G, pos):
        if isinstance(rec, ComputeRec):
            self.compute(rec, G, pos)
        elif isinstance(rec, ExpectRec):
            self.expect(rec, G, pos)
        elif isinstance(rec, ReadRec):
            self.read(rec, G, pos)
        elif isinstance(rec, PrintRec):
            for k, rank in enumerate(G):
                p = k if pos is None else int(pos[k])
                self.printed.append((rec, int(rank), [self.read_at(v.at(p), int(rank)).copy() for v in rec.views]))

    def read(self, rec: ReadRec, G, pos):
        """An integer read from data, kept with each rank's ordinal for `expand`."""
        ordinal = rec.ordinal if pos is None else rec.ordinal[pos]
        self.read_values.append((np.asarray(G).copy(), np.asarray(ordinal).copy(), self.read_sums(rec, G, pos)))

    def read_sums(self, rec: ReadRec, G, pos) -> np.ndarray:
        """What an integer read from data gives each rank of G: its expression summed over its shape, as torch's
        `int(E.sum())` (one element: `int(t[k])`)."""
        if rec.shape is None:
            count = 1
        else:
            count = at(rec.shape.numel, pos, G.size) if is_vec(rec.shape.numel) else rec.shape.numel
        counts = np.broadcast_to(np.asarray(count, dtype=np.int64), (G.size,))
        el = _Elements(pos, G.size, count)
        with np.errstate(all="ignore"):
            value = self.ev(rec.value, el, pos, G)
        flat = np.asarray(self.flat(value, int(counts.sum()))).astype(np.int64)
        sums = np.zeros(G.size, dtype=np.int64)
        filled = counts > 0
        if flat.size:
            sums[filled] = np.add.reduceat(flat, (np.cumsum(counts) - counts)[filled])
        return sums

    def rank_state(self, rank: int) -> dict[str, np.ndarray]:
        """A copy of one rank's tensors (flat)."""
        out = {}
        for name in self.names:
            b = int(self.base[name][rank])
            out[name] = self.buf[name][b : b + int(self.numel[name][rank])].copy()
        return out

    def load_rank(self, rank: int, state: dict[str, np.ndarray]) -> None:
        for name, values in state.items():
            b = int(self.base[name][rank])
            self.buf[name][b : b + values.size] = values

    def read_at(self, v: View, rank: int) -> np.ndarray:
        b = int(self.base[v.tensor][rank]) + v.offset
        return self.buf[v.tensor][b : b + v.numel].reshape(v.shape)

    def compute(self, rec: ComputeRec, G, pos):
        t = rec.target
        idx, count = self.indices(t, G, pos)
        el = _Elements(pos, G.size, count)
        with np.errstate(all="ignore"):
            value = self.ev(rec.value, el, pos, G)
            if rec.op != "=":  # torch.add(target, value) and so on, then copied into the target
                current = tensor_values(self.buf[t.tensor][idx], self.dtype[t.tensor], t.shape)
                fn = {"+=": "+", "-=": "-", "*=": "*", "/=": "/"}[rec.op]
                value = combine(fn, current, value)
        sources = list(rec.reads) + ([t] if rec.op != "=" else [])
        for marks in (self.undef, self.order):  # a rank's result is marked if anything it read was
            flags = marks.per_rank(sources, self, G, pos)
            if flags is not None or marks.get(t.tensor) is not None:
                marks.set(t.tensor, idx, False if flags is None else flags[el.rep])
        self.buf[t.tensor][idx] = self.store(self.flat(value, idx.size), t.tensor, rec.span, el, G)

    def store(self, values, name: str, span: Span, el: _Elements, G: np.ndarray) -> np.ndarray:
        """`values` (one per element of `el`) as tensor `name` holds them, noting a float its integer dtype cannot
        hold (V804) with the first such element of each rank."""
        values, dtype = np.asarray(values), self.dtype[name]
        if not (DTYPES[dtype].is_int and values.dtype.kind == "f"):
            return cast(values, dtype)
        stored, held = _float_to_int(values, dtype)
        if not held.all():
            bad = np.flatnonzero(~held)
            owners, first = np.unique(el.rep[bad], return_index=True)
            at_ = bad[first]
            self.unheld.append((span, name, G[owners].copy(), el.i[at_].copy(), values[at_].copy()))
        return stored

    def expect(self, rec: ExpectRec, G, pos):
        """Judged a piece at a time (`_chunks`): an expect only reads, so the pieces cannot disturb each other."""
        v = rec.view
        failed = Failed(rec.cmp, np.zeros(G.size, dtype=bool))
        count = at(v.numel, pos, G.size) if is_vec(v.numel) else v.numel
        ok = np.ones(G.size, dtype=bool)
        for ks, window in _chunks(count, G.size):
            if ks is None:
                ks, el = np.arange(G.size), _Elements(pos, G.size, count)
            else:
                p = ks if pos is None else pos[ks]
                el = (
                    _Elements(p, ks.size, at(count, ks, ks.size) if is_vec(count) else count)
                    if window is None
                    else _Elements(p, 1, window[1] - window[0], window[0], _segments(count, G.size)[ks])
                )
            self.judge_piece(rec, G[ks] if ks.size != G.size else G, el, ks, ok, failed)
        undefined = self.undef.per_rank([v, *rec.reads], self, G, pos)
        if undefined is None:
            undefined = np.zeros(G.size, dtype=bool)
        order = self.order.per_rank([v, *rec.reads], self, G, pos)
        if order is not None and order.any():
            self.order_read.append(rec)
        ok &= ~undefined
        failed.undefined = undefined
        self.expect_recs.append((rec, G.copy(), ok, failed))

    def judge_piece(self, rec: ExpectRec, G, el: _Elements, ks: np.ndarray, ok: np.ndarray, failed: Failed):
        """Judge the piece of an expect on ranks G (positions `ks` of the record's ranks): clear their `ok`
        where it fails, and keep each failing rank's first failing element to word its detail when asked."""
        idx, count = self.indices(rec.view, G, el.pos, el)
        with np.errstate(all="ignore"):
            expected = np.broadcast_to(np.asarray(self.flat(self.ev(rec.value, el, el.pos, G), idx.size)), idx.shape)
        actual = self.buf[rec.view.tensor][idx]
        good = compare(actual, expected, rec.cmp, self.dtype[rec.view.tensor])
        here = _all_per_rank(good, count, G.size)
        if here.all():
            return
        bad = np.flatnonzero(~good)
        owners, first = np.unique(el.rep[bad], return_index=True)
        at_ = bad[first]
        starts = np.cumsum(np.broadcast_to(np.asarray(count, dtype=np.int64), (G.size,))) - count
        for o, a, start in zip(owners.tolist(), at_.tolist(), starts[owners].tolist()):
            k = int(ks[o])
            if ok[k]:  # an earlier window of this rank failed first
                failed.element[k] = a - start + (el.lo or 0)
                failed.got[k] = actual[a : a + 1].tolist()[0]
                failed.want[k] = expected[a : a + 1].tolist()[0]
        ok[ks] &= here

    def expect_results(self) -> list[ExpectResult]:
        out = []
        for rec, G, ok, failed in self.expect_recs:
            for k, (rank, good) in enumerate(zip(G.tolist(), ok.tolist())):
                out.append(ExpectResult(rank, rec, good, "" if good else failed.detail(k)))
        return out

    def matched(self, sends: Posts, recvs: Posts):
        same = sends.dtype == recvs.dtype  # differing dtypes: the checker reports it; Gloo reinterprets bytes
        if not same.all():
            sends, recvs = sends.take(same), recvs.take(same)
        if not len(sends):
            return
        runs = []  # per (send record, receive record): (source tensor, target tensor, starts there, counts)
        for m in _record_pairs(sends.rec * len(self.s.records) + recvs.rec):
            s_view, r_view = self.s.records[int(sends.rec[m][0])].view, self.s.records[int(recvs.rec[m][0])].view
            src = self.start(s_view, sends.rank[m], sends.pos[m])
            dst = self.start(r_view, recvs.rank[m], recvs.pos[m])
            runs.append((s_view.tensor, r_view.tensor, src, dst, delivered(sends.numel[m], recvs.numel[m])))
        if len(runs) > 1:  # a pipeline's round: many records, one rank each; joined per pair of tensors if they may be
            joined: dict[tuple[str, str], list] = {}
            for a, b, *cols in runs:
                joined.setdefault((a, b), []).append(cols)
            together = _moves([(a, b, *map(np.concatenate, zip(*parts))) for (a, b), parts in joined.items()])
            moves = together if _independent(together) else _moves(runs)
        else:
            moves = _moves(runs)
        for a, b, src, dst in moves:
            self.buf[b][dst] = cast(self.buf[a][src], self.dtype[b])
            for marks in (self.undef, self.order):
                if marks.get(a) is not None or marks.get(b) is not None:
                    marks.set(b, dst, marks.get(a)[src] if marks.get(a) is not None else False)

    def start(self, v, ranks: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The flat index where view `v` starts on each of `ranks` (at their positions in its record)."""
        return self.base[v.tensor][ranks] + (at(v.offset, pos, ranks.size) if is_vec(v.offset) else v.offset)

    def called(self, rec, G: np.ndarray, pos, me):
        """The first call of a `coalesced:` block: torch reads the inputs of all the block's collectives when it
        issues its one call at the end, before writing any output, so each later collective of the block
        contributes its inputs as they are now, not what an earlier one in the block writes into them."""
        block = rec.block
        if block is None or block.index != 0 or block.count == 1:
            return
        for j in range(1, block.count):
            member = self.s.records[rec.id + j]
            for r in G.tolist():
                k = int(np.searchsorted(member.ranks, r))
                if k < member.ranks.size and member.ranks[k] == r:
                    self.sent[member.base + k] = [self.read_at(v.at(k), r).reshape(-1).copy() for v in member.inputs]

    def completed(self, calls: Calls, starts, counts):
        for s, c in zip(starts.tolist(), counts.tolist()):
            rows = calls.take(slice(s, s + c))
            self.collective(rows, rows.released == 0)
            if self.sent:
                for rid, p in zip(rows.rec.tolist(), rows.pos.tolist()):
                    self.sent.pop(self.s.records[rid].base + p, None)

    def released(self, calls: Calls, leaving: np.ndarray):
        """Members leaving a rooted collective early (Gloo): their results come from the root, which has called.
        What they contributed is kept as it was when they left: they may change their buffers from now on."""
        for k in np.flatnonzero(leaving).tolist():
            rec = self.s.records[int(calls.rec[k])]
            p, r = int(calls.pos[k]), int(calls.rank[k])
            self.sent[rec.base + p] = [self.read_at(v.at(p), r).reshape(-1).copy() for v in rec.inputs]
        self.collective(calls, leaving)

    def collective(self, calls: Calls, writing: np.ndarray):
        """Members `writing` of one collective (the rows: the members that have called, in group order) get
        their results: `Kind.apply` on the members' inputs, none for members that have not called yet."""
        if not writing.any():
            return
        recs = [self.s.records[int(r)] for r in calls.rec]
        first = recs[0]
        kind = first.kind
        if kind.name == "barrier":
            return
        if (
            any(r.kind is not kind for r in recs)
            or (distinct(calls.contribution).size > 1)
            or distinct(calls.redop).size > 1
            or distinct(calls.root).size > 1
            or distinct(calls.scale).size > 1
            or distinct(calls.dtype).size > 1
        ):
            return  # members disagree: the checker reports it; the data would be garbage
        writes = np.array(
            [
                kind.roles(bool(r == root))[1] or kind.roles(bool(r == root))[2]
                for r, root in zip(calls.rank.tolist(), calls.root.tolist())
            ]
        )
        writing = writing & writes  # members whose buffers the collective does not touch need no result
        if not writing.any():
            return
        size = len(self.s.groups[int(calls.gid[0])].ranks)
        me = calls.me.tolist()
        member: list = [None] * size  # (record, position, rank) by group index
        for rec, p, r, m in zip(recs, calls.pos.tolist(), calls.rank.tolist(), me):
            member[m] = (rec, p, r)
        inst = self.instance(member, first, calls)
        if kind.members_disagree(inst) is not None:
            return
        try:
            outputs = kind.apply(inst)
        except (ValueError, TypeError):
            # sizes that disagree across ranks, or a reduce op the dtype lacks (bitwise on floats): the
            # checker reports it; the outputs hold no defined value
            for m in np.asarray(me)[writing].tolist():
                rec, p, r = member[m]
                for v in rec.outputs:
                    self.mark(self.undef, v.at(p), r, True)
            return
        dtype = self.dtype[first.outputs[0].tensor] if first.outputs else None
        spread = self.order_spread(kind, inst, outputs, dtype) if dtype else None
        tainted = self.inputs_marked(self.order, member)  # an order-dependent input spreads to every result
        for m in np.asarray(me)[writing].tolist():
            rec, p, r = member[m]
            for j, (v, values) in enumerate(zip(rec.outputs, outputs[m])):
                view = v.at(p)
                if values is None:
                    self.mark(self.undef, view, r, True)
                    continue
                b = int(self.base[view.tensor][r]) + view.offset
                self.buf[view.tensor][b : b + view.numel] = cast(
                    np.asarray(values).reshape(-1), self.dtype[view.tensor]
                )
                self.mark(self.undef, view, r, False)
                order = True if tainted else (spread.at_risk[m][j] if spread is not None else False)
                self.mark(self.order, view, r, order)
                if spread is not None and np.any(spread[m][j]) and not tainted:
                    self.order_found.append((rec, p, r, spread[m][j], values, spread.exact[m][j]))

    def order_spread(self, kind, inst: InstanceData, outputs, dtype: str):
        """Where a floating-point sum's (or product's) result depends on the order the members are combined in:
        `found`, where the rank-order result (what the simulator keeps) differs from the exactly rounded one
        beyond the dtype's tolerance (V803); `at_risk`, those and every element where two orders may differ by
        more than that tolerance (each order is within γ(k) = k·u / (1 - k·u) of the exact result, relative to
        the sum of the terms' magnitudes, after k roundings of unit roundoff u), which `commdsl run` compares
        across ranks only: a float16 sum of four positive terms may move by 2·γ(3) ≈ 0.3 %, beyond float16's
        0.1 % (measured: 495 of 65,536 random elements at world 4 on Gloo, none of them off from the exact sum
        by more than the tolerance). Neither Gloo (ring order, chunked by size) nor NCCL (algorithm and
        topology) promises an order, and two operands commute exactly, so only three or more members can
        differ."""
        if not (kind.reducing and inst.redop in ORDERED_REDOPS and DTYPES[dtype].is_float):
            return None
        members = sum(x is not None for x in inst.inputs)
        if members < 3:
            return None
        wide = replace(inst, inputs=[None if x is None else [a.astype(np.float64) for a in x] for x in inst.inputs])
        exact = kind.apply(wide)
        sizes = [None if x is None else [np.abs(a) for a in x] for x in wide.inputs]
        magnitude = kind.apply(replace(wide, inputs=sizes))  # the sum (or product) of the terms' magnitudes
        roundings = members - 1 + (inst.redop in ("avg", "premul_sum"))  # the division or the scaling rounds once more
        u = UNIT_ROUNDOFF[dtype] * roundings
        spread = 2 * u / (1 - u)
        rtol, atol = TOLERANCE[dtype]
        out = Spread(exact=[[None] * len(o) for o in outputs])
        for m, (mine, ref, size) in enumerate(zip(outputs, exact, magnitude)):
            found, at_risk = [], []
            for j, (values, wide_values, terms) in enumerate(zip(mine, ref, size)):
                if values is None or wide_values is None:
                    found.append(False)
                    at_risk.append(False)
                    continue
                rounded = cast(np.asarray(wide_values).reshape(-1), dtype)
                out.exact[m][j] = rounded
                off = ~close(np.asarray(values).reshape(-1), rounded, dtype)
                found.append(off)
                with np.errstate(invalid="ignore", over="ignore"):
                    moves = spread * np.abs(np.asarray(terms).reshape(-1)) > atol + rtol * np.abs(rounded)
                at_risk.append(off | moves)
            out.append(found)
            out.at_risk.append(at_risk)
        return out

    def inputs_marked(self, marks: Marks, member: list) -> bool:
        """Whether any member's inputs to a collective carry `marks`."""
        for m in member:
            if m is None:
                continue
            rec, p, r = m
            for v in rec.inputs:
                view = v.at(p)
                b = int(self.base[view.tensor][r]) + view.offset
                if marks.any_at(view.tensor, slice(b, b + view.numel)):
                    return True
        return False

    def contributed(self, rec, p: int, r: int) -> list[np.ndarray]:
        """A member's inputs to its collective: as it left, if it left early, else its buffers now."""
        kept = self.sent.get(rec.base + p)
        return kept if kept is not None else [self.read_at(v.at(p), r).reshape(-1) for v in rec.inputs]

    def instance(self, member: list, first, calls: Calls) -> InstanceData:
        """What `Kind.apply` computes on: each member's inputs (None for a member that has not called)."""

        def each(fn, absent):
            return [absent if m is None else fn(*m) for m in member]

        root = None
        if first.root is not None:
            root = next((k for k, m in enumerate(member) if m is not None and m[2] == int(calls.root[0])), None)
        scale = None if first.scale is None else float(at(first.scale, np.array([int(calls.pos[0])]), 1)[0])
        return InstanceData(
            size=len(member),
            root=root,
            redop=first.applied_redop,
            scale=scale,
            inputs=each(self.contributed, None),
            input_shapes=each(lambda rec, p, r: [v.at(p).shape for v in rec.inputs], None),
            output_numel=each(lambda rec, p, r: [v.at(p).numel for v in rec.outputs], None),
            inputs_listed=each(lambda rec, p, r: rec.inputs_listed, False),
            outputs_listed=each(lambda rec, p, r: rec.outputs_listed, False),
            in_splits=each(lambda rec, p, r: tuple(split_table(rec.in_splits, rec.ranks.size)[:, p].tolist()), ()),
            out_splits=each(lambda rec, p, r: tuple(split_table(rec.out_splits, rec.ranks.size)[:, p].tolist()), ()),
        )

    def mark(self, marks: Marks, view: View, rank: int, flags):
        b = int(self.base[view.tensor][rank]) + view.offset
        marks.set(view.tensor, slice(b, b + view.numel), flags)


class Spread(list):
    """Per member, per output: which elements of a sum differ from the exactly rounded values (`exact`) in
    the simulator's order, and which may in a backend's (`at_risk`; `Data.order_spread`)."""

    def __init__(self, exact: list):
        super().__init__()
        self.exact = exact
        self.at_risk: list = []


SIM_CHUNK = 1 << 22
"""Elements an initialiser or an `expect` is evaluated on at a time (over all ranks): the evaluation makes
int64 indices and float64 temporaries of its size, which over a whole large tensor came to more than ten
times the tensors' bytes. Computations are not split: a write may alias what the expression reads."""


def _chunks(count, n: int, limit: int | None = None):
    """(positions, window) pieces of `n` ranks with `count` elements each, at most `limit` elements a piece:
    consecutive ranks together (window None), a rank with more than `limit` alone, in windows (lo, hi)."""
    limit = SIM_CHUNK if limit is None else limit
    counts = np.asarray(_segments(count, n), dtype=np.int64)
    csum = np.cumsum(counts)
    if not n or int(csum[-1]) <= limit:
        yield None, None  # one piece: all of them
        return
    k = 0
    while k < n:
        c = int(counts[k])
        if c > limit:
            for lo in range(0, c, limit):
                yield np.array([k]), (lo, min(c, lo + limit))
            k += 1
            continue
        end = max(k + 1, int(np.searchsorted(csum, int(csum[k]) - c + limit, side="right")))
        yield np.arange(k, end), None
        k = end


def _ragged(starts, counts, n: int) -> np.ndarray:
    """Flat indices of the ranges [start, start + count), one after another."""
    starts = np.asarray(starts, dtype=np.int64)
    if not is_vec(counts) or np.ndim(counts) == 0:
        c = int(counts)
        if c == 1:
            return starts
        return (starts[:, None] + np.arange(c)).reshape(-1)
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    return np.repeat(starts - first, counts) + np.arange(total)


def _record_pairs(pairs: np.ndarray) -> Iterator:
    """The rows of each distinct value of `pairs` (a send's and a receive's record), in ascending order of it."""
    if (pairs == pairs[0]).all():
        yield slice(None)
        return
    order = np.argsort(pairs, kind="stable")
    yield from np.split(order, np.flatnonzero(np.diff(pairs[order])) + 1)


def _moves(runs: list[tuple]) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """(source tensor, target tensor, source indices, target indices) of each run of messages (the tensors, the
    messages' starts in each, their counts)."""
    return [(a, b, _ragged(src, c, c.size), _ragged(dst, c, c.size)) for a, b, src, dst, c in runs]


def _independent(moves: list[tuple[str, str, np.ndarray, np.ndarray]]) -> bool:
    """Whether no element is written by two of `moves` or written by one and read by another: then they may be
    made in any order, or joined (a message race, which the checker reports, keeps the engine's order)."""
    read: dict[str, list] = {}
    written: dict[str, list] = {}
    for a, b, src, dst in moves:
        read.setdefault(a, []).append(src)
        written.setdefault(b, []).append(dst)
    for t, parts in written.items():
        dst = distinct(np.concatenate(parts))
        if dst.size != sum(p.size for p in parts) or (t in read and np.isin(np.concatenate(read[t]), dst).any()):
            return False
    return True


def _segments(count, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(count, dtype=np.int64), (n,))


def _all_per_rank(good: np.ndarray, count, n: int) -> np.ndarray:
    counts = _segments(count, n)
    owner = np.repeat(np.arange(n), counts)
    bad = np.bincount(owner[~good], minlength=n)
    return bad == 0


def _any_per_rank(flags: np.ndarray, count, n: int) -> np.ndarray:
    counts = _segments(count, n)
    owner = np.repeat(np.arange(n), counts)
    return np.bincount(owner[flags], minlength=n) > 0


def simulate(schedule: Schedule, initial: dict[str, np.ndarray] | None = None) -> SimResult:
    """Run the Schedule with data under Gloo's semantics. `initial`: flat tensors (every rank's, rank after
    rank) to start from instead of the initialisers."""
    data = Data(schedule, initial)
    return SimResult(schedule, run_engine(schedule, observer=data), data)


__all__ = ["simulate", "SimResult", "ExpectResult", "Data", "initial_value", "cast", "close", "judge", "format_tensor"]
