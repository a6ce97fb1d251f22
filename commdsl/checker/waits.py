"""The wait-for analysis of a stalled run: who waits for whom, and which waits can never end.

A stuck op waits for a peer. If the peer finished, or nothing left in its program could ever match
(no op of the right kind on the same channel), the op itself is the bug (unmatched, missing
participant). Otherwise the wait is an edge of the wait-for graph, and a cycle there is a deadlock.

A member stuck in `new_group` (Gloo) waits for each member that has not called it.

The graph has a node per rank and one per unfinished collective: a rank stuck in a collective waits
for the collective, and the collective waits for each member that has not called it. So a thousand
ranks waiting for one late member make a thousand edges, not a million.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commdsl.engine import Calls, Outcome, Posts
from commdsl.p2p import ANY_SOURCE
from commdsl.schedule import BatchRec, CollectiveRec, NewGroupRec, P2PRec, WaitRec
from commdsl.values import at, ident


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


@dataclass(frozen=True)
class Making:
    """A `new_group` a member waits in (Gloo): the rank's k-th, which the target member has not called yet."""

    k: int


@dataclass
class Edge:
    rank: int
    op: int  # the op id `rank` is stuck in
    target: int
    thing: object  # Pending, Waiting or Making


@dataclass
class Analysis:
    unmatched: list[tuple[int, str]]  # (row of `unmatched`, "finished" | "never")
    tag_mismatches: list[tuple[int, tuple[int, int], int]]  # (row, (record id, position) of the near op, its rank)
    missing: list[tuple[Waiting, int, int, str]]  # (collective, member, a waiting op id, "finished" | "never")
    cycles: list[list[Edge]]
    edges: dict[int, list[Edge]] = field(default_factory=dict)
    only_sends: set[int] = field(default_factory=set)  # stuck ranks that wait for their own sends alone

    def definite(self, cycle: list[Edge]) -> bool:
        """A cycle that sends which never waited for their receive would not break: no rank in it waits
        for its own sends alone (else it is a buffering hazard: it hangs only where sends wait)."""
        return not any(e.rank in self.only_sends for e in cycle)


def _member(a: tuple, b: tuple) -> np.ndarray:
    """For each row of columns `a`, whether the same row occurs among columns `b`."""
    n = a[0].size
    if not n or not b[0].size:
        return np.zeros(n, dtype=bool)
    cols = [np.concatenate([x, y]) for x, y in zip(a, b)]
    from_b = np.concatenate([np.zeros(n, dtype=np.int64), np.ones(b[0].size, dtype=np.int64)])
    order = np.lexsort(tuple(reversed(cols)))
    new = np.zeros(order.size, dtype=bool)
    new[0] = True
    for c in cols:
        cs = c[order]
        new[1:] |= cs[1:] != cs[:-1]
    starts = np.flatnonzero(new)
    has_b = np.add.reduceat(from_b[order], starts) > 0  # per run of equal rows
    run = np.cumsum(new) - 1
    out = np.zeros(order.size, dtype=bool)
    out[order] = has_b[run]
    return out[:n]


