"""Facts the rules read: the engine's runs under both buffering models, NCCL matching, local accesses.

`AccessTracker` rides along the zero-buffering run (as an engine observer) and records the local
facts no rendezvous shows: a buffer touched while an async op on it is in flight, a non-root buffer
read after `reduce`, a collective result overwritten before anyone read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commdsl.collectives import reads_writes
from commdsl.engine import Call, EngineResult, Instance, Observer, Posted, Request
from commdsl.resolve import Program
from commdsl.schedule import Collective, Compute, Expect, Print, Recv, Schedule, View


@dataclass
class Window:
    """A buffer an async op may touch until its request is waited."""

    view: View
    writes: bool
    op: object
    thing: object


@dataclass
class Race:
    rank: int
    op: object
    window: Window
    writes: bool


@dataclass
class UndefinedRead:
    rank: int
    op: object
    reduce: Collective


@dataclass
class DeadStore:
    rank: int
    producer: object
    overwriter: object


class AccessTracker(Observer):
    def __init__(self, world: int):
        self.inflight: list[list[Window]] = [[] for _ in range(world)]
        self.undefined: list[list[tuple[View, Collective]]] = [[] for _ in range(world)]
        self.unread: list[list[tuple[View, object]]] = [[] for _ in range(world)]
        self.races: list[Race] = []
        self.undefined_reads: list[UndefinedRead] = []
        self.dead_stores: list[DeadStore] = []

    def access(self, rank: int, view: View, writes: bool, op, own=None):
        for w in self.inflight[rank]:
            if w.thing is not own and (writes or w.writes) and w.view.overlaps(view):
                self.races.append(Race(rank, op, w, writes))
        if writes:
            self.undefined[rank] = [(v, red) for v, red in self.undefined[rank] if not view.covers(v)]
            still = []
            for v, producer in self.unread[rank]:
                if view.covers(v) and producer is not op:
                    self.dead_stores.append(DeadStore(rank, producer, op))
                elif not view.overlaps(v) or producer is op:
                    still.append((v, producer))
            self.unread[rank] = still
        else:
            for v, red in self.undefined[rank]:
                if v.overlaps(view):
                    self.undefined_reads.append(UndefinedRead(rank, op, red))
                    break
            self.unread[rank] = [(v, p) for v, p in self.unread[rank] if not v.overlaps(view)]

    def local(self, rank, op, index):
        if type(op) is Compute:
            for v in op.reads:
                self.access(rank, v, False, op)
            if op.op != "=":
                self.access(rank, op.target, False, op)
            self.access(rank, op.target, True, op)
        elif type(op) is Expect:
            self.access(rank, op.view, False, op)
            for v in op.reads:
                self.access(rank, v, False, op)
        elif type(op) is Print:
            for v in op.views:
                self.access(rank, v, False, op)

    def posted(self, p: Posted):
        writes = type(p.op) is Recv
        self.access(p.rank, p.op.view, writes, p.op, own=p)
        if not p.op.blocking:
            self.inflight[p.rank].append(Window(p.op.view, writes, p.op, p))

    def called(self, call: Call):
        op = call.op
        me = op.group.ranks.index(call.rank)
        reads, writes, undefined = reads_writes(op, me)
        for v in reads:
            self.access(call.rank, v, False, op)
        for v in writes:
            self.access(call.rank, v, True, op)
        for v in undefined:
            self.undefined[call.rank].append((v, op))
        for v in writes:
            self.unread[call.rank].append((v, op))
        if op.req is not None:
            for v in reads:
                self.inflight[call.rank].append(Window(v, False, op, call))
            for v in writes + undefined:
                self.inflight[call.rank].append(Window(v, True, op, call))

    def waited(self, rank: int, reqs: list[Request], op, index: int):
        things = set()
        for q in reqs:
            t = q.thing
            if isinstance(t, Instance):
                t = t.calls.get(rank)
            things.add(id(t))
        self.inflight[rank] = [w for w in self.inflight[rank] if id(w.thing) not in things]


@dataclass
class Context:
    """Everything the rules see for one program at one world size."""

    program: Program
    schedule: Schedule
    zero: EngineResult
    infinite: EngineResult
    nccl: EngineResult | None
    access: AccessTracker
    backends: tuple[str, ...]
    extra: dict = field(default_factory=dict)

    def text(self, op) -> str:
        """The source text of an op's statement, on one line."""
        src = self.program.source.text[op.span.start : op.span.end]
        return " ".join(src.split())
