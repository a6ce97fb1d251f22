"""The Schedule: a program expanded at one world size — the single source of truth every stage reads.

It is a struct of arrays. Each `Record` is one statement under one set of loop bindings, run by a set
of ranks (`ranks`, ascending); its per-rank fields (a peer, a view's offset, a root) are a scalar when
every one of those ranks has the same value and an array aligned with `ranks` otherwise. A ring
all-reduce at world 1024 is about 5 M ops but only about 6,000 records, so the engine, the checker's
rules and the simulator work record by record, on arrays.

Every op has an integer id: rank `ranks[k]` of record `rec` runs op `rec.base + k`. Rank r's program
is the sequence of records that contain r, in order (`Schedule.sequence`); ranks that run the same
records share one sequence.

Stages that work on one rank at a time (the runtime, `compile`, `graph`) read `Schedule.ops[rank]`:
that rank's ops as small concrete objects (`Send`, `Collective`, ...), made from the records on
demand. They are the same ops, seen from one rank.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from commdsl.p2p import form
from commdsl.source import Span
from commdsl.values import at, distinct, item, sub

if TYPE_CHECKING:
    from commdsl.collectives import Kind

# Elem: ("c", value) | ("v", view) | ("i",) | ("u", op, Elem) | ("b", op, Elem, Elem, span of the operation)
#       | ("f", fname, (Elem, ...)) | ("rand", seed, normal)
# In a record, a ("c", value)'s value and a ("v", view)'s view are per rank (see the module docstring);
# in a concrete op they are plain.
Elem = tuple


# ---- concrete values: one rank's view of things ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class View:
    """A contiguous region of a tensor on one rank: flat elements [offset, offset + numel) with a shape."""

    tensor: str
    offset: int
    shape: tuple[int, ...]
    numel: int

    @property
    def stop(self) -> int:
        return self.offset + self.numel

    def overlaps(self, other: View) -> bool:
        return (
            self.tensor == other.tensor
            and self.offset < other.stop
            and other.offset < self.stop
            and self.numel > 0
            and other.numel > 0
        )


@dataclass(frozen=True, slots=True)
class Group:
    """A process group: global ranks in group-rank order. Group 0 is the world. `step`: made by a `new_group`
    statement when a rank runs it, not before the program."""

    id: int
    name: str
    ranks: tuple[int, ...]
    step: bool = False

    def index(self, rank: int) -> int:
        return self.ranks.index(rank)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One rank's tensor: what the runtime allocates and the simulator starts from."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    init: Elem | None
    span: Span


# ---- per-rank values in records ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VView:
    """A view on every rank of a record: a flat offset and a shape, each entry a scalar or per rank."""

    tensor: str
    offset: object
    shape: tuple

    @property
    def numel(self):
        """Elements per rank (in the record's own integer type for a 1-d view, else computed in int64)."""
        if len(self.shape) == 1:
            return self.shape[0]
        return math.prod(d.astype(np.int64) if isinstance(d, np.ndarray) else d for d in self.shape)

    @property
    def rows(self):
        return self.shape[0]

    def at(self, k: int) -> View:
        shape = tuple(int(item(d, k)) for d in self.shape)
        return View(self.tensor, int(item(self.offset, k)), shape, math.prod(shape) if shape else 1)

    def sub(self, sel) -> VView:
        return VView(self.tensor, sub(self.offset, sel), tuple(sub(d, sel) for d in self.shape))


def elem_at(e: Elem, k: int) -> Elem:
    """Rank k's element expression (a record's per-rank constants and views made concrete)."""
    tag = e[0]
    if tag == "c":
        return ("c", item(e[1], k))
    if tag == "v":
        return ("v", e[1].at(k))
    if tag == "u":
        return ("u", e[1], elem_at(e[2], k))
    if tag == "b":
        return ("b", e[1], elem_at(e[2], k), elem_at(e[3], k), e[4])
    if tag == "f":
        return ("f", e[1], tuple(elem_at(a, k) for a in e[2]))
    if tag == "rand":
        return ("rand", item(e[1], k), e[2])
    return e


def elem_reads(e: Elem) -> list:
    """The views an element expression reads, left to right."""
    tag = e[0]
    if tag == "v":
        return [e[1]]
    if tag == "u":
        return elem_reads(e[2])
    if tag == "b":
        return elem_reads(e[2]) + elem_reads(e[3])
    if tag == "f":
        return [v for a in e[2] for v in elem_reads(a)]
    return []


# ---- records ---------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Record:
    """One statement instance, run by `ranks` (ascending)."""

    node: object  # the AST statement: its span is the op's span
    ranks: np.ndarray
    bindings: tuple[tuple[str, int], ...]
    id: int = -1
    base: int = 0
    data: tuple = ()  # the `ReadRec`s whose values this statement's operands came from (named in diagnostics)

    @property
    def span(self) -> Span:
        return self.node.span

    def bindings_at(self, k: int) -> tuple[tuple[str, int], ...]:
        """Rank `ranks[k]`'s loop values (a loop whose bounds differ by rank holds them per global rank)."""
        if all(not isinstance(v, np.ndarray) for _, v in self.bindings):
            return self.bindings
        rank = int(self.ranks[k])
        return tuple((name, int(v[rank]) if isinstance(v, np.ndarray) else v) for name, v in self.bindings)

    def positions(self, ranks: np.ndarray) -> np.ndarray | None:
        """Where `ranks` (a sorted subset) sit in this record; None when they are all of them."""
        if ranks.size == self.ranks.size:
            return None
        return np.searchsorted(self.ranks, ranks)

    def at(self, k: int):  # pragma: no cover - every kind defines it
        raise NotImplementedError


@dataclass(eq=False, slots=True)
class ComputeRec(Record):
    target: VView = None
    op: str = "="
    value: Elem = ()
    reads: tuple[VView, ...] = ()

    def at(self, k: int) -> Compute:
        return Compute(
            span=self.span,
            bindings=self.bindings_at(k),
            target=self.target.at(k),
            op=self.op,
            value=elem_at(self.value, k),
            reads=tuple(v.at(k) for v in self.reads),
        )


@dataclass(eq=False, slots=True)
class ExpectRec(Record):
    view: VView = None
    cmp: str = "=="
    value: Elem = ()
    reads: tuple[VView, ...] = ()

    def at(self, k: int) -> Expect:
        return Expect(
            span=self.span,
            bindings=self.bindings_at(k),
            view=self.view.at(k),
            cmp=self.cmp,
            value=elem_at(self.value, k),
            reads=tuple(v.at(k) for v in self.reads),
        )


@dataclass(eq=False, slots=True)
class PrintRec(Record):
    views: tuple[VView, ...] = ()
    texts: tuple[str, ...] = ()

    def at(self, k: int) -> Print:
        return Print(
            span=self.span, bindings=self.bindings_at(k), views=tuple(v.at(k) for v in self.views), texts=self.texts
        )


@dataclass(eq=False, slots=True)
class P2PRec(Record):
    """`send`/`recv`, blocking or async (`isend`/`irecv`, with request ids), or one op of a batch."""

    is_send: bool = True
    view: VView = None
    dtype: str = "float32"
    peer: object = 0
    tag: object = 0
    gid: object = None  # None: the world; else the group id (per rank for a split group)
    blocking: bool = True
    req: object = None  # request ids of an async op (per rank)
    batched: bool = False

    @property
    def word(self) -> str:
        """The op as the user wrote it: `send`, `isend`, ..."""
        return form(self.is_send, self.node.blocking).word

    @property
    def from_any(self) -> bool:
        """A receive from any source (`recv x from any`, torch's `src=None`): its statement names no peer."""
        return not self.is_send and getattr(self.node, "peer", 0) is None

    def at(self, k: int, groups: list[Group] | None = None) -> Send | Recv:
        gid = None if self.gid is None else int(item(self.gid, k))
        cls = Send if self.is_send else Recv
        return cls(
            span=self.span,
            bindings=self.bindings_at(k),
            view=self.view.at(k),
            dtype=self.dtype,
            peer=int(item(self.peer, k)),
            tag=int(item(self.tag, k)),
            group=None if gid is None or groups is None else groups[gid],
            blocking=self.blocking,
            req=None if self.req is None else int(item(self.req, k)),
        )


@dataclass(eq=False, slots=True)
class BatchRec(Record):
    """`batch:` — P2P ops posted together (batch_isend_irecv); each rank waits for its own at the end, or,
    bound to a handle, later: then `req` holds each rank's one request, which its ops in the batch share
    and which is done when all of them are."""

    ops: tuple[P2PRec, ...] = ()
    req: object = None

    @property
    def blocking(self) -> bool:
        return self.req is None

    def members(self, rank: int) -> Iterator[tuple[P2PRec, int]]:
        """(op, position) of each of `rank`'s ops in the batch, in order."""
        for op in self.ops:
            k = int(np.searchsorted(op.ranks, rank))
            if k < op.ranks.size and op.ranks[k] == rank:
                yield op, k


@dataclass(eq=False, slots=True)
class WaitRec(Record):
    """`wait h, ...` or `wait all`: the request ids of ranks[k] are reqs[starts[k]:starts[k + 1]]."""

    starts: np.ndarray = None
    reqs: np.ndarray = None
    all: bool = False

    def at(self, k: int) -> Wait:
        return Wait(
            span=self.span,
            bindings=self.bindings_at(k),
            reqs=tuple(int(q) for q in self.reqs[self.starts[k] : self.starts[k + 1]]),
            all=self.all,
        )


@dataclass(frozen=True, slots=True)
class Coalesced:
    """A collective's place in a `coalesced:` block. Torch records the block's collectives and issues them as
    one backend call at its end (`_coalescing_manager`): that call carries the first collective's reduce op
    for all of them (measured on Gloo: `sum` then `max` gives two sums)."""

    node: object  # the `coalesced:` statement
    index: int  # this collective's place in the block
    count: int  # the block's collectives
    redop: str | None  # the reduce op the call applies: the first collective's

    @property
    def span(self) -> Span:
        return self.node.span

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


@dataclass(eq=False, slots=True)
class CollectiveRec(Record):
    kind: Kind = None
    gid: object = 0
    dtype: str = "float32"
    inputs: tuple[VView, ...] = ()
    outputs: tuple[VView, ...] = ()
    inputs_listed: bool = False
    outputs_listed: bool = False
    root: object = None  # a global rank, per rank
    redop: str | None = None
    scale: object = None
    in_splits: tuple = ()
    out_splits: tuple = ()
    req: object = None
    contribution: object = 0  # elements each rank contributes per peer (`Kind.contribution`)
    block: Coalesced | None = None

    @property
    def blocking(self) -> bool:
        return self.req is None

    @property
    def applied_redop(self) -> str | None:
        """The reduce op the backend applies: in a `coalesced:` block, the block's first collective's."""
        return self.redop if self.block is None else self.block.redop

    @property
    def buffer_names(self) -> tuple[str, ...]:
        """The tensors the call reads and writes: what tells two same-kind calls of one rank apart."""
        return tuple(v.tensor for v in self.inputs) + ("->",) + tuple(v.tensor for v in self.outputs)

    def at(self, k: int, groups: list[Group]) -> Collective:
        root = None if self.root is None else int(item(self.root, k))
        scale = None if self.scale is None else float(item(self.scale, k))
        return Collective(
            span=self.span,
            bindings=self.bindings_at(k),
            kind=self.kind.name,
            group=groups[int(item(self.gid, k))],
            dtype=self.dtype,
            inputs=tuple(v.at(k) for v in self.inputs),
            outputs=tuple(v.at(k) for v in self.outputs),
            inputs_listed=self.inputs_listed,
            outputs_listed=self.outputs_listed,
            root=root,
            redop=self.redop,
            scale=scale,
            in_splits=_splits_at(self.in_splits, k),
            out_splits=_splits_at(self.out_splits, k),
            req=None if self.req is None else int(item(self.req, k)),
            block=self.block,
        )


def _splits_at(splits: tuple, k: int) -> tuple[int, ...]:
    """Rank k's split sizes: one entry per peer, each a scalar or an array over ranks. Read in one pass (an
    all_to_all at world 1024 has 1024 entries; `item` by `item` took 3 ms a rank, and the checker's C306 reads
    every member's: 9 of the MoE dispatch's 19 s of lint)."""
    column = (v[k] if isinstance(v, np.ndarray) else v for v in splits)
    return tuple(np.fromiter(column, dtype=np.int64, count=len(splits)).tolist())


_SPLITS: dict[int, tuple] = {}


def split_table(splits: tuple, n: int) -> np.ndarray:
    """A record's split sizes as one (sizes, ranks) int64 table, made once per list (a member reads its column)."""
    if not splits:
        return np.zeros((0, n), dtype=np.int64)
    hit = _SPLITS.get(id(splits))
    if hit is not None and hit[0] is splits and hit[1].shape[1] == n:
        return hit[1]
    table = np.array([at(x, None, n) for x in splits], dtype=np.int64).reshape(len(splits), n)
    if len(_SPLITS) > 64:
        _SPLITS.clear()
    _SPLITS[id(splits)] = (splits, table)  # holding `splits` keeps its id from being reused
    return table


@dataclass(eq=False, slots=True)
class NewGroupRec(Record):
    """`g = new_group [...]`: rank `ranks[k]` makes group `made` (a group id, per rank). Under Gloo's model the
    engine has a member wait in it for the other members, a non-member go on (`Engine.new_group`;
    docs/backend-support.md#groups-made-at-run-time); that every rank makes the same groups in the same order
    is the checker's rule C313, read from the records."""

    made: object = 0

    def at(self, k: int, groups: list[Group]) -> NewGroup:
        return NewGroup(span=self.span, bindings=self.bindings_at(k), group=groups[int(item(self.made, k))])


@dataclass(eq=False, slots=True)
class ReadRec(Record):
    """An integer read from tensor data, `T[k]` or `sum(E)` (`node` is that expression): on rank `ranks[k]`,
    the sum of `value` over `shape` (a view's shape; None: one element) at this point of its program. It is the
    rank's `ordinal`-th read; `known` is the value the expansion used, except on a rank that stopped here
    because the value was not known yet (`missing`; `expand.expand` runs the schedule to learn it)."""

    value: Elem = ()
    shape: VView | None = None
    reads: tuple[VView, ...] = ()
    ordinal: object = 0
    known: np.ndarray | None = None
    missing: np.ndarray | None = None  # the ranks (positions) whose value was not known
    text: str = ""

    def at(self, k: int) -> Read:
        return Read(
            span=self.span,
            bindings=self.bindings_at(k),
            value=elem_at(self.value, k),
            shape=() if self.shape is None else self.shape.at(k).shape,
            reads=tuple(v.at(k) for v in self.reads),
            expected=None if self.missing is not None and self.missing[k] else int(self.known[k]),
            text=self.text,
        )

    def value_at(self, rank: int) -> int | None:
        """The value rank `rank` read here (None: not known)."""
        k = int(np.searchsorted(self.ranks, rank))
        if k == self.ranks.size or self.ranks[k] != rank or (self.missing is not None and self.missing[k]):
            return None
        return int(self.known[k])


def values_read(reads, ranks) -> list[str]:
    """What each rank of `ranks` read from data in `reads`, one line per expression and rank, as diagnostics
    name it: "on rank 1, `recv_counts[j]` was 2, 0 (read at line 14)" (a comprehension reads once per value)."""
    out = []
    for rank in ranks:
        seen: dict[tuple[str, int], list[int]] = {}
        for r in reads:
            v = r.value_at(rank)
            if v is not None:
                seen.setdefault((r.text, r.span.line), []).append(v)
        for (text, line), vals in seen.items():
            shown = ", ".join(map(str, vals[:8])) + (", ..." if len(vals) > 8 else "")
            out.append(f"on rank {rank}, `{text}` was {shown} (read at line {line})")
    return out


AnyRecord = ComputeRec | ExpectRec | PrintRec | P2PRec | BatchRec | WaitRec | CollectiveRec | NewGroupRec | ReadRec
LOCAL_RECORDS = (ComputeRec, ExpectRec, PrintRec, NewGroupRec, ReadRec)
UNTIMED_RECORDS = (ExpectRec, PrintRec)
VIEW_FIELDS = ("view", "target")
"""A record's fields that hold the one view it sends, receives, writes or checks (`ReadRec.shape` is a shape,
not an access)."""
VIEW_TUPLE_FIELDS = ("reads", "views", "inputs", "outputs")
"""A record's fields that hold a tuple of the views it reads, shows or passes to a collective."""
"""Statements that check or show rather than run: `commdsl bench` leaves them out of its timed ops and
`commdsl predict` prices them at nothing (no line of its profile)."""


# ---- one rank's ops ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    span: Span
    bindings: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute(Op):
    target: View
    op: str  # "=", "+=", "-=", "*=", "/="
    value: Elem
    reads: tuple[View, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Expect(Op):
    view: View
    cmp: str
    value: Elem
    reads: tuple[View, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Print(Op):
    views: tuple[View, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Send(Op):
    view: View
    dtype: str
    peer: int
    tag: int
    group: Group | None
    blocking: bool
    req: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recv(Op):
    view: View
    dtype: str
    peer: int
    tag: int
    group: Group | None
    blocking: bool
    req: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch(Op):
    """P2P ops posted together (batch_isend_irecv); the rank waits for all of them at the end, or, with a
    request, at a later `wait`."""

    ops: tuple[Send | Recv, ...]
    req: int | None = None

    @property
    def blocking(self) -> bool:
        return self.req is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait(Op):
    reqs: tuple[int, ...]
    all: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective(Op):
    kind: str
    group: Group
    dtype: str
    inputs: tuple[View, ...] = ()
    outputs: tuple[View, ...] = ()
    inputs_listed: bool = False
    outputs_listed: bool = False
    root: int | None = None
    redop: str | None = None
    scale: float | None = None
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    req: int | None = None
    block: Coalesced | None = None

    @property
    def blocking(self) -> bool:
        return self.req is None


@dataclass(frozen=True, slots=True, kw_only=True)
class NewGroup(Op):
    """`torch.distributed.new_group(group.ranks)`, made when the rank gets here."""

    group: Group


@dataclass(frozen=True, slots=True, kw_only=True)
class Read(Op):
    """`int(E.sum())` over `shape` (torch's `int(t[k])` for one element): the run stops where it differs from
    `expected`, the value the checked schedule was expanded with."""

    value: Elem
    shape: tuple[int, ...]
    reads: tuple[View, ...]
    expected: int | None
    text: str


AnyOp = Compute | Expect | Print | Send | Recv | Batch | Wait | Collective | NewGroup | Read


# ---- tensors ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class TensorInfo:
    """A declared tensor on every rank: its shape entries and its initialiser's constants are per rank
    (arrays over all `world` ranks) where they differ."""

    name: str
    dtype: str
    shape: tuple
    init: Elem | None
    span: Span

    @property
    def numel(self):
        return math.prod(self.shape) if self.shape else 1

    def numel_array(self, world: int) -> np.ndarray:
        n = self.numel
        return n.astype(np.int64) if isinstance(n, np.ndarray) else np.full(world, n, dtype=np.int64)

    def spec(self, rank: int) -> TensorSpec:
        shape = tuple(int(item(d, rank)) for d in self.shape)
        init = None if self.init is None else elem_at(self.init, rank)
        return TensorSpec(self.name, self.dtype, shape, math.prod(shape) if shape else 1, init, self.span)


@dataclass(frozen=True)
class Requests:
    """Every async request of the schedule (isend, irecv, async collectives): request id → who posts it. Each
    column int32 (a request id is an index into them; the engine's per-request arrays hold the rest)."""

    rank: np.ndarray  # the rank that posts request q
    record: np.ndarray  # the record (its id) that posts it
    pos: np.ndarray  # the rank's position in that record
    parts: np.ndarray  # how many ops must complete for it to be done: 1, or the rank's ops in a batch

    @property
    def count(self) -> int:
        return int(self.rank.size)


# ---- the schedule ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Schedule:
    """Everything a run at one world size needs, with every integer resolved."""

    program: str
    path: str
    world: int
    params: dict[str, object]
    backends: tuple[str, ...]
    groups: list[Group]
    infos: dict[str, TensorInfo]
    records: list[AnyRecord]  # every record, batch members included, by id
    top: list[int]  # the ids of the records ranks step through (batch members are reached through their batch)
    requests: Requests
    group_of: dict = field(default_factory=dict)  # (name, dim) → (group id per rank, index in it per rank)
    made: frozenset = frozenset()  # the names `new_group` binds: their groups are made as steps, not up front
    reached: dict = field(default_factory=dict)  # function → the call chains (outermost first) that inlined it
    unread: dict = field(default_factory=dict)  # rank → the `ReadRec` it stopped at: no run reached its value

    @cached_property
    def sequences(self) -> Sequences:
        return Sequences.of(self)

    def p2p_records(self) -> Iterator[P2PRec]:
        """Every send and receive record, the ops of each batch among them."""
        for rec in self.records:
            if isinstance(rec, P2PRec):
                yield rec
            elif isinstance(rec, BatchRec):
                yield from rec.ops

    def sequence(self, rank: int) -> np.ndarray:
        """The records rank steps through, in order (ids)."""
        s = self.sequences
        c = s.cohort[rank]
        return s.flat[s.starts[c] : s.starts[c + 1]]

    @cached_property
    def op_bases(self) -> np.ndarray:
        return np.array([r.base for r in self.records], dtype=np.int64)

    def locate(self, op_id: int) -> tuple[AnyRecord, int]:
        """The record and position of an op id."""
        i = int(np.searchsorted(self.op_bases, op_id, side="right")) - 1
        rec = self.records[i]
        return rec, op_id - rec.base

    @cached_property
    def ops(self) -> RankOps:
        return RankOps(self)

    @cached_property
    def tensors(self) -> RankTensors:
        return RankTensors(self)

    def op_at(self, rec: AnyRecord, k: int) -> AnyOp:
        """Rank `rec.ranks[k]`'s concrete op of a record."""
        if isinstance(rec, (P2PRec, CollectiveRec, NewGroupRec)):
            return rec.at(k, self.groups)
        if isinstance(rec, BatchRec):
            rank = int(rec.ranks[k])
            return Batch(
                span=rec.span,
                bindings=rec.bindings_at(k),
                ops=tuple(op.at(j, self.groups) for op, j in rec.members(rank)),
                req=None if rec.req is None else int(rec.req[k]),
            )
        return rec.at(k)

    @property
    def num_ops(self) -> int:
        """Ops over all ranks, each op of a batch counted."""
        return sum(int(r.ranks.size) for r in self.records if not isinstance(r, BatchRec))


class RankOps:
    """`schedule.ops[rank]`: one rank's concrete ops, made from the records when first asked for."""

    def __init__(self, schedule: Schedule):
        self.s = schedule
        self.cache: dict[int, list[AnyOp]] = {}

    def __len__(self) -> int:
        return self.s.world

    def __getitem__(self, rank: int) -> list[AnyOp]:
        if rank < 0:
            rank += self.s.world
        if not 0 <= rank < self.s.world:
            raise IndexError(rank)
        ops = self.cache.get(rank)
        if ops is None:
            ops = []
            for rid in self.s.sequence(rank):
                rec = self.s.records[int(rid)]
                k = int(np.searchsorted(rec.ranks, rank))
                ops.append(self.s.op_at(rec, k))
            self.cache[rank] = ops
        return ops

    def __iter__(self):
        return (self[r] for r in range(self.s.world))


class RankTensors:
    """`schedule.tensors[rank]`: one rank's tensors by name."""

    def __init__(self, schedule: Schedule):
        self.s = schedule
        self.cache: dict[int, dict[str, TensorSpec]] = {}

    def __len__(self) -> int:
        return self.s.world

    def __getitem__(self, rank: int) -> dict[str, TensorSpec]:
        specs = self.cache.get(rank)
        if specs is None:
            specs = self.cache[rank] = {name: info.spec(rank) for name, info in self.s.infos.items()}
        return specs

    def __iter__(self):
        return (self[r] for r in range(self.s.world))


@dataclass(frozen=True)
class Sequences:
    """Each rank's record sequence. Ranks that run the same records (a cohort) share one: rank r's
    sequence is flat[starts[cohort[r]] : starts[cohort[r] + 1]]."""

    cohort: np.ndarray
    starts: np.ndarray
    flat: np.ndarray

    @property
    def length(self) -> np.ndarray:
        """Per rank, the number of records it steps through."""
        return (self.starts[1:] - self.starts[:-1])[self.cohort]

    @classmethod
    def of(cls, s: Schedule) -> Sequences:
        W = s.world
        sets: dict[int, np.ndarray] = {}
        for rid in s.top:
            ranks = s.records[rid].ranks
            sets.setdefault(id(ranks), ranks)
        cohort = _refine(W, sets.values())
        count = int(cohort.max()) + 1 if W else 0
        per_set = {key: distinct(cohort[ranks]) for key, ranks in sets.items()}
        lists: list[list[int]] = [[] for _ in range(count)]
        for rid in s.top:
            for c in per_set[id(s.records[rid].ranks)]:
                lists[c].append(rid)
        lens = np.array([len(x) for x in lists], dtype=np.int64)
        starts = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        flat = np.array([rid for x in lists for rid in x], dtype=np.int64)
        return cls(cohort, starts, flat)


def _refine(W: int, rank_sets) -> np.ndarray:
    """Cohorts: ranks split apart whenever a record's rank set holds one and not the other."""
    cohort = np.zeros(W, dtype=np.int64)
    size = [W]
    for ranks in rank_sets:
        if ranks.size == W or not ranks.size:
            continue
        ids = cohort[ranks]
        u, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        split = counts < np.array(size, dtype=np.int64)[u]
        if not split.any():
            continue
        fresh = np.full(u.size, -1, dtype=np.int64)
        fresh[split] = np.arange(len(size), len(size) + int(split.sum()))
        for old, n_ in zip(u[split], counts[split]):
            size[old] -= int(n_)
        size.extend(int(c) for c in counts[split])
        moved = fresh[inverse]
        cohort[ranks] = np.where(moved >= 0, moved, ids)
    return cohort
