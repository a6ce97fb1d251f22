"""Happens-before over one engine run, for the message-race rule (P211): which sends could meet a receive from any.

A receive from any source races when a send from a second rank could be the one it takes: a send on its (group,
destination, tag) that is not ordered after the receive's completion and not taken by an earlier receive. The
engine's rounds show only the sends waiting at the same moment; a slower rank's send, posted later, may still be
unordered. So the run keeps vector clocks, restricted to the ranks that receive from any source (`K` columns:
what each rank knows of how far each of them has come), and the race test reads them at the end.

Ordering comes from data flow only, the edges every backend guarantees (docs/backend-support.md#receive-from-any):
program order; a message orders its sender's posting before its receiver's completion (a blocking receive's
return, an `irecv`'s `wait`); a collective orders the calls of the members whose data a member's result holds
before that member's return (all of them for all_reduce, all_gather, reduce_scatter, all_to_all, barrier; for an
all_to_all with split sizes those it gets rows from; the root's for broadcast and scatter; every member's for the
root of reduce and gather, nothing for its others); `new_group` orders every member's call before each member's
return (Gloo connects the members to each other as it makes the group). Gloo's acknowledgements (a blocking send
returns once its receive is posted, a gather's non-root once the root has called) are not counted: a race only
they would rule out on Gloo is still reported, as it rests on the transport, not on the program's data.

A rank's time is the index in `Schedule.top` of the record it is at (each rank's records are in that order).
Clocks cost O(K) per message and call: K is 1 for a master taking results from any worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from commdsl.p2p import ANY_SOURCE
from commdsl.schedule import CollectiveRec, NewGroupRec, P2PRec
from commdsl.values import distinct, item

if TYPE_CHECKING:
    from commdsl.engine import Calls, Engine, Posts

NEVER = np.iinfo(np.int64).max
"""The completion time of a receive whose request no `wait` took: nothing is known to come after it."""


def wildcard_receivers(schedule) -> np.ndarray:
    """The ranks with a receive from any source (ascending)."""
    ranks = [r.ranks for r in schedule.records if isinstance(r, P2PRec) and r.from_any and r.ranks.size]
    return distinct(np.concatenate(ranks)) if ranks else np.zeros(0, dtype=np.int64)


class Clocks:
    """Vector clocks over an engine run (the engine calls it beside its observer); `races` reads them."""

    def __init__(self, engine: Engine, receivers: np.ndarray):
        s = engine.s
        self.engine, self.s = engine, s
        W, K = s.world, receivers.size
        self.col = np.full(W, -1, dtype=np.int64)  # rank → its column, if it receives from any source
        self.col[receivers] = np.arange(K)
        self.K = K
        self.vc = np.full((W, K), -1, dtype=np.int64)  # what each rank knows of each receiver's time
        self.time = np.full(len(s.records), -1, dtype=np.int64)
        self.time[np.asarray(s.top, dtype=np.int64)] = np.arange(len(s.top))
        self.snaps: dict[int, list] = {}  # record id → [its ranks' clocks as they posted or called it, rows still open]
        self.by_req: dict[int, np.ndarray] = {}  # request → what its completion teaches, until it is waited
        self.made: dict[int, np.ndarray] = {}  # k → each rank's clock as it called its k-th new_group
        # what the race test reads: sends to receivers, receivers' receives, and who met whom
        self.sends: list[tuple] = []
        self.recvs: list[tuple] = []
        self.pairs: list[tuple[np.ndarray, np.ndarray]] = []
        self.order = 0

    # ---- clocks -----------------------------------------------------------------------------------
    def now(self, ranks: np.ndarray, rids) -> np.ndarray:
        """The clocks of `ranks` as they act at records `rids`: what they know, and their own time."""
        v = self.vc[ranks]
        mine = self.col[ranks]
        own = mine >= 0
        if own.any():
            t = np.broadcast_to(self.time[rids], ranks.shape)
            v[np.flatnonzero(own), mine[own]] = t[own]
        return v

    def learn(self, ranks: np.ndarray, vecs: np.ndarray, reqs: np.ndarray) -> None:
        """Ranks learn `vecs` as an op completes: at once where it is blocking or its wait is under way, else
        when its request is waited."""
        later = reqs >= 0
        if later.any():
            waited = self.engine.req_waited[reqs[later]] >= 0
            for q, v, now_ in zip(reqs[later].tolist(), vecs[later], waited.tolist()):
                if now_:
                    continue
                got = self.by_req.get(q)
                self.by_req[q] = v.copy() if got is None else np.maximum(got, v)
            keep = ~later
            keep[np.flatnonzero(later)[waited]] = True
            ranks, vecs = ranks[keep], vecs[keep]
        if ranks.size:
            np.maximum.at(self.vc, ranks, vecs)

    def collective(self, rid: int) -> CollectiveRec:
        """Record `rid` of the engine's calls, which are collectives only."""
        rec = self.s.records[rid]
        assert isinstance(rec, CollectiveRec)
        return rec

    def snapshot(self, rid: int, size: int, pos: np.ndarray, vecs: np.ndarray) -> None:
        """Keep the clocks of a record's ranks as they post or call it, until their messages meet or the call
        completes (`snapped`)."""
        got = self.snaps.get(rid)
        if got is None:
            got = self.snaps[rid] = [np.full((size, self.K), -1, dtype=np.int64), 0]
        got[0][pos] = vecs
        got[1] += int(pos.size)

    def snapped(self, rids: np.ndarray, pos: np.ndarray, done: bool = True) -> np.ndarray:
        """The kept clocks of ops (record ids, positions); `done`: these ops are over, forget them."""
        out = np.empty((rids.size, self.K), dtype=np.int64)
        for rid in distinct(rids).tolist():
            sel = rids == rid
            got = self.snaps[rid]
            out[sel] = got[0][pos[sel]]
            if done:
                got[1] -= int(sel.sum())
                if got[1] <= 0:
                    del self.snaps[rid]
        return out

    # ---- what the engine reports ------------------------------------------------------------------------
    def posted(self, rows: Posts) -> None:
        """Each send's clock as posted; and the rows the race test reads."""
        send = rows.send == 1
        if send.any():
            s = rows.take(send) if not send.all() else rows
            vecs = self.now(s.src, s.via)
            for rid in distinct(s.rec).tolist():
                sel = s.rec == rid
                self.snapshot(rid, self.s.records[rid].ranks.size, s.pos[sel], vecs[sel])
            to = self.col[s.dst]
            keep = to >= 0
            if keep.any():
                n = int(keep.sum())
                seen = vecs[np.flatnonzero(keep), to[keep]]
                order = np.arange(self.order, self.order + n)
                self.order += n
                cols = (s.rec, s.pos, s.src, s.dst, s.gid, s.tag)
                self.sends.append(tuple(c[keep] for c in cols) + (seen, order))
        recv = ~send & (self.col[rows.rank] >= 0)
        if recv.any():
            r = rows.take(recv)
            self.recvs.append((r.rec, r.pos, r.rank, r.gid, r.tag, r.src == ANY_SOURCE, self.time[r.via], r.req))

    def matched(self, sends: Posts, recvs: Posts) -> None:
        """Each receiver learns its sender's clock as posted."""
        self.learn(recvs.rank, self.snapped(sends.rec, sends.pos), recvs.req)
        at = self.col[recvs.rank] >= 0
        if at.any():
            bases = self.s.op_bases
            self.pairs.append((bases[sends.rec[at]] + sends.pos[at], bases[recvs.rec[at]] + recvs.pos[at]))

    def called(self, rec, G: np.ndarray, pos, me) -> None:
        p = np.arange(G.size) if pos is None else np.asarray(pos)
        self.snapshot(rec.id, rec.ranks.size, p, self.now(G, rec.id))

    def released(self, calls: Calls, leaving: np.ndarray) -> None:
        """Members a rooted collective lets go early: on a kind whose root sends they hold the root's data."""
        kind = self.collective(int(calls.rec[0])).kind
        root = np.flatnonzero(calls.rank == calls.root)
        go = np.flatnonzero(leaving & (calls.rank != calls.root))
        if not (kind.root_sends and root.size and go.size):
            return
        vec = self.snapped(calls.rec[root[:1]], calls.pos[root[:1]], done=False)
        self.learn(calls.rank[go], np.repeat(vec, go.size, axis=0), calls.req[go])

    def completed(self, calls: Calls, starts: np.ndarray, counts: np.ndarray) -> None:
        """Members of complete collectives learn the calls of those whose data their result holds."""
        if not len(calls):
            return
        vecs = self.snapped(calls.rec, calls.pos)
        inst = np.repeat(np.arange(starts.size), counts)
        whole = np.maximum.reduceat(vecs, starts, axis=0)
        is_root = calls.rank == calls.root
        root_row = np.full(starts.size, -1, dtype=np.int64)
        root_row[inst[is_root]] = np.flatnonzero(is_root)
        learn = np.zeros(len(calls), dtype=bool)
        got = np.empty_like(vecs)
        kinds = [self.collective(int(r)).kind for r in calls.rec[starts].tolist()]
        for i, kind in enumerate(kinds):
            s, c = int(starts[i]), int(counts[i])
            rows = slice(s, s + c)
            if self.collective(int(calls.rec[s])).out_splits:
                learn[rows], got[rows] = self.split_senders(calls, s, c, vecs)
            elif not kind.rooted:
                learn[rows] = True
                got[rows] = whole[i]
            elif kind.root_sends and root_row[i] >= 0:
                learn[rows] = ~is_root[rows]
                got[rows] = vecs[root_row[i]]
            elif root_row[i] >= 0:
                learn[root_row[i]] = True
                got[root_row[i]] = whole[i]
        learn &= calls.released == 0  # members that left early learned what they could then
        if learn.any():
            self.learn(calls.rank[learn], got[learn], calls.req[learn])

    def split_senders(self, calls: Calls, s: int, c: int, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An all_to_all with split sizes (calls[s:s+c], in group order): each member holds data only of the
        members it receives rows from (`out_splits[j] > 0`); (whether it learns anything, what)."""
        learn = np.zeros(c, dtype=bool)
        got = np.full((c, self.K), -1, dtype=np.int64)
        for i in range(c):
            rec, pos = self.collective(int(calls.rec[s + i])), int(calls.pos[s + i])
            senders = np.flatnonzero(np.array([int(item(sp, pos)) for sp in rec.out_splits]) > 0)
            if senders.size:
                learn[i] = True
                got[i] = vecs[s + senders].max(axis=0)
        return learn, got

    def waited(self, reqs: np.ndarray) -> None:
        """A `wait` teaches what its requests' completions carried (those done already; the others teach as
        they complete, their wait being under way)."""
        for q in reqs.tolist():
            v = self.by_req.pop(q, None)
            if v is not None:
                r = int(self.s.requests.rank[q])
                self.vc[r] = np.maximum(self.vc[r], v)

    def new_group(self, rec: NewGroupRec, G: np.ndarray, pos, k: np.ndarray) -> None:
        """Ranks G call their k-th new_group (records their clocks for the members they will meet)."""
        vecs = self.now(G, rec.id)
        for kk in distinct(k).tolist():
            sel = k == kk
            got = self.made.get(kk)
            if got is None:
                got = self.made[kk] = np.full((self.s.world, self.K), -1, dtype=np.int64)
            got[G[sel]] = vecs[sel]

    def group_made(self, k: int, members: np.ndarray, waiting: np.ndarray) -> None:
        """The members of a group made as k-th new_group have all called it: the `waiting` ones go on knowing
        every member's call."""
        vec = self.made[k][members].max(axis=0)
        self.vc[waiting] = np.maximum(self.vc[waiting], vec)

    # ---- the race test ------------------------------------------------------------------------------------
    def races(self) -> list[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]:
        """((record id, position) of the receive from any, of the send it met, of another send it could have
        met): the first racing receive of each triple of statements (the receive's, the taken send's, the other
        send's), in the order the receives were posted. P211 reports one finding per triple.

        Another send could have met it when it comes from a third rank on the receive's (group, destination,
        tag), is not ordered after the receive's completion, and was not taken first: by a receive from any the
        rank posted before this one, or by a receive naming its source posted before this one completed (the
        engine's matching, docs/language.md §8)."""
        if not self.recvs or not self.sends:
            return []
        S = [np.concatenate(c) for c in zip(*self.sends)]
        s_rec, s_pos, s_src, s_dst, s_gid, s_tag, s_seen, s_order = S
        R = [np.concatenate(c) for c in zip(*self.recvs)]
        r_rec, r_pos, r_rank, r_gid, r_tag, r_wild, r_time, r_req = R
        bases = self.s.op_bases
        s_op, r_op = bases[s_rec] + s_pos, bases[r_rec] + r_pos
        # which receive each send met (-1: none), and that receive's row
        met_by = np.full(s_op.size, -1, dtype=np.int64)
        took = np.full(r_op.size, -1, dtype=np.int64)
        if self.pairs:
            ps = np.concatenate([p[0] for p in self.pairs])
            pr = np.concatenate([p[1] for p in self.pairs])
            s_sort, r_sort = np.argsort(s_op), np.argsort(r_op)
            si = np.searchsorted(s_op, ps, sorter=s_sort)
            ri = np.searchsorted(r_op, pr, sorter=r_sort)
            ok = (si < s_op.size) & (ri < r_op.size)
            si, ri = s_sort[np.minimum(si, s_op.size - 1)], r_sort[np.minimum(ri, r_op.size - 1)]
            ok &= (s_op[si] == ps) & (r_op[ri] == pr)
            met_by[si[ok]] = ri[ok]
            took[ri[ok]] = si[ok]
        done = self.completion(r_time, r_req)
        # each send's and receive's channel (destination, group, tag); sends grouped by channel
        keys = np.stack([np.concatenate(p) for p in ((s_dst, r_rank), (s_gid, r_gid), (s_tag, r_tag))])
        chan = np.unique(keys, axis=1, return_inverse=True)[1].reshape(-1)
        s_chan, r_chan = chan[: s_op.size], chan[s_op.size :]
        by_chan = np.argsort(s_chan, kind="stable")
        bounds = np.searchsorted(s_chan[by_chan], np.arange(int(chan.max()) + 2))
        senders = distinct(np.stack([s_chan, s_src]), axis=1)[0]
        sources = np.bincount(senders, minlength=int(chan.max()) + 1)  # distinct sending ranks per channel
        span = [rec.span for rec in self.s.records]
        statements: dict[int, set] = {}  # per channel, the send statements on it
        for c, rid in distinct(np.stack([s_chan, s_rec]), axis=1).T.tolist():
            statements.setdefault(c, set()).add(span[rid])
        out, found = [], set()
        for r in np.flatnonzero(r_wild & (took >= 0) & (sources[r_chan] > 1)).tolist():
            first = took[r]
            pair = (span[r_rec[r]], span[s_rec[first]])
            if all((*pair, other_span) in found for other_span in statements[r_chan[r]]):
                continue  # every race it could show is listed (a gather from any: all but its first receive)
            cand_idx = by_chan[bounds[r_chan[r]] : bounds[r_chan[r] + 1]]
            # from another rank, not ordered after the receive's completion
            cand_idx = cand_idx[(s_src[cand_idx] != s_src[first]) & (s_seen[cand_idx] <= done[r])]
            if not cand_idx.size:
                continue
            m = met_by[cand_idx]
            mr = np.maximum(m, 0)
            taken_first = (m >= 0) & np.where(r_wild[mr], r_time[mr] < r_time[r], r_time[mr] < done[r]) & (mr != r)
            cand_idx = cand_idx[~taken_first]
            if not cand_idx.size:
                continue
            other = cand_idx[np.lexsort((s_order[cand_idx], s_src[cand_idx]))[0]]
            if (*pair, span[s_rec[other]]) in found:
                continue
            found.add((*pair, span[s_rec[other]]))
            out.append(
                (
                    (int(r_rec[r]), int(r_pos[r])),
                    (int(s_rec[first]), int(s_pos[first])),
                    (int(s_rec[other]), int(s_pos[other])),
                )
            )
        return out

    def completion(self, r_time: np.ndarray, r_req: np.ndarray) -> np.ndarray:
        """Each receive's completion time on its rank: its own record's, or its request's wait's (NEVER if no
        wait took it)."""
        done = r_time.copy()
        asy = np.flatnonzero(r_req >= 0)
        if asy.size:
            wait_op = self.engine.req_waited[r_req[asy]]
            at = np.full(asy.size, NEVER, dtype=np.int64)
            w = wait_op >= 0
            if w.any():
                rec_of = np.searchsorted(self.s.op_bases, wait_op[w], side="right") - 1
                at[w] = self.time[rec_of]
            done[asy] = at
        return done
