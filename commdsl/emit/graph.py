"""Pictures of a program: a sequence diagram of its Schedule, and a timeline of a Chrome trace.

Sequence diagram. `build()` turns one expansion into a `Diagram`: a lifeline per rank, an event per
send, receive and collective call, placed on rows by the causal order of the zero-buffering engine
run (an event sits below everything its rank completed before posting it, a receive below its send,
and the calls of one collective share a row). The checker's facts are drawn in: a deadlock cycle in
red, unmatched and blocked ops marked, ranks that never finish named. Mermaid and DOT are both
written from that one model, so they cannot disagree. The DOT positions are computed here and pinned
(`layout=neato`, `pos="x,y!"`): Graphviz only draws, and `dot -Tsvg` on the text gives the same picture.

Folding. Beyond `max_ranks` lanes, the ranks between the first and last few share one folded lane, and a
run of loop iterations that look alike on the lanes shown keeps its first iterations and folds the rest
into one marked row. Both happen here, in the model, so every format folds alike and says so in its
caption; ranks and iterations that hold a finding are never folded.

Timeline. `load_trace()` reads Chrome trace event JSON (what `--trace` writes, what Perfetto opens)
and `timeline_png()` draws one row per track with matplotlib's Agg canvas (no pyplot, no display).
"""

from __future__ import annotations

import html
import io
import json
import math
import textwrap
from dataclasses import dataclass, field

import numpy as np

from commdsl.dtypes import DTYPES
from commdsl.engine import run_engine
from commdsl.p2p import ANY_SOURCE
from commdsl.resolve import Program
from commdsl.schedule import Collective, Group, NewGroup, Recv, Schedule, Send, View
from commdsl.syntax import nodes as n
from commdsl.values import distinct

MAX_EVENTS = 4000  # beyond this a diagram is unreadable and Graphviz slow; ask for a smaller world
MAX_EXPANSION = 1_000_000  # events a folded diagram is chosen from; beyond this even choosing is slow
MAX_RANKS = 8  # lanes a diagram shows before it folds ranks
KEEP_ITERATIONS = 2  # a run of alike loop iterations keeps this many and folds the rest
NEVER = math.inf  # completion index of an async op that no `wait` covers


class DiagramTooLarge(Exception):
    """The expansion has more communication events than a diagram can show."""


class GraphvizMissing(Exception):
    """Graphviz (the `dot` program or the `graphviz` Python package) is not installed."""


class RenderError(Exception):
    """Graphviz ran but failed."""


class _Cycle(RuntimeError):
    """Internal: the causal order to place rows by has a cycle."""


class TraceError(Exception):
    """A trace file that is not Chrome trace event JSON, or has no duration events."""


# ---- the model ------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Event:
    """One rank's send, receive or collective call, or a `new_group` a member is stuck in."""

    rank: int
    op: Send | Recv | Collective | NewGroup
    posted: int  # op index at which the rank posts it
    done: float  # op index by which it has completed: itself if blocking, its `wait` or `batch` if not
    view: str = ""  # what a send or receive moves, as the language writes it
    text: str = ""  # its label: peer, view, size
    status: str = "ok"  # ok | cycle | unmatched | blocked
    note: str = ""
    row: int = 0


@dataclass(slots=True)
class Message:
    send: Event
    recv: Event


@dataclass(slots=True)
class Band:
    """One collective instance: the calls of every member that arrived, on one row."""

    label: str
    group: Group
    calls: list[Event]
    mismatch: bool = False  # members call different kinds, roots, reduce ops or dtypes
    missing: list[tuple[int, str]] = field(default_factory=list)  # (member, why absent) if it never completes

    @property
    def row(self) -> int:
        return self.calls[0].row

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(slots=True)
class WaitEdge:
    """An edge of a deadlock cycle: `src`'s rank waits for the rank of `dst`, stuck in `dst`."""

    src: Event
    dst: Event
    text: str


@dataclass(slots=True)
class Lane:
    rank: int  # the rank it draws; a folded lane's first rank
    stuck_line: int | None  # the line the rank never gets past; None if it finishes
    not_reached: int = 0  # ops after the stuck one
    last: int | None = None  # a folded lane's last rank
    stuck: int = 0  # how many of a folded lane's ranks never finish

    @property
    def folded(self) -> bool:
        return self.last is not None

    @property
    def label(self) -> str:
        if self.last is None:
            return f"rank {self.rank}"
        stuck = f", {self.stuck} stuck" if self.stuck else ""
        return f"ranks {self.rank}–{self.last} ({self.last - self.rank + 1} ranks, folded{stuck})"


@dataclass(slots=True)
class Fold:
    """Iterations of a loop left out: each looks like the kept ones before it, and none holds a finding."""

    loop: n.For
    prefix: tuple[tuple[str, int], ...]  # the bindings of the loops around it
    values: list[int]  # the iterations folded
    like: list[int]  # the iterations kept, which they look like
    events: list[Event]
    lo: int = 0  # first and last lane it spans
    hi: int = 0
    row: int = 0

    @property
    def line(self) -> int:
        return self.loop.span.line

    @property
    def var(self) -> str:
        return self.loop.var

    def holds(self, rec, pos: np.ndarray) -> np.ndarray:
        """Which of the ops at positions `pos` of record `rec` run in one of the folded iterations."""
        span, depth = rec.span, len(self.prefix)
        inside = self.loop.span.start <= span.start and span.end <= self.loop.span.end
        if not inside or len(rec.bindings) <= depth:
            return np.zeros(len(pos), dtype=bool)
        ranks = rec.ranks[pos]

        def value(v) -> np.ndarray:  # a loop value per op: bounds that differ by rank hold it per global rank
            return v[ranks] if isinstance(v, np.ndarray) else np.full(len(pos), v)

        yes = np.ones(len(pos), dtype=bool)
        for (name, v), (outer, want) in zip(rec.bindings[:depth], self.prefix, strict=True):
            yes &= (name == outer) & (value(v) == want)
        name, v = rec.bindings[depth]
        return yes & (name == self.var) & np.isin(value(v), self.values)

    @property
    def which(self) -> str:
        """The iterations folded, inside the outer loops' iteration: `epoch=1, s = 2…5`."""
        outer = "".join(f"{k}={v}, " for k, v in self.prefix)
        return f"{outer}{self.var} = {self.values[0]}…{self.values[-1]}"

    @property
    def label(self) -> str:
        count = len(self.values)
        return f"× {count} more iteration{'s' * (count != 1)} of the loop at line {self.line} ({self.which}), folded"


@dataclass(slots=True)
class Finding:
    severity: str
    code: str
    message: str
    line: int | None


@dataclass(slots=True)
class Hidden:
    """Sends or receives a folded lane hides, as arrays: they are not drawn but still order what is."""

    rank: np.ndarray
    posted: np.ndarray
    done: np.ndarray  # float: NEVER where no `wait` covers an async op
    rec: np.ndarray
    pos: np.ndarray

    def folded(self, schedule: Schedule, folds: list[Fold]) -> np.ndarray:
        """Per row, the index of the fold it runs in, or -1."""
        out = np.full(len(self.rank), -1, dtype=np.int64)
        for rid in distinct(self.rec).tolist():
            rows = np.flatnonzero(self.rec == rid)
            rec = schedule.records[rid]
            for k, f in enumerate(folds):
                out[rows[(out[rows] < 0) & f.holds(rec, self.pos[rows])]] = k
        return out


@dataclass
class Diagram:
    title: str
    world: int
    lanes: list[Lane]
    events: list[Event]
    messages: list[Message]
    bands: list[Band]
    cycles: list[list[WaitEdge]]
    gutter: list[list[tuple[int | None, str]]]  # per row: (line, "LINE  source text  · bindings")
    findings: list[Finding]
    column: list[int]  # per rank: the index of its lane
    folds: list[Fold]
    caption: list[str]  # what was folded, for the reader

    @property
    def rows(self) -> int:
        return len(self.gutter)

    def lane_of(self, rank: int) -> Lane:
        return self.lanes[self.column[rank]]


