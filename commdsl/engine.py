"""The stepping engine: runs a Schedule's ranks against each other, without data.

One machine for the checker and the simulator (which adds data through an `Observer`). Each rank
runs until it blocks; a match or a completed collective wakes the ranks it concerns. When no rank
can move, every unfinished rank is stuck: the result records where each one stopped and on whom it
waits, which is all the deadlock analysis needs. Cost is linear in the number of ops.

Semantics (design.md §4): P2P messages match FIFO per channel (group, src, dst, tag) — tags dropped
for NCCL; under zero buffering a blocking send completes only when its receive is posted (what Gloo
does at every size), under infinite buffering at once. A collective completes when every member of
its group has posted its k-th collective on that group.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from commdsl.schedule import Batch, Collective, Compute, Expect, Group, Print, Recv, Schedule, Send, Wait

Buffering = Literal["zero", "infinite"]


@dataclass(slots=True, eq=False)
class Posted:
    """A send or receive that a rank has posted."""

    rank: int
    op: Send | Recv
    index: int
    channel: tuple
    matched: "Posted | None" = None
    done: bool = False
    payload: object = None

    @property
    def is_send(self) -> bool:
        return isinstance(self.op, Send)


@dataclass(slots=True, eq=False)
class Call:
    """One member's call of a collective."""

    rank: int
    op: Collective
    index: int


@dataclass(slots=True, eq=False)
class Instance:
    """The k-th collective on a group: complete once every member has called it."""

    group: Group
    seq: int
    calls: dict[int, Call] = field(default_factory=dict)
    done: bool = False

    def missing(self) -> list[int]:
        return [r for r in self.group.ranks if r not in self.calls]


@dataclass(slots=True)
class Request:
    rank: int
    req: int
    op: object
    index: int
    thing: Posted | Instance | None = None  # None: skipped for a bad parameter, counts as complete
    waited_at: object = None

    @property
    def done(self) -> bool:
        t = self.thing
        if t is None:
            return True
        return t.done


@dataclass(slots=True)
class Blocked:
    """Where a stuck rank stopped, and the ranks it waits for (with the thing it waits on)."""

    rank: int
    op: object
    index: int
    waits_on: list[tuple[int, object]]


@dataclass(slots=True)
class BadParam:
    rank: int
    op: object
    index: int
    problem: str  # "peer-out-of-range", "self", "peer-not-in-group", "not-member", "root-not-in-group"


@dataclass
class EngineResult:
    schedule: Schedule
    buffering: Buffering
    ignore_tags: bool
    finished: list[bool]
    stalled: dict[int, Blocked]
    matches: list[tuple[Posted, Posted]]
    unmatched: list[Posted]
    instances: list[Instance]
    never_waited: list[Request]
    double_waits: list[tuple[Request, object, int]]
    bad_params: list[BadParam]
    positions: list[int]

    @property
    def completed(self) -> bool:
        return not self.stalled


class Observer:
    """Hooks for the simulator (data) and the checker's access tracking. All default to no-ops."""

    def local(self, rank: int, op, index: int) -> None: ...
    def posted(self, p: Posted) -> None: ...
    def matched(self, send: Posted, recv: Posted) -> None: ...
    def called(self, call: Call) -> None: ...
    def completed(self, inst: Instance) -> None: ...
    def waited(self, rank: int, reqs: list[Request], op, index: int) -> None: ...


