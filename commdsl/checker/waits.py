"""The wait-for analysis of a stalled run: who waits for whom, and which waits can never end.

A stuck op waits for a peer. If the peer finished, or will never post a matching op (nothing left in
its op list could match), the op itself is the bug (unmatched, missing participant). Otherwise the
wait is an edge of the wait-for graph; a cycle there is a deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass

from commdsl.engine import Instance, Posted
from commdsl.schedule import Batch, Collective, Recv, Send


@dataclass
class Edge:
    rank: int
    op: object  # the op `rank` is stuck in
    target: int
    thing: object  # Posted or Instance


@dataclass
class Analysis:
    unmatched: list[tuple[Posted, str]]  # reason: "finished" or "never"
    tag_mismatches: list[tuple[Posted, object, int]]  # (posted, other op, other rank)
    missing: list[tuple[Instance, int, object, str]]  # (instance, member, waiting op, reason)
    cycles: list[list[Edge]]
    edges: dict[int, list[Edge]]


def _remaining_p2p(ctx, rank: int):
    """(op, index) for every P2P op rank has not passed yet, batch members included."""
    ops = ctx.schedule.ops[rank]
    for i in range(ctx.zero.positions[rank], len(ops)):
        op = ops[i]
        if type(op) is Batch:
            for sub in op.ops:
                yield sub
        elif type(op) in (Send, Recv):
            yield op


def _could_match(ctx, p: Posted) -> tuple[bool, object]:
    """Can p's peer still post the complementary op? Returns (yes, an op differing only in tag)."""
    want = Recv if type(p.op) is Send else Send
    peer, me = p.op.peer, p.rank
    gid = p.op.group.id if p.op.group else 0
    near = None
    for op in _remaining_p2p(ctx, peer):
        if type(op) is want and op.peer == me and (op.group.id if op.group else 0) == gid:
            if ctx.zero.ignore_tags or op.tag == p.op.tag:
                return True, None
            near = near or op
    if near is None:
        for q in ctx.zero.unmatched:
            if q.rank == peer and type(q.op) is want and q.op.peer == me and q.op.tag != p.op.tag:
                near = q.op
                break
    return False, near


def analyse(ctx) -> Analysis:
    res = ctx.zero
    finished = res.finished
    unmatched, tags, missing, edges = [], [], [], {}
    for p in res.unmatched:
        peer = p.op.peer
        if finished[peer]:
            unmatched.append((p, "finished"))
            continue
        yes, near = _could_match(ctx, p)
        if yes:
            if p.rank in res.stalled:
                edges.setdefault(p.rank, [])
            continue
        if near is not None:
            tags.append((p, near, peer))
        else:
            unmatched.append((p, "never"))
    for r, blocked in res.stalled.items():
        out = edges.setdefault(r, [])
        for target, thing in blocked.waits_on:
            if isinstance(thing, Posted):
                if not finished[target] and _could_match(ctx, thing)[0]:
                    out.append(Edge(r, blocked.op, target, thing))
            elif isinstance(thing, Instance):
                if finished[target] or not _will_call(ctx, target, thing):
                    missing.append((thing, target, blocked.op, "finished" if finished[target] else "never"))
                else:
                    out.append(Edge(r, blocked.op, target, thing))
    return Analysis(unmatched, _dedupe_tags(tags), missing, _cycles(edges), edges)


def _will_call(ctx, rank: int, inst: Instance) -> bool:
    ops = ctx.schedule.ops[rank]
    return any(type(op) is Collective and op.group.id == inst.group.id
               for op in ops[ctx.zero.positions[rank]:])


def _dedupe_tags(tags):
    seen, out = set(), []
    for p, near, peer in tags:
        key = frozenset((id(p.op), id(near)))
        if key not in seen:
            seen.add(key)
            out.append((p, near, peer))
    return out


def _cycles(edges: dict[int, list[Edge]]) -> list[list[Edge]]:
    """One cycle per strongly connected component (Tarjan), walked from its smallest rank."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        work = [(v, iter(edges.get(v, ())))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for e in it:
                w = e.target
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
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

    for v in sorted(edges):
        if v not in index:
            strong(v)
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