class _Events:
    """Makes one `Event` per op the engine reports (on demand: listing a rank's ops is costly at scale)."""

    def __init__(self, schedule: Schedule, outcome):
        self.schedule, self.outcome = schedule, outcome
        self.sequences = [schedule.sequence(r) for r in range(schedule.world)]
        self.made: dict[tuple[int, int], Event] = {}

    def when(self, rank: int, rid: int, via: int, req: int) -> tuple[int, float]:
        """(index at which the rank posts an op, index by which it has completed: itself if blocking or in a
        `batch`, else its first `wait`; the ops of a batch bound to a handle share its request, so they complete
        at the `wait` of the batch)."""
        posted = int(np.searchsorted(self.sequences[rank], via))
        if req < 0:
            return posted, posted
        waited = int(self.outcome.req_waited[req])
        if waited < 0:
            return posted, NEVER
        return posted, int(np.searchsorted(self.sequences[rank], self._record_of(waited)))

    def _record_of(self, op_ids):
        return np.searchsorted(self.schedule.op_bases, op_ids, "right") - 1

    def event(self, rank: int, rid: int, pos: int, via: int, req: int) -> Event:
        ev = self.made.get((rid, pos))
        if ev is None:
            op = self.schedule.op_at(self.schedule.records[rid], pos)
            ev = self.made[(rid, pos)] = Event(rank, op, *self.when(rank, rid, via, req))
            if isinstance(op, (Send, Recv)):
                ev.view = _view(self.schedule, rank, op.view)
                ev.text = _p2p_text(op, ev.view)
        return ev

    def post(self, rows, k: int) -> Event:
        """The event of row `k` of posted sends and receives."""
        return self.event(int(rows.rank[k]), int(rows.rec[k]), int(rows.pos[k]), int(rows.via[k]), int(rows.req[k]))

    def call(self, calls, k: int) -> Event:
        """The event of row `k` of collective calls."""
        rank, rid = int(calls.rank[k]), int(calls.rec[k])
        return self.event(rank, rid, int(calls.pos[k]), rid, int(calls.req[k]))

    def making(self, rank: int, absent: tuple[int, ...]) -> Event:
        """The event of a member stuck in `new_group`, waiting for the members in `absent`."""
        rid, pos = self.outcome.head(rank)
        ev = self.event(rank, rid, pos, rid, -1)
        ev.text = f"new_group {list(ev.op.group.ranks)}"
        ev.status = "blocked"
        ev.note = "waits in `new_group` for " + ", ".join(f"rank {m}" for m in absent)
        return ev

    def hidden(self, rows, keep: np.ndarray) -> Hidden:
        """`when` for the rows of `keep` at once, without making events."""
        rank, rec, via, req = rows.rank[keep], rows.rec[keep], rows.via[keep], rows.req[keep]
        posted = _index_in(self.sequences, rank, via)
        done = posted.astype(np.float64)
        late = np.flatnonzero(req >= 0)  # async ops and the ops of batches bound to a handle
        waited = self.outcome.req_waited[req[late]]
        done[late[waited < 0]] = NEVER
        late, waited = late[waited >= 0], waited[waited >= 0]
        done[late] = _index_in(self.sequences, rank[late], self._record_of(waited))
        return Hidden(rank, posted, done, rec, rows.pos[keep])


def build(program: Program, schedule: Schedule, max_ranks: int | None = MAX_RANKS) -> Diagram:
    """The diagram of one expansion, with the checker's findings for it. Beyond `max_ranks` lanes ranks are
    folded, and alike loop iterations are folded whenever `max_ranks` is not None (None draws everything)."""
    from commdsl.checker import analyse_schedule
    from commdsl.checker.waits import analyse

    outcome = run_engine(schedule, record_matches=True)
    sends, recvs = outcome.matches
    size = 2 * len(sends) + len(outcome.unmatched) + sum(len(i.calls) for i in outcome.instances)
    size += len(outcome.waiting)
    if size > (MAX_EVENTS if max_ranks is None else MAX_EXPANSION):
        raise DiagramTooLarge(
            f"world size {schedule.world} gives {size} sends, receives and collective calls; "
            + (
                f"a diagram stays readable up to about {MAX_EVENTS}"
                if max_ranks is None
                else f"folding picks from at most {MAX_EXPANSION:,}"
            )
        )
    waits = analyse(outcome)
    diags, _ = analyse_schedule(program, schedule, schedule.backends, False, False)

    made = _Events(schedule, outcome)
    loose = [made.post(outcome.unmatched, k) for k in range(len(outcome.unmatched))]
    making = {r: made.making(r, absent) for r, (_k, absent) in outcome.in_new_group.items()}
    bands, band_of, unfinished = _bands(schedule, outcome, made)
    cycles = _cycles(waits, loose, band_of, making)
    _mark_unmatched(schedule, waits, loose)
    loose += making.values()
    _mark_missing(waits, band_of, unfinished)

    lanes, column = _fold_ranks(_lanes(schedule, outcome), _finding_ranks(outcome, waits, loose, bands), max_ranks)
    messages, bands, loose, hidden = _shown(made, lanes, column, loose, bands)
    folds = [] if max_ranks is None else _fold_iterations(program, messages, bands, lanes, column)
    try:
        messages, bands, events = _placed(schedule, max_ranks, folds, messages, bands, loose, column, hidden)
    except _Cycle:  # a fold merged iterations that some rank's order interleaves with other code: draw them
        folds = []
        messages, bands, events = _placed(schedule, max_ranks, folds, messages, bands, loose, column, hidden)
    findings = [
        Finding(d.severity, d.code, d.message, d.span.line if d.span else None)
        for d in sorted(diags, key=lambda d: (d.severity != "error", d.span.start if d.span else -1))
    ]
    params = ", ".join(f"{k}={v}" for k, v in schedule.params.items())
    title = f"{schedule.program} — world {schedule.world}" + (f" ({params})" if params else "")
    return Diagram(
        title,
        schedule.world,
        lanes,
        events,
        messages,
        bands,
        cycles,
        _gutter(program, events, folds),
        findings,
        column,
        folds,
        _caption(lanes, len(hidden[0][0].rank), len({id(b) for b, *_ in hidden[1] if not b.calls}), folds),
    )


def _bands(schedule: Schedule, outcome, made: _Events) -> tuple[list[Band], dict, list[tuple[int, int]]]:
    """A band per collective instance, complete or not, in (group, sequence) order; (gid, seq) → band; the
    (gid, seq) of those that never complete."""
    waiting = outcome.waiting
    unfinished = {(w.gid, w.seq): w for w in _unfinished(waiting)}
    bands, band_of = [], {}
    groups = [(inst.gid, inst.seq, inst.calls) for inst in outcome.instances]
    groups += [(gid, seq, waiting.take(np.array(w.rows))) for (gid, seq), w in unfinished.items()]
    for gid, seq, calls in sorted(groups, key=lambda g: (g[0], g[1])):
        evs = [made.call(calls, k) for k in np.argsort(calls.rank, kind="stable")]
        label, mismatch = _band_label(evs, schedule.groups[gid])
        band = Band(label, schedule.groups[gid], evs, mismatch=mismatch)
        bands.append(band)
        band_of[(gid, seq)] = band
    return bands, band_of, list(unfinished)


def _cycles(waits, loose: list[Event], band_of: dict, making: dict[int, Event]) -> list[list[WaitEdge]]:
    """Each deadlock cycle as wait-for edges between the stuck events, which turn red."""
    from commdsl.checker.waits import Making, Pending

    def event_of(rank: int, thing) -> Event:
        if isinstance(thing, Pending):
            return loose[thing.row]
        if isinstance(thing, Making):
            return making[rank]
        return next(ev for ev in band_of[(thing.gid, thing.seq)].calls if ev.rank == rank)

    cycles = []
    for cycle in waits.cycles:
        stuck = {e.rank: e for e in cycle}
        edges = []
        for e in cycle:
            src, dst = event_of(e.rank, e.thing), event_of(e.target, stuck[e.target].thing)
            src.status = dst.status = "cycle"
            edges.append(WaitEdge(src, dst, f"rank {e.rank} waits for rank {e.target}"))
        cycles.append(edges)
    return cycles


def _shown(made: _Events, lanes: list[Lane], column: list[int], loose: list[Event], bands: list[Band]):
    """What folded lanes show: messages that leave the lane (its end labelled with its rank), one call of
    each collective that reaches beyond the lane, no blocked ops. What they hide still orders what they show,
    so it is returned too: ((hidden sends, their receives), hidden collective calls as (band, rank, posted,
    done); a band wholly hidden is left with no calls)."""
    sends, recvs = made.outcome.matches
    folded = np.array([lanes[c].folded for c in column], dtype=bool)
    col = np.array(column, dtype=np.int64)
    apart = (col[sends.rank] != col[recvs.rank]) | ~folded[sends.rank]  # not two ranks of one folded lane
    messages = [Message(made.post(sends, k), made.post(recvs, k)) for k in np.flatnonzero(apart).tolist()]
    pairs = (made.hidden(sends, ~apart), made.hidden(recvs, ~apart))
    calls_hidden = []
    shown = []
    for b in bands:
        if len({column[ev.rank] for ev in b.calls}) == 1 and folded[b.calls[0].rank] and not b.missing:
            calls_hidden += [(b, ev.rank, ev.posted, ev.done) for ev in b.calls]
            b.calls = []
            continue
        shown.append(b)
        calls, seen = [], set()
        for ev in b.calls:
            if not folded[ev.rank] or column[ev.rank] not in seen:
                calls.append(ev)
                seen.add(column[ev.rank])
            else:
                calls_hidden.append((b, ev.rank, ev.posted, ev.done))
        b.calls = calls
    for ev in [ev for m in messages for ev in (m.send, m.recv)] + [ev for b in bands for ev in b.calls]:
        if folded[ev.rank] and ev.text:
            ev.text = f"rank {ev.rank} {ev.text}"
    return messages, shown, [ev for ev in loose if not folded[ev.rank]], (pairs, calls_hidden)


def _placed(schedule: Schedule, max_ranks: int | None, folds: list[Fold], messages, bands, loose, column, hidden):
    """The messages, bands and events left after `folds`, placed on rows."""
    gone = {id(ev) for f in folds for ev in f.events}
    messages = [m for m in messages if id(m.send) not in gone]
    bands = [b for b in bands if id(b.calls[0]) not in gone]
    events = [ev for m in messages for ev in (m.send, m.recv)] + loose + [ev for b in bands for ev in b.calls]
    if len(events) > MAX_EVENTS:
        raise DiagramTooLarge(
            f"world size {schedule.world} gives {len(events)} sends, receives and collective calls"
            + ("" if max_ranks is None else " after folding")
            + f"; a diagram stays readable up to about {MAX_EVENTS}"
        )
    pairs, calls = hidden
    _place(events, messages, bands, folds, column, pairs, tuple(h.folded(schedule, folds) for h in pairs), calls)
    return messages, bands, events


