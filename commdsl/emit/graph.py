"""Pictures of a program: a sequence diagram of its Schedule, and a timeline of a Chrome trace.

Sequence diagram. `build()` turns one expansion into a `Diagram`: a lifeline per rank, an event per
send, receive and collective call, placed on rows by the causal order of the zero-buffering engine
run (an event sits below everything its rank completed before posting it, a receive below its send,
and the calls of one collective share a row). The checker's facts are drawn in: a deadlock cycle in
red, unmatched and blocked ops marked, ranks that never finish named. Mermaid and DOT are both
written from that one model, so they cannot disagree. The DOT positions are computed here and pinned
(`layout=neato`, `pos="x,y!"`): Graphviz only draws, and `dot -Tsvg` on the text gives the same picture.

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
from commdsl.resolve import Program
from commdsl.schedule import Batch, Collective, Group, Recv, Schedule, Send, View, Wait

MAX_EVENTS = 4000  # beyond this a diagram is unreadable and Graphviz slow; ask for a smaller world
NEVER = math.inf  # completion index of an async op that no `wait` covers


class DiagramTooLarge(Exception):
    """The expansion has more communication events than a diagram can show."""


class GraphvizMissing(Exception):
    """Graphviz (the `dot` program or the `graphviz` Python package) is not installed."""


class RenderError(Exception):
    """Graphviz ran but failed."""


class TraceError(Exception):
    """A trace file that is not Chrome trace event JSON, or has no duration events."""


# ---- the model ------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Event:
    """One rank's send, receive or collective call."""

    rank: int
    op: Send | Recv | Collective
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
    rank: int
    stuck_line: int | None  # the line the rank never gets past; None if it finishes
    not_reached: int = 0  # ops after the stuck one


@dataclass(slots=True)
class Finding:
    severity: str
    code: str
    message: str
    line: int | None


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

    @property
    def rows(self) -> int:
        return len(self.gutter)


def build(program: Program, schedule: Schedule) -> Diagram:
    """The diagram of one expansion, with the checker's findings for it."""
    from commdsl.checker import analyse_schedule
    from commdsl.checker.waits import Pending, analyse

    outcome = run_engine(schedule, record_matches=True)
    sends, recvs = outcome.matches
    waiting = outcome.waiting
    size = 2 * len(sends) + len(outcome.unmatched) + sum(len(i.calls) for i in outcome.instances) + len(waiting)
    if size > MAX_EVENTS:
        raise DiagramTooLarge(
            f"world size {schedule.world} gives {size} sends, receives and collective calls; a diagram stays "
            f"readable up to about {MAX_EVENTS}"
        )
    waits = analyse(outcome)
    diags, _ = analyse_schedule(program, schedule, schedule.backends, False, False)

    done_at = [_completions(ops) for ops in schedule.ops]
    sequences = [schedule.sequence(r) for r in range(schedule.world)]

    def index_of(rank: int, rid: int) -> int:
        return int(np.searchsorted(sequences[rank], rid))

    events_of: dict[tuple[int, int], Event] = {}

    def event(rank: int, rid: int, pos: int, via: int) -> Event:
        key = (rid, pos)
        ev = events_of.get(key)
        if ev is None:
            op = schedule.op_at(schedule.records[rid], pos)
            index = index_of(rank, via)
            ev = events_of[key] = Event(rank, op, index, _done(schedule.ops[rank], op, index, done_at[rank]))
            if isinstance(op, (Send, Recv)):
                ev.view = _view(schedule, rank, op.view)
                ev.text = _p2p_text(op, ev.view)
        return ev

    def post(rows, k: int) -> Event:
        return event(int(rows.rank[k]), int(rows.rec[k]), int(rows.pos[k]), int(rows.via[k]))

    messages = [Message(post(sends, k), post(recvs, k)) for k in range(len(sends))]
    loose = [post(outcome.unmatched, k) for k in range(len(outcome.unmatched))]
    unfinished = {(w.gid, w.seq): w for w in _unfinished(waiting)}
    bands, band_of = [], {}
    groups = [(inst.gid, inst.seq, inst.calls) for inst in outcome.instances]
    groups += [(gid, seq, waiting.take(np.array(w.rows))) for (gid, seq), w in unfinished.items()]
    for gid, seq, calls in sorted(groups, key=lambda g: (g[0], g[1])):
        evs = [
            event(int(calls.rank[k]), int(calls.rec[k]), int(calls.pos[k]), int(calls.rec[k]))
            for k in np.argsort(calls.rank, kind="stable")
        ]
        label, mismatch = _band_label(evs, schedule.groups[gid])
        band = Band(label, schedule.groups[gid], evs, mismatch=mismatch)
        bands.append(band)
        band_of[(gid, seq)] = band

    def event_of(rank: int, thing) -> Event:
        if isinstance(thing, Pending):
            return post(outcome.unmatched, thing.row)
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
    _mark_unmatched(schedule, waits, loose)
    _mark_missing(waits, band_of, unfinished)

    events = [ev for m in messages for ev in (m.send, m.recv)] + loose + [ev for b in bands for ev in b.calls]
    _place(events, messages, bands, schedule.world)
    findings = [
        Finding(d.severity, d.code, d.message, d.span.line if d.span else None)
        for d in sorted(diags, key=lambda d: (d.severity != "error", d.span.start if d.span else -1))
    ]
    params = ", ".join(f"{k}={v}" for k, v in schedule.params.items())
    title = f"{schedule.program} — world {schedule.world}" + (f" ({params})" if params else "")
    return Diagram(
        title,
        schedule.world,
        _lanes(schedule, outcome),
        events,
        messages,
        bands,
        cycles,
        _gutter(program, events),
        findings,
    )


