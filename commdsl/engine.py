"""The round engine: every rank's program run against every other's, record by record, without data.

One machine for the checker, the simulator (which adds data through an `Observer`), `graph` and the
runtime's pre-flight. In each round every rank that is not waiting runs on until it has to wait:
local ops execute, sends and receives are posted, collectives are called. Then posted sends meet
posted receives, collective calls that every member has made complete, and the ranks they release
go on in the next round. A round in which nothing moves is a stall: every unfinished rank is stuck,
and the outcome records where each one stopped and on what it waits — all the deadlock analysis
needs. Ranks at the same record are handled together, as arrays, so a ring all-reduce at world 1024
costs a few thousand rounds of NumPy calls, not five million Python steps.

Semantics (design.md §4). Messages match first-in first-out per channel (group, source, destination,
tag); a receive from any source takes, after the named receives, a send waiting on its (group,
destination, tag); where a program has such receives the run keeps vector clocks (`ordering.Clocks`),
from which the outcome lists the receives another rank's send could have met (message races). The
`Model` says whether tags count (NCCL ignores them) and whether a blocking send waits for its receive
(zero buffering: what Gloo does at every size) or completes when posted (infinite buffering, the model
under which a remaining deadlock is definite). The k-th collective a member
calls on a group meets the k-th call of every other member; it completes when all have called it. On
Gloo a member of a group made by `new_group` waits in it until every member has made it.
A bad parameter (a peer outside the world, a non-member calling a group's collective) is recorded
and the op counts as done, so the rest of the program is still checked.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np

from commdsl.limits import Deadline, time_limit
from commdsl.ordering import Clocks, wildcard_receivers
from commdsl.p2p import ANY_SOURCE
from commdsl.schedule import (
    LOCAL_RECORDS,
    BatchRec,
    CollectiveRec,
    ComputeRec,
    ExpectRec,
    NewGroupRec,
    P2PRec,
    PrintRec,
    ReadRec,
    Schedule,
    WaitRec,
)
from commdsl.steady import FEWEST_FOLDED, ByValue, Steady, whole_periods
from commdsl.values import at, distinct, ident

FOLDED_LOCALS = (ComputeRec, ExpectRec, PrintRec, ReadRec)
"""The local records a fold may span (`Engine.lockstep_key`): not `new_group`, which ranks meet in on Gloo."""


@dataclass(frozen=True)
class Model:
    """What the backend does, as far as who waits for whom is concerned."""

    name: str
    tags: bool = True  # messages match by (peer, tag); False: by peer only, in posting order (NCCL)
    eager_sends: bool = False  # a send completes when posted, without waiting for its receive
    early_release: bool = False  # rooted collectives let members leave before all have called (Gloo)
    streams: bool = False  # ops on one communicator run in issue order, async or not (NCCL)
    self_in_batch: bool = False  # a send to self and a receive from self in one batch meet (NCCL)
    member_meets: bool = False  # `new_group` returns to a member once every member has called it (Gloo)


GLOO = Model("gloo", early_release=True, member_meets=True)
NCCL = Model("nccl", tags=False, streams=True, self_in_batch=True)


RANK_BITS = 17
"""A rank plus one (from any source: 0) in a stream key: ranks are below `resolve.MAX_WORLD`, 2**16."""
STREAM_GROUPS = 1 << (63 - 2 * RANK_BITS - 2)
"""A pair's stream key (`post_streams`) holds a group id below this (2**27) in an int64."""


def main_stream(gid, rank) -> np.ndarray:
    """NCCL: the stream of group `gid`'s communicator on `rank`, as an int (even): its collectives and batches."""
    return (np.asarray(gid, dtype=np.int64) << RANK_BITS | (np.asarray(rank, dtype=np.int64) + 1)) << 1


def post_streams(rows: Posts) -> np.ndarray:
    """NCCL: each post's stream, as an int. torch runs an unbatched send or receive on a communicator of its own
    for the pair of ranks, and a batch on the group's (lazy initialisation, the default; docs/backend-support.md).
    A pair's stream on one of its ranks is odd: (group, lower rank, higher rank, which of the two) in bits."""
    src, dst, rank, gid = rows.src, rows.dst, rows.rank, rows.gid
    lo, hi = np.minimum(src, dst) + 1, np.maximum(src, dst) + 1
    pair = (((gid << RANK_BITS | lo) << RANK_BITS | hi) << 1 | (rank + 1 == hi)) << 1 | 1
    return np.where(rows.via != rows.rec, main_stream(gid, rank), pair)