def _index_in(sequences: list[np.ndarray], ranks: np.ndarray, rids: np.ndarray) -> np.ndarray:
    """Each record id's index in its rank's sequence."""
    out = np.zeros(len(ranks), dtype=np.int64)
    order = np.argsort(ranks, kind="stable")
    bounds = np.flatnonzero(np.diff(ranks[order])) + 1
    for chunk in np.split(order, bounds) if len(order) else []:
        out[chunk] = np.searchsorted(sequences[int(ranks[chunk[0]])], rids[chunk])
    return out


def _finding_ranks(outcome, waits, loose: list[Event], bands: list[Band]) -> set[int]:
    """Ranks a finding involves, which folding must keep in view: both ends of a wait-for edge, of an
    unmatched op and of a mismatched message, members that never call, members that call a different variant
    of a collective (and one that calls the common one), ranks that issue a bad op."""
    world = outcome.schedule.world
    keep = {e.rank for c in waits.cycles for e in c} | {e.target for c in waits.cycles for e in c}
    for ev in loose:
        if ev.status == "unmatched":
            keep |= {ev.rank} | ({ev.op.peer} if 0 <= ev.op.peer < world else set())
    keep |= set(np.flatnonzero(outcome.mismatched_ranks).tolist())
    keep |= {member for _inst, member, _op, _reason in waits.missing}
    keep |= {rank for rank, *_ in outcome.bad}
    for b in bands:
        if b.mismatch:
            variants = sorted(_variants(b.calls).values(), key=len, reverse=True)
            keep |= {variants[0][0]} | {rank for ranks in variants[1:] for rank in ranks}
    return keep


def _fold_ranks(lanes: list[Lane], keep: set[int], max_ranks: int | None) -> tuple[list[Lane], list[int]]:
    """The lanes to draw and each rank's lane: the first and last few ranks and those in `keep` each get one,
    each run of two or more ranks between them shares a folded lane; as few of the first and last as fit
    `max_ranks` lanes, but at least one of each."""
    world = len(lanes)
    if max_ranks is None or world <= max_ranks:
        return lanes, list(range(world))
    head, tail = max_ranks - 1 - (max_ranks - 1) // 2, (max_ranks - 1) // 2
    while True:
        shown = set(range(head)) | set(range(world - tail, world)) | keep
        runs: list[tuple[int, int]] = []
        for r in range(world):
            if r in shown or not runs or runs[-1][0] in shown or runs[-1][1] != r - 1:
                runs.append((r, r))
            else:
                runs[-1] = (runs[-1][0], r)
        if len(runs) <= max_ranks:
            break
        if head >= tail and head > 1:
            head -= 1
        elif tail > 1:
            tail -= 1
        else:
            break
    out: list[Lane] = []
    column: list[int] = []
    for first, last in runs:
        if first == last:
            out.append(lanes[first])
        else:
            stuck = sum(lanes[r].stuck_line is not None for r in range(first, last + 1))
            out.append(Lane(first, None, last=last, stuck=stuck))
        column += [len(out) - 1] * (last - first + 1)
    return out, column


def _fold_iterations(
    program: Program, messages: list[Message], bands: list[Band], lanes: list[Lane], column: list[int]
) -> list[Fold]:
    """Runs of alike iterations of each loop, outermost loops first: a run of more than `KEEP_ITERATIONS` + 1
    keeps its first `KEEP_ITERATIONS` and folds the rest. Iterations are alike when their events, seen on the
    lanes, are the same (lane, kind, line, peer's lane); one whose message or collective reaches outside it,
    or that holds a finding, is like no other, so folding takes whole messages and collectives."""
    folder = _Iterations(_loops(program.body), messages, bands, lanes, column)
    folder.visit([ev for m in messages for ev in (m.send, m.recv)] + [ev for b in bands for ev in b.calls], 0)
    return folder.folds


class _Iterations:
    """The state of `_fold_iterations`: who each event talks to, and the folds found so far."""

    def __init__(
        self, loops: list[n.For | n.While], messages: list[Message], bands: list[Band], lanes: list[Lane], column
    ):
        self.loops, self.column = loops, column
        self.folded = [lane.folded for lane in lanes]
        self.partner = {id(m.send): m.recv for m in messages} | {id(m.recv): m.send for m in messages}
        self.band_of = {id(ev): b for b in bands for ev in b.calls}
        self.folds: list[Fold] = []

    def enclosing(self, ev: Event, depth: int) -> n.For:
        """The loop that binds `ev.op.bindings[depth]`."""
        loop = self.around(ev)[depth]
        assert isinstance(loop, n.For)  # `visit` takes only events whose loops to `depth` are `for` loops
        return loop

    def around(self, ev: Event) -> list[n.For | n.While]:
        """The loops around `ev`'s op, outermost first."""
        span = ev.op.span
        return [f for f in self.loops if f.span.start <= span.start and span.end <= f.span.end]

    def foldable(self, ev: Event, depth: int) -> bool:
        """Whether `ev` has an iteration of a `for` loop at `depth` under `for` loops only: a `while` binds as
        many values as its condition reads `let`s, so below one the bindings no longer line up with loops."""
        loops = self.around(ev)
        return len(ev.op.bindings) > depth < len(loops) and all(isinstance(f, n.For) for f in loops[: depth + 1])

    def signature(self, evs: list[Event], depth: int) -> tuple[tuple | None, list[Event]]:
        """What one iteration's events look like on the lanes (None if it is like no other), and the events
        outside the loop it takes along: the ends of its messages on folded lanes."""
        where, loop = evs[0].op.bindings[: depth + 1], self.enclosing(evs[0], depth)
        items, along = [], []
        for ev in evs:
            if ev.status != "ok":
                return None, []
            other = self.partner.get(id(ev))
            if other is not None:
                inside = loop.span.start <= other.op.span.start and other.op.span.end <= loop.span.end
                if inside and other.op.bindings[: depth + 1] != where:
                    return None, []
                if not inside:
                    if not self.folded[self.column[other.rank]] or other.status != "ok":
                        return None, []
                    along.append(other)
                    items.append((self.column[other.rank], type(other.op).__name__, other.op.span.line, "along"))
                items.append((self.column[ev.rank], type(ev.op).__name__, ev.op.span.line, self.column[other.rank]))
                continue
            b = self.band_of[id(ev)]
            if b.mismatch or b.missing or any(c.op.bindings[: depth + 1] != where for c in b.calls):
                return None, []
            items.append((self.column[ev.rank], ev.op.kind, ev.op.span.line, b.group.id))
        return tuple(sorted(items, key=repr)), along

    def visit(self, evs: list[Event], depth: int) -> None:
        """Fold the loops at nesting `depth` among `evs`, then look inside the iterations kept."""
        frames: dict[tuple, dict[int, list[Event]]] = {}
        for ev in evs:
            if self.foldable(ev, depth):
                key = (id(self.enclosing(ev, depth)), ev.op.bindings[:depth])
                frames.setdefault(key, {}).setdefault(ev.op.bindings[depth][1], []).append(ev)
        for its in frames.values():
            values = sorted(its)
            sigs, along = zip(*(self.signature(its[v], depth) for v in values), strict=True)
            i = 0
            while i < len(values):
                j = i + 1
                while sigs[i] is not None and j < len(values) and sigs[j] == sigs[i]:
                    j += 1
                for v in self.fold(values[i:j], [its[values[k]] + along[k] for k in range(i, j)], depth):
                    self.visit(its[v], depth + 1)
                i = j

    def fold(self, run: list[int], events: list[list[Event]], depth: int) -> list[int]:
        """Fold a run of alike iterations (`events`: each one's) if it is long enough; return those kept."""
        if len(run) <= KEEP_ITERATIONS + 1:
            return run
        gone = [ev for evs in events[KEEP_ITERATIONS:] for ev in evs]
        lanes = [self.column[ev.rank] for ev in gone]
        first = events[0][0]
        loop, prefix = self.enclosing(first, depth), first.op.bindings[:depth]
        self.folds.append(
            Fold(loop, prefix, run[KEEP_ITERATIONS:], run[:KEEP_ITERATIONS], gone, min(lanes), max(lanes))
        )
        return run[:KEEP_ITERATIONS]


def _loops(body) -> list[n.For | n.While]:
    """Every `for` and `while` statement in a body, outer before inner."""
    out: list[n.For | n.While] = []
    for s in body:
        if isinstance(s, (n.For, n.While)):
            out.append(s)
        for inner in (s.body,) if isinstance(s, (n.For, n.While, n.Batch)) else ():
            out += _loops(inner)
        if isinstance(s, n.On):
            for branch in s.branches:
                out += _loops(branch.body)
            out += _loops(s.orelse)
    return out


def _caption(lanes: list[Lane], hidden: int, hidden_bands: int, folds: list[Fold]) -> list[str]:
    """What folding left out, one line each; empty when nothing was."""
    out = []
    for lane in lanes:
        if lane.folded:
            out.append(f"ranks {lane.rank}–{lane.last} folded into one lane")
    if hidden:
        out.append(f"{hidden} message{'s' * (hidden != 1)} between ranks of one folded lane not drawn")
    if hidden_bands:
        s = "s" * (hidden_bands != 1)
        out.append(f"{hidden_bands} collective{s} among ranks of one folded lane not drawn")
    for line in sorted({f.line for f in folds}):
        mine = [f for f in folds if f.line == line]
        count = sum(len(f.values) for f in mine)
        iterations = f"{count} iteration{'s' * (count != 1)}"
        out.append(f"{iterations} of the loop at line {line} folded, each like the ones kept before it")
    if out:
        out.append("(`commdsl graph --no-fold` draws every rank and iteration)")
    return out