def _mark_unmatched(schedule: Schedule, waits, unmatched: list[Event]) -> None:
    """Unmatched sends and receives (`unmatched[row]`) say why; the rest of them are blocked on their peer."""
    for row, reason in waits.unmatched:
        ev = unmatched[row]
        want = "recv" if isinstance(ev.op, Send) else "send"
        ev.status = "unmatched"
        ev.note = (
            f"unmatched: rank {ev.op.peer} finishes without a matching `{want}`"
            if reason == "finished"
            else f"unmatched: rank {ev.op.peer} never posts a matching `{want}`"
        )
    for row, near, peer in waits.tag_mismatches:
        ev = unmatched[row]
        other = schedule.op_at(schedule.records[near[0]], near[1])
        ev.status = "unmatched"
        ev.note = f"unmatched: tag {ev.op.tag} here, tag {other.tag} on rank {peer} (line {other.span.line})"
    for ev in unmatched:
        if ev.status == "ok":
            ev.status, ev.note = "blocked", f"waits for rank {ev.op.peer}"


def _mark_missing(waits, band_of: dict, unfinished: dict) -> None:
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


def _completions(ops) -> dict[int, int]:
    """Request id → index of the first `wait` that covers it, for one rank."""
    out: dict[int, int] = {}
    for i, op in enumerate(ops):
        if type(op) is Wait:
            for q in op.reqs:
                out.setdefault(q, i)
    return out


def _done(ops, op, index: int, waits: dict[int, int]) -> float:
    if op.req is None or (type(ops[index]) is Batch and ops[index].blocking):
        return index
    return waits.get(op.req, NEVER)


def _place(events: list[Event], messages: list[Message], bands: list[Band], world: int) -> None:
    """Rows by longest path over the causal order (Kahn): program order, send before receive, calls of a
    collective together. Program order is kept only where it is real: an op posted after another has
    completed (so the two sides of a `batch`, or an `isend` and what follows it before its `wait`, may
    share a row). The zero-buffering run happened in one such order, so the graph has no cycle."""
    node = {id(ev): i for i, ev in enumerate(events)}
    for b in bands:  # calls of one collective share one node
        for ev in b.calls[1:]:
            node[id(ev)] = node[id(b.calls[0])]
    count, base, edges = len(events), {}, []
    for rank in range(world):
        count = _program_order(rank, events, node, count, base, edges)
    for m in messages:
        edges.append((node[id(m.send)], node[id(m.recv)], 1))
    row = _longest_paths(count, base, edges)
    _split_rows(events, bands, node, row)


def _program_order(rank: int, events: list[Event], node: dict, count: int, base: dict, edges: list) -> int:
    """Edges of `rank`'s real program order, through one checkpoint node per posting index (every event of
    the rank completed before that index); returns the node count with the checkpoints added."""
    mine = [ev for ev in events if ev.rank == rank]
    posts = sorted({ev.posted for ev in mine})
    by_done = sorted((ev for ev in mine if ev.done != NEVER), key=lambda ev: ev.done)
    k, prev = 0, None
    for p in posts:
        cp = count
        count += 1
        base[cp] = -1
        if prev is not None:
            edges.append((prev, cp, 0))
        while k < len(by_done) and by_done[k].done < p:
            edges.append((node[id(by_done[k])], cp, 0))
            k += 1
        for ev in mine:
            if ev.posted == p:
                edges.append((cp, node[id(ev)], 1))
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
        raise RuntimeError("internal error: the causal order of the schedule has a cycle")
    return row


