"""The wait-for analysis of a stalled run: who waits for whom, and which waits can never end.

A stuck op waits for a peer. If the peer finished, or nothing left in its program could ever match
(no op of the right kind on the same channel), the op itself is the bug (unmatched, missing
participant). Otherwise the wait is an edge of the wait-for graph, and a cycle there is a deadlock.

The graph has a node per rank and one per unfinished collective: a rank stuck in a collective waits
for the collective, and the collective waits for each member that has not called it. So a thousand
ranks waiting for one late member make a thousand edges, not a million.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commdsl.engine import Calls, Outcome, Posts
from commdsl.schedule import BatchRec, CollectiveRec, P2PRec, WaitRec
from commdsl.values import at


@dataclass(frozen=True)
class Pending:
    """A posted send or receive that never met: row `row` of the outcome's `unmatched`."""

    row: int


@dataclass(frozen=True)
class Waiting:
    """An unfinished collective instance: its calls are rows `rows` of the outcome's `waiting`."""

    gid: int
    seq: int
    rows: tuple[int, ...]


@dataclass
class Edge:
    rank: int
    op: int  # the op id `rank` is stuck in
    target: int
    thing: object  # Pending or Waiting


@dataclass
class Analysis:
    unmatched: list[tuple[int, str]]  # (row of `unmatched`, "finished" | "never")
    tag_mismatches: list[tuple[int, tuple[int, int], int]]  # (row, (record id, position) of the near op, its rank)
    missing: list[tuple[Waiting, int, int, str]]  # (collective, member, a waiting op id, "finished" | "never")
    cycles: list[list[Edge]]
    edges: dict[int, list[Edge]] = field(default_factory=dict)


def _member(a: tuple, b: tuple) -> np.ndarray:
    """For each row of columns `a`, whether the same row occurs among columns `b`."""
    n = a[0].size
    if not n or not b[0].size:
        return np.zeros(n, dtype=bool)
    cols = [np.concatenate([x, y]) for x, y in zip(a, b)]
    src = np.concatenate([np.zeros(n, dtype=np.int64), np.ones(b[0].size, dtype=np.int64)])
    order = np.lexsort((src,) + tuple(reversed(cols)))
    same = np.ones(order.size, dtype=bool)
    same[0] = False
    for c in cols:
        cs = c[order]
        same[1:] &= cs[1:] == cs[:-1]
    # a row of `a` is present if the next row in sorted order (with src after it) is equal and from b
    is_a = src[order] == 0
    present = np.zeros(order.size, dtype=bool)
    present[:-1] = is_a[:-1] & same[1:]
    # equal rows of `a` may repeat before the b row: carry presence backwards through equal runs
    for i in range(order.size - 2, -1, -1):
        if is_a[i] and not present[i] and same[i + 1] and present[i + 1]:
            present[i] = True
    out = np.zeros(n, dtype=bool)
    out[order[is_a]] = present[is_a]
    return out


class _Remaining:
    """The communication each rank still has ahead of it (from where it stopped), as key columns."""

    def __init__(self, outcome: Outcome, ranks: np.ndarray, tags: bool):
        s = outcome.schedule
        self.s = s
        W = s.world
        wanted = np.zeros(W, dtype=bool)
        wanted[ranks] = True
        wanted &= ~outcome.finished
        head = np.full(W, np.iinfo(np.int64).max, dtype=np.int64)
        for r in np.flatnonzero(wanted):
            head[r] = outcome.head(int(r))[0]
        p2p: list[tuple] = []
        calls: list[tuple] = []
        low = head[wanted].min() if wanted.any() else None
        if low is not None:
            for rid in s.top:
                if rid < low:
                    continue
                rec = s.records[rid]
                G = rec.ranks[wanted[rec.ranks] & (head[rec.ranks] <= rid)]
                if not G.size:
                    continue
                if isinstance(rec, P2PRec):
                    p2p.append(self.p2p_keys(rec, G, tags))
                elif isinstance(rec, BatchRec):
                    for op in rec.ops:
                        g = op.ranks[np.isin(op.ranks, G)]
                        if g.size:
                            p2p.append(self.p2p_keys(op, g, tags))
                elif isinstance(rec, CollectiveRec):
                    pos = rec.positions(G)
                    calls.append((G, at(rec.gid, pos, G.size).astype(np.int64)))
        cols = ("send", "gid", "src", "dst", "tag", "rec", "pos", "rank")
        self.p2p = {c: np.concatenate([k[i] for k in p2p]) if p2p else np.zeros(0, np.int64) for i, c in enumerate(cols)}
        self.calls = (np.concatenate([c[0] for c in calls]) if calls else np.zeros(0, np.int64),
                      np.concatenate([c[1] for c in calls]) if calls else np.zeros(0, np.int64))

    @staticmethod
    def p2p_keys(rec: P2PRec, G: np.ndarray, tags: bool) -> tuple:
        pos = rec.positions(G)
        n = G.size
        peer = at(rec.peer, pos, n).astype(np.int64)
        src, dst = (G, peer) if rec.is_send else (peer, G)
        gid = np.zeros(n, dtype=np.int64) if rec.gid is None else at(rec.gid, pos, n).astype(np.int64)
        tag = at(rec.tag, pos, n).astype(np.int64) if tags else np.zeros(n, dtype=np.int64)
        p = np.arange(n, dtype=np.int64) if pos is None else pos.astype(np.int64)
        return (np.full(n, int(rec.is_send)), gid, src, dst, tag, np.full(n, rec.id), p, G)