def _mark_unmatched(schedule: Schedule, waits, unmatched: list[Event]) -> None:
    """Unmatched sends and receives (`unmatched[row]`) say why; the rest of them are blocked on their peer."""
    for row, reason in waits.unmatched:
        ev = unmatched[row]
        want = "recv" if isinstance(ev.op, Send) else "send"
        ev.status = "unmatched"
        who = _peer_text(ev.op.peer)
        ev.note = (
            f"unmatched: {who} finishes without a matching `{want}`"
            if reason == "finished" and ev.op.peer != ANY_SOURCE
            else f"unmatched: every other rank finishes without a matching `{want}`"
            if reason == "finished"
            else f"unmatched: {who} never posts a matching `{want}`"
        )
    for row, near, peer in waits.tag_mismatches:
        ev = unmatched[row]
        other = schedule.op_at(schedule.records[near[0]], near[1])
        ev.status = "unmatched"
        ev.note = f"unmatched: tag {ev.op.tag} here, tag {other.tag} on rank {peer} (line {other.span.line})"
    for ev in unmatched:
        if ev.status == "ok":
            ev.status, ev.note = "blocked", f"waits for {_peer_text(ev.op.peer)}"


def _mark_missing(waits, band_of: dict, unfinished: list[tuple[int, int]]) -> None:
    """Each unfinished collective names the members it waits for, and its callers are blocked."""
    for inst, member, _op, reason in waits.missing:
        band = band_of[(inst.gid, inst.seq)]
        if any(m == member for m, _ in band.missing):
            continue
        band.missing.append(
            (member, f"rank {member} {'finishes without calling it' if reason == 'finished' else 'never calls it'}")
        )
    for key in unfinished:
        band = band_of[key]
        named = {m for m, _ in band.missing}
        called = {ev.rank for ev in band.calls}
        band.missing += [(m, f"waits for rank {m}") for m in band.group.ranks if m not in called and m not in named]
        for ev in band.calls:
            if ev.status == "ok":
                ev.status = "blocked"


def _lanes(schedule: Schedule, outcome) -> list[Lane]:
    """One lane per rank: finished, or the line it stopped at and how many of its ops never ran."""
    lanes = []
    for rank in range(schedule.world):
        if outcome.finished[rank]:
            lanes.append(Lane(rank, None))
        else:
            rid, _ = outcome.head(rank)
            lanes.append(
                Lane(rank, schedule.records[rid].span.line, len(schedule.ops[rank]) - int(outcome.pc[rank]) - 1)
            )
    return lanes


def _unfinished(waiting):
    from commdsl.checker.waits import _instances

    return list(_instances(waiting).values())


def _place(
    events: list[Event],
    messages: list[Message],
    bands: list[Band],
    folds: list[Fold],
    column: list[int],
    hidden_pairs: tuple[Hidden, Hidden],
    hidden_folds: tuple[np.ndarray, np.ndarray],
    hidden_calls: list[tuple[Band, int, int, float]],
) -> None:
    """Rows by longest path over the causal order (Kahn): program order, send before receive, calls of a
    collective together. Program order is kept only where it is real: an op posted after another has
    completed (so the two sides of a `batch`, or an `isend` and what follows it before its `wait`, may
    share a row). Messages and calls a folded lane hides (`hidden_*`) are nodes too, so what it shows keeps
    its order. A fold stands, on each rank it holds events of (hidden ones included), where those events
    were: one node after what came before them and before what comes after. The zero-buffering run happened
    in one such order, so without folds the graph has no cycle; a fold that makes one raises `_Cycle`."""
    node = {id(ev): i for i, ev in enumerate(events)}
    for b in bands:  # calls of one collective share one node
        for ev in b.calls[1:]:
            node[id(ev)] = node[id(b.calls[0])]
    items: dict[int, list[tuple[int, float, int]]] = {}  # per rank: (posted, done, node)
    for ev in events:
        items.setdefault(ev.rank, []).append((ev.posted, ev.done, node[id(ev)]))
    count = len(events) + len(folds)
    alone: dict[int, int] = {}  # a band wholly hidden: its own node
    for b, rank, p, d in hidden_calls:
        if not b.calls:
            if id(b) not in alone:
                alone[id(b)], count = count, count + 1
            items.setdefault(rank, []).append((p, d, alone[id(b)]))
        elif id(b.calls[0]) in node:
            items.setdefault(rank, []).append((p, d, node[id(b.calls[0])]))
    for k, span in enumerate(_fold_spans(folds, hidden_pairs, hidden_folds, hidden_calls)):
        for rank, (p, d) in span.items():
            items.setdefault(rank, []).append((p, d, len(events) + k))
    edges: list[tuple[int, int, int]] = [(node[id(m.send)], node[id(m.recv)], 1) for m in messages]
    (sends, recvs), (sf, rf) = hidden_pairs, hidden_folds
    for k in np.flatnonzero((sf < 0) | (rf < 0)).tolist():  # hidden ops outside folds are nodes of their own
        ends = []
        for h, fold in ((sends, sf), (recvs, rf)):
            if fold[k] >= 0:
                ends.append(len(events) + int(fold[k]))
            else:
                items.setdefault(int(h.rank[k]), []).append((int(h.posted[k]), float(h.done[k]), count))
                ends.append(count)
                count += 1
        if ends[0] != ends[1]:
            edges.append((ends[0], ends[1], 1))
    base: dict[int, int] = {}
    for mine in items.values():
        count = _program_order(mine, count, base, edges)
    row = _longest_paths(count, base, edges)
    _split_rows(events, bands, folds, node, row, column, len(events))


def _fold_spans(
    folds: list[Fold],
    hidden_pairs: tuple[Hidden, Hidden],
    hidden_folds: tuple[np.ndarray, np.ndarray],
    hidden_calls: list[tuple[Band, int, int, float]],
) -> list[dict[int, tuple[int, float]]]:
    """Per fold, per rank: (first posting, last completion) of its events there, hidden ones included."""
    spans: list[dict[int, tuple[int, float]]] = [{} for _ in folds]
    fold_of = {id(ev): k for k, f in enumerate(folds) for ev in f.events}

    def widen(k: int, rank: int, p: int, d: float) -> None:
        q, e = spans[k].get(rank, (p, d))
        spans[k][rank] = (min(p, q), max(d, e))

    for k, f in enumerate(folds):
        for ev in f.events:
            widen(k, ev.rank, ev.posted, ev.done)
    for b, rank, p, d in hidden_calls:
        if b.calls and id(b.calls[0]) in fold_of:
            widen(fold_of[id(b.calls[0])], rank, p, d)
    for h, fold in zip(hidden_pairs, hidden_folds, strict=True):
        for k in distinct(fold[fold >= 0]).tolist():
            m = fold == k
            ranks, at = np.unique(h.rank[m], return_inverse=True)
            first, last = np.full(len(ranks), np.iinfo(np.int64).max), np.full(len(ranks), -1.0)
            np.minimum.at(first, at, h.posted[m])
            np.maximum.at(last, at, h.done[m])
            for rank, p, d in zip(ranks.tolist(), first.tolist(), last.tolist(), strict=True):
                widen(k, rank, p, d)
    return spans


def _program_order(mine: list[tuple[int, float, int]], count: int, base: dict, edges: list) -> int:
    """Edges of one rank's real program order (`mine`: its items as (posted, done, node)), through one
    checkpoint node per posting index (every item of the rank completed before that index); returns the
    node count with the checkpoints added."""
    posts = sorted({p for p, _, _ in mine})
    by_done = sorted((it for it in mine if it[1] != NEVER), key=lambda it: it[1])
    at: dict[int, list[int]] = {}
    for p, _, v in mine:
        at.setdefault(p, []).append(v)
    k, prev = 0, None
    for p in posts:
        cp = count
        count += 1
        base[cp] = -1
        if prev is not None:
            edges.append((prev, cp, 0))
        while k < len(by_done) and by_done[k][1] < p:
            edges.append((by_done[k][2], cp, 0))
            k += 1
        for v in at[p]:
            edges.append((cp, v, 1))
        prev = cp
    return count


def _longest_paths(count: int, base: dict, edges: list[tuple[int, int, int]]) -> list[int]:
    """Each node's row: the longest weighted path to it (Kahn's order over the acyclic graph)."""
    row = [base.get(i, 0) for i in range(count)]
    out: list[list[tuple[int, int]]] = [[] for _ in range(count)]
    indegree = [0] * count
    for u, v, w in edges:
        out[u].append((v, w))
        indegree[v] += 1
    ready = [i for i in range(count) if indegree[i] == 0]
    seen = 0
    while ready:
        u = ready.pop()
        seen += 1
        for v, w in out[u]:
            row[v] = max(row[v], row[u] + w)
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    if seen != count:  # the engine ran these events in some order, so this cannot happen
        raise _Cycle("internal error: the causal order of the schedule has a cycle")
    return row


