"""The local facts no rendezvous shows, recorded element by element while the engine runs.

* a buffer read or written while an async op that uses it is still in flight (R503): each element
  counts the in-flight ops reading and writing it, and which op put it in flight;
* a non-root buffer read after `reduce` left it undefined (R504): each element remembers the reduce;
* a collective's result overwritten before anyone read it (L705, lint only): each element remembers
  the collective call whose unread result it holds, and each collective record how many ranks it left a
  result on (L705 speaks only when every one of them overwrote it unread).

Every tensor of every rank is one flat array, laid out as the simulator lays it out; the arrays are
made for a tensor only when something needs them. A large tensor's arrays hold one entry per segment
instead of per element (`Access.segments`): every view is a run of whole rows, so the facts above change
only at the views' ends, and a tensor cut at every view's start and end on every rank gives segments that
each view covers whole. The findings are the same; the work and memory follow the program's views, not its
bytes (a 256 MiB ring attention at world 4 took 51 s and 9.5 GB element by element, under `commdsl predict`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from commdsl.engine import Observer, Posts
from commdsl.rules import LISTED
from commdsl.schedule import (
    VIEW_FIELDS,
    VIEW_TUPLE_FIELDS,
    CollectiveRec,
    ComputeRec,
    ExpectRec,
    PrintRec,
    ReadRec,
    Schedule,
)
from commdsl.values import at, distinct, is_vec

SEGMENTS_FROM = 1 << 22
"""Tensors of at least this many elements over all ranks are tracked by segments (`Access.segments`); smaller
ones element by element, which costs nothing to set up."""

ELEMENTS_PER_SEGMENT = 2
"""Segments are used where their views cut a tensor into segments this long on average, or longer: shorter
ones (a ring's chunks of one element at world 4096: a cut at every element) are tracked element by element,
cheaper than looking up each view's ends among millions of cuts."""


@dataclass(frozen=True, order=True)
class Race:
    """An access (by op id) to elements an in-flight op (by op id) uses. Ordered by rank first: rules report
    the lowest rank that shows a finding, whatever order the engine ran the ranks in."""

    rank: int
    op: int
    inflight: int
    writes: bool  # the access writes
    window_writes: bool  # the in-flight op writes the elements
    tensor: str
    same_batch: bool = False  # both ops are in one batch
    nccl_ordered: bool = False  # NCCL's stream order runs the in-flight collective first (`Access.nccl_order`)


@dataclass(frozen=True, order=True)
class UndefinedRead:
    """A read (by op id) of elements a `reduce` left undefined; ordered by rank first, as `Race`."""

    rank: int
    op: int
    reduce: int  # the op id of the reduce call that left the elements undefined


@dataclass(frozen=True)
class DeadStore:
    rank: int
    producer: int  # the collective call whose result was never read
    overwriter: int


class Windows:
    """The elements async ops hold in flight, by request, until a `wait` (or a barrier) ends them. One entry per
    op and the ranks that posted it at once (their requests, the elements each holds), not one per request: a
    ring of `isend`s at world 4096 posts 4,096 requests a step, and walking them one by one was most of a lint."""

    def __init__(self, requests: int):
        self.entry_of = np.full(requests, -1, dtype=np.int32)  # a request's latest entry, -1: it holds nothing
        # (tensor, elements, their slot, writes, the requests by slot, each slot's earlier entry, slots open)
        self.entries: list[list | None] = []
        self.live = 0

    def __bool__(self) -> bool:
        return self.live > 0

    def __contains__(self, q: int) -> bool:
        return bool(self.entry_of[q] >= 0)

    def open(self, t: str, idx: np.ndarray, owner: np.ndarray, writes: bool, reqs: np.ndarray) -> None:
        """Requests `reqs` (distinct) hold elements `idx` of `t`, element i by request `reqs[owner[i]]`."""
        self.entries.append([t, idx, owner, writes, reqs, self.entry_of[reqs].copy(), reqs.size])
        self.entry_of[reqs] = len(self.entries) - 1
        self.live += 1

    def close(self, reqs: np.ndarray) -> Iterator[tuple[str, np.ndarray, bool]]:
        """(tensor, elements, writes) of every window the requests held: they hold none after."""
        reqs = reqs[self.entry_of[reqs] >= 0]
        if reqs.size > 1 and not bool((reqs[1:] > reqs[:-1]).all()):  # a wait's are ascending: no sort then
            reqs = distinct(reqs)
        eids = self.entry_of[reqs]
        self.entry_of[reqs] = -1
        while reqs.size:
            later_reqs, later_eids = [], []
            one = bool((eids == eids[0]).all())  # a wait on one op's requests, posted together
            for eid in [int(eids[0])] if one else distinct(eids).tolist():
                entry = self.entries[eid]
                assert entry is not None  # a request's entries stay until it is closed
                t, idx, owner, writes, by_slot, earlier, _ = entry
                mine = reqs if one else reqs[eids == eid]
                if mine.size == by_slot.size:  # every slot (they are distinct): the whole entry, unsorted
                    slots = np.arange(by_slot.size)
                    yield t, idx, writes
                else:
                    sorter = np.argsort(by_slot)
                    slots = sorter[np.searchsorted(by_slot, mine, sorter=sorter)]
                    closing = np.zeros(by_slot.size, dtype=bool)
                    closing[slots] = True
                    yield t, idx[closing[owner]], writes
                entry[6] -= slots.size
                if entry[6] == 0:
                    self.entries[eid] = None
                    self.live -= 1
                back = earlier[slots]
                later_reqs.append(mine[back >= 0])
                later_eids.append(back[back >= 0])
            reqs, eids = np.concatenate(later_reqs), np.concatenate(later_eids)


def _first_of_each(owner: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the owners with a hit, the index of each one's first): `owner` ascends (`Access.indices`)."""
    h = np.flatnonzero(hit)
    first = h[np.r_[True, owner[h][1:] != owner[h][:-1]]]
    return owner[first], first


def _insert(kept: list, found) -> None:
    """`found` among `kept` (ascending), which holds the first `LISTED` findings of a pair of statements."""
    if len(kept) < LISTED or found < kept[-1]:
        bisect.insort(kept, found)
        del kept[LISTED:]


class Access(Observer):
    def __init__(self, schedule: Schedule, lints: bool):
        self.s = schedule
        W = schedule.world
        self.lints = lints
        self.numel = {name: info.numel_array(W) for name, info in schedule.infos.items()}
        self.base = {
            name: (np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64) if W else np.zeros(0, np.int64))
            for name, n in self.numel.items()
        }
        self.size = {name: int(n.sum()) for name, n in self.numel.items()}
        self.cuts: dict[str, np.ndarray | None] = {}  # per tensor: its segments' bounds, None: by element
        self.views_of: dict[str, list] | None = None  # per tensor: (ranks, view) of every record, see `segments`
        self.reading: dict[str, np.ndarray] = {}  # in-flight ops reading each element
        self.writing: dict[str, np.ndarray] = {}
        self.owner: dict[str, np.ndarray] = {}  # the op id that last put an element in flight
        self.undef: dict[str, np.ndarray] = {}  # op id of the reduce that left an element undefined, or -1
        self.unread: dict[str, np.ndarray] = {}  # op id of the collective whose result an element holds, or -1
        self.windows = Windows(schedule.requests.count)  # what each request holds in flight
        # (statement, in-flight statement, NCCL-ordered) → its first `LISTED` races in rank order, of which R503
        # reports the first: a ring step that writes its in-flight send buffer at world 4096 races on every rank
        # at every iteration, 16 million races for one finding (`keep`)
        self.kept: dict[tuple, list[Race]] = {}
        self.undefined: dict[tuple, list[UndefinedRead]] = {}  # (statement, reduce statement) → its first reads
        self.dead_stores: list[DeadStore] = []
        self.receivers: dict[int, int] = {}  # collective record id → ranks it left a result on (lints only)
        # a barrier ends an earlier async collective of its group on its rank (`barrier_ends`): per (group,
        # rank), those requests, some maybe waited already; per async barrier, those its `wait` ends
        self.group_reqs: dict[tuple[int, int], list[int]] = {}
        # NCCL's stream order (`nccl_order`): per (group, rank), the async collectives and batch ops not yet
        # followed by a blocking collective or batch of the group; per rank, those that were; while an op of the
        # group's stream makes its accesses, per rank, the ops before it there
        self.group_ops: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (request, op id)
        self.nccl_done: dict[int, set[int]] = {}
        self.same_stream: dict[int, set[int]] = {}
        self.ops_groups: set[int] = set()  # the groups of `group_ops` entries
        self.barrier_reqs: dict[int, list[int]] = {}
        barriers = [r.id for r in schedule.records if isinstance(r, CollectiveRec) and r.kind.name == "barrier"]
        self.barriers = np.array(barriers, dtype=np.int64)

    # ---- element arrays ------------------------------------------------------------------------------
    def indices(self, v, G: np.ndarray, pos) -> tuple[np.ndarray, np.ndarray]:
        """(flat indices, the position in G each belongs to) of view `v` on ranks G: of its elements, or of
        its segments where the tensor is tracked by segments."""
        n = G.size
        start = self.base[v.tensor][G] + (at(v.offset, pos, n) if is_vec(v.offset) else v.offset)
        cuts = self.segments(v.tensor)
        if cuts is None and not is_vec(v.numel):  # every rank's view as long: a rank's elements are a row
            c = int(v.numel)
            if n == 1:  # one rank (a pipeline's ranks step apart)
                first = int(start[0])
                return np.arange(first, first + c), np.zeros(c, dtype=np.int64)
            return (start[:, None] + np.arange(c)).ravel(), np.repeat(np.arange(n), c)
        count = np.broadcast_to(np.asarray(at(v.numel, pos, n) if is_vec(v.numel) else v.numel, dtype=np.int64), (n,))
        if cuts is not None:  # the view's first segment and how many: its ends are cuts
            first_cut = np.searchsorted(cuts, start)
            count = np.searchsorted(cuts, start + count) - first_cut
            start = first_cut
        owner = np.repeat(np.arange(n), count)
        first = np.cumsum(count) - count
        idx = np.repeat(start - first, count) + np.arange(int(count.sum()), dtype=np.int64)
        return idx, owner

    def _table(self, tables: dict, name: str, fill: int, dtype=np.int64) -> np.ndarray:
        t = tables.get(name)
        if t is None:
            cuts = self.segments(name)
            t = tables[name] = np.full(self.size[name] if cuts is None else cuts.size - 1, fill, dtype=dtype)
        return t

    def segments(self, tensor: str) -> np.ndarray | None:
        """The bounds of the segments `tensor` is tracked by (ascending flat offsets, from 0 to its size), or None
        when it is tracked element by element (below `SEGMENTS_FROM`). Worked out once, the first time the
        tensor is tracked: every start and end of a view of it, on every rank of every record."""
        if tensor in self.cuts:
            return self.cuts[tensor]
        if self.size[tensor] < SEGMENTS_FROM:
            self.cuts[tensor] = None
            return None
        if self.views_of is None:
            self.views_of = {}
            for rec in self.s.records:
                views = [getattr(rec, f, None) for f in VIEW_FIELDS]
                views += [v for f in VIEW_TUPLE_FIELDS for v in getattr(rec, f, ())]
                for v in views:
                    if v is not None:
                        self.views_of.setdefault(v.tensor, []).append((rec.ranks, v))
        base = self.base[tensor]
        found = [np.array([0, self.size[tensor]], dtype=np.int64)]
        held, limit = 2, 1 << 20
        for ranks, v in self.views_of.get(tensor, ()):
            start = base[ranks] + np.asarray(v.offset, dtype=np.int64)
            found += [start, start + np.asarray(v.numel, dtype=np.int64)]
            held += 2 * ranks.size
            if held > limit:  # a loop's views share most of their ends: keep the distinct ones
                found = [distinct(np.concatenate([np.ravel(f) for f in found]))]
                held = found[0].size
                if (held - 1) * ELEMENTS_PER_SEGMENT > self.size[tensor]:
                    break
                limit = max(limit, 2 * held)  # when they are many, not again at every view
        cuts = distinct(np.concatenate([np.ravel(f) for f in found]))
        if (cuts.size - 1) * ELEMENTS_PER_SEGMENT > self.size[tensor]:
            cuts = None
        self.cuts[tensor] = cuts
        return cuts

    # ---- one access -------------------------------------------------------------------------------------
    def tracks(self, t: str) -> bool:
        """Whether an access to tensor `t` can matter: something is in flight on it, or undefined, or unread."""
        return t in self.writing or t in self.undef or t in self.unread

    def access(self, v, G, pos, writes: bool, op_ids: np.ndarray, where=None) -> None:
        """Ranks G read (or write) view v in ops `op_ids` (one per rank of G); `where`: its `indices`, if known."""
        t = v.tensor
        if not self.tracks(t):
            return
        idx, owner = self.indices(v, G, pos) if where is None else where
        if not idx.size:
            return
        if t in self.writing:
            busy = self.writing[t][idx] > 0
            if writes:
                busy |= self.reading[t][idx] > 0
            if busy.any():
                self.race(G, owner, idx, busy, t, op_ids, writes)
        if writes:
            if t in self.undef:
                self.undef[t][idx] = -1
            if t in self.unread:
                self.overwrite(t, idx, owner, G, op_ids)
        else:
            if t in self.undef:
                u = self.undef[t][idx]
                hit = u >= 0
                if hit.any():
                    k, first = _first_of_each(owner, hit)
                    reduces = u[first]
                    for spans, js in self.by_statements(G[k], op_ids[k], reduces):
                        kept = self.undefined.setdefault(spans, [])
                        for j in js[:LISTED].tolist():
                            _insert(kept, UndefinedRead(int(G[k[j]]), int(op_ids[k[j]]), int(reduces[j])))
            if t in self.unread:
                self.forget(t, self.unread[t][idx])

    def forget(self, t: str, held: np.ndarray) -> None:
        """Results read (even in part) are used: none of their elements can become a dead store."""
        producers = distinct(held[held >= 0])
        if producers.size:
            table = self.unread[t]
            table[np.isin(table, producers)] = -1

    def undefined_by(self, views, G, pos) -> np.ndarray:
        """Per rank of G, the reduce that left one of the elements of `views` undefined, or -1."""
        out = np.full(G.size, -1, dtype=np.int64)
        for v in views:
            if v.tensor in self.undef:
                idx, owner = self.indices(v, G, pos)
                u = self.undef[v.tensor][idx]
                hit = u >= 0
                out[owner[hit]] = u[hit]
        return out

    @property
    def races(self) -> list[Race]:
        """The races kept: per pair of statements, the first `LISTED` in rank order."""
        return [race for kept in self.kept.values() for race in kept]

    @property
    def undefined_reads(self) -> list[UndefinedRead]:
        """The reads of undefined elements kept: per pair of statements, the first `LISTED` in rank order."""
        return [read for kept in self.undefined.values() for read in kept]

    def by_statements(self, ranks: np.ndarray, ops: np.ndarray, others: np.ndarray):
        """Findings of `ranks` (distinct) by `ops` against the ops `others`, grouped by the pair of statements
        they name: (the two spans, the findings' indices in rank order). A rule reports each pair once, for its
        lowest rank, so only a pair's first `LISTED` here can be among those kept."""
        records, bases = self.s.records, self.s.op_bases
        pairs = (np.searchsorted(bases, ops, side="right") - 1) * len(records)
        pairs += np.searchsorted(bases, others, side="right") - 1
        for pair in distinct(pairs).tolist():
            mine = np.flatnonzero(pairs == pair)
            yield (
                (records[pair // len(records)].span, records[pair % len(records)].span),
                mine[np.argsort(ranks[mine], kind="stable")],
            )

    def race(self, G, owner, idx, busy, t, op_ids, writes) -> None:
        """Each rank of G whose access meets elements in flight races with the op that put its first such element
        in flight."""
        k, first = _first_of_each(owner, busy)
        el = idx[first]
        # a write meets the in-flight readers of its element first: the window writes only where none reads
        window_writes = self.reading[t][el] == 0 if writes else np.ones(el.size, dtype=bool)
        self.keep(G[k], op_ids[k], self.owner[t][el], writes, window_writes, t, same_batch=False)

    def keep(self, ranks, ops, inflight, writes: bool, window_writes, tensor: str, same_batch: bool) -> None:
        """Races of `ranks` (distinct) by `ops` with the in-flight ops `inflight`, kept per pair of statements and
        NCCL order (looked up per rank, where there is any)."""
        orders = not same_batch and bool(self.nccl_done or self.same_stream)
        for spans, js in self.by_statements(ranks, ops, inflight):
            seen = {False: 0, True: 0}
            for j in js.tolist():
                rank, q = int(ranks[j]), int(inflight[j])
                ordered = orders and (q in self.nccl_done.get(rank, ()) or q in self.same_stream.get(rank, ()))
                race = Race(rank, int(ops[j]), q, writes, bool(window_writes[j]), tensor, same_batch, ordered)
                _insert(self.kept.setdefault((*spans, ordered), []), race)
                seen[ordered] += 1
                if seen[False] >= LISTED and (seen[True] >= LISTED or not orders):
                    break

    def overwrite(self, t: str, idx, owner, G, op_ids) -> None:
        """A write over unread collective results: a dead store when it overwrites all of one; one it
        overwrites in part is dropped (its other elements may still be read)."""
        held = self.unread[t][idx]
        live = (held >= 0) & (held != op_ids[owner])
        if not live.any():
            return
        table = self.unread[t]
        n = G.size  # per (producer, writing rank): the elements written, against all the producer still holds
        pairs, written = np.unique(held[live] * n + owner[live], return_counts=True)
        producers, owners = pairs // n, pairs % n
        values, everywhere = np.unique(table[np.isin(table, producers)], return_counts=True)
        whole = written == everywhere[np.searchsorted(values, producers)]
        for j in np.flatnonzero(whole)[np.lexsort((producers[whole], owners[whole]))].tolist():
            k = int(owners[j])
            self.dead_stores.append(DeadStore(int(G[k]), int(producers[j]), int(op_ids[k])))
        self.forget(t, held[live])

    def open_window(self, v, G, pos, writes: bool, op_ids: np.ndarray, reqs: np.ndarray | None, where=None) -> None:
        """The elements an async op uses stay in flight until its request is waited (or, for the ops of a
        batch, until the batch ends: `reqs` None); `where`: the view's `indices`, if known."""
        idx, owner = self.indices(v, G, pos) if where is None else where
        t = v.tensor
        table = self._table(self.writing if writes else self.reading, t, 0, np.int32)
        self._table(self.reading if writes else self.writing, t, 0, np.int32)
        own = self._table(self.owner, t, -1)
        table[idx] += 1  # a view's elements on one rank are distinct, and ranks' elements never overlap
        own[idx] = op_ids[owner]
        if reqs is not None:
            self.windows.open(t, idx, owner, writes, np.asarray(reqs, dtype=np.int64))

    def close(self, t: str, idx: np.ndarray, writes: bool) -> None:
        (self.writing[t] if writes else self.reading[t])[idx] -= 1

    # ---- the engine's events -----------------------------------------------------------------------------
    def local(self, rec, G, pos):
        ops = rec.base + (np.arange(G.size) if pos is None else pos)
        if isinstance(rec, ComputeRec):
            sources = list(rec.reads) + ([rec.target] if rec.op != "=" else [])
            taint = self.undefined_by(sources, G, pos)
            for v in rec.reads:
                self.access(v, G, pos, False, ops)
            tainted = (taint >= 0).any()
            where = self.indices(rec.target, G, pos) if tainted or self.tracks(rec.target.tensor) else None
            if rec.op != "=":
                self.access(rec.target, G, pos, False, ops, where)
            self.access(rec.target, G, pos, True, ops, where)
            if tainted:  # computed from undefined elements: the result is undefined too
                idx, owner = where
                keep = taint[owner] >= 0
                self._table(self.undef, rec.target.tensor, -1)[idx[keep]] = taint[owner[keep]]
        elif isinstance(rec, ExpectRec):
            self.access(rec.view, G, pos, False, ops)
            for v in rec.reads:
                self.access(v, G, pos, False, ops)
        elif isinstance(rec, PrintRec):
            for v in rec.views:
                self.access(v, G, pos, False, ops)
        elif isinstance(rec, ReadRec):
            for v in rec.reads:
                self.access(v, G, pos, False, ops)

    def posted(self, rows: Posts):
        """Each op in posting order: its access, then (async) its window. The ops of a batch are in flight
        together until the batch ends, so each is also checked against the batch's earlier ops."""
        earlier: list[tuple] = []
        windows = []
        one = rows.const("rec")  # most postings are one record's (an unbatched op: one rank's, in a pipeline)
        if one is not None:
            bounds, rids = [0, len(rows)], [one]
        else:
            recs = rows.rec
            bounds = [0, *(np.flatnonzero(recs[1:] != recs[:-1]) + 1).tolist(), len(rows)]
            rids = recs[bounds[:-1]].tolist()
        for rid, a, b in zip(rids, bounds[:-1], bounds[1:]):
            rec = self.s.records[rid]
            G, pos = rows.rank[a:b], rows.pos[a:b]
            ops = rec.base + pos
            writes = not rec.is_send
            gids = self.stream_groups(rows.gid[a:b]) if rec.batched else []  # a batch runs on its group's stream
            self.same_stream = self.ahead_on_stream(gids, G)
            where = self.indices(rec.view, G, pos) if rec.req is not None or self.tracks(rec.view.tensor) else None
            self.access(rec.view, G, pos, writes, ops, where)
            self.same_stream = {}
            if rec.batched:
                for other in earlier:
                    self.batch_overlap(other, (rec, G, pos, writes, ops))
                earlier.append((rec, G, pos, writes, ops))
            if rec.req is not None:  # async, or in a batch bound to a handle: in flight until waited
                windows.append((rec.view, G, pos, writes, ops, rows.req[a:b], where))
                if rec.batched:
                    for g, r, q, o in zip(rows.gid[a:b].tolist(), G.tolist(), rows.req[a:b].tolist(), ops.tolist()):
                        self.on_stream(g, r, q, o)
            elif gids:  # a blocking batch: the rank's later work runs after it, as after a blocking collective
                self.nccl_order(gids, G)
        for window in windows:  # after the batch's own accesses, which `batch_overlap` judges
            self.open_window(*window)

    def batch_overlap(self, first, second) -> None:
        """Two ops of one batch on overlapping elements, one of them a receive: a race, as with a window."""
        (ra, Ga, pa, wa, oa), (rb, Gb, pb, wb, ob) = first, second
        if ra.view.tensor != rb.view.tensor or not (wa or wb):
            return
        if Ga.size == Gb.size and (Ga is Gb or (Ga == Gb).all()):
            common, ia, ib = Ga, np.arange(Ga.size), np.arange(Gb.size)
        else:
            common, ia, ib = np.intersect1d(Ga, Gb, assume_unique=True, return_indices=True)
        if not common.size:
            return
        va, vb = ra.view, rb.view
        sa, na = (np.asarray(at(x, pa[ia], ia.size), dtype=np.int64) for x in (va.offset, va.numel))
        sb, nb = (np.asarray(at(x, pb[ib], ib.size), dtype=np.int64) for x in (vb.offset, vb.numel))
        hit = np.flatnonzero((sa < sb + nb) & (sb < sa + na) & (na > 0) & (nb > 0))
        if hit.size:
            window = np.full(hit.size, wa, dtype=bool)
            self.keep(common[hit], ob[ib[hit]], oa[ia[hit]], wb, window, va.tensor, same_batch=True)

    def called(self, rec: CollectiveRec, G, pos, me):
        ops = rec.base + pos
        gids = self.stream_groups(np.broadcast_to(at(rec.gid, pos, G.size), G.shape)) if self.ops_groups else []
        self.same_stream = self.ahead_on_stream(gids, G)
        root = np.zeros(G.size, dtype=bool) if rec.root is None else (at(rec.root, pos, G.size) == G)
        for is_root in (True, False):
            sel = root == is_root
            if sel.any():
                self.member_access(rec, is_root, G[sel], pos[sel], ops[sel])
        self.same_stream = {}
        if rec.req is not None:
            self.in_group(rec, G, pos, ops)
        elif gids:
            self.nccl_order(gids, G)

    def member_access(self, rec: CollectiveRec, is_root: bool, g, p, o) -> None:
        """The accesses of members `g` (all roots, or none) of a collective call, and an async one's windows."""
        reads, writes, undefined = rec.kind.roles(is_root)
        if reads:
            for v in rec.inputs:
                self.access(v, g, p, False, o)
        if writes:
            for v in rec.outputs:
                self.access(v, g, p, True, o)
        if undefined:
            for v in rec.outputs:
                idx, owner = self.indices(v, g, p)
                self._table(self.undef, v.tensor, -1)[idx] = o[owner]
        if writes and self.lints:
            self.result_left(rec, g, p, o)
        if rec.req is not None:
            reqs = at(rec.req, p, g.size)
            if reads:
                for v in rec.inputs:
                    self.open_window(v, g, p, False, o, reqs)
            for v in rec.outputs if (writes or undefined) else ():
                self.open_window(v, g, p, True, o, reqs)

    def stream_groups(self, gids: np.ndarray) -> list[int]:
        """The calling ranks' groups (`gids`), where an async op on one of their streams is remembered for NCCL's
        stream order; [] otherwise (most calls: the per-rank walk is then skipped)."""
        if not self.ops_groups or self.ops_groups.isdisjoint(distinct(gids).tolist()):
            return []
        return gids.tolist()

    def ahead_on_stream(self, gids: list[int], G: np.ndarray) -> dict[int, set[int]]:
        """Per rank of G, the async ops still remembered on its group's stream (`group_ops`): a collective or a
        batch of the group runs after them there, so its own accesses do not race with theirs on NCCL."""
        if not gids:  # most calls: no rank of G has an op on its group's stream to look up
            return {}
        return {r: {o for _, o in c} for g, r in zip(gids, G.tolist()) if (c := self.group_ops.get((g, r)))}

    def in_group(self, rec: CollectiveRec, G, pos, ops) -> None:
        """Remember async collective calls by group and rank for the barrier that ends them (an async barrier
        takes those before it, which its `wait` ends) and for NCCL's stream order (`nccl_order`)."""
        gids = np.broadcast_to(at(rec.gid, pos, G.size), G.shape).tolist()
        reqs = np.broadcast_to(at(rec.req, pos, G.size), G.shape).tolist()
        for g, r, q, o in zip(gids, G.tolist(), reqs, ops.tolist()):
            if rec.kind.name == "barrier":
                self.barrier_reqs[q] = self.group_reqs.pop((g, r), [])
                continue
            earlier = self.group_reqs.setdefault((g, r), [])
            if len(earlier) >= 64:  # most are long waited: keep those still in flight
                earlier[:] = [e for e in earlier if e in self.windows]
            earlier.append(q)
            self.on_stream(g, r, q, o)

    def on_stream(self, g: int, r: int, q: int, o: int) -> None:
        """Rank r's async op `o` (request `q`: a collective, or an op of a batch bound to a handle) runs on group
        g's stream on NCCL, for `nccl_order`."""
        calls = self.group_ops.setdefault((g, r), [])
        if len(calls) >= 64:  # most are long waited: keep those still in flight
            calls[:] = [c for c in calls if c[0] in self.windows]
        calls.append((q, o))
        self.ops_groups.add(g)

    def nccl_order(self, gids: list[int], G: np.ndarray) -> None:
        """On NCCL a group's collectives and batches run on one stream in issue order, and a blocking one makes
        the rank's current stream wait for it (torch's `WorkNCCL::synchronize`): the rank's later work runs after
        every earlier async op of the group, waited or not. A race with such an op is Gloo's only
        (`Race.nccl_ordered`; Gloo runs a group's collectives on two threads, measured, and a batch's ops as
        separate sends and receives), as is one between two ops of a group's stream, the later of which
        `same_stream` marks while its accesses are made."""
        for g, r in zip(gids, G.tolist()):
            calls = self.group_ops.pop((g, r), None)
            if calls:
                self.nccl_done.setdefault(r, set()).update(o for _, o in calls)

    def completed(self, calls, starts, counts) -> None:
        """A blocking barrier's members go on with every earlier collective of its group ended on their rank."""
        if not self.group_reqs or not self.barriers.size:
            return
        for j in np.flatnonzero((calls.req < 0) & np.isin(calls.rec, self.barriers)).tolist():
            self.barrier_ends(self.group_reqs.pop((int(calls.gid[j]), int(calls.rank[j])), []))

    def barrier_ends(self, reqs: list[int]) -> None:
        """torch's barrier returns once the rank's earlier collectives on its group have ended (Gloo's waits for
        every earlier work of the group, measured; NCCL's synchronizes the stream they ran on): their buffers
        are no longer in flight, though their requests are not yet waited."""
        for t, idx, writes in self.windows.close(np.asarray(reqs, dtype=np.int64)):
            self.close(t, idx, writes)

    def result_left(self, rec: CollectiveRec, g, p, o) -> None:
        """Mark the outputs `rec` wrote on ranks `g` as results not yet read (L705), and count those ranks."""
        got = np.zeros(g.size, dtype=bool)
        for v in rec.outputs:
            idx, owner = self.indices(v, g, p)
            if idx.size:
                self._table(self.unread, v.tensor, -1)[idx] = o[owner]
                got[owner] = True
        self.receivers[rec.id] = self.receivers.get(rec.id, 0) + int(got.sum())

    def waited(self, reqs: np.ndarray):
        if not self.windows:
            return
        for t, idx, writes in self.windows.close(reqs):
            self.close(t, idx, writes)
        if self.barrier_reqs:  # an async barrier's `wait` ends what its group's earlier collectives hold
            for q in reqs.tolist():
                self.barrier_ends(self.barrier_reqs.pop(q, []))