def analyse(outcome: Outcome) -> Analysis:
    s = outcome.schedule
    finished = outcome.finished
    posts, waiting = outcome.unmatched, outcome.waiting
    stuck = outcome.stalled
    peers = posts.src.copy() if len(posts) else np.zeros(0, dtype=np.int64)
    if len(posts):
        peers = np.where(posts.send == 1, posts.dst, posts.src)
    missing_members = _missing_members(outcome)
    relevant = np.unique(np.concatenate([peers, stuck] + [np.asarray(m, dtype=np.int64)
                                                          for m in missing_members.values()]))
    remaining = _Remaining(outcome, relevant, outcome.model.tags)
    could, near = _could_match(posts, remaining)
    unmatched, tags = [], []
    for i in range(len(posts)):
        peer = int(peers[i])
        if finished[peer]:
            unmatched.append((i, "finished"))
        elif could[i]:
            continue
        elif near[i] is not None:
            tags.append((i, near[i], peer))
        else:
            unmatched.append((i, "never"))
    edges: dict[int, list[Edge]] = {}
    missing: list[tuple[Waiting, int, int, str]] = []
    will = _will_call(remaining)
    instances = _instances(waiting)
    member_of = {}
    for inst in instances.values():
        for row in inst.rows:
            member_of[(int(waiting.rank[row]), int(waiting.rec[row]))] = inst
    for r in stuck.tolist():
        rid, pos = outcome.head(r)
        rec = s.records[rid]
        op = rec.base + pos
        out = edges.setdefault(r, [])
        for target, thing in _waits_on(outcome, rec, r, pos, member_of, instances, missing_members):
            if isinstance(thing, Pending):
                if not finished[target] and could[thing.row]:
                    out.append(Edge(r, op, target, thing))
            elif finished[target] or (target, thing.gid) not in will:
                missing.append((thing, target, op, "finished" if finished[target] else "never"))
            else:
                out.append(Edge(r, op, target, thing))
    return Analysis(unmatched, _dedupe_tags(posts, tags), missing, _cycles(edges), edges)


def _could_match(posts: Posts, rem: _Remaining) -> tuple[np.ndarray, list]:
    """Can each pending op's peer still post the complementary op (same channel)? And if not, an op of the
    peer's that differs only in tag (for P204)."""
    n = len(posts)
    if not n:
        return np.zeros(0, dtype=bool), []
    want = 1 - posts.send
    p = rem.p2p
    could = _member((want, posts.gid, posts.src, posts.dst, posts.tag),
                    (p["send"], p["gid"], p["src"], p["dst"], p["tag"]))
    near: list = [None] * n
    loose = np.flatnonzero(~could)
    if loose.size:
        ok = _member((want[loose], posts.gid[loose], posts.src[loose], posts.dst[loose]),
                     (p["send"], p["gid"], p["src"], p["dst"]))
        for i, hit in zip(loose.tolist(), ok.tolist()):
            if hit:
                m = np.flatnonzero((p["send"] == want[i]) & (p["gid"] == posts.gid[i]) & (p["src"] == posts.src[i])
                                   & (p["dst"] == posts.dst[i]))[0]
                near[i] = (int(p["rec"][m]), int(p["pos"][m]))
            else:  # the peer's own pending op on the same pair with another tag
                m = np.flatnonzero((posts.send == want[i]) & (posts.gid == posts.gid[i]) & (posts.src == posts.src[i])
                                   & (posts.dst == posts.dst[i]) & (posts.tag != posts.tag[i]))
                if m.size:
                    first = int(m[np.argmin(posts.order[m])])  # the earliest posted
                    near[i] = (int(posts.rec[first]), int(posts.pos[first]))
    return could, near