def _split_rows(
    events: list[Event],
    bands: list[Band],
    folds: list[Fold],
    node: dict,
    row: list[int],
    column: list[int],
    first_fold: int,
) -> None:
    """Set each event's and fold's row. Items on one row are causally unordered, so a row whose items would
    overlap on the lanes (two ops of one rank in a `batch`, two collectives over the same ranks, ranks of one
    folded lane) is split into sub-rows."""
    items: dict[int, list[tuple[int, int, list]]] = {}
    in_band = {id(ev) for b in bands for ev in b.calls}
    for b in bands:
        lanes = [column[ev.rank] for ev in b.calls] + [column[m] for m, _ in b.missing]
        items.setdefault(row[node[id(b.calls[0])]], []).append((min(lanes), max(lanes), b.calls))
    for ev in events:
        if id(ev) not in in_band:
            items.setdefault(row[node[id(ev)]], []).append((column[ev.rank], column[ev.rank], [ev]))
    for k, f in enumerate(folds):
        items.setdefault(row[first_fold + k], []).append((f.lo, f.hi, [f]))
    next_row = 0
    for r in sorted(items):
        subrows: list[list[tuple[int, int]]] = []
        # widest first, but a fold below what shares its row: it stands for what comes after
        for lo, hi, things in sorted(items[r], key=lambda it: (type(it[2][0]) is Fold, it[0] - it[1], it[0])):
            k = next(k for k, taken in enumerate(subrows + [[]]) if all(hi < a or b < lo for a, b in taken))
            if k == len(subrows):
                subrows.append([])
            subrows[k].append((lo, hi))
            for thing in things:
                thing.row = next_row + k
        next_row += len(subrows)


def _gutter(program: Program, events: list[Event], folds: list[Fold]) -> list[list[tuple[int | None, str]]]:
    """Per row, the source lines its events come from (line, text), with loop bindings when they agree; on
    a fold's row, the iterations it folds."""
    rows = max([ev.row for ev in events] + [f.row for f in folds], default=-1) + 1
    lines: list[dict[int, set]] = [{} for _ in range(rows)]
    for ev in events:
        lines[ev.row].setdefault(ev.op.span.line, set()).add(ev.op.bindings)
    out = []
    for at in lines:
        texts = []
        for line, bindings in sorted(at.items()):
            where = " " + _bindings(next(iter(bindings))) if len(bindings) == 1 and bindings != {()} else ""
            code = program.source.line_text(line).split("#")[0].strip()
            room = GUTTER_CHARS - 5 - len(where)
            code = code if len(code) <= room else code[: room - 1] + "…"
            texts.append((line, f"{line:>3}  {code}{where}"))
        out.append(texts if len(texts) <= 3 else texts[:2] + [(None, f"     … and {len(texts) - 2} more lines")])
    for f in folds:
        out[f.row].append((f.line, f"{f.line:>3}  … {f.which} folded"))
    return out


def _bindings(b: tuple[tuple[str, int], ...]) -> str:
    return " · " + ", ".join(f"{k}={v}" for k, v in b) if b else ""


def _size(views: tuple[View, ...], dtype: str) -> str:
    numel = sum(v.numel for v in views)
    return f"{numel} × {dtype} = {_bytes(numel * DTYPES[dtype].itemsize)}"


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def _view(schedule: Schedule, rank: int, v: View) -> str:
    """A view as the language writes it: the whole tensor, rows `x[a:b]`, or a flat element range."""
    spec = schedule.tensors[rank][v.tensor]
    if v.offset == 0 and v.numel == spec.numel:
        return v.tensor
    row = math.prod(spec.shape[1:]) if spec.shape else 1
    if row and v.offset % row == 0 and v.numel % row == 0:
        return f"{v.tensor}[{v.offset // row}:{(v.offset + v.numel) // row}]"
    return f"{v.tensor} (elements {v.offset}:{v.offset + v.numel})"


def _p2p_text(op: Send | Recv, view: str) -> str:
    arrow = "→" if type(op) is Send else "←"
    extra = (f" tag {op.tag}" if op.tag else "") + (f" in {op.group.name}" if op.group and op.group.id else "")
    size = f" ({_bytes(op.view.numel * DTYPES[op.dtype].itemsize)})" if type(op) is Send else ""
    return f"{arrow} {'any' if op.peer == ANY_SOURCE else op.peer}: {view}{size}{extra}"


def _peer_text(peer: int) -> str:
    return "any rank" if peer == ANY_SOURCE else f"rank {peer}"


def _variants(calls: list[Event]) -> dict[tuple, list[int]]:
    """What each member calls (kind, root, reduce op, dtype, async) → the ranks that call it."""
    variants: dict[tuple, list[int]] = {}
    for ev in calls:
        op = ev.op
        parts = [op.kind]
        if op.root is not None:
            parts.append(f"root {op.root}")
        if op.redop is not None:
            parts.append(op.redop + (f"({op.scale:g})" if op.scale is not None else ""))
        if op.kind != "barrier":
            parts.append(op.dtype)
        if not op.blocking:
            parts.append("async")
        variants.setdefault(tuple(parts), []).append(ev.rank)
    return variants


def _ranks(ranks) -> str:
    """A group's ranks, the middle elided when there are many (a wide world's groups are)."""
    ranks = list(ranks)
    if len(ranks) <= MAX_RANKS:
        return str(ranks)
    return f"[{', '.join(map(str, ranks[:3]))}, …, {ranks[-1]}] ({len(ranks)} ranks)"


def _band_label(calls: list[Event], g: Group) -> tuple[str, bool]:
    """kind · root · reduce op · size · group; when members disagree on what they call, one line per variant
    (second value True)."""
    variants = _variants(calls)
    biggest = max((ev.op for ev in calls), key=lambda op: sum(v.numel for v in op.inputs))
    group = f" · in {g.name} {_ranks(g.ranks)}" if g.id else ""
    if len(variants) == 1:
        parts = [p for p in next(iter(variants)) if p != biggest.dtype]
        size = [_size(biggest.inputs, biggest.dtype)] if biggest.inputs else []
        return " · ".join(parts + size) + group, False
    lines = [
        (f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}") + ": " + " · ".join(parts)
        for parts, ranks in variants.items()
    ]
    return "\n".join(lines) + group, True


# ---- Mermaid --------------------------------------------------------------------------------------


_MERMAID_ESCAPES = str.maketrans({"#": "#35;", ";": "#59;", "<": "#lt;", ">": "#gt;", "\n": " "})


def _mm(text: str) -> str:
    """Mermaid message text: `#` and `;` start entity codes and statements, `<`/`>` would be HTML."""
    return text.translate(_MERMAID_ESCAPES)


def to_mermaid(d: Diagram) -> str:
    """A `sequenceDiagram`: paste it into a ```mermaid block on GitHub. Mermaid draws one message per
    line, so rows become an order; the deadlock cycle sits in a red `rect`."""

    def who(rank: int) -> str:  # the participant a rank is drawn in
        return f"r{d.lane_of(rank).rank}" if 0 <= rank < d.world else f"r{rank}"

    def whose(ev: Event) -> str:  # on a folded lane, which rank
        return f"rank {ev.rank} " if d.lane_of(ev.rank).folded else ""

    out = ["sequenceDiagram", f"    title {_mm(d.title)}"]
    out += [f"    participant r{lane.rank} as {_mm(lane.label)}" for lane in d.lanes]
    ends = f"r{d.lanes[0].rank}" + (f",r{d.lanes[-1].rank}" if len(d.lanes) > 1 else "")
    out += [f"    Note over {ends}: {_mm(line)}" for line in d.caption]
    items: list[tuple[tuple, str]] = []
    for m in d.messages:
        s, r = m.send, m.recv
        lines = f"line {s.op.span.line}" + (f"→{r.op.span.line}" if r.op.span.line != s.op.span.line else "")
        size = _bytes(s.op.view.numel * DTYPES[s.op.dtype].itemsize)
        text = f"{whose(s)}{s.view} → {whose(r)}{r.view} ({size}) · {lines}{_bindings(s.op.bindings)}"
        items.append(
            ((s.row, 0, d.column[s.rank], d.column[r.rank]), f"    {who(s.rank)}->>{who(r.rank)}: {_mm(text)}")
        )
    for ev in d.events:
        if type(ev.op) not in (Send, Recv) or ev.status not in ("unmatched", "blocked"):
            continue
        peer = ev.rank if ev.op.peer == ANY_SOURCE else ev.op.peer  # from any: drawn on the receiver's lane
        src, dst = (ev.rank, peer) if type(ev.op) is Send else (peer, ev.rank)
        kind = "send" if type(ev.op) is Send else "recv"
        text = f"{kind} {ev.view} · line {ev.op.span.line} — {ev.note}"
        items.append(((ev.row, 1, d.column[ev.rank], 0), f"    {who(src)}-x{who(dst)}: {_mm(text)}"))
    for f in d.folds:
        lo, hi = d.lanes[f.lo].rank, d.lanes[f.hi].rank
        items.append(((f.row, 2, f.lo, 0), f"    Note over r{lo}{f',r{hi}' if hi != lo else ''}: {_mm(f.label)}"))
    for b in d.bands:
        lanes = [d.column[ev.rank] for ev in b.calls] + [d.column[m] for m, _ in b.missing]
        lo, hi = d.lanes[min(lanes)].rank, d.lanes[max(lanes)].rank
        over = f"r{lo}" if lo == hi else f"r{lo},r{hi}"
        label = ("mismatch: " if b.mismatch else "") + b.label.replace("\n", " / ")
        missing = "" if b.complete else " — " + ", ".join(t for _, t in b.missing)
        text = f"{label} · line {b.calls[0].op.span.line}{missing}"
        items.append(((b.row, 2, min(lanes), 0), f"    Note over {over}: {_mm(text)}"))
    out += [text for _key, text in sorted(items, key=lambda kv: kv[0])]
    for cycle in d.cycles:
        ranks = sorted({d.lane_of(e.src.rank).rank for e in cycle})
        lines = {e.src.op.span.line for e in cycle}
        head = next((f for f in d.findings if f.code[0] in "DC" and f.line in lines), None)
        what = f"{head.code}: {head.message}" if head else "deadlock cycle"
        out.append("    rect rgb(255, 214, 214)")
        out.append(f"    Note over r{ranks[0]},r{ranks[-1]}: {_mm(what)}")
        for e in cycle:
            out.append(f"    {who(e.src.rank)}--){who(e.dst.rank)}: {_mm(f'line {e.src.op.span.line}: {e.text}')}")
        out.append("    end")
    for lane in d.lanes:
        if lane.stuck_line is not None:
            out.append(f"    Note over r{lane.rank}: {_mm(_stuck(lane))}")
    return "\n".join(out) + "\n"