def _split_rows(events: list[Event], bands: list[Band], node: dict, row: list[int]) -> None:
    """Set each event's row. Events on one row are causally unordered, so a row whose items would overlap
    (two ops of one rank in a `batch`, two collectives over the same ranks) is split into sub-rows."""
    items: dict[int, list[tuple[int, int, list[Event]]]] = {}
    in_band = {id(ev) for b in bands for ev in b.calls}
    for b in bands:
        ranks = [ev.rank for ev in b.calls] + [m for m, _ in b.missing]
        items.setdefault(row[node[id(b.calls[0])]], []).append((min(ranks), max(ranks), b.calls))
    for ev in events:
        if id(ev) not in in_band:
            items.setdefault(row[node[id(ev)]], []).append((ev.rank, ev.rank, [ev]))
    next_row = 0
    for r in sorted(items):
        subrows: list[list[tuple[int, int]]] = []
        for lo, hi, evs in sorted(items[r], key=lambda it: (it[0] - it[1], it[0])):
            k = next(k for k, taken in enumerate(subrows + [[]]) if all(hi < a or b < lo for a, b in taken))
            if k == len(subrows):
                subrows.append([])
            subrows[k].append((lo, hi))
            for ev in evs:
                ev.row = next_row + k
        next_row += len(subrows)


def _gutter(program: Program, events: list[Event]) -> list[list[tuple[int | None, str]]]:
    """Per row, the source lines its events come from (line, text), with loop bindings when they agree."""
    rows = max((ev.row for ev in events), default=-1) + 1
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
    return f"{arrow} {op.peer}: {view}{size}{extra}"


def _band_label(calls: list[Event], g: Group) -> tuple[str, bool]:
    """kind · root · reduce op · size · group; when members disagree on what they call, one line per variant
    (second value True)."""
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
    biggest = max((ev.op for ev in calls), key=lambda op: sum(v.numel for v in op.inputs))
    group = f" · in {g.name} {list(g.ranks)}" if g.id else ""
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
    out = ["sequenceDiagram", f"    title {_mm(d.title)}"]
    out += [f"    participant r{lane.rank} as rank {lane.rank}" for lane in d.lanes]
    items: list[tuple[tuple, str]] = []
    for m in d.messages:
        s, r = m.send, m.recv
        lines = f"line {s.op.span.line}" + (f"→{r.op.span.line}" if r.op.span.line != s.op.span.line else "")
        size = _bytes(s.op.view.numel * DTYPES[s.op.dtype].itemsize)
        text = f"{s.view} → {r.view} ({size}) · {lines}{_bindings(s.op.bindings)}"
        items.append(((s.row, 0, s.rank, r.rank), f"    r{s.rank}->>r{r.rank}: {_mm(text)}"))
    for ev in d.events:
        if type(ev.op) is Collective or ev.status not in ("unmatched", "blocked"):
            continue
        src, dst = (ev.rank, ev.op.peer) if type(ev.op) is Send else (ev.op.peer, ev.rank)
        kind = "send" if type(ev.op) is Send else "recv"
        text = f"{kind} {ev.view} · line {ev.op.span.line} — {ev.note}"
        items.append(((ev.row, 1, ev.rank, 0), f"    r{src}-xr{dst}: {_mm(text)}"))
    for b in d.bands:
        ranks = [ev.rank for ev in b.calls] + [m for m, _ in b.missing]
        lo, hi = min(ranks), max(ranks)
        over = f"r{lo}" if lo == hi else f"r{lo},r{hi}"
        label = ("mismatch: " if b.mismatch else "") + b.label.replace("\n", " / ")
        missing = "" if b.complete else " — " + ", ".join(t for _, t in b.missing)
        text = f"{label} · line {b.calls[0].op.span.line}{missing}"
        items.append(((b.row, 2, lo, 0), f"    Note over {over}: {_mm(text)}"))
    out += [text for _key, text in sorted(items, key=lambda kv: kv[0])]
    for cycle in d.cycles:
        ranks = sorted({e.src.rank for e in cycle})
        lines = {e.src.op.span.line for e in cycle}
        head = next((f for f in d.findings if f.code[0] in "DC" and f.line in lines), None)
        what = f"{head.code}: {head.message}" if head else "deadlock cycle"
        out.append("    rect rgb(255, 214, 214)")
        out.append(f"    Note over r{ranks[0]},r{ranks[-1]}: {_mm(what)}")
        for e in cycle:
            out.append(f"    r{e.src.rank}--)r{e.dst.rank}: {_mm(f'line {e.src.op.span.line}: {e.text}')}")
        out.append("    end")
    for lane in d.lanes:
        if lane.stuck_line is not None:
            out.append(f"    Note over r{lane.rank}: {_mm(_stuck(lane))}")
    return "\n".join(out) + "\n"