def call_streams(gid: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """NCCL: each collective call's stream, its group's communicator on the calling rank (a batch's too)."""
    return main_stream(np.broadcast_to(gid, rank.shape), rank)


# bad parameters
PEER_OUT_OF_RANGE, SELF, NOT_MEMBER, PEER_NOT_IN_GROUP, ROOT_NOT_IN_GROUP = range(5)


class Rows:
    """A table of equal-length int64 columns (posted messages, collective calls). A subclass declares its
    columns as annotations; `COLUMNS` lists them in that order.

    A column that is one value on every row may be given as that value (`size` then gives the length when
    no column is an array): a ring step's messages share their record, batch, dtype, tag and size, and
    copying twelve columns of 4,096 rows per step was most of the engine's time. `concat` and `take` keep
    such a column one value while they can, `const` reads it without an array, and reading the attribute
    makes it an array for good (so a reader may write into it)."""

    COLUMNS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.COLUMNS = tuple(name for name in inspect.get_annotations(cls) if name != "COLUMNS")

    def __init__(self, size: int | None = None, **cols):
        consts = {}
        held = self.__dict__
        for name, v in cols.items():
            if type(v) is np.ndarray:  # a table is made at every step: `type` is the quicker test
                held[name] = v
                size = v.size
            else:
                consts[name] = v if type(v) is int else int(v)
        if size is None:
            raise ValueError("a table of constant columns needs its size")  # pragma: no cover - a bug in commdsl
        self.size = size
        self.consts = consts
        self.parts: dict[str, list] = {}  # a column `concat` has not joined yet: its parts' columns

    def __getattr__(self, name: str) -> np.ndarray:
        parts = self.__dict__.get("parts")
        if parts and name in parts:
            col = self.__dict__[name] = _join(parts.pop(name))
            return col
        consts = self.__dict__.get("consts")
        if consts is None or name not in consts:
            raise AttributeError(name)
        col = self.__dict__[name] = np.full(self.size, consts.pop(name), dtype=np.int64)
        return col

    def const(self, name: str) -> int | None:
        """The column's one value when it was given as one (and not made an array since), else None."""
        return self.consts.get(name)

    def column(self, name: str) -> np.ndarray:
        """The column as an array, without keeping one made for a constant column."""
        got = self.__dict__.get(name)
        if got is not None:
            return got
        if name in self.parts:
            return getattr(self, name)
        return np.full(self.size, self.consts[name], dtype=np.int64)

    def repeated(self, name: str) -> np.ndarray | None:
        """The array a column repeats when it is parts not joined yet that are all that one array (a self-matched
        batch's ops, each posted by the same ranks); else None. Its distinct values are the column's."""
        parts = self.parts.get(name)
        if not parts or not isinstance(parts[0][0], np.ndarray) or any(p is not parts[0][0] for p, _ in parts):
            return None
        return parts[0][0]

    def piece(self, name: str):
        """The column as it is held: its array, or its one value (a constant column), joining it if need be."""
        got = self.__dict__.get(name)
        if got is not None:
            return got
        if name in self.parts:
            return getattr(self, name)
        return self.consts[name]

    @classmethod
    def empty(cls):
        return cls(**{c: np.zeros(0, dtype=np.int64) for c in cls.COLUMNS})

    @classmethod
    def concat(cls, parts: list):
        if len(parts) == 1:
            return parts[0]
        cols: dict[str, object] = {}
        lazy: dict[str, list] = {}
        first, rest = parts[0].consts, [p.consts for p in parts[1:]]
        for c in cls.COLUMNS:
            v = first.get(c)
            if v is not None and all(r.get(c) == v for r in rest):
                cols[c] = v
            else:  # joined when first read: the engine reads few of a batch's columns (docs/predict.md §Scale)
                lazy[c] = [(p.piece(c), p.size) for p in parts]
        out = cls(size=sum(p.size for p in parts), **cols)
        out.parts = lazy
        return out

    def take(self, idx):
        """The rows `idx` (a slice, a mask or indices) as a table of their own. Every row of a mask shares the
        columns that are never written (`_frozen`: a self-matched batch's peers and positions) and copies the
        rest: a bug on every rank of a loop keeps each step's mismatched messages, all of them."""
        if isinstance(idx, slice):
            size = len(range(*idx.indices(self.size)))
        else:
            idx = np.asarray(idx)
            size = int(np.count_nonzero(idx)) if idx.dtype == bool else idx.size
            if idx.dtype == bool and size == self.size:
                return type(self)(size=size, **{c: self._whole(c) for c in self.COLUMNS})
            part = self._part_holding(idx) if self.parts and idx.dtype != bool and size else None
            if part is not None:
                return self._take_from_part(*part, idx)
        cols = {c: self.consts[c] if c in self.consts else getattr(self, c)[idx] for c in self.COLUMNS}
        return type(self)(size=size, **cols)

    def _part_holding(self, idx: np.ndarray) -> tuple[int, int] | None:
        """(which, its first row) of the parts `concat` joined, when rows `idx` all lie in that one part: the
        engine takes a step's matched sends, all posted before, and its receives, all just posted."""
        sizes = [n for _, n in next(iter(self.parts.values()))]
        lo, hi = int(idx.min()), int(idx.max())
        start = 0
        for j, n in enumerate(sizes):
            if lo < start + n:
                return (j, start) if hi < start + n else None
            start += n
        return None  # pragma: no cover - an index past the end fails below, as numpy's own

    def _take_from_part(self, j: int, start: int, idx: np.ndarray):
        """Rows `idx` of part j (which begins at row `start`), from that part's columns: without joining the
        columns `concat` left unjoined, and keeping a part's one value (its record's) one value."""
        local = idx - start
        cols: dict[str, object] = {}
        for c in self.COLUMNS:
            if c in self.consts:
                cols[c] = self.consts[c]
            elif c in self.parts:
                piece = self.parts[c][j][0]
                cols[c] = piece[local] if isinstance(piece, np.ndarray) else piece
            else:
                cols[c] = self.__dict__[c][idx]
        return type(self)(size=idx.size, **cols)

    def _whole(self, name: str):
        if name in self.consts:
            return self.consts[name]
        column = getattr(self, name)
        return column if not column.flags.writeable else column.copy()

    def __len__(self) -> int:
        return self.size


class Posts(Rows):
    """Posted sends and receives, in posting order. `via`: the record the rank was at when it posted (a
    batch, or the op itself); `req`: the request id of an async op, else -1."""

    send: np.ndarray
    gid: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    tag: np.ndarray
    rank: np.ndarray
    rec: np.ndarray
    pos: np.ndarray
    req: np.ndarray
    via: np.ndarray
    numel: np.ndarray
    dtype: np.ndarray


class Calls(Rows):
    """Collective calls: instance (gid, seq), the caller's index in the group, what members must agree on."""

    gid: np.ndarray
    seq: np.ndarray
    me: np.ndarray
    rank: np.ndarray
    rec: np.ndarray
    pos: np.ndarray
    req: np.ndarray
    kind: np.ndarray
    root: np.ndarray
    redop: np.ndarray
    scale: np.ndarray
    dtype: np.ndarray
    contribution: np.ndarray
    buffers: np.ndarray
    block: np.ndarray  # the call's place in a `coalesced:` block ((index, count) by id), -1 outside one
    released: np.ndarray


@dataclass
class Instance:
    """A complete collective, or one whose members never all came: its calls in group order."""

    gid: int
    seq: int
    calls: Calls  # sorted by member index


class Observer:
    """Hooks for the simulator's data and the checker's access tracking; all default to nothing."""

    meets_isend_at_once = False
    """True: an async send meets a receive already posted before its rank goes on, so the observer can hold
    the rank while the message moves (the timing observer on Gloo: `predict.cost.Clocks.matched`). Only
    where no receive takes any source: matching earlier changes nothing then, since each channel meets its
    sends and receives in posting order whenever it is matched."""

    completes_async_at_once = False
    """True: an async collective whose last member's call makes it complete is completed before that member
    goes on, so the observer times it before the ops its members issue while it runs (the timing observer on
    a Gloo host whose cores the collective shares with them: `predict.cost.Clocks.cores_taken`). Only where
    no receive takes any source, as `meets_isend_at_once`."""

    def stepping(self, rec, G: np.ndarray) -> None:
        """Ranks G begin record `rec` (each rank once per record it runs, in its program order): the
        predictor's per-line profile starts the record's time here."""

    def local(self, rec, G: np.ndarray, pos) -> None: ...
    def posted(self, rows: Posts) -> None: ...
    def matched(self, sends: Posts, recvs: Posts) -> None: ...
    def called(self, rec: CollectiveRec, G: np.ndarray, pos, me: np.ndarray) -> None: ...
    def completed(self, calls: Calls, starts: np.ndarray, counts: np.ndarray) -> None:
        """Complete instances: calls[starts[i] : starts[i] + counts[i]] is instance i, in group order
        (members with `released` set left earlier, see `released`)."""

    def released(self, calls: Calls, leaving: np.ndarray) -> None:
        """Members of an unfinished instance (`calls`, those that have called, in group order) that leave
        early (`leaving`, Gloo's rooted collectives)."""

    def waited(self, reqs: np.ndarray) -> None: ...

    folds = False
    """True: the observer can fold a loop's alike iterations (`commdsl.steady`: the timing observer); the engine
    then asks for `cost_key`, `snapshot`, `settled` and `fold`."""

    def cost_key(self, rec, value: Callable[[object], Hashable]) -> Hashable | None:
        """What the observer's account of record `rec` depends on, beyond the engine's plan (its bytes, the line its
        time goes to): equal keys, equal accounts (`value`: an array or number as a key, by its values). None:
        not foldable."""
        return None

    def snapshot(self, period: np.ndarray) -> object | None:
        """The observer's state between two periods of a loop every rank runs in step (`period`: the records of the
        one that just ended), for `settled`; None: it cannot fold now."""
        return None

    def settled(self, snaps: list) -> object | None:
        """Where the state shifted alike across the last periods (`snaps`: the state at their boundaries, the
        last one now), what `fold` applies; None where it did not."""
        return None

    def fold(self, shift, periods: int, rids: np.ndarray) -> None:
        """The state as after `periods` more periods like the last ones (`shift`: from `settled`; `rids`: the
        records of the last period, row 0, and of each folded one)."""

    def started(self, ops: Posts | Calls, after: int) -> None:
        """NCCL: `ops` (posts or collective calls), queued on their stream behind async request `after`,
        start now that it has completed (`Model.streams`)."""

    def met(self, members: np.ndarray, waiting: np.ndarray) -> None:
        """Gloo: every one of `members` has called its `new_group`; `waiting` (those of them still in it)
        go on (`Model.member_meets`)."""


class Both(Observer):
    """Feeds one engine run to two observers (the simulator's data and the checker's accesses; an observer and the
    ordering's clocks, which follow messages and collectives only: `locals_too=False`, and take group meetings
    from the engine itself, `Clocks.group_made`)."""

    def __init__(self, a: Observer, b: Observer, locals_too: bool = True):
        self.a, self.b, self.locals_too = a, b, locals_too

    def stepping(self, rec, G):
        self.a.stepping(rec, G)
        if self.locals_too:
            self.b.stepping(rec, G)

    def local(self, *args):
        self.a.local(*args)
        if self.locals_too:
            self.b.local(*args)

    def posted(self, rows):
        self.a.posted(rows)
        self.b.posted(rows)

    def matched(self, sends, recvs):
        self.a.matched(sends, recvs)
        self.b.matched(sends, recvs)

    def called(self, *args):
        self.a.called(*args)
        self.b.called(*args)

    def completed(self, *args):
        self.a.completed(*args)
        self.b.completed(*args)

    def released(self, *args):
        self.a.released(*args)
        self.b.released(*args)

    def waited(self, reqs):
        self.a.waited(reqs)
        self.b.waited(reqs)

    def started(self, ops, after):
        self.a.started(ops, after)
        if self.locals_too:
            self.b.started(ops, after)

    def met(self, members, waiting):
        self.a.met(members, waiting)
        if self.locals_too:
            self.b.met(members, waiting)


@dataclass(frozen=True)
class Stop:
    op: object  # the rank's concrete op it never got past
    index: int  # its index in the rank's ops


@dataclass
class Outcome:
    """What happened: who finished, where the others stopped, what never met, what disagreed."""

    schedule: Schedule
    model: Model
    finished: np.ndarray  # per rank
    pc: np.ndarray  # per rank: the index in its sequence it reached
    unmatched: Posts  # sends and receives that never met
    waiting: Calls  # calls of collectives whose members never all came
    # matched pairs whose sizes or dtypes differ: all of the first MISMATCHES_KEPT, then per step the first of each
    # pair of records, which is what the rules name
    mismatched_messages: tuple[Posts, Posts]
    mismatched_ranks: np.ndarray  # per rank: it sent or received a mismatched message (any, kept or not)
    disagreements: list[Instance]  # complete collectives whose members disagree
    bad: list[tuple[int, int, int, int]]  # (rank, record id, position, problem)
    req_done: np.ndarray
    req_waited: np.ndarray  # per request: the op id of its first wait, or -1
    double_waits: list[tuple[int, int, int]]  # (request, record id of the second wait, position)
    matches: tuple[Posts, Posts] | None = None  # every matched pair, when asked for
    instances: list[Instance] | None = None  # every complete collective, when asked for
    calls_seen: int = 0
    early: int = 0  # members Gloo's rooted collectives released before every member had called
    queued_calls: Calls | None = None  # NCCL: collective calls that never started, behind an op on their stream
    behind: dict = field(default_factory=dict)  # op (record id, position) that never started → request ahead of it
    # receives from any source that sends from two sources could meet: ((record id, position) of the
    # receive, of the send it met, of another send not ordered after it; `ordering.Clocks.races`)
    races: list[tuple[tuple[int, int], ...]] = field(default_factory=list)
    # members stuck in a `new_group` (Gloo): rank → (its k-th new_group, the members that never made their k-th)
    in_new_group: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return bool(self.finished.all())

    @property
    def stalled(self) -> np.ndarray:
        """The ranks that never finished."""
        return np.flatnonzero(~self.finished)

    @cached_property
    def stops(self) -> dict[int, Stop]:
        """Where each unfinished rank stopped: its op there and its index in the rank's ops."""
        out = {}
        for r in self.stalled.tolist():
            rid, pos = self.head(r)
            out[r] = Stop(self.schedule.op_at(self.schedule.records[rid], pos), int(self.pc[r]))
        return out

    def head(self, rank: int) -> tuple[int, int]:
        """(record id, position) where an unfinished rank stopped."""
        seq = self.schedule.sequence(rank)
        rid = int(seq[self.pc[rank]])
        rec = self.schedule.records[rid]
        return rid, int(np.searchsorted(rec.ranks, rank))

    @property
    def never_waited(self) -> np.ndarray:
        """Requests of finished ranks that no `wait` ever took."""
        req = self.schedule.requests
        return np.flatnonzero((self.req_waited < 0) & self.finished[req.rank]) if req.count else np.zeros(0, np.int64)


class Engine:
    def __init__(
        self,
        schedule: Schedule,
        model: Model = GLOO,
        observer: Observer | None = None,
        record_matches: bool = False,
        deadline: Deadline | None = None,
    ):
        self.s = schedule
        self.deadline = deadline or Deadline(None)
        self.model = model
        self.obs = observer or Observer()
        receivers = wildcard_receivers(schedule)
        self.clocks = Clocks(self, receivers) if receivers.size else None  # for message races (P211)
        if self.clocks is not None:
            self.obs = Both(self.obs, self.clocks, locals_too=False)
        W = schedule.world
        self.W = W
        seq = schedule.sequences
        self.flat, self.first, self.length = seq.flat, seq.starts[seq.cohort], seq.length
        self.pc = np.zeros(W, dtype=np.int64)
        self.everyone = _frozen(np.arange(W, dtype=np.int64))  # R when every rank runs: one array, see `frozen`
        self.widened: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # see `wide`
        self.blocked = np.zeros(W, dtype=bool)
        self.remaining = np.zeros(W, dtype=np.int64)
        self.pending = Posts.empty()
        self.fresh: list[Posts] = []
        self.arrivals = Calls.empty()
        self.fresh_calls: list[Calls] = []
        R = schedule.requests.count
        self.req_done = np.zeros(R, dtype=bool)
        parts = schedule.requests.parts
        self.req_left = parts.copy() if R and int(parts.max()) > 1 else None  # ops still to complete, per request
        self.req_waited = np.full(R, -1, dtype=np.int64)
        self.req_in_wait = np.zeros(R, dtype=bool)
        self.double_waits: list[tuple[int, int, int]] = []
        self.bad: list[tuple[int, int, int, int]] = []
        self.bad_msgs: list[tuple[Posts, Posts]] = []
        self.bad_msgs_kept = 0  # rows in bad_msgs
        self.mismatched_ranks = np.zeros(W, dtype=bool)
        self.made = np.zeros(W, dtype=np.int64)  # how many `new_group`s each rank has called
        self.making: dict[int, np.ndarray] = {}  # k → which ranks have called their k-th `new_group`
        self.meeting: list[tuple[int, int, np.ndarray]] = []  # (k, group id, members waiting in that new_group)
        self.disagreements: list[Instance] = []
        self.record_matches = record_matches
        self.matches: list[tuple[Posts, Posts]] = []
        self.instances: list[Instance] = []
        self.dtype_ids = {name: i for i, name in enumerate(sorted({i.dtype for i in schedule.infos.values()}))}
        self.kind_ids: dict[str, int] = {}
        self.redop_ids: dict[str | None, int] = {None: -1}
        self.buffer_ids: dict[tuple, int] = {}
        self.block_ids: dict[tuple[int, int], int] = {}
        self.group_size = np.array([len(g.ranks) for g in schedule.groups], dtype=np.int64)
        self.families = {key: i for i, key in enumerate(schedule.group_of)}
        # a name `new_group` binds may mean another group later, so its groups count calls each on its own
        self.coll_seq = np.zeros((len(self.families) + 1 + len(schedule.groups) * bool(schedule.made), W), np.int64)
        self.step_rows: dict[int, np.ndarray] = {}  # step group id → each rank's index in it, or -1
        self.calls_seen = 0
        self.early = 0  # members released before their collective completed (Gloo)
        # NCCL streams (`post_streams`): the async op running on each stream that has one (it holds the stream until
        # it completes), the ops queued behind it in issue order ([request, their rows, batch] entries), and the
        # stream each running request holds
        assert len(schedule.groups) < STREAM_GROUPS, "more groups than an NCCL stream key holds"
        self.running: dict[int, int] = {}
        self.queues: dict[int, deque] = {}
        self.stream_of: dict[int, int] = {}
        self.plans: dict[tuple, tuple] = {}  # see `exchange_plan`
        self.ramps: dict[int, np.ndarray] = {}  # 0 .. n - 1 as a column, per n (`aligned`)
        self.firsts: dict[int, np.ndarray | None] = {}  # per wait record: `aligned`
        # a loop's alike iterations folded for an observer that times them (`steady`); not for a run that keeps
        # vector clocks, which must see every message
        self.steady = Steady(self) if self.obs.folds and self.clocks is None else None
        # calls whose sizes differ per peer (uneven splits or lists: `Kind.contribution` -1), compared member by
        # member by the checker
        self.uneven = np.array(
            [type(r) is CollectiveRec and bool(np.any(np.asarray(r.contribution) < 0)) for r in schedule.records],
            dtype=bool,
        )

    # ---- the rounds ------------------------------------------------------------------------------
    def run(self) -> Outcome:
        while True:
            self.mind_deadline()
            moved = self.run_ready()
            moved |= self.match()
            moved |= self.complete_calls()
            moved |= self.wake()
            if not moved or not (self.pc < self.length).any():
                break
        return self.outcome()

    def mind_deadline(self) -> None:
        """N134 at the op the first unfinished rank is at, once the deadline has passed."""
        if self.deadline.passed():
            live = np.flatnonzero(self.pc < self.length)
            rid = int(self.flat[self.first[live[0]] + self.pc[live[0]]])
            raise time_limit(self.deadline, self.s.records[rid].span, f"running the ops at world {self.W}")

    def run_ready(self) -> bool:
        """Every rank that is not waiting runs until it must wait (or finishes)."""
        moved = False
        while True:
            R = np.flatnonzero(~self.blocked & (self.pc < self.length))
            if not R.size:
                return moved
            if moved:
                self.mind_deadline()
            moved = True
            if R.size == self.W:
                R = self.everyone
                heads = self.flat[self.first + self.pc]
            else:
                heads = self.flat[self.first[R] + self.pc[R]]
            for rid, G in _by_head(heads, R):
                rec = self.s.records[rid]
                if not (type(rec) is CollectiveRec and self.collective_run(G)):
                    key = None
                    if self.steady is not None and G is self.everyone:
                        if self.steady.boundary():
                            break  # folded: every rank is further on
                        key = self.lockstep_key(rec)
                    self.obs.stepping(rec, G)
                    self.step(rec, G, rec.positions(G))
                    if self.steady is not None:
                        self.steady.stepped(key)

    def lockstep_key(self, rec):
        """What record `rec` does and what its cost depends on when every rank runs it, for `Steady`: a
        point-to-point op's (or a batch's ops') peers, tags, group and whether it blocks or binds a request, a
        wait's requests as which earlier records posted them, and the observer's `cost_key`. None for a record
        the watch does not span (a collective, a `new_group`), or where the observer cannot say."""
        if rec.ranks.size != self.W or self.steady is None:
            return None
        t = type(rec)
        if t is BatchRec:
            plan = (self.steady.values(rec.ranks), rec.blocking, rec.req is None, *map(self.p2p_key, rec.ops))
        elif t is P2PRec:
            plan = self.p2p_key(rec)
        elif t is WaitRec:
            plan = self.wait_key(rec)
        elif t in FOLDED_LOCALS:
            plan = None
        else:
            return None
        cost = self.obs.cost_key(rec, self.steady.values)
        return None if cost is None else (plan, cost)

    def p2p_key(self, op: P2PRec) -> tuple:
        """What the engine reads of a send or receive: the same at every iteration of a loop that repeats it."""
        value = self.steady.values
        tag = value(op.tag) if self.model.tags else None
        gid = None if op.gid is None else value(op.gid)
        return (op.is_send, op.blocking, op.req is None, op.from_any, value(op.ranks), value(op.peer), tag, gid)

    def wait_key(self, rec: WaitRec) -> tuple:
        """A wait's requests as the records that posted them, counted back from the wait, and the positions
        in them: the wait of the next iteration, on that iteration's requests, has the same key."""
        first = self.aligned(rec)
        if first is not None:  # the common case, cheaply: each handle one record's requests at the wait's positions
            return (rec.all, first.size, tuple((rec.id - self.s.requests.record[first]).tolist()))
        req = self.s.requests
        counts, owner = _waiters(rec)
        back = rec.id - req.record[rec.reqs].astype(np.int64)
        return (rec.all, _uniform(counts), _uniform(back, counts), _uniform(req.pos[rec.reqs] - owner, counts))

    def aligned(self, rec: WaitRec) -> np.ndarray | None:
        """The first rank's requests of wait `rec` where every rank waits as many and the k-th of each rank is
        one record's request at that rank's position in the wait, request ids running with the positions (a
        record's requests are numbered in its ranks' order): `wait h, r` on every rank; else None. Kept per
        wait: the fold's lookahead asks, then the fold."""
        got = self.firsts.get(rec.id, False)
        if got is not False:
            return got
        n, reqs = rec.starts.size - 1, rec.reqs
        first = None
        if n and not reqs.size % n:
            c = reqs.size // n
            grid = reqs.reshape(n, c)
            ramp = self.ramps.get(n)
            if ramp is None:
                ramp = self.ramps[n] = np.arange(n, dtype=np.int64)[:, None]
            req = self.s.requests
            if (
                rec.starts[-1] == reqs.size
                and (rec.starts[:-1] == ramp[:, 0] * c).all()
                and ((grid - grid[0]) == ramp).all()
                and (req.record[grid[0]] == req.record[grid[-1]]).all()
                and not req.pos[grid[0]].any()
            ):
                first = grid[0]
        self.firsts[rec.id] = first
        return first

    def snapshot(self, P: int) -> tuple | None:
        """The state at a boundary between two periods of P records every rank runs in step, for `Steady`:
        None unless the engine is at rest (every rank free to go on, nothing posted, queued or called that has not
        completed, and the period just run waited for every request it posted: what a fold leaves behind is then
        only what the observer holds), else the problems found so far, which must not grow across the periods,
        and the observer's `snapshot`."""
        start = int(self.first[0] + self.pc[0])
        if (
            self.blocked.any()
            or len(self.pending)
            or self.fresh
            or self.running
            or self.queues
            or len(self.arrivals)
            or self.fresh_calls
            or self.meeting
            or not self.waits_within(self.flat[start - P : start][None, :])
        ):
            return None
        found = (len(self.bad), self.bad_msgs_kept, len(self.double_waits))
        obs = self.obs.snapshot(self.flat[start - P : start])
        return None if obs is None else (found, obs)

    def fold(self, keys: list, snaps: list) -> bool:
        """Every rank has just run a period of records with these keys, the state taken at the last period
        boundaries (`snaps`, from `snapshot`): move every rank past the whole periods of alike records that follow,
        where nothing went wrong in them, the observer's state shifted alike (`Observer.settled`) and each
        period waits only for requests it posts itself (`waits_within`). False where not, or none follow."""
        if any(found != snaps[-1][0] for found, _ in snaps):
            return False
        shift = self.obs.settled([obs for _, obs in snaps])
        if shift is None:
            return False
        P = len(keys)
        live = self.length - self.pc
        start, end = int(self.first[0] + self.pc[0]), int(self.first[0] + self.length[0])
        rids = (rid for j in range(start, end, 1024) for rid in self.flat[j : min(j + 1024, end)].tolist())
        periods = whole_periods(keys, (self.lockstep_key(self.s.records[rid]) for rid in rids))
        span = periods * P
        if periods < FEWEST_FOLDED or (live < span).any():
            return False
        for ends in (self.first + self.pc, self.first + self.pc + span - 1):  # every rank runs the same records
            if (self.flat[ends] != self.flat[ends[0]]).any():
                return False
        block = self.flat[start - P : start + span].reshape(periods + 1, P)
        if not self.waits_within(block):
            return False
        self.obs.fold(shift, periods, block)
        self.waited_in_fold(block)
        self.pc += span
        return True

    def waits_within(self, block: np.ndarray) -> bool:
        """Whether the periods of records `block` (the last one run, row 0, and those to fold) are one another's
        records one stride of ids on, and each wait of a period waits for requests its period's earlier
        records posted, all of them: what a folded period leaves behind is then done and waited."""
        if ((block - block[:, :1]) != (block[0] - block[0, 0])).any():
            return False
        req = self.s.requests
        place = {rid: j for j, rid in enumerate(block[0].tolist())}
        posted = waited = 0
        for j, rid in enumerate(block[0].tolist()):
            rec = self.s.records[rid]
            if type(rec) is WaitRec:
                by = distinct(req.record[rec.reqs].astype(np.int64)).tolist()
                if any(place.get(r, j) >= j for r in by):
                    return False
                waited += rec.reqs.size
            elif type(rec) in (P2PRec, BatchRec) and rec.req is not None:
                posted += rec.ranks.size
        return posted == waited

    def waited_in_fold(self, block: np.ndarray) -> None:
        """The requests of the folded periods (`block`'s rows after the first) done and waited, as running them
        would have left them (an `aligned` wait's as runs of ids)."""
        for j, rid in enumerate(block[0].tolist()):
            if type(self.s.records[rid]) is not WaitRec:
                continue
            for later in block[1:, j].tolist():
                rec = self.s.records[later]
                first = self.aligned(rec)
                if first is None:
                    self.req_done[rec.reqs] = True
                    self.req_waited[rec.reqs] = rec.base + _waiters(rec)[1]
                    continue
                n = rec.starts.size - 1
                for q in first.tolist():
                    self.req_done[q : q + n] = True
                    self.req_waited[q : q + n] = self.ramps[n][:, 0] + rec.base

    def advance(self, G: np.ndarray) -> None:
        """Ranks G go on to their next record (every rank at once without an index: a common case)."""
        if G is self.everyone:
            self.pc += 1
        else:
            self.pc[G] += 1

    def step(self, rec, G: np.ndarray, pos) -> None:
        t = type(rec)
        if t is NewGroupRec and self.model.member_meets:
            self.new_group(rec, G, pos)
        elif t in LOCAL_RECORDS:
            self.obs.local(rec, G, pos)
            self.advance(G)
        elif t is P2PRec:
            self.post_one(rec, G, pos)
        elif t is BatchRec:
            if G.size == rec.ranks.size and not len(self.pending) and not self.fresh and not self.running:
                plan = self.exchange_plan(rec)
                if plan is not None:
                    self.exchange(rec, G, plan)
                    self.advance(G)
                    return
            parts, count = self.batch_parts(rec, G)
            done = self.post(parts, rec.id, G)
            if rec.blocking:
                self.block(G, count - done)
            else:  # `b = batch:` its request is done when all the rank's ops in it are
                self.pc[G] += 1
        elif t is CollectiveRec:
            void = self.call(rec, G, pos)
            if rec.blocking:
                self.block(G, 1 if void is None else 1 - void)
                self.settle(G)
            else:
                self.advance(G)
                if self.obs.completes_async_at_once and self.clocks is None:
                    self.complete_calls()
        elif t is WaitRec:
            self.enter_wait(rec, G, pos)
        else:  # pragma: no cover - the Schedule has no other records
            raise TypeError(t)

    @staticmethod
    def batch_parts(rec: BatchRec, G: np.ndarray) -> tuple[list[tuple], np.ndarray]:
        """The ops of batch `rec` that ranks G post ((op, its ranks among G, their positions in it or None for
        all), as `post` takes them), and how many each rank of G posts."""
        parts, count = [], np.zeros(G.size, dtype=np.int64)
        for op in rec.ops:
            if G.size == rec.ranks.size and op.ranks is rec.ranks:
                parts.append((op, G, None))
                count += 1
                continue
            if not op.ranks.size:
                continue
            k = np.searchsorted(op.ranks, G)  # where each rank of G would sit among the op's (both ascending)
            hit = op.ranks[np.minimum(k, op.ranks.size - 1)] == G
            if hit.any():
                mine = G[hit]
                parts.append((op, mine, None if mine.size == op.ranks.size else k[hit]))
                count[hit] += 1
        return parts, count

    def post_one(self, rec: P2PRec, G: np.ndarray, pos) -> None:
        """An unbatched send or receive by ranks G: a blocking one waits to be met; an async one goes on, an
        isend first meeting a receive already posted where the observer holds its caller for it
        (`Observer.meets_isend_at_once`)."""
        done = self.post([(rec, G, pos)], rec.id, G)
        if rec.blocking:
            self.block(G, 1 - done)
            return
        self.advance(G)
        if rec.is_send and self.obs.meets_isend_at_once and self.clocks is None:
            self.match()

    def exchange_plan(self, rec: BatchRec):
        """[(send op, receive op, where each send's receiver sits in the receive op)] when every op of the batch
        meets its partner inside the batch itself (a ring step, a pairwise swap), or None.

        Posted by all its ranks at once with nothing else pending, such a batch completes at once: each
        channel carries one message of it (no two of its sends share a channel). The answer depends only on
        the ops' rank sets, peers, tags and groups, which a loop's batches share (the expansion gives equal
        values one array): it is kept per those arrays (by identity, holding them) and found again."""
        key = (ident(rec.ranks),) + tuple(
            (op.is_send, ident(op.ranks), ident(op.peer), ident(op.tag), op.gid is None) for op in rec.ops
        )
        got = self.plans.get(key)
        if got is None:
            if len(self.plans) >= PLANS:
                self.plans.clear()
            got = self.plans[key] = (self.plan_of(rec), (rec.ranks, [(op.ranks, op.peer, op.tag) for op in rec.ops]))
        return None if got[0] is None else [(rec.ops[i], rec.ops[j], *arrays) for i, j, *arrays in got[0]]

    def plan_of(self, rec: BatchRec) -> list[tuple] | None:
        """`exchange_plan` worked out, by op index, with what `exchange` posts for each pair that is the same at
        every batch sharing the plan: `q`, the send's and the receive's peers, the ranks' positions and both ops'
        tag columns."""
        ranks, n, W = rec.ranks, rec.ranks.size, self.W
        if any(op.ranks is not ranks and not np.array_equal(op.ranks, ranks) for op in rec.ops):
            return None
        sends = [i for i, op in enumerate(rec.ops) if op.is_send]
        recvs = [i for i, op in enumerate(rec.ops) if not op.is_send]
        if len(sends) != len(recvs) or self.model.eager_sends:
            return None
        full = n == W
        plan = []
        seen: list[tuple] = []
        for i in sends:
            s = rec.ops[i]
            if s.gid is not None:
                return None
            peer = at(s.peer, None, n).astype(np.int64)
            if ((peer < 0) | (peer >= W) | (peer == ranks)).any():
                return None
            q = peer if full else np.searchsorted(ranks, peer)
            if not full and ((q >= n) | (ranks[np.minimum(q, n - 1)] != peer)).any():
                return None
            tag = at(s.tag, None, n) if self.model.tags else 0
            if any(((p == peer) & (t_ == tag)).any() for p, t_ in seen):
                return None  # two sends on one channel somewhere: leave their order to the general matching
            seen.append((peer, tag))
            for j in recvs:
                r = rec.ops[j]
                r_tag = at(r.tag, None, n)[q] if self.model.tags else 0
                if r.gid is None and np.array_equal(at(r.peer, None, n)[q], ranks) and np.all(r_tag == tag):
                    positions = _frozen(np.arange(n, dtype=np.int64))
                    froms = _frozen(at(r.peer, None, n).astype(np.int64))
                    tags = (_tag_column(s, positions), _tag_column(r, positions)) if self.model.tags else (0, 0)
                    plan.append((i, j, _frozen(q.astype(np.int64)), _frozen(peer), froms, positions, *tags))
                    recvs.remove(j)
                    break
            else:
                return None
        return plan

    def exchange(self, rec: BatchRec, G: np.ndarray, plan) -> None:
        """A self-matched batch: every message posted and met in one step. Its posts are put together from the
        plan, not checked row by row as `rows` does: the plan holds only peers in range, none the rank itself,
        none in a group. The receives are posted in their op's order and matched in their sends' (`q`)."""
        sends, recvs, posted = [], [], []
        for s, r, q, peer, froms, positions, tag, r_tag in plan:
            srows = self.posts(s, rec.id, G, peer, G, positions, tag)
            posted += [srows, self.posts(r, rec.id, froms, G, G, positions, r_tag)]
            sends.append(srows)
            recvs.append(self.posts(r, rec.id, G, peer, peer, q, tag))  # its tag at q is the send's
        rows = Posts.concat(posted)
        self.obs.posted(rows)
        self.note_matches(Posts.concat(sends), Posts.concat(recvs))
        if rec.req is not None:
            self.finish_requests(rows.req)

    def posts(self, op: P2PRec, via: int, src, dst, rank, pos: np.ndarray, tag, gid: np.ndarray | int = 0) -> Posts:
        """The posts of op `op` by the ranks `rank`, at positions `pos` of the op (their peers checked)."""
        n = pos.size
        return Posts(
            size=n,
            send=int(op.is_send),
            gid=gid,
            src=src,
            dst=dst,
            tag=tag,
            rank=rank,
            rec=op.id,
            pos=pos,
            req=-1 if op.req is None else at(op.req, pos, n).astype(np.int64),
            via=via,
            numel=_per_row(op.view.numel, pos),
            dtype=self.dtype_ids[op.dtype],
        )

    def new_group(self, rec: NewGroupRec, G: np.ndarray, pos) -> None:
        """Ranks G call `new_group`: torch names the group by how many each rank has made, and a member waits
        until every member has made its group of that number (Gloo connects them in ProcessGroupGloo's
        constructor; measured in docs/backend-support.md#groups-made-at-run-time). A non-member goes on.
        Ranks whose lists differ (C313) still meet by number, as in torch."""
        self.obs.local(rec, G, pos)
        n = G.size
        k = self.made[G]
        self.made[G] += 1
        if self.clocks is not None:
            self.clocks.new_group(rec, G, pos, k)
        for kk in distinct(k).tolist():
            called = self.making.get(kk)
            if called is None:
                called = self.making[kk] = np.zeros(self.W, dtype=bool)
            called[G[k == kk]] = True
        gid = np.broadcast_to(at(rec.made, pos, n).astype(np.int64), G.shape)
        member = self.place(gid, G) >= 0
        self.pc[G[~member]] += 1
        if member.any():
            M = G[member]
            self.blocked[M] = True
            self.remaining[M] = 1
            for kk, g in {(int(a), int(b)) for a, b in zip(k[member].tolist(), gid[member].tolist())}:
                sel = (k[member] == kk) & (gid[member] == g)
                self.meeting.append((kk, g, M[sel]))
        self.meet()

    def meet(self) -> None:
        """Members waiting in a `new_group` whose members have all called it go on."""
        still = []
        for k, g, waiting in self.meeting:
            members = np.asarray(self.s.groups[g].ranks, dtype=np.int64)
            if self.making[k][members].all():
                if self.clocks is not None:
                    self.clocks.group_made(k, members, waiting)
                self.obs.met(members, waiting)
                self.remaining[waiting] -= 1
            else:
                still.append((k, g, waiting))
        self.meeting = still

    def block(self, G: np.ndarray, outstanding) -> None:
        """Ranks G wait for `outstanding` things (one count for all, or one per rank); ranks with none go on at once."""
        if isinstance(outstanding, int):
            if outstanding > 0:
                self.blocked[G] = True
                self.remaining[G] = outstanding
            else:
                self.advance(G)
            return
        waiting = outstanding > 0
        if waiting.all():
            self.blocked[G] = True
            self.remaining[G] = outstanding
            return
        self.pc[G[~waiting]] += 1
        W_ = G[waiting]
        self.blocked[W_] = True
        self.remaining[W_] = outstanding[waiting]

    def wake(self) -> bool:
        """Ranks whose last wait is over go on."""
        ready = np.flatnonzero(self.blocked & (self.remaining <= 0))
        if not ready.size:
            return False
        self.blocked[ready] = False
        self.pc[ready] += 1
        return True

    # ---- point to point --------------------------------------------------------------------------
    def post(self, parts, via: int, owners: np.ndarray) -> np.ndarray:
        """Post sends and receives (`parts`: (record, ranks, their positions in it or None for all));
        returns, per rank of `owners`, how many of its posts are done already: a bad parameter counts
        as done, and so does a send under eager sends."""
        done = np.zeros(owners.size, dtype=np.int64)
        chunks = []
        for rec, G, pos in parts:
            rows, void = self.rows(rec, G, pos, via)
            finished = G[void]
            if rows is not None:
                chunks.append(rows)
                if self.model.eager_sends and rec.is_send:
                    self.finish_requests(rows.req[rows.req >= 0])
                    finished = G
            if finished.size:
                np.add.at(done, np.searchsorted(owners, finished), 1)
        if chunks:
            rows = Posts.concat(chunks)
            self.obs.posted(rows)
            if self.model.streams:
                rows = self.admit(rows, post_streams(rows))
            if len(rows):
                self.fresh.append(rows)
        return done

    def rows(self, rec: P2PRec, G: np.ndarray, pos, via: int) -> tuple[Posts | None, np.ndarray]:
        """The posts of one P2P record by ranks G, and which of G post nothing (a bad parameter: the first
        check a rank fails names its problem)."""
        W, n = self.W, G.size
        peer = self.wide(rec.peer) if pos is None and isinstance(rec.peer, np.ndarray) else at(rec.peer, pos, n)
        peer = peer.astype(np.int64, copy=False)
        wild = rec.from_any  # `from any`: no peer to check
        checks = [] if wild else [((peer < 0) | (peer >= W), PEER_OUT_OF_RANGE)]
        if not (self.model.self_in_batch and rec.batched):
            checks.append((peer == G, SELF))
        gid: np.ndarray | int = 0
        if rec.gid is not None:
            gid = at(rec.gid, pos, n).astype(np.int64)
            safe = np.where((peer >= 0) & (peer < W), peer, 0)
            if rec.node.group.name in self.s.made:
                checks.append((self.place(gid, G) < 0, NOT_MEMBER))
                outside = self.place(gid, safe) < 0
            else:
                gid_of, idx_in = self.s.group_of[(rec.node.group.name, rec.node.group.dim)]
                checks.append((idx_in[G] < 0, NOT_MEMBER))
                outside = (idx_in[safe] < 0) | (gid_of[safe] != gid)
            if not wild:
                checks.append((outside, PEER_NOT_IN_GROUP))
        void = checks[0][0] if checks else np.zeros(n, dtype=bool)
        for mask, _ in checks[1:]:
            void = void | mask
        p = np.arange(n, dtype=np.int64) if pos is None else pos.astype(np.int64)
        if void.any():
            problem = np.full(n, -1, dtype=np.int64)
            for mask, code in checks:
                problem[(problem < 0) & mask] = code
            for k in np.flatnonzero(void):
                self.bad.append((int(G[k]), rec.id, int(p[k]), int(problem[k])))
            if rec.req is not None:  # a void async op's request is done: a wait on it returns
                req = at(rec.req, pos, n).astype(np.int64)
                self.finish_requests(req[void & (req >= 0)])
            good = ~void
            if not good.any():
                return None, void
            G, peer, gid, p = (_keep(x, good) for x in (G, peer, gid, p))
        src, dst = (G, peer) if rec.is_send else (peer, G)
        tag = _per_row(rec.tag, p) if self.model.tags else 0
        return self.posts(rec, via, src, dst, G, p, tag, gid), void

    def wide(self, a: np.ndarray) -> np.ndarray:
        """A record's compacted array (`expand.compact`) as int64, read-only, kept per array: the records of a
        loop share their peers, and an observer that keeps what it worked out per message pattern (the
        clocks' routes) knows a read-only array it has seen by its identity."""
        got = self.widened.get(id(a))
        if got is None or got[0] is not a:
            if len(self.widened) >= PLANS:
                self.widened.clear()
            got = self.widened[id(a)] = (a, _frozen(a.astype(np.int64)))
        return got[1]

    def match(self) -> bool:
        """New posts meet pending ones: on each channel the j-th send meets the j-th receive; then each
        receive from any source takes a send left on its (group, destination, tag), in posting order.

        Rows are kept in posting order (pending first), so a stable sort by channel puts each channel's
        receives, then its sends, in the order they were posted."""
        if not self.fresh:
            return False
        rows = Posts.concat([self.pending] + self.fresh if len(self.pending) else self.fresh)
        self.fresh = []
        wild = (rows.send == 0) & (rows.src == ANY_SOURCE)
        fixed = np.flatnonzero(~wild)
        s_idx, r_idx = self.pair(rows.take(fixed) if wild.any() else rows)
        if wild.any():
            s_idx, r_idx = fixed[s_idx], fixed[r_idx]
            s_any, r_any = self.pair_any(rows, np.flatnonzero(wild), s_idx)
            s_idx, r_idx = np.concatenate([s_idx, s_any]), np.concatenate([r_idx, r_any])
        if not s_idx.size:
            self.pending = rows
            return False
        keep = np.ones(len(rows), dtype=bool)
        keep[s_idx] = False
        keep[r_idx] = False
        self.pending = rows if keep.all() else rows.take(keep) if keep.any() else Posts.empty()
        self.met(rows.take(s_idx), rows.take(r_idx))
        return True

    def pair(self, rows: Posts) -> tuple[np.ndarray, np.ndarray]:
        """(send rows, receive rows) that meet on their channels, FIFO per channel."""
        order, chan = self.channels(rows)
        n = order.size
        send = rows.send[order]
        new_chan = np.ones(n, dtype=bool)
        new_chan[1:] = chan[1:] != chan[:-1]
        starts = np.flatnonzero(new_chan)
        chan_start = np.repeat(starts, np.diff(np.append(starts, n)))
        recvs_here = np.repeat(np.add.reduceat(1 - send, starts), np.diff(np.append(starts, n)))
        j = np.arange(n) - chan_start - np.where(send == 1, recvs_here, 0)
        s_sorted = np.flatnonzero((send == 1) & (j < recvs_here))
        return order[s_sorted], order[chan_start[s_sorted] + j[s_sorted]]

    def pair_any(self, rows: Posts, wild: np.ndarray, taken: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Receives from any source (`wild`, in posting order) meet sends not `taken`: each takes the first
        send of the lowest source rank with a send waiting on its (group, destination, tag), a deterministic
        stand-in for whichever arrives first. Whether another send could have met it instead (a message race,
        design.md §4), also one a slower rank posts later, the run's clocks tell at its end (`ordering.Clocks`)."""
        free = rows.send == 1
        free[taken] = False
        s_out, r_out = [], []
        for r in wild.tolist():
            cand = np.flatnonzero(
                free & (rows.gid == rows.gid[r]) & (rows.dst == rows.dst[r]) & (rows.tag == rows.tag[r])
            )
            if not cand.size:
                continue
            firsts = cand[np.unique(rows.src[cand], return_index=True)[1]]  # each source's first, by rank
            free[firsts[0]] = False
            s_out.append(firsts[0])
            r_out.append(r)
        return np.array(s_out, dtype=np.int64), np.array(r_out, dtype=np.int64)

    def channels(self, rows: Posts) -> tuple[np.ndarray, np.ndarray]:
        """(a stable order by channel, receives before sends; each row's channel key in that order)."""
        W = self.W
        tag = rows.tag
        if (
            W <= 1 << 16
            and (tag.size == 0 or (tag.min() >= 0 and tag.max() < 1 << 12))
            and (rows.gid.size == 0 or rows.gid.max() < 1 << 14)
        ):
            key = ((rows.gid << 12 | tag) * W + rows.src) * W + rows.dst  # fits in 63 bits
            order = np.argsort(key * 2 + rows.send, kind="stable")
            return order, key[order]
        keys = (rows.gid, rows.src, rows.dst, tag)
        order = np.lexsort((rows.send,) + tuple(reversed(keys)))
        cols = [k[order] for k in keys]
        change = np.zeros(order.size, dtype=bool)
        for c in cols:
            change[1:] |= c[1:] != c[:-1]
        return order, np.cumsum(change)

    def note_matches(self, sends: Posts, recvs: Posts) -> None:
        """What every matched pair is shown to: the mismatch record, the observers."""
        bad = _differ(sends, recvs, "numel") | _differ(sends, recvs, "dtype")
        if bad is not False and bad.any():
            self.mismatched_ranks[sends.rank[bad]] = True
            self.mismatched_ranks[recvs.rank[bad]] = True
            if self.bad_msgs_kept >= MISMATCHES_KEPT:
                bad = first_of_each_pair(sends, recvs, np.flatnonzero(bad))
            self.bad_msgs.append((sends.take(bad), recvs.take(bad)))
            self.bad_msgs_kept += len(self.bad_msgs[-1][0])
        if self.record_matches:
            self.matches.append((sends, recvs))
        self.obs.matched(sends, recvs)

    def met(self, sends: Posts, recvs: Posts) -> None:
        """Matched pairs: noted, and the ops (or their requests) done."""
        self.note_matches(sends, recvs)
        for side in (recvs, sends) if self.model.eager_sends else (sends, recvs):  # eager sends finished at posting
            if side.const("req") == -1:  # none async
                np.subtract.at(self.remaining, side.rank, 1)
            else:
                req = side.req
                self.finish_requests(req[req >= 0])
                np.subtract.at(self.remaining, side.rank[req < 0], 1)
            if self.model.eager_sends:
                break

    # ---- NCCL streams ------------------------------------------------------------------------------
    def admit(self, rows, streams: np.ndarray):
        """The rows that start now; the others wait for the ops before them on their stream. A running async op
        holds its stream until it completes; a blocking op (or a batch) holds its rank, so nothing of that rank
        can queue behind it."""
        req = rows.req
        if not self.running and not (req >= 0).any():
            return rows
        keys = streams.tolist()
        if self.running.keys().isdisjoint(keys) and len(set(keys)) == len(keys):  # every stream free, one op on each
            a = req >= 0
            began, by = (streams, req) if a.all() else (streams[a], req[a])
            began, by = began.tolist(), by.tolist()
            self.running.update(zip(began, by))
            self.stream_of.update(zip(by, began))
            return rows
        start = np.ones(len(rows), dtype=bool)
        via = rows.via.tolist() if isinstance(rows, Posts) else [-1] * len(rows)
        waiting: list[list] = []  # entries made here: [request, row indices, batch]
        for k, (key, q) in enumerate(zip(keys, req.tolist())):
            running = self.running.get(key)
            if running is not None:
                if running == q >= 0:
                    continue  # another op of the batch (one request) that is running: it runs too
                start[k] = False
                queue = self.queues.setdefault(key, deque())
                last = queue[-1] if queue else None
                if last is not None and last in waiting and last[0] == q and via[k] >= 0 and last[2] == via[k]:
                    last[1].append(k)  # the ops of one batch start together
                else:
                    entry = [q, [k], via[k]]
                    queue.append(entry)
                    waiting.append(entry)
            elif q >= 0:
                self.running[key] = q
                self.stream_of[q] = key
        for entry in waiting:
            entry[1] = rows.take(np.array(entry[1]))
        return rows.take(start) if not start.all() else rows

    def free_streams(self, reqs: list[int]) -> None:
        """Async ops `reqs` completed: each frees its stream, where the ops queued behind it start, up to the next
        async one, which holds it in turn."""
        if not self.queues:  # nothing queued behind them (most rounds): the streams are free
            for key in map(self.stream_of.pop, reqs):
                del self.running[key]
            return
        for q in reqs:
            key = self.stream_of.pop(q)
            queue = self.queues.get(key)
            if queue is None:
                del self.running[key]
                continue
            while queue:
                q_next, ops, _ = queue.popleft()
                (self.fresh if isinstance(ops, Posts) else self.fresh_calls).append(ops)
                self.obs.started(ops, q)
                if q_next >= 0:
                    self.running[key] = q_next
                    self.stream_of[q_next] = key
                    break
            else:
                del self.running[key]
            if not queue:
                del self.queues[key]

    # ---- requests ----------------------------------------------------------------------------------
    def finish_requests(self, reqs: np.ndarray) -> None:
        """One op of each of `reqs` completed (a request appears once per op); those with no op left are done."""
        if not reqs.size:
            return
        if self.req_left is not None:
            np.subtract.at(self.req_left, reqs, 1)
            reqs = distinct(reqs[self.req_left[reqs] == 0])
        self.req_done[reqs] = True
        if self.stream_of:
            self.free_streams(list(filter(self.stream_of.__contains__, reqs.tolist())))
        waited = reqs[self.req_in_wait[reqs]]
        if waited.size:
            self.req_in_wait[waited] = False
            np.subtract.at(self.remaining, self.s.requests.rank[waited], 1)

    def enter_wait(self, rec: WaitRec, G: np.ndarray, pos) -> None:
        p = np.arange(G.size) if pos is None else pos
        lo, hi = rec.starts[p], rec.starts[p + 1]
        counts = hi - lo
        idx = _ragged(lo, counts)
        reqs = rec.reqs[idx]
        owner = np.repeat(np.arange(G.size), counts)
        again = self.req_waited[reqs] >= 0
        if again.any():
            for q, k in zip(reqs[again], owner[again]):
                self.double_waits.append((int(q), rec.id, int(p[k])))
            reqs, owner = reqs[~again], owner[~again]
        self.req_waited[reqs] = rec.base + p[owner]
        self.obs.waited(reqs)
        open_ = ~self.req_done[reqs]
        self.req_in_wait[reqs[open_]] = True
        self.block(G, np.bincount(owner[open_], minlength=G.size))

    # ---- collectives -------------------------------------------------------------------------------
    def call(self, rec: CollectiveRec, G: np.ndarray, pos) -> np.ndarray | None:
        """Members call; returns, per rank of G, 1 where its call is void (a bad parameter), or None when
        none is."""
        n = G.size
        gid = at(rec.gid, pos, n).astype(np.int64, copy=False)
        ref = rec.node.group
        if ref is None:
            fam, me = 0, G
        elif ref.name in self.s.made:
            fam, me = len(self.families) + 1 + gid, self.place(gid, G)
        else:
            fam = self.families[(ref.name, ref.dim)] + 1
            me = self.s.group_of[(ref.name, ref.dim)][1][G]
        root = np.full(n, -1, dtype=np.int64) if rec.root is None else at(rec.root, pos, n).astype(np.int64)
        req = at(rec.req, pos, n).astype(np.int64) if rec.req is not None else np.full(n, -1, dtype=np.int64)
        p = np.arange(n, dtype=np.int64) if pos is None else pos.astype(np.int64, copy=False)
        void = self.void_calls(rec, G, p, me, root, gid)
        if void is not None:
            self.finish_requests(req[void & (req >= 0)])
            ok = ~void
            if not ok.any():
                return void.astype(np.int64)
            G, gid, me, root, req, p = G[ok], gid[ok], me[ok], root[ok], req[ok], p[ok]
        seq = self.coll_seq[fam, G]
        self.coll_seq[fam, G] += 1
        self.obs.called(rec, G, p, me)
        m = G.size
        kind = self.kind_ids.setdefault(rec.kind.name, len(self.kind_ids))
        redop = self.redop_ids.setdefault(rec.redop, len(self.redop_ids))
        dtype = self.dtype_ids.get(rec.dtype, -1)
        buffers = self.buffer_ids.setdefault(rec.buffer_names, len(self.buffer_ids))
        scale = (
            np.full(m, -1, dtype=np.int64)
            if rec.scale is None
            else at(rec.scale, p, m).astype(np.float64).view(np.int64)
        )
        self.fresh_calls.append(
            Calls(
                gid=gid,
                seq=seq,
                me=me,
                rank=G,
                rec=np.full(m, rec.id, dtype=np.int64),
                pos=p,
                req=req,
                kind=np.full(m, kind, dtype=np.int64),
                root=root,
                redop=np.full(m, redop, dtype=np.int64),
                scale=scale,
                dtype=np.full(m, dtype, dtype=np.int64),
                contribution=at(rec.contribution, p, m).astype(np.int64),
                buffers=np.full(m, buffers, dtype=np.int64),
                block=np.full(m, self.block_id(rec), dtype=np.int64),
                released=np.zeros(m, dtype=np.int64),
            )
        )
        self.calls_seen += m
        if self.model.streams:
            calls = self.fresh_calls.pop()
            calls = self.admit(calls, call_streams(calls.gid, calls.rank))
            if len(calls):
                self.fresh_calls.append(calls)
        return None if void is None else void.astype(np.int64)

    def block_id(self, rec: CollectiveRec) -> int:
        """The call's place in its `coalesced:` block as an id (-1 outside one): members that disagree on it
        do not issue the same backend call (rules C316)."""
        if rec.block is None:
            return -1
        return self.block_ids.setdefault((rec.block.index, rec.block.count), len(self.block_ids))

    def void_calls(self, rec: CollectiveRec, G, p, me, root, gid) -> np.ndarray | None:
        """Which calls are void (a caller outside the group, a root outside the world or the group), each
        recorded in `bad`; None when none is."""
        W = self.W
        non_member = me < 0
        out = np.zeros(G.size, dtype=bool) if rec.root is None else (root < 0) | (root >= W)
        outside = np.zeros(G.size, dtype=bool)
        ref = rec.node.group
        if rec.root is not None and ref is not None and ref.name in self.s.made:
            outside = self.place(gid, np.where(out, 0, root)) < 0
        elif rec.root is not None and ref is not None:
            gid_of, idx_in = self.s.group_of[(ref.name, ref.dim)]
            safe = np.where(out, 0, root)
            outside = (idx_in[safe] < 0) | (gid_of[safe] != gid)
        void = non_member | out | outside
        if not void.any():
            return None
        problem = np.where(non_member, NOT_MEMBER, np.where(out, PEER_OUT_OF_RANGE, ROOT_NOT_IN_GROUP))
        for k in np.flatnonzero(void).tolist():
            self.bad.append((int(G[k]), rec.id, int(p[k]), int(problem[k])))
        return void

    def place(self, gid: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Each rank's index in the step group `gid` beside it (aligned arrays), or -1 where it is no member."""
        out = np.full(ranks.size, -1, dtype=np.int64)
        gid = np.broadcast_to(gid, ranks.shape)
        for g in distinct(gid).tolist():
            row = self.step_rows.get(g)
            if row is None:
                row = self.step_rows[g] = np.full(self.W, -1, dtype=np.int64)
                row[list(self.s.groups[g].ranks)] = np.arange(len(self.s.groups[g].ranks))
            sel = gid == g
            out[sel] = row[ranks[sel]]
        return out

    def complete_calls(self) -> bool:
        """Instances that every member has now called complete, in group order."""
        if not self.fresh_calls:
            return False
        rows = Calls.concat([self.arrivals] + self.fresh_calls if len(self.arrivals) else self.fresh_calls)
        self.fresh_calls = []
        order = np.lexsort((rows.me, rows.seq, rows.gid))
        rows = rows.take(order)
        n = len(rows)
        new = np.ones(n, dtype=bool)
        new[1:] = (rows.gid[1:] != rows.gid[:-1]) | (rows.seq[1:] != rows.seq[:-1])
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, n))
        full = counts == self.group_size[rows.gid[starts]]
        moved = self.model.early_release and self.release_early(rows, starts, counts, full)
        if not full.any():
            self.arrivals = rows
            return moved
        member_of_full = np.repeat(full, counts)
        done = rows.take(member_of_full)
        self.arrivals = rows.take(~member_of_full)
        dstarts, dcounts = starts[full], counts[full]
        dstarts = np.cumsum(np.append(0, dcounts))[:-1]
        self.finish_instances(done, dstarts, dcounts)
        return True

    def quiet(self) -> bool:
        """Nothing under way: no call waiting for members, no message posted, no NCCL stream held."""
        return not (self.fresh_calls or len(self.arrivals) or len(self.pending) or self.fresh or self.running)

    def collective_run(self, G: np.ndarray) -> bool:
        """Ranks G are at a run of blocking collectives, each of which they alone call and all of them call,
        with one group instance, root and size for every rank, and nothing else is under way: every call of
        the run completes as it is made, so the run is called and completed here, a chunk at a time, without
        a round each. Returns False (nothing done) where the next statement is not such a call; a run stops
        at the first one that is not."""
        if not self.quiet():
            return False
        window = self.upcoming(G)
        m, records = G.size, self.s.records
        run: list[CollectiveRec] = []
        for rid in window.tolist():
            rec = records[rid]
            if type(rec) is not CollectiveRec or not self.completes_alone(rec, G):
                break
            run.append(rec)
        if not run:
            return False
        calls = self.calls_of_run(run, G)
        positions, one = np.arange(m, dtype=np.int64), np.zeros(1, dtype=np.int64)
        size = np.array([m], dtype=np.int64)
        for k, rec in enumerate(run):
            rows = calls.take(slice(k * m, (k + 1) * m))
            self.obs.stepping(rec, G)
            self.obs.called(rec, G, positions, rows.me)
            if self.record_matches:
                self.instances.append(Instance(int(rows.gid[0]), int(rows.seq[0]), rows))
            self.obs.completed(rows, one, size)
        self.calls_seen += len(run) * m
        self.pc[G] += len(run)
        return True

    def upcoming(self, G: np.ndarray) -> np.ndarray:
        """The record ids every rank of G runs next, in order, as far as their sequences agree (RUN_CALLS
        calls at most)."""
        at_ = self.first[G] + self.pc[G]
        ahead = int((self.length[G] - self.pc[G]).min())
        starts = distinct(at_)
        if starts.size > 8:  # ranks in many different cohorts: not worth comparing their sequences
            ahead = 1
        lo = int(starts[0])
        window = self.flat[lo : lo + min(ahead, max(1, RUN_CALLS // G.size))]
        for other in starts[1:].tolist():
            differ = np.flatnonzero(self.flat[other : other + window.size] != window)
            if differ.size:
                window = window[: differ[0]]
        return window

    def completes_alone(self, rec: CollectiveRec, G: np.ndarray) -> bool:
        """Whether `rec` is a blocking call that G, every member of its one group instance, makes with one
        root and one size for all: it completes as soon as G makes it, and no member's call is void."""
        if (
            rec.req is not None
            or rec.ranks.size != G.size
            or self.uneven[rec.id]
            or isinstance(rec.gid, np.ndarray)
            or isinstance(rec.root, np.ndarray)
            or isinstance(rec.scale, np.ndarray)
            or isinstance(rec.contribution, np.ndarray)
            or self.group_size[rec.gid] != G.size
        ):
            return False
        ref = rec.node.group
        if ref is None:
            return rec.root is None or 0 <= rec.root < self.W
        if ref.name in self.s.made:  # its group on each rank is the record's, not the name's last (see `call`)
            return False
        gid_of, idx_in = self.s.group_of[(ref.name, ref.dim)]
        if not (gid_of[G] == rec.gid).all() or (idx_in[G] < 0).any():
            return False
        return rec.root is None or (0 <= rec.root < self.W and gid_of[rec.root] == rec.gid and idx_in[rec.root] >= 0)

    def calls_of_run(self, run: list[CollectiveRec], G: np.ndarray) -> Calls:
        """The calls of a run (`collective_run`), record after record, each in group order; the members'
        collective counters move past them."""
        m, K = G.size, len(run)
        seq, me = [], []
        for rec in run:
            ref = rec.node.group
            fam = 0 if ref is None else self.families[(ref.name, ref.dim)] + 1
            me.append(G if ref is None else self.s.group_of[(ref.name, ref.dim)][1][G])
            seq.append(int(self.coll_seq[fam, G[0]]))
            self.coll_seq[fam, G] += 1
        in_group_order = all((x[1:] > x[:-1]).all() for x in me)

        def each(values) -> np.ndarray:
            return np.repeat(np.asarray(values, dtype=np.int64), m)

        calls = Calls(
            gid=each([r.gid for r in run]),
            seq=each(seq),
            me=np.concatenate(me),
            rank=np.tile(G, K),
            rec=each([r.id for r in run]),
            pos=np.tile(np.arange(m, dtype=np.int64), K),
            req=np.full(K * m, -1, dtype=np.int64),
            kind=each([self.kind_ids.setdefault(r.kind.name, len(self.kind_ids)) for r in run]),
            root=each([-1 if r.root is None else r.root for r in run]),
            redop=each([self.redop_ids.setdefault(r.redop, len(self.redop_ids)) for r in run]),
            scale=each([-1 if r.scale is None else np.float64(r.scale).view(np.int64) for r in run]),
            dtype=each([self.dtype_ids.get(r.dtype, -1) for r in run]),
            contribution=each([r.contribution for r in run]),
            buffers=each([self.buffer_ids.setdefault(r.buffer_names, len(self.buffer_ids)) for r in run]),
            block=each([self.block_id(r) for r in run]),
            released=np.zeros(K * m, dtype=np.int64),
        )
        if not in_group_order:  # by member index within each record's calls
            calls = calls.take(np.lexsort((calls.me, np.repeat(np.arange(K), m))))
        return calls

    def settle(self, G: np.ndarray) -> None:
        """Ranks G have just called a blocking collective with nothing else under way (no call waiting for
        members, no message posted, no NCCL stream held): where they are every member of its instances, those
        complete now and G goes on in this round. The outcome is the one the round's end would give; a loop
        of collectives costs one pass per collective instead of one round of the machine and its queues."""
        if len(self.fresh_calls) != 1 or len(self.arrivals) or len(self.pending) or self.fresh or self.running:
            return
        calls = self.fresh_calls[0]
        gid, seq, me = calls.gid, calls.seq, calls.me
        if gid.size and gid[0] == gid[-1] and (gid == gid[0]).all() and (seq == seq[0]).all():
            if not (me[1:] > me[:-1]).all():
                calls = calls.take(np.argsort(me))
            starts = np.zeros(1, dtype=np.int64)
            counts = np.array([gid.size], dtype=np.int64)
        else:
            calls = calls.take(np.lexsort((calls.me, seq, gid)))
            new = np.ones(gid.size, dtype=bool)
            new[1:] = (calls.gid[1:] != calls.gid[:-1]) | (calls.seq[1:] != calls.seq[:-1])
            starts = np.flatnonzero(new)
            counts = np.diff(np.append(starts, gid.size))
        if not np.array_equal(counts, self.group_size[calls.gid[starts]]):
            return
        self.fresh_calls = []
        self.finish_instances(calls, starts, counts)
        ready = G[self.blocked[G] & (self.remaining[G] <= 0)]
        self.blocked[ready] = False
        self.pc[ready] += 1

    def release_early(self, rows: Calls, starts, counts, full) -> bool:
        """Gloo's rooted collectives let some members leave before every member has called
        (`Kind.released`); they go on, and the instance completes for the rest later."""
        moved = False
        for i in np.flatnonzero(~full).tolist():
            s, c = int(starts[i]), int(counts[i])
            rec = self.s.records[int(rows.rec[s])]
            if not rec.kind.rooted or int(rows.released[s : s + c].min()) == 1:
                continue
            arrived, root = self.arrived(rows, s, c)
            go = rec.kind.released(arrived, root)[rows.me[s : s + c]] & (rows.released[s : s + c] == 0)
            if not go.any():
                continue
            idx = s + np.flatnonzero(go)
            rows.released[idx] = 1
            self.early += idx.size
            self.obs.released(rows.take(slice(s, s + c)), go)
            req = rows.req[idx]
            self.finish_requests(req[req >= 0])
            np.subtract.at(self.remaining, rows.rank[idx[req < 0]], 1)
            moved = True
        return moved

    def arrived(self, rows: Calls, s: int, c: int) -> tuple[np.ndarray, int | None]:
        """(which members of the instance at rows[s:s+c] have called, the root's index in the group)."""
        gid = int(rows.gid[s])
        arrived = np.zeros(int(self.group_size[gid]), dtype=bool)
        arrived[rows.me[s : s + c]] = True
        root = int(rows.root[s])
        if root < 0:
            return arrived, None
        return arrived, int(np.searchsorted(np.asarray(self.s.groups[gid].ranks), root))

    def finish_instances(self, rows: Calls, starts: np.ndarray, counts: np.ndarray) -> None:
        bad_inst = self.uneven[rows.rec[starts]]  # compared member by member by the checker (C312, C306)
        differ = self.disagreeing(rows, starts, counts)
        if differ is not None:
            bad_inst[distinct(np.searchsorted(starts, np.flatnonzero(differ), side="right") - 1)] = True
        for i in np.flatnonzero(bad_inst):
            s, c = int(starts[i]), int(counts[i])
            self.disagreements.append(Instance(int(rows.gid[s]), int(rows.seq[s]), rows.take(slice(s, s + c))))
        if self.record_matches:
            self.instances += [
                Instance(int(rows.gid[s]), int(rows.seq[s]), rows.take(slice(int(s), int(s + c))))
                for s, c in zip(starts, counts)
            ]
        self.obs.completed(rows, starts, counts)
        waiting = rows.released == 0  # members released early are done already
        req = rows.req[waiting]
        self.finish_requests(req[req >= 0])
        np.subtract.at(self.remaining, rows.rank[waiting][req < 0], 1)

    def disagreeing(self, rows: Calls, starts: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
        """Which calls differ from their instance's first member in what members must agree on; None if none."""
        rid = rows.rec
        if rid[0] == rid[-1] and (rid == rid[0]).all():  # one statement: only its per-rank values can differ
            rec = self.s.records[int(rid[0])]
            varying = [col for col in _PER_RANK if isinstance(getattr(rec, col), np.ndarray)]
            if not varying:
                return None
            first = np.repeat(starts, counts)
            differ = np.zeros(len(rows), dtype=bool)
        else:
            varying = list(_PER_RANK + _PER_STATEMENT)
            first = np.repeat(starts, counts)
            blocking = rows.req < 0
            differ = blocking != blocking[first]
        for col in varying:
            c = getattr(rows, col)
            differ |= c != c[first]
        return differ if differ.any() else None

    # ---- the result ----------------------------------------------------------------------------------
    def outcome(self) -> Outcome:
        bad_s = Posts.concat([b[0] for b in self.bad_msgs]) if self.bad_msgs else Posts.empty()
        bad_r = Posts.concat([b[1] for b in self.bad_msgs]) if self.bad_msgs else Posts.empty()
        matches = None
        if self.record_matches:
            matches = (
                (Posts.concat([m[0] for m in self.matches]), Posts.concat([m[1] for m in self.matches]))
                if self.matches
                else (Posts.empty(), Posts.empty())
            )
        pending = Posts.concat([self.pending] + self.fresh) if self.fresh else self.pending
        queued_posts = [e[1] for q in self.queues.values() for e in q if isinstance(e[1], Posts)]
        if queued_posts:  # NCCL: posts that never started count among those that never met
            pending = Posts.concat([pending] + queued_posts)
        pending = pending.take(np.lexsort((pending.pos, pending.rec, pending.rank)))  # rank by rank, in program order
        arrivals = Calls.concat([self.arrivals] + self.fresh_calls) if self.fresh_calls else self.arrivals
        queued_calls = [e[1] for q in self.queues.values() for e in q if isinstance(e[1], Calls)]
        return Outcome(
            self.s,
            self.model,
            self.pc >= self.length,
            self.pc.copy(),
            pending,
            arrivals,
            (bad_s, bad_r),
            self.mismatched_ranks,
            self.disagreements,
            self.bad,
            self.req_done,
            self.req_waited,
            self.double_waits,
            matches,
            self.instances if self.record_matches else None,
            self.calls_seen,
            self.early,
            Calls.concat(queued_calls) if queued_calls else Calls.empty(),
            self.stream_heads(),
            self.clocks.races() if self.clocks is not None else [],
            self.waiting_in_new_group(),
        )

    def waiting_in_new_group(self) -> dict[int, tuple[int, tuple[int, ...]]]:
        """Members stuck in a `new_group`: rank → (k: it is the rank's k-th, the members that never called theirs)."""
        out = {}
        for k, g, waiting in self.meeting:
            members = np.asarray(self.s.groups[g].ranks, dtype=np.int64)
            absent = tuple(int(m) for m in members[~self.making[k][members]])
            for r in waiting.tolist():
                out[r] = (k, absent)
        return out

    def stream_heads(self) -> dict[tuple[int, int], int]:
        """For each op that never started (NCCL; op as (record id, position)), the request of the async op its
        stream was running. Sends and receives among them are in `unmatched` too, collective calls in
        `queued_calls`."""
        out = {}
        for key, queue in self.queues.items():
            head = self.running[key]
            for entry in queue:
                rows = entry[1]
                for rid, pos in zip(rows.rec.tolist(), rows.pos.tolist()):
                    out[(rid, pos)] = head
        return out


MISMATCHES_KEPT = 1 << 16
"""Mismatched messages kept whole (`Outcome.mismatched_messages`); past them only what the rules read. A bug on
every rank of a loop mismatches ranks × iterations messages: 33 million in the ring at world 4096, 2.6 GB kept."""
PLANS = 64
"""The most batch shapes `Engine.exchange_plan` keeps at once."""
RUN_CALLS = 1 << 18
"""The most calls one pass of `Engine.collective_run` builds at once (its memory: 15 int64 columns each)."""
_PER_RANK = ("root", "scale", "contribution")
"""Columns (and the CollectiveRec attributes they come from) members may disagree on while they run one
statement: where the statement's value is per rank (an array, not one number)."""
_PER_STATEMENT = ("kind", "redop", "dtype", "buffers", "block")
"""The columns a statement fixes (as it fixes whether the call is blocking): members at one statement agree."""


def _waiters(rec: WaitRec) -> tuple[np.ndarray, np.ndarray]:
    """How many requests each rank of wait `rec` waits for, and each request's rank position in the wait."""
    counts = np.diff(rec.starts)
    return counts, np.repeat(np.arange(counts.size), counts)


def _uniform(a: np.ndarray, counts: np.ndarray | None = None):
    """A key's part for array `a`: one number where every value is the same; with `counts` (how many values
    each rank has), one tuple where every rank's values are the same; else `a` by its values."""
    if not a.size:
        return ()
    if counts is not None and counts.size and (counts == counts[0]).all() and counts[0]:
        rows = a.reshape(counts.size, int(counts[0]))
        if (rows == rows[0]).all():
            return tuple(rows[0].tolist())
    elif (a == a[0]).all():
        return a[0].item()
    return ByValue(a)


def _join(parts: list[tuple[np.ndarray | int, int]]) -> np.ndarray:
    """One int64 column of parts that are arrays or (value, length) runs: a match round joins the pending posts
    with each rank's new ones, which in a pipeline are many one-row tables whose record, tag and size are one
    value each."""
    arrays = [type(v) is np.ndarray for v, _ in parts]
    if all(arrays):
        return np.concatenate([v for v, _ in parts])
    sizes = [n for _, n in parts]
    col = np.repeat(np.array([0 if a else v for (v, _), a in zip(parts, arrays)], dtype=np.int64), sizes)
    if any(arrays):
        col[np.repeat(arrays, sizes)] = np.concatenate([v for (v, _), a in zip(parts, arrays) if a])
    return col


def _by_head(heads: np.ndarray, ranks: np.ndarray):
    """(record id, ranks at it) for the ranks about to run, ranks ascending within each."""
    h0 = heads[0]
    if heads[-1] == h0 and (heads == h0).all():
        yield int(h0), ranks
        return
    order = np.argsort(heads, kind="stable")
    hs, rs = heads[order], ranks[order]
    cuts = np.flatnonzero(hs[1:] != hs[:-1]) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, hs.size]):
        yield int(hs[a]), rs[a:b]


def first_of_each_pair(sends: Posts, recvs: Posts, rows: np.ndarray) -> np.ndarray:
    """Of the matched pairs at `rows` (ascending indices), the first of each pair of records, in order: what the
    rules read of a mismatch (a record has one dtype, so one kind of mismatch). A pair of records' messages
    mostly meet together, so runs are cut first and only their heads sorted."""
    if sends.const("rec") is not None and recvs.const("rec") is not None:  # one pair: a self-matched batch's step
        return rows[:1]
    sent_by, received_by = sends.column("rec")[rows], recvs.column("rec")[rows]
    key = sent_by * (int(received_by.max()) + 1) + received_by
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return rows[starts[np.sort(np.unique(key[starts], return_index=True)[1])]]


def _differ(a: Rows, b: Rows, col: str):
    """Where column `col` of a and b differ row by row: False for all when both are one and the same value."""
    x, y = a.const(col), b.const(col)
    if x is not None and x == y:
        return False
    return a.column(col) != b.column(col)


def _frozen(a: np.ndarray) -> np.ndarray:
    """`a`, read-only: an array that is never written may be known again by its identity."""
    a.flags.writeable = False
    return a


def _keep(v, good: np.ndarray):
    """The rows `good` of a column given as an array or as one value."""
    return v[good] if isinstance(v, np.ndarray) else v


def _per_row(v, p: np.ndarray):
    """A record's per-rank field at positions p as a column: an int64 array, or its one value."""
    return v[p].astype(np.int64) if isinstance(v, np.ndarray) else int(v)


def _tag_column(op: P2PRec, positions: np.ndarray):
    """An op's tags at `positions` as a column that is never written: an int64 array, or its one value."""
    column = _per_row(op.tag, positions)
    return _frozen(column) if isinstance(column, np.ndarray) else column


def _ragged(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Flat indices of the ranges [start, start + count), one after another."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(counts) - counts
    return np.repeat(starts - first, counts) + np.arange(total)


def run_engine(
    schedule: Schedule,
    model: Model = GLOO,
    observer: Observer | None = None,
    record_matches: bool = False,
    deadline: Deadline | None = None,
) -> Outcome:
    return Engine(schedule, model, observer, record_matches, deadline).run()