class Engine:
    def __init__(self, schedule: Schedule, buffering: Buffering = "zero", ignore_tags: bool = False,
                 observer: Observer | None = None):
        self.s = schedule
        self.buffering = buffering
        self.ignore_tags = ignore_tags
        self.obs = observer or Observer()
        W = schedule.world
        self.pc = [0] * W
        self.visited = [-1] * W  # pc of the blocking op a rank has already posted / entered
        self.current: list[object] = [None] * W
        self.sends: dict[tuple, deque[Posted]] = {}
        self.recvs: dict[tuple, deque[Posted]] = {}
        self.seq: dict[tuple[int, int], int] = {}
        self.instances: dict[tuple[int, int], Instance] = {}
        self.requests: list[dict[int, Request]] = [dict() for _ in range(W)]
        self.matches: list[tuple[Posted, Posted]] = []
        self.bad: list[BadParam] = []
        self.double_waits: list[tuple[Request, object, int]] = []
        self.ready: deque[int] = deque()
        self.queued = [False] * W

    # ---------------------------------------------------------------------------------------------
    def run(self) -> EngineResult:
        for r in range(self.s.world):
            self.wake(r)
        while self.ready:
            r = self.ready.popleft()
            self.queued[r] = False
            self.advance(r)
        return self.result()

    def wake(self, r: int):
        if not self.queued[r]:
            self.queued[r] = True
            self.ready.append(r)

    def advance(self, r: int):
        ops = self.s.ops[r]
        pc = self.pc[r]
        n = len(ops)
        obs = self.obs
        while pc < n:
            op = ops[pc]
            t = type(op)
            if t is Compute or t is Expect or t is Print:
                obs.local(r, op, pc)
                pc += 1
            elif t is Send or t is Recv:
                if op.blocking:
                    if self.visited[r] != pc:
                        self.visited[r] = pc
                        self.current[r] = self.post(r, op, pc)
                    p = self.current[r]
                    if p is not None and not p.done:
                        break
                else:
                    self.post(r, op, pc)
                pc += 1
            elif t is Collective:
                if self.visited[r] != pc:
                    self.visited[r] = pc
                    self.current[r] = self.call(r, op, pc)
                inst = self.current[r]
                if op.req is None and inst is not None and not inst.done:
                    break
                pc += 1
            elif t is Wait or t is Batch:
                if self.visited[r] != pc:
                    self.visited[r] = pc
                    self.current[r] = self.enter_wait(r, op, pc)
                reqs = self.current[r]
                if any(not q.done for q in reqs):
                    break
                obs.waited(r, reqs, op, pc)
                pc += 1
            else:  # pragma: no cover - the Schedule has no other op kinds
                raise TypeError(t)
        self.pc[r] = pc

    # P2P -----------------------------------------------------------------------------------------
    def post(self, r: int, op: Send | Recv, index: int) -> Posted | None:
        problem = self.p2p_problem(r, op)
        if problem:
            self.bad.append(BadParam(r, op, index, problem))
            if op.req is not None:
                self.requests[r][op.req] = Request(r, op.req, op, index, None)
            return None
        is_send = type(op) is Send
        src, dst = (r, op.peer) if is_send else (op.peer, r)
        gid = op.group.id if op.group is not None else 0
        ch = (gid, src, dst) if self.ignore_tags else (gid, src, dst, op.tag)
        p = Posted(r, op, index, ch)
        if op.req is not None:
            self.requests[r][op.req] = Request(r, op.req, op, index, p)
        self.obs.posted(p)
        mine, theirs = (self.sends, self.recvs) if is_send else (self.recvs, self.sends)
        queue = theirs.get(ch)
        if queue:
            other = queue.popleft()
            self.match(p, other) if is_send else self.match(other, p)
        else:
            mine.setdefault(ch, deque()).append(p)
            if is_send and self.buffering == "infinite":
                p.done = True
        return p

    def p2p_problem(self, r: int, op: Send | Recv) -> str | None:
        peer = op.peer
        if not 0 <= peer < self.s.world:
            return "peer-out-of-range"
        if peer == r:
            return "self"
        g = op.group
        if g is not None:
            if r not in g.ranks:
                return "not-member"
            if peer not in g.ranks:
                return "peer-not-in-group"
        return None

    def match(self, s: Posted, q: Posted):
        s.matched, q.matched = q, s
        s.done = q.done = True
        self.matches.append((s, q))
        self.obs.matched(s, q)
        self.wake(s.rank)
        self.wake(q.rank)

    # collectives ---------------------------------------------------------------------------------
    def call(self, r: int, op: Collective, index: int) -> Instance | None:
        g = op.group
        problem = None
        if r not in g.ranks:
            problem = "not-member"
        elif op.root is not None and op.root not in g.ranks:
            problem = "root-not-in-group" if 0 <= op.root < self.s.world else "peer-out-of-range"
        if problem:
            self.bad.append(BadParam(r, op, index, problem))
            if op.req is not None:
                self.requests[r][op.req] = Request(r, op.req, op, index, None)
            return None
        key = (g.id, r)
        k = self.seq.get(key, 0)
        self.seq[key] = k + 1
        inst = self.instances.get((g.id, k))
        if inst is None:
            inst = self.instances[(g.id, k)] = Instance(g, k)
        c = Call(r, op, index)
        inst.calls[r] = c
        if op.req is not None:
            self.requests[r][op.req] = Request(r, op.req, op, index, inst)
        self.obs.called(c)
        if len(inst.calls) == len(g.ranks):
            inst.done = True
            self.obs.completed(inst)
            for m in g.ranks:
                self.wake(m)
        return inst

    # requests ------------------------------------------------------------------------------------
    def enter_wait(self, r: int, op: Wait | Batch, index: int) -> list[Request]:
        if type(op) is Batch:
            for p in op.ops:
                self.post(r, p, index)
            reqs = [self.requests[r][p.req] for p in op.ops]
            for q in reqs:
                q.waited_at = op
            return reqs
        reqs = []
        for req in op.reqs:
            q = self.requests[r].get(req)
            if q is None:
                continue
            if q.waited_at is not None:
                self.double_waits.append((q, op, index))
                continue
            q.waited_at = op
            reqs.append(q)
        return reqs

    # ---------------------------------------------------------------------------------------------
    def result(self) -> EngineResult:
        W = self.s.world
        finished = [self.pc[r] >= len(self.s.ops[r]) for r in range(W)]
        stalled = {r: self.blocked(r) for r in range(W) if not finished[r]}
        unmatched = [p for qs in (self.sends, self.recvs) for q in qs.values() for p in q]
        unmatched.sort(key=lambda p: (p.rank, p.index))
        never = [q for r in range(W) if finished[r] for q in self.requests[r].values() if q.waited_at is None]
        insts = sorted(self.instances.values(), key=lambda i: (i.group.id, i.seq))
        return EngineResult(self.s, self.buffering, self.ignore_tags, finished, stalled, self.matches, unmatched,
                            insts, never, self.double_waits, self.bad, list(self.pc))

    def blocked(self, r: int) -> Blocked:
        index = self.pc[r]
        op = self.s.ops[r][index]
        waits: list[tuple[int, object]] = []
        cur = self.current[r]
        if type(op) in (Send, Recv):
            waits.append((op.peer, cur))
        elif type(op) is Collective:
            waits.extend((m, cur) for m in cur.missing())
        else:
            for q in cur:
                if q.done:
                    continue
                t = q.thing
                if isinstance(t, Posted):
                    waits.append((t.op.peer, t))
                else:
                    waits.extend((m, t) for m in t.missing())
        return Blocked(r, op, index, waits)


def run_engine(schedule: Schedule, buffering: Buffering = "zero", ignore_tags: bool = False,
               observer: Observer | None = None) -> EngineResult:
    return Engine(schedule, buffering, ignore_tags, observer).run()