def _stuck(lane: Lane, wrap: bool = False) -> str:
    more = f"{lane.not_reached} op{'s' * (lane.not_reached != 1)} not reached" if lane.not_reached else ""
    return f"stuck at line {lane.stuck_line}" + (("\n" if wrap else ", ") + more if more else "")


# ---- Graphviz DOT ---------------------------------------------------------------------------------

COL_W, ROW_H, GUTTER_W, GUTTER_CHARS, FOLD_H = 200, 40, 360, 56, 22
RED, GREY, BLUE, ORANGE = "#c0392b", "#8a8a8a", "#3b6fb6", "#d35400"
_FILL = {"ok": "black", "cycle": RED, "unmatched": "white", "blocked": ORANGE}
_LINE = {"ok": "black", "cycle": RED, "unmatched": RED, "blocked": ORANGE}


def _q(text: str) -> str:
    """A DOT string; a newline in `text` becomes a centred line break."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _left(lines: list[str]) -> str:
    r"""A left-justified multi-line DOT string: every line ends in `\l`."""
    return '"' + "".join(t.replace("\\", "\\\\").replace('"', '\\"') + "\\l" for t in lines) + '"'


def _html(lines: list[tuple[str, str]], width: float) -> str:
    """An HTML-like label of (text, colour) lines, flush left in a cell `width` points wide."""
    body = "<br/>".join(f'<font color="{c}">{html.escape(t)}</font>' for t, c in lines)
    return (
        f'<<table border="0" cellborder="0" cellpadding="0" cellspacing="0"><tr>'
        f'<td width="{width:.0f}" align="left" balign="left">{body}</td></tr></table>>'
    )


class _Layout:
    """Coordinates in points, y up (Graphviz's convention): rows go down from the rank boxes, each as tall
    as its labels and bands need, so nothing on one row runs into the next."""

    def __init__(self, d: Diagram):
        self.gutter = GUTTER_W if any(d.gutter) else 40
        self.x = [self.gutter + c * COL_W for c in d.column]  # per rank: its lane's
        self.band_height = {id(ev): _band_height(b) for b in d.bands for ev in b.calls}
        shown = [{line for line, _ in entries} for entries in d.gutter]
        self.labels = {id(ev): _label_lines(ev, shown[ev.row]) for ev in d.events if type(ev.op) is not Collective}
        above, below = [6.0] * d.rows, [6.0] * d.rows
        for row, entries in enumerate(d.gutter):
            above[row] = below[row] = max(6.0, 6 * len(entries))
        for b in d.bands:
            above[b.row] = max(above[b.row], _band_height(b) / 2)
            below[b.row] = max(below[b.row], _band_height(b) / 2)
        for f in d.folds:
            above[f.row] = max(above[f.row], FOLD_H / 2)
            below[f.row] = max(below[f.row], FOLD_H / 2)
        for ev in d.events:
            if id(ev) in self.labels:
                need = 5 + 13 * len(self.labels[id(ev)])
                side = above if type(ev.op) is Send else below
                side[ev.row] = max(side[ev.row], need)
        self.rows, y = [], -15.0  # the lower edge of the rank boxes
        for row in range(d.rows):
            y -= max(ROW_H, above[row] + below[row - 1] + 8) if row else max(ROW_H * 0.75, above[0] + 18)
            self.rows.append(y)
        end = (self.rows[-1] - below[-1] - 30) if d.rows else -15.0 - ROW_H
        lowest = min((self.at(ev)[1] for ev in d.events if ev.status == "cycle"), default=0.0)
        depth = max((len(c) for c in d.cycles), default=0)
        self.level = lowest - 26  # the first wait-for edge runs this far below the lowest stuck op
        self.bottom = min(end, self.level - 22 * depth - 14) if d.cycles else end

    def y(self, row: int) -> float:
        return self.rows[row]

    def at(self, ev: Event) -> tuple[float, float]:
        """Where an event's dot sits; a collective call on the lower edge of its band."""
        dy = self.band_height[id(ev)] / 2 - 2 if id(ev) in self.band_height else 0
        return self.x[ev.rank], self.y(ev.row) - dy


def _label_lines(ev: Event, shown: set) -> list[tuple[str, str]]:
    """A send's or receive's label: what moves (and its line, unless the row's gutter shows it), then
    why it is not matched, wrapped to fit a column."""
    text = ev.text if ev.op.span.line in shown else f"{ev.text} · line {ev.op.span.line}"
    return [(text, "black")] + [(t, _LINE[ev.status]) for t in textwrap.wrap(ev.note, 38)]


def _band_height(b: Band) -> float:
    return 18 + 12 * (b.label.count("\n") + 1 + (not b.complete))


def _dot_event(d: Diagram, lay: _Layout, ev: Event, i: str) -> list[str]:
    """The DOT lines of one event: its dot, its text (sends above, receives below) and, for an op that never
    completes, a dashed stub towards the peer that never answers."""
    x, (ex, ey) = lay.x, lay.at(ev)
    fill, color = _FILL[ev.status], _LINE[ev.status]
    shape = 'circle, width=0.12, fixedsize=true, label=""' if ev.status == "unmatched" else "point"
    out = [f'  {i} [shape={shape}, style=filled, fillcolor="{fill}", color="{color}", penwidth=1.5, pos="{ex},{ey}!"];']
    if type(ev.op) is Collective:
        return out
    lines = lay.labels[id(ev)]
    height, w = 13 * len(lines), COL_W - 22
    ly = ey + 3 + height / 2 if type(ev.op) is Send else ey - 3 - height / 2
    out.append(
        f"  t{i} [shape=plaintext, fixedsize=true, width={w / 72:.2f}, height={height / 72:.2f}, "
        f'fontsize=9, label={_html(lines, w)}, pos="{ex + 7 + w / 2},{ly}!"];'
    )
    if ev.status in ("unmatched", "blocked") and type(ev.op) is not NewGroup:
        peer = ev.op.peer if 0 <= ev.op.peer < d.world and d.column[ev.op.peer] != d.column[ev.rank] else ev.rank
        stub = ex + (0.45 if x[peer] >= ex else -0.45) * COL_W
        dash = f'style=dashed, color="{color}", arrowsize=0.6'
        out.append(f'  s{i} [shape=point, width=0.01, color="{color}", pos="{stub},{ey}!"];')
        out.append(f"  {i} -> s{i} [{dash}, arrowhead=tee];" if type(ev.op) is Send else f"  s{i} -> {i} [{dash}];")
    return out


def _heading(d: Diagram) -> str:
    """The graph's label: its title, then what folding left out in smaller type."""
    if not d.caption:
        return _q(d.title)
    lines = "<br/>".join(html.escape(t) for t in d.caption)
    return f'<{html.escape(d.title)}<br/><font point-size="11" color="{GREY}">{lines}</font>>'


def to_dot(d: Diagram) -> str:
    """Graphviz DOT with every node pinned; `dot -Tsvg` renders it as is (the graph selects neato itself)."""
    lay = _Layout(d)
    x, gx = lay.x, lay.gutter / 2 - 20
    out = [
        f"digraph {_q(d.title)} {{",
        "  layout=neato; inputscale=72; overlap=true; splines=line; outputorder=edgesfirst;",
        f'  pad=0.3; bgcolor=white; labelloc=t; fontname="Helvetica"; fontsize=16; label={_heading(d)};',
        '  node [fontname="Helvetica", fontsize=10, shape=point, width=0.09, color=black];',
        '  edge [fontname="Helvetica", fontsize=9, arrowsize=0.7];',
    ]
    if any(d.gutter):
        out.append(f'  src [shape=plaintext, label="source line", fontcolor="{GREY}", pos="{gx},0!"];')
    for lane in d.lanes:
        r, color = lane.rank, RED if lane.stuck_line is not None else "black"
        label, box = lane.label.replace(" (", "\n("), "style=dashed, height=0.5" if lane.folded else "height=0.4"
        for node, y in (("h", 0), ("f", lay.bottom)):
            out.append(
                f'  {node}{r} [shape=box, width=1.1, {box}, label={_q(label)}, color="{color}", pos="{x[r]},{y}!"];'
            )
        line = "style=dotted, " if lane.folded else ""
        out.append(f'  h{r} -> f{r} [{line}arrowhead=none, color="{GREY}"];')
        if lane.stuck_line is not None:
            out.append(
                f'  stuck{r} [shape=plaintext, fontsize=9, fontcolor="{RED}", label={_q(_stuck(lane, True))}, '
                f'pos="{x[r]},{lay.bottom - 32}!"];'
            )
    for row, entries in enumerate(d.gutter):
        if entries:
            out.append(
                f"  g{row} [shape=plaintext, fixedsize=true, width={(lay.gutter - 40) / 72:.2f}, "
                f'height={0.17 * len(entries):.2f}, fontname="Courier", fontsize=9, '
                f'label={_left([t for _, t in entries])}, pos="{gx},{lay.y(row)}!"];'
            )
    ids = {id(ev): f"e{i}" for i, ev in enumerate(d.events)}
    for k, b in enumerate(d.bands):
        xs = [x[ev.rank] for ev in b.calls] + [x[m] for m, _ in b.missing]
        lo, hi = min(xs), max(xs)
        label = b.label if b.complete else b.label + "\n" + "; ".join(t for _, t in b.missing)
        width = max(hi - lo + 90, 6.2 * max(len(t) for t in label.split("\n")) + 24)
        style = "rounded,filled" if b.complete else "rounded,filled,dashed"
        color = BLUE if b.complete and not b.mismatch else RED
        out.append(
            f'  band{k} [shape=box, style="{style}", fillcolor="#dce9f9e6", color="{color}", fixedsize=true, '
            f"width={width / 72:.2f}, height={_band_height(b) / 72:.2f}, label={_q(label)}, "
            f'pos="{(lo + hi) / 2},{lay.y(b.row)}!"];'
        )
    for k, f in enumerate(d.folds):
        lo, hi = x[d.lanes[f.lo].rank], x[d.lanes[f.hi].rank]
        width = max(hi - lo + 90, 6.2 * len(f.label) + 24)
        out.append(
            f'  fold{k} [shape=box, style="rounded,dashed", color="{GREY}", fontcolor="{GREY}", fixedsize=true, '
            f"width={width / 72:.2f}, height={FOLD_H / 72:.2f}, label={_q(f.label)}, "
            f'pos="{(lo + hi) / 2},{lay.y(f.row)}!"];'
        )
    for ev in d.events:
        out += _dot_event(d, lay, ev, ids[id(ev)])
    for m in d.messages:
        out.append(f"  {ids[id(m.send)]} -> {ids[id(m.recv)]};")
    level = lay.level
    for c, cycle in enumerate(d.cycles):  # each wait-for edge as a bracket below the stuck row, nested
        for k, e in enumerate(cycle):
            x1, x2 = lay.at(e.src)[0], lay.at(e.dst)[0]
            side = 4 if x2 > x1 else -4
            a, b = f"w{c}_{k}a", f"w{c}_{k}b"
            out.append(f'  {a} [shape=point, width=0.01, color="{RED}", pos="{x1 + side},{level}!"];')
            out.append(f'  {b} [shape=point, width=0.01, color="{RED}", pos="{x2 - side},{level}!"];')
            out.append(
                f'  {a}t [shape=plaintext, fontsize=9, fontcolor="{RED}", label={_q(e.text)}, '
                f'pos="{(x1 + x2) / 2},{level + 7}!"];'
            )
            red = f'color="{RED}", penwidth=2'
            out.append(f"  {ids[id(e.src)]} -> {a} [{red}, arrowhead=none, tailclip=false];")
            out.append(f"  {a} -> {b} [{red}, arrowhead=none];")
            out.append(f"  {b} -> {ids[id(e.dst)]} [{red}];")
            level -= 22
    if d.findings:
        lines = [
            (
                f"{f.severity}[{f.code}]" + (f" line {f.line}" if f.line else "") + f": {f.message}",
                RED if f.severity == "error" else ORANGE,
            )
            for f in d.findings[:8]
        ]
        if len(d.findings) > 8:
            lines.append((f"… and {len(d.findings) - 8} more: run `commdsl check`", "black"))
        width = max(x[-1] + COL_W / 2 - gx, 6.5 * max(len(t) for t, _ in lines))
        top = lay.bottom - (56 if any(lane.stuck_line is not None for lane in d.lanes) else 36)
        out.append(
            f"  findings [shape=plaintext, fixedsize=true, width={width / 72:.2f}, "
            f"height={0.2 * len(lines):.2f}, fontsize=10, label={_html(lines, width)}, "
            f'pos="{gx - 20 + width / 2},{top - 7 * len(lines)}!"];'
        )
    out.append("}")
    return "\n".join(out) + "\n"


def render(dot: str, fmt: str) -> bytes:
    """DOT text → SVG or PNG bytes through Graphviz."""
    try:
        import graphviz
    except ImportError:
        raise GraphvizMissing("the Python package `graphviz` is not installed (pip install 'graphviz>=0.20')") from None
    try:
        return graphviz.Source(dot).pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise GraphvizMissing(
            "Graphviz's `dot` program was not found on PATH (Debian/Ubuntu: apt-get install "
            "graphviz; macOS: brew install graphviz; conda: conda install graphviz)"
        ) from None
    except graphviz.CalledProcessError as e:
        detail = (e.stderr or b"").decode(errors="replace").strip()
        raise RenderError(f"Graphviz failed: {detail or e}") from None


def _image_lanes(ax, d: Diagram, x, bottom: float, top: float, row_h: float) -> None:
    """Each lane of `diagram_image`: its name, its lifeline, where its rank got stuck."""
    for lane in d.lanes:
        label = lane.label.replace(" (", "\n(")
        ax.text(x(lane.rank), top, label, ha="center", fontsize=10 - 2 * lane.folded, weight="bold")
        style = ":" if lane.folded else "--"
        ax.plot([x(lane.rank)] * 2, [bottom + row_h * 0.3, top - 0.2], color="#9e9e9e", lw=0.8, ls=style, zorder=0)
        if lane.stuck_line is not None:
            ax.text(x(lane.rank), bottom, _stuck(lane), ha="center", va="top", fontsize=7.5, color="#d62728")


def diagram_image(d: Diagram, fmt: str) -> bytes:
    """The diagram as SVG or PNG drawn with matplotlib, for machines without Graphviz's `dot` program: the
    same rows (the causal order `_place` computed), one lifeline per rank, arrows for messages, a bar across
    the members of each collective, a deadlock's cycle in red, and where each stuck rank stopped."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch

    red, grey, ink = "#d62728", "#9e9e9e", "#222222"
    lane_w, row_h = 2.4, 0.55
    gutter = 3.6 if any(g for g in d.gutter) else 0.3
    rows, top = max(d.rows, 1), 0.2 * len(d.caption)  # the caption says what folding left out
    width, height = gutter + lane_w * len(d.lanes) + 0.6, 1.6 + top + row_h * (rows + 2)
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")

    def x(rank: int) -> float:
        return gutter + lane_w * (d.column[rank] + 0.5)

    def y(row: int) -> float:
        return height - 1.3 - top - row_h * (row + 0.5)

    ax.text(0.15, height - 0.35, d.title, fontsize=11, weight="bold", va="center")
    for k, line in enumerate(d.caption):
        ax.text(0.15, height - 0.62 - 0.2 * k, line, fontsize=8, color="#555555", va="center")
    _image_lanes(ax, d, x, y(rows), height - 0.85 - top, row_h)
    for row, entries in enumerate(d.gutter):
        if entries:
            ax.text(0.15, y(row), entries[0][1][:52], fontsize=7, family="monospace", va="center", color="#555555")
    for f in d.folds:
        lo, hi = x(d.lanes[f.lo].rank) - lane_w * 0.42, x(d.lanes[f.hi].rank) + lane_w * 0.42
        box = FancyBboxPatch(
            (lo, y(f.row) - row_h * 0.3), hi - lo, row_h * 0.6, boxstyle="round,pad=0.02", fc="white", ec=grey, ls="--"
        )
        ax.add_patch(box)
        ax.text((lo + hi) / 2, y(f.row), f.label, ha="center", va="center", fontsize=7.5, color="#555555")
    for b in d.bands:
        ranks = [ev.rank for ev in b.calls]
        lo, hi = min(ranks), max(ranks)
        box = FancyBboxPatch(
            (x(lo) - lane_w * 0.42, y(b.row) - row_h * 0.3),
            x(hi) - x(lo) + lane_w * 0.84,
            row_h * 0.6,
            boxstyle="round,pad=0.02",
            facecolor="#e8f0fb",
            edgecolor=red if b.mismatch or b.missing else "#4e79a7",
            lw=1.4 if b.mismatch or b.missing else 0.8,
            zorder=2,
        )
        ax.add_patch(box)
        ax.text((x(lo) + x(hi)) / 2, y(b.row), b.label[:60], ha="center", va="center", fontsize=7.5, zorder=3)
    in_band = {id(ev) for b in d.bands for ev in b.calls}
    for ev in d.events:
        if id(ev) in in_band:
            continue
        colour = red if ev.status in ("cycle", "blocked") else "#ff7f0e" if ev.status == "unmatched" else ink
        ax.plot([x(ev.rank)], [y(ev.row)], marker="o", ms=4, color=colour, zorder=3)
        ax.text(x(ev.rank) + 0.08, y(ev.row) + row_h * 0.18, ev.text[:34], fontsize=7, color=colour, zorder=3)
    cycle = {id(e.src) for c in d.cycles for e in c} | {id(e.dst) for c in d.cycles for e in c}
    for m in d.messages:
        bad = id(m.send) in cycle or id(m.recv) in cycle
        ax.annotate(
            "",
            xy=(x(m.recv.rank), y(m.recv.row)),
            xytext=(x(m.send.rank), y(m.send.row)),
            arrowprops={"arrowstyle": "-|>", "color": red if bad else ink, "lw": 1.0, "shrinkA": 4, "shrinkB": 4},
            zorder=2,
        )
    for c in d.cycles:
        for e in c:
            ax.annotate(
                "",
                xy=(x(e.dst.rank), y(e.dst.row)),
                xytext=(x(e.src.rank), y(e.src.row)),
                arrowprops={"arrowstyle": "->", "color": red, "lw": 1.2, "ls": ":", "connectionstyle": "arc3,rad=0.25"},
                zorder=4,
            )
    for k, f in enumerate(d.findings[:4]):
        where = f" (line {f.line})" if f.line else ""
        colour = red if f.severity == "error" else "#b8860b"
        ax.text(
            0.15,
            0.25 + 0.28 * (len(d.findings[:4]) - 1 - k),
            f"{f.code}{where}: {f.message}"[:140],
            fontsize=7.5,
            color=colour,
        )
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    return buf.getvalue()


# ---- timeline of a Chrome trace -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Slice:
    """One duration event on one track, in microseconds."""

    track: int
    name: str
    kind: str  # what it is coloured by: the event's `cat` if it has one, else its name
    start: float
    dur: float
    depth: int = 0


@dataclass
class Trace:
    tracks: list[str]
    slices: list[Slice]
    skipped: int = 0  # B without E, E without B, X without dur
    title: str = ""  # from `otherData` (program and world), as `commdsl run --trace` writes it


def load_trace(text: str) -> Trace:
    """Chrome trace event JSON (object with `traceEvents`, or a bare array) → duration slices per track.
    Complete events (`ph: X`) and `B`/`E` pairs count; `M` metadata names and orders the tracks."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError("expected Chrome trace event JSON: an object with a `traceEvents` list, or a list of events")
    names, order, raw, skipped = _read_events(events)
    if not raw:
        raise TraceError('no duration events: expected `ph: "X"` events or `B`/`E` pairs')

    def placed(kind: str, key: tuple) -> tuple:  # tracks with a sort index first, by it; the rest by id
        index = order.get((kind,) + key)
        return (0, index) if index is not None else (1, 0)

    keys = sorted(
        {key for key, *_ in raw},
        key=lambda key: (
            placed("process_sort_index", key[:1]),
            _sortable(key[0]),
            placed("thread_sort_index", key),
            _sortable(key[1]),
        ),
    )
    other = data.get("otherData") if isinstance(data, dict) else None
    title = ""
    if isinstance(other, dict) and isinstance(other.get("program"), str):
        title = other["program"] + (f" — world {other['world']}" if _number(other.get("world")) else "")
    return Trace(_track_labels(keys, names), _stacked_slices(keys, raw), skipped, title)


def _read_events(events: list) -> tuple[dict, dict, list, int]:
    """(track names, track sort indices, (track, name, kind, start, duration) per slice, events skipped) of a
    trace's events: `M` metadata, `X` complete events and `B`/`E` pairs (an unclosed `B` is skipped)."""
    names: dict[tuple, str] = {}
    order: dict[tuple, float] = {}
    raw: list[tuple[tuple, str, str, float, float]] = []
    open_: dict[tuple, list[tuple[str, str, float]]] = {}
    skipped = 0
    for k, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise TraceError(f"event {k} is not an object")
        ph = ev.get("ph")
        key = (ev.get("pid", 0), ev.get("tid", 0))
        if ph == "M":
            _read_metadata(ev, key, names, order)
            continue
        if ph not in ("X", "B", "E"):
            continue
        ts = ev.get("ts")
        if not _number(ts):
            raise TraceError(f"event {k} (`{ev.get('name', '?')}`, ph {ph}): `ts` is not a number")
        name = str(ev.get("name", "?"))
        kind = str(ev.get("cat") or name)
        if ph == "X":
            dur = ev.get("dur")
            if not _number(dur) or dur < 0:
                skipped += 1
                continue
            raw.append((key, name, kind, float(ts), float(dur)))
        elif ph == "B":
            open_.setdefault(key, []).append((name, kind, float(ts)))
        elif open_.get(key):
            name, kind, start = open_[key].pop()
            raw.append((key, name, kind, start, max(0.0, float(ts) - start)))
        else:
            skipped += 1
    skipped += sum(len(v) for v in open_.values())
    return names, order, raw, skipped


def _read_metadata(ev: dict, key: tuple, names: dict, order: dict) -> None:
    """A process or thread name, or sort index, from an `M` event."""
    arg = ev.get("args") or {}
    if ev.get("name") in ("process_name", "thread_name") and isinstance(arg.get("name"), str):
        names[(ev["name"],) + (key[:1] if ev["name"] == "process_name" else key)] = arg["name"]
    elif ev.get("name") in ("process_sort_index", "thread_sort_index") and _number(arg.get("sort_index")):
        order[(ev["name"],) + (key[:1] if ev["name"] == "process_sort_index" else key)] = arg["sort_index"]


def _track_labels(keys: list, names: dict) -> list[str]:
    """Each track's label: its process and thread names, or ids where the trace names none."""
    tids: dict = {}
    for pid, tid in keys:
        tids.setdefault(pid, []).append(tid)
    labels = []
    for pid, tid in keys:
        process, thread = names.get(("process_name", pid)), names.get(("thread_name", pid, tid))
        several = len(tids[pid]) > 1
        if process:
            labels.append(f"{process} / {thread or f'tid {tid}'}" if several else process)
        elif thread:
            labels.append(thread)
        else:
            labels.append(f"pid {pid} / tid {tid}" if several else f"pid {pid}")
    return labels


def _stacked_slices(keys: list, raw: list) -> list[Slice]:
    """The slices of each track, with their nesting depth (a slice inside another is drawn below it)."""
    index = {key: i for i, key in enumerate(keys)}
    slices = []
    for track in range(len(keys)):
        mine = sorted(((s, d, n, k) for key, n, k, s, d in raw if index[key] == track), key=lambda t: (t[0], -t[1]))
        ends: list[float] = []
        for start, dur, name, kind in mine:
            while ends and ends[-1] <= start:
                ends.pop()
            slices.append(Slice(track, name, kind, start, dur, len(ends)))
            ends.append(start + dur)
    return slices


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _sortable(v) -> tuple:
    return (0, v, "") if _number(v) else (1, 0, str(v))


def timeline_png(trace: Trace, title: str) -> bytes:
    """A Gantt chart, one row per track, one colour per event category (`cat`, else name): the ten
    commonest; the rest grey; ops a hang stopped (`stuck`) red. Nested slices are drawn thinner over their
    parents."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    t0 = min(s.start for s in trace.slices)
    span = max(s.start + s.dur for s in trace.slices) - t0
    unit, scale = ("s", 1e6) if span >= 2e6 else ("ms", 1e3) if span >= 2e3 else ("µs", 1.0)
    counts: dict[str, int] = {}
    for s in trace.slices:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    named = sorted(counts, key=lambda n: (-counts[n], n))[:10]
    palette = [
        "#4e79a7",
        "#f28e2b",
        "#59a14f",
        "#e15759",
        "#76b7b2",
        "#edc948",
        "#b07aa1",
        "#ff9da7",
        "#9c755f",
        "#86bcb6",
    ]
    colour = {n: palette[i] for i, n in enumerate(sorted(named))}
    if "stuck" in colour:  # `commdsl run --trace` of a hang: where each rank was stopped, in red whatever else
        red = colour.pop("stuck")
        colour = {n: (red if c == palette[3] else c) for n, c in colour.items()} | {"stuck": palette[3]}
    rows = len(trace.tracks)
    fig = Figure(figsize=(11, 1.4 + 0.45 * rows), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for s in trace.slices:
        height = max(0.25, 0.7 - 0.18 * s.depth)
        ax.broken_barh(
            [((s.start - t0) / scale, max(s.dur / scale, span / scale / 2000))],
            (s.track - height / 2, height),
            facecolors=colour.get(s.kind, "#bab0ac"),
            edgecolors="white",
            linewidth=0.4,
        )
        room = int(s.dur / span * 8.0 * 72 / 4.6) if span else 0  # characters that fit in the bar (7 pt)
        if s.depth == 0 and room >= 6:
            label = s.name if len(s.name) <= room else s.name[: room - 1] + "…"
            ax.text(
                (s.start - t0 + s.dur / 2) / scale,
                s.track,
                label,
                ha="center",
                va="center",
                fontsize=7,
                color="white",
                clip_on=True,
            )
    ax.set_yticks(range(rows), trace.tracks)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlim(0, span / scale * 1.01 if span else 1)
    ax.set_xlabel(f"time since the first event ({unit})")
    ax.set_title(title)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    handles = [Patch(color=colour[n], label=n) for n in sorted(named)]
    if len(counts) > len(named):
        handles.append(Patch(color="#bab0ac", label=f"{len(counts) - len(named)} others"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