def _will_call(rem: _Remaining) -> set[tuple[int, int]]:
    ranks, gids = rem.calls
    return set(zip(ranks.tolist(), gids.tolist()))


def _instances(waiting: Calls) -> dict[tuple[int, int], Waiting]:
    out: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(waiting.gid.tolist(), waiting.seq.tolist())):
        out.setdefault(key, []).append(i)
    return {k: Waiting(k[0], k[1], tuple(v)) for k, v in out.items()}


def _missing_members(outcome: Outcome) -> dict[tuple[int, int], list[int]]:
    """For each unfinished collective, the members that have not called it."""
    s, waiting = outcome.schedule, outcome.waiting
    out = {}
    for key, inst in _instances(waiting).items():
        called = {int(waiting.rank[r]) for r in inst.rows}
        out[key] = [m for m in s.groups[key[0]].ranks if m not in called]
    return out


def _waits_on(outcome: Outcome, rec, rank: int, pos: int, member_of, instances, missing_members):
    """(rank, thing) pairs a stuck rank waits for."""
    posts = outcome.unmatched
    if isinstance(rec, (P2PRec, BatchRec)):
        rows = np.flatnonzero((posts.rank == rank) & (posts.via == rec.id))
        for i in rows.tolist():
            peer = int(posts.dst[i] if posts.send[i] else posts.src[i])
            yield peer, Pending(i)
        return
    if isinstance(rec, CollectiveRec):
        inst = member_of.get((rank, rec.id))
        if inst is not None:
            for m in missing_members[(inst.gid, inst.seq)]:
                yield m, inst
        return
    if isinstance(rec, WaitRec):
        reqs = rec.reqs[rec.starts[pos]:rec.starts[pos + 1]]
        open_ = reqs[~outcome.req_done[reqs]]
        for q in open_.tolist():
            rows = np.flatnonzero(posts.req == q)
            if rows.size:
                i = int(rows[0])
                yield int(posts.dst[i] if posts.send[i] else posts.src[i]), Pending(i)
                continue
            calls = np.flatnonzero(outcome.waiting.req == q)
            if calls.size:
                c = int(calls[0])
                inst = instances[(int(outcome.waiting.gid[c]), int(outcome.waiting.seq[c]))]
                for m in missing_members[(inst.gid, inst.seq)]:
                    yield m, inst


def _dedupe_tags(posts: Posts, tags):
    seen, out = set(), []
    for i, near, peer in tags:
        key = frozenset(((int(posts.rec[i]), int(posts.pos[i])), near))
        if key not in seen:
            seen.add(key)
            out.append((i, near, peer))
    return out


def _cycles(edges: dict[int, list[Edge]]) -> list[list[Edge]]:
    """One cycle per strongly connected component (Tarjan, iterative), walked from its smallest rank.

    A rank waiting in a collective has one edge per member it waits for; several ranks in the same
    collective share those members, which Tarjan visits once each."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for e in it:
                w = e.target
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                comps.append(comp)
    cycles = []
    for comp in comps:
        members = set(comp)
        if len(comp) == 1 and not any(e.target == comp[0] for e in edges.get(comp[0], ())):
            continue
        start = min(comp)
        path, seen, v = [], {}, start
        while v not in seen:
            seen[v] = len(path)
            e = next(e for e in edges[v] if e.target in members)
            path.append(e)
            v = e.target
        cycles.append(path[seen[v]:])
    cycles.sort(key=lambda c: min(e.rank for e in c))
    return cycles