def _content(v):
    """A per-rank field as a key by its values (an array's dtype and bytes), any other value by itself."""
    return (v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else v


class _Ahead:
    """What ranks will still do, looked up only as far ahead as the questions need.

    A question names a rank and something it may post later (a message on a channel, a collective on a
    group). Records are scanned in order from where the asking ranks stopped; a question is answered by
    the first record that has the rank do it, and the scan ends when every question is answered, so in
    the usual stall (each stuck op's partner a few records ahead) only a few records are read."""

    def __init__(self, outcome: Outcome):
        self.s = outcome.schedule
        W = self.s.world
        self.head = np.full(W, np.iinfo(np.int64).max, dtype=np.int64)
        for r in outcome.stalled.tolist():
            self.head[r] = outcome.head(r)[0]

    def messages(self, poster, send, gid, src, dst, tag, tags: bool, with_tag: bool = True):
        """For each asked message (its poster, side and channel), the (record id, position) of a later op of
        the poster's that posts it, or None. `with_tag` False: any tag will do (the near misses of P204)."""
        n = poster.size
        found: list = [None] * n
        if not n:
            return found
        open_ = np.ones(n, dtype=bool)
        W = self.s.world
        asking = np.zeros(W, dtype=bool)
        asking[poster] = True
        heads = np.sort(self.head[poster])
        low = int(heads[0])
        # An op that posts on the channels of one already read answers nothing that one did not, unless more of
        # the asking ranks run it (those stalled before it do not; the questions only get fewer): a loop's ops
        # are read once per count of asking ranks that reach them. A loop's records share their ranks' array
        # (known by identity); a peer computed per iteration is a new array of the same values.
        read: dict[tuple, int] = {}
        for rid in self.s.top:
            if rid < low:
                continue
            rec = self.s.records[rid]
            ops = (rec,) if isinstance(rec, P2PRec) else rec.ops if isinstance(rec, BatchRec) else ()
            running = int(np.searchsorted(heads, rid, side="right"))  # of the asking ranks, those that reach rid
            for op in ops:
                key = (op.is_send, op.from_any, ident(op.ranks), *(_content(v) for v in (op.peer, op.tag, op.gid)))
                if read.get(key) == running:
                    continue
                read[key] = running
                G = op.ranks[asking[op.ranks] & (self.head[op.ranks] <= rid)]
                if not G.size:
                    continue
                pos = op.positions(G)
                k = G.size
                peer = at(op.peer, pos, k).astype(np.int64)
                o_src, o_dst = (G, peer) if op.is_send else (peer, G)
                o_gid = np.zeros(k, dtype=np.int64) if op.gid is None else at(op.gid, pos, k).astype(np.int64)
                o_tag = at(op.tag, pos, k).astype(np.int64) if tags and with_tag else np.zeros(k, dtype=np.int64)
                ask = np.flatnonzero(open_ & (send == int(op.is_send)))
                if not ask.size:
                    continue
                q_tag = tag[ask] if tags and with_tag else np.zeros(ask.size, dtype=np.int64)
                wild = op.from_any  # a receive from any source takes any sender's
                q_src = np.full(ask.size, ANY_SOURCE) if wild else src[ask]
                hit = _member((gid[ask], q_src, dst[ask], q_tag), (o_gid, o_src, o_dst, o_tag))
                for i in ask[hit].tolist():
                    m = np.flatnonzero(
                        (o_gid == gid[i])
                        & (o_src == (ANY_SOURCE if wild else src[i]))
                        & (o_dst == dst[i])
                        & (o_tag == (tag[i] if tags and with_tag else 0))
                    )[0]
                    found[i] = (op.id, int(m if pos is None else pos[m]))
                    open_[i] = False
                if not open_.any():
                    return found
                asking[:] = False
                asking[poster[open_]] = True
        return found

    def calls(self, ranks: list[int], gids: list[int]) -> set[tuple[int, int]]:
        """Which (rank, group) pairs have the rank call a collective on that group later."""
        open_ = set(zip(ranks, gids))
        out: set[tuple[int, int]] = set()
        if not open_:
            return out
        W = self.s.world
        asking = np.zeros(W, dtype=bool)
        asking[list({r for r, _ in open_})] = True
        low = int(min(self.head[r] for r, _ in open_))
        for rid in self.s.top:
            if rid < low:
                continue
            rec = self.s.records[rid]
            if not isinstance(rec, CollectiveRec):
                continue
            G = rec.ranks[asking[rec.ranks] & (self.head[rec.ranks] <= rid)]
            if not G.size:
                continue
            gid = at(rec.gid, rec.positions(G), G.size)
            for r, g in zip(G.tolist(), gid.tolist()):
                if (r, g) in open_:
                    open_.discard((r, g))
                    out.add((r, g))
            if not open_:
                break
            asking[:] = False
            asking[list({r for r, _ in open_})] = True
        return out


def analyse(outcome: Outcome) -> Analysis:
    s = outcome.schedule
    finished = outcome.finished
    posts, waiting = outcome.unmatched, outcome.waiting
    stuck = outcome.stalled
    peers = np.where(posts.send == 1, posts.dst, posts.src) if len(posts) else np.zeros(0, dtype=np.int64)
    wild = (posts.send == 0) & (peers == ANY_SOURCE)
    peers = np.where(wild, posts.rank, peers)  # asked about separately, by `_senders`
    missing_members = _missing_members(outcome)
    ahead = _Ahead(outcome)
    could, near = _could_match(posts, peers, finished, ahead, outcome.model.tags)
    senders = _senders(outcome, ahead, np.flatnonzero(wild))
    for i, who in senders.items():
        could[i], near[i] = bool(who), None
    unmatched, tags = _never_matched(peers, finished, could, near, senders)
    nears = {n for _, n, _ in tags}  # a receive from any that a send's tag misses is that send's P204, once
    unmatched = [(i, why) for i, why in unmatched if i not in senders or _at(posts, i) not in nears]
    edges: dict[int, list[Edge]] = {}
    missing: list[tuple[Waiting, int, int, str]] = []
    instances = _instances(waiting)
    will = _calls_to_come(outcome, ahead, missing_members)
    member_of = {}
    for inst in instances.values():
        for row in inst.rows:
            member_of[(int(waiting.rank[row]), int(waiting.rec[row]))] = inst
    only_sends = set()
    nodes: dict[tuple[int, int], int] = {}  # a collective every member of which its callers wait for → node id
    for r in stuck.tolist():
        rid, pos = outcome.head(r)
        rec = s.records[rid]
        op = rec.base + pos
        out = edges.setdefault(r, [])
        things = list(_waits_on(outcome, rec, r, pos, member_of, instances, missing_members))
        if things and all(
            isinstance(x, Pending) and posts.send[x.row] == 1 and posts.rank[x.row] == r for _, x in things
        ):
            only_sends.add(r)
        for target, thing in things:
            if isinstance(thing, Pending) and thing.row in senders:  # from any: it waits for each of them
                out.extend(Edge(r, op, q, thing) for q in senders[thing.row])
            elif isinstance(thing, Pending):
                if not finished[target] and could[thing.row]:
                    out.append(Edge(r, op, target, thing))
            elif isinstance(thing, Making):  # `_waits_on` names the members that have not finished
                out.append(Edge(r, op, target, thing))
            elif target == EVERY_MISSING:  # one node for the collective: its callers × its absentees stay linear
                key = (thing.gid, thing.seq)
                if key not in nodes:
                    nodes[key] = s.world + len(nodes)
                    inner, absent = _absentees(thing, nodes[key], op, missing_members[key], finished, will)
                    edges[nodes[key]] = inner
                    missing += absent
                out.append(Edge(r, op, nodes[key], thing))
            elif finished[target] or (target, thing.gid) not in will:
                missing.append((thing, target, op, "finished" if finished[target] else "never"))
            else:
                out.append(Edge(r, op, target, thing))
    cycles = [_through_nodes(c, s.world) for c in _cycles(edges)]
    return Analysis(unmatched, _dedupe_tags(posts, tags), missing, [c for c in cycles if c], edges, only_sends)


def _absentees(thing: Waiting, node: int, op: int, members: list[int], finished: np.ndarray, will: set):
    """(edges from a collective's node to the absent members that will still call it, (collective, member, op,
    why) for those that will not)."""
    inner, missing = [], []
    for m in members:
        if finished[m] or (m, thing.gid) not in will:
            missing.append((thing, m, op, "finished" if finished[m] else "never"))
        else:
            inner.append(Edge(node, op, m, thing))
    return inner, missing


def _at(posts: Posts, i: int) -> tuple[int, int]:
    return int(posts.rec[i]), int(posts.pos[i])


def _senders(outcome: Outcome, ahead: _Ahead, wild: np.ndarray) -> dict[int, list[int]]:
    """For each pending receive from any source (rows `wild` of `unmatched`), the unfinished ranks that will
    still send on its channel: the ranks it waits for."""
    posts, W = outcome.unmatched, outcome.schedule.world
    out = {}
    for i in wild.tolist():
        ranks = np.array([q for q in range(W) if q != posts.rank[i] and not outcome.finished[q]], dtype=np.int64)
        k = ranks.size
        found = ahead.messages(
            ranks,
            np.ones(k, dtype=np.int64),
            np.full(k, posts.gid[i]),
            ranks,
            np.full(k, posts.rank[i]),
            np.full(k, posts.tag[i]),
            outcome.model.tags,
        )
        out[i] = [int(q) for q, f in zip(ranks, found) if f is not None]
    return out


def _never_matched(peers: np.ndarray, finished: np.ndarray, could: np.ndarray, near: list, senders: dict):
    """(pending op, "finished" or "never") for each pending op its peer will not answer, and (op, the peer's
    op that differs only in tag, peer) where a tag alone keeps them apart. A receive from any source
    (`senders`) is answered by no one when no rank will send to it: "finished" when all the others have."""
    unmatched, tags = [], []
    for i in range(len(peers)):
        peer = int(peers[i])
        if i in senders:
            if not senders[i]:
                others = np.delete(finished, peer)
                unmatched.append((i, "finished" if others.all() else "never"))
        elif finished[peer]:
            unmatched.append((i, "finished"))
        elif could[i]:
            continue
        elif near[i] is not None:
            tags.append((i, near[i], peer))
        else:
            unmatched.append((i, "never"))
    return unmatched, tags


def _calls_to_come(outcome: Outcome, ahead: _Ahead, missing_members: dict) -> set:
    """(rank, group id) of every absent member that will still call a collective on that group."""
    asked = [(m, key[0]) for key, ms in missing_members.items() for m in ms if not outcome.finished[m]]
    will = ahead.calls([m for m, _ in asked], [g for _, g in asked])
    queued = outcome.queued_calls
    if queued is not None and len(queued):  # NCCL: a call that waits on its stream is still coming
        will |= set(zip(queued.rank.tolist(), queued.gid.tolist(), strict=True))
    return will


EVERY_MISSING = -1
"""A `_waits_on` target: every member of the collective that has not called it."""


def _through_nodes(cycle: list[Edge], world: int) -> list[Edge]:
    """A cycle with its collective nodes taken out: rank → collective → member becomes rank → member."""
    out = []
    for k, e in enumerate(cycle):
        if e.rank >= world:
            continue
        if e.target >= world:
            nxt = cycle[(k + 1) % len(cycle)]
            out.append(Edge(e.rank, e.op, nxt.target, e.thing))
        else:
            out.append(e)
    return out


def _could_match(posts: Posts, peers: np.ndarray, finished: np.ndarray, ahead: _Ahead, tags: bool):
    """Can each pending op's peer still post the complementary op (same channel)? And if not, an op of the
    peer's that differs only in tag (for P204)."""
    n = len(posts)
    if not n:
        return np.zeros(0, dtype=bool), []
    want = 1 - posts.send
    # a partner posted already but not started (NCCL: behind another op on its stream) is still coming
    tag = posts.tag if tags else np.zeros(n, dtype=np.int64)
    could = _member((want, posts.gid, posts.src, posts.dst, tag), (posts.send, posts.gid, posts.src, posts.dst, tag))
    ask = np.flatnonzero(~finished[peers] & ~could)
    found = ahead.messages(peers[ask], want[ask], posts.gid[ask], posts.src[ask], posts.dst[ask], posts.tag[ask], tags)
    could[ask] = [f is not None for f in found]
    near: list = [None] * n
    loose = ask[~could[ask]]
    if loose.size:
        close = ahead.messages(
            peers[loose],
            want[loose],
            posts.gid[loose],
            posts.src[loose],
            posts.dst[loose],
            posts.tag[loose],
            tags,
            with_tag=False,
        )
        for i, hit in zip(loose.tolist(), close):
            if hit is not None and tags:
                near[i] = hit
                continue
            # the peer's own pending op on the same pair with another tag, the first in its program
            m = np.flatnonzero(
                (posts.send == want[i])
                & (posts.gid == posts.gid[i])
                & (posts.src == posts.src[i])
                & (posts.dst == posts.dst[i])
                & (posts.tag != posts.tag[i])
            )
            if m.size:
                first = int(m[np.lexsort((posts.pos[m], posts.rec[m]))[0]])
                near[i] = (int(posts.rec[first]), int(posts.pos[first]))
    return could, near


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


def _needed(outcome: Outcome, inst: Waiting, rank: int) -> list[int]:
    """The members (global ranks) that `rank`, stuck in an unfinished collective, waits for: on Gloo a rooted
    collective needs only some (`Kind.needs`), otherwise every member that has not called (EVERY_MISSING)."""
    waiting, s = outcome.waiting, outcome.schedule
    kind = s.records[int(waiting.rec[inst.rows[0]])].kind
    if not (outcome.model.early_release and kind.rooted):
        return [EVERY_MISSING]
    mine = next(r for r in inst.rows if int(waiting.rank[r]) == rank)  # a rooted collective's tree is small to walk
    group = s.groups[inst.gid].ranks
    arrived = np.zeros(len(group), dtype=bool)
    arrived[waiting.me[list(inst.rows)]] = True
    root = int(waiting.root[mine])
    root_index = group.index(root) if root >= 0 else None
    return [group[int(k)] for k in kind.needs(arrived, root_index, int(waiting.me[mine]))]


def _waits_on(outcome: Outcome, rec, rank: int, pos: int, member_of, instances, missing_members):
    """(rank, thing) pairs a stuck rank waits for. An op that never started (NCCL: behind an async op on its
    stream) waits for what that op waits for."""
    posts = outcome.unmatched
    if isinstance(rec, (P2PRec, BatchRec)):
        rows = np.flatnonzero((posts.rank == rank) & (posts.via == rec.id))
        for i in rows.tolist():
            yield from _through_stream(outcome, i, instances, rank)
        return
    if isinstance(rec, CollectiveRec):
        inst = member_of.get((rank, rec.id))
        if inst is not None:
            for m in _needed(outcome, inst, rank):
                yield m, inst
        elif (rec.id, pos) in outcome.behind:
            yield from _request(outcome, outcome.behind[(rec.id, pos)], instances, rank)
        return
    if isinstance(rec, NewGroupRec):  # a member that finished without making it is C313's
        k, absent = outcome.in_new_group[rank]
        for m in absent:
            if not outcome.finished[m]:
                yield m, Making(k)
        return
    if isinstance(rec, WaitRec):
        reqs = rec.reqs[rec.starts[pos] : rec.starts[pos + 1]]
        for q in reqs[~outcome.req_done[reqs]].tolist():
            yield from _request(outcome, q, instances, rank)


def _through_stream(outcome: Outcome, row: int, instances, rank: int):
    """What pending post `row` waits for: its peer, or, if it never started, what its stream's running op
    waits for."""
    posts = outcome.unmatched
    ahead = outcome.behind.get((int(posts.rec[row]), int(posts.pos[row])))
    if ahead is not None:
        yield from _request(outcome, ahead, instances, rank)
        return
    yield int(posts.dst[row] if posts.send[row] else posts.src[row]), Pending(row)


def _request(outcome: Outcome, q: int, instances, rank: int):
    """What an unfinished request waits for: its messages' peers (a batch's request has one message per op),
    or its collective's missing members."""
    posts = outcome.unmatched
    rows = np.flatnonzero(posts.req == q)
    if rows.size:
        for row in rows.tolist():
            yield from _through_stream(outcome, row, instances, rank)
        return
    calls = np.flatnonzero(outcome.waiting.req == q)
    if calls.size:
        c = int(calls[0])
        inst = instances[(int(outcome.waiting.gid[c]), int(outcome.waiting.seq[c]))]
        for m in _needed(outcome, inst, rank):
            yield m, inst
        return
    queued = outcome.queued_calls
    if queued is not None and len(queued):
        k = np.flatnonzero(queued.req == q)
        if k.size:
            ahead = outcome.behind.get((int(queued.rec[k[0]]), int(queued.pos[k[0]])))
            if ahead is not None:
                yield from _request(outcome, ahead, instances, rank)


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
        cycles.append(path[seen[v] :])
    cycles.sort(key=lambda c: min(e.rank for e in c))
    return cycles