def _stuck(lane: Lane, wrap: bool = False) -> str:
    more = f"{lane.not_reached} op{'s' * (lane.not_reached != 1)} not reached" if lane.not_reached else ""
    return f"stuck at line {lane.stuck_line}" + (("\n" if wrap else ", ") + more if more else "")


# ---- Graphviz DOT ---------------------------------------------------------------------------------

COL_W, ROW_H, GUTTER_W, GUTTER_CHARS = 200, 40, 360, 56
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
        self.x = [self.gutter + r * COL_W for r in range(d.world)]
        self.band_height = {id(ev): _band_height(b) for b in d.bands for ev in b.calls}
        shown = [{line for line, _ in entries} for entries in d.gutter]
        self.labels = {id(ev): _label_lines(ev, shown[ev.row]) for ev in d.events if type(ev.op) is not Collective}
        above, below = [6.0] * d.rows, [6.0] * d.rows
        for row, entries in enumerate(d.gutter):
            above[row] = below[row] = max(6.0, 6 * len(entries))
        for b in d.bands:
            above[b.row] = max(above[b.row], _band_height(b) / 2)
            below[b.row] = max(below[b.row], _band_height(b) / 2)
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
    if ev.status in ("unmatched", "blocked"):
        peer = ev.op.peer if 0 <= ev.op.peer < d.world else ev.rank
        stub = ex + (0.45 if x[peer] >= ex else -0.45) * COL_W
        dash = f'style=dashed, color="{color}", arrowsize=0.6'
        out.append(f'  s{i} [shape=point, width=0.01, color="{color}", pos="{stub},{ey}!"];')
        out.append(f"  {i} -> s{i} [{dash}, arrowhead=tee];" if type(ev.op) is Send else f"  s{i} -> {i} [{dash}];")
    return out


def to_dot(d: Diagram) -> str:
    """Graphviz DOT with every node pinned; `dot -Tsvg` renders it as is (the graph selects neato itself)."""
    lay = _Layout(d)
    x, gx = lay.x, lay.gutter / 2 - 20
    out = [
        f"digraph {_q(d.title)} {{",
        "  layout=neato; inputscale=72; overlap=true; splines=line; outputorder=edgesfirst;",
        f'  pad=0.3; bgcolor=white; labelloc=t; fontname="Helvetica"; fontsize=16; label={_q(d.title)};',
        '  node [fontname="Helvetica", fontsize=10, shape=point, width=0.09, color=black];',
        '  edge [fontname="Helvetica", fontsize=9, arrowsize=0.7];',
    ]
    if any(d.gutter):
        out.append(f'  src [shape=plaintext, label="source line", fontcolor="{GREY}", pos="{gx},0!"];')
    for lane in d.lanes:
        r, color = lane.rank, RED if lane.stuck_line is not None else "black"
        for node, y in (("h", 0), ("f", lay.bottom)):
            out.append(
                f'  {node}{r} [shape=box, width=1.1, height=0.4, label="rank {r}", color="{color}", pos="{x[r]},{y}!"];'
            )
        out.append(f'  h{r} -> f{r} [arrowhead=none, color="{GREY}"];')
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
    rows = max(d.rows, 1)
    fig = Figure(figsize=(gutter + lane_w * d.world + 0.6, 1.6 + row_h * (rows + 2)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    width, height = gutter + lane_w * d.world + 0.6, 1.6 + row_h * (rows + 2)
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")

    def x(rank: int) -> float:
        return gutter + lane_w * (rank + 0.5)

    def y(row: int) -> float:
        return height - 1.3 - row_h * (row + 0.5)

    ax.text(0.15, height - 0.35, d.title, fontsize=11, weight="bold", va="center")
    for lane in d.lanes:
        ax.text(x(lane.rank), height - 0.85, f"rank {lane.rank}", ha="center", fontsize=10, weight="bold")
        ax.plot([x(lane.rank)] * 2, [y(rows) + row_h * 0.3, height - 1.05], color=grey, lw=0.8, ls="--", zorder=0)
        if lane.stuck_line is not None:
            ax.text(x(lane.rank), y(rows), _stuck(lane), ha="center", va="top", fontsize=7.5, color=red)
    for row, entries in enumerate(d.gutter):
        if entries:
            ax.text(0.15, y(row), entries[0][1][:52], fontsize=7, family="monospace", va="center", color="#555555")
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
