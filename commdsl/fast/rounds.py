"""The round-based engine: every rank's head op advances at once, ranks at one record in one step.

Rank r's ops are the records whose rank set holds r, in emission order; ranks that belong to the
same rank sets share one op sequence. Each round, the ranks that are not waiting run their head
op: local ops execute (data as `commdsl.simulate`, accesses as the checker's `AccessTracker`), P2P
ops and batches post, collectives arrive. Then posted sends and receives meet by channel key, and
complete collectives move their data. A round with no progress is a stall: `run` answers False.

With only blocking P2P, batches and blocking collectives, what matches what is fixed by the
schedule (FIFO per channel; each channel holds at most one pending send and one pending receive,
because a batch may not repeat a channel), so any fair order reaches the state the scalar engine
reaches; a run that finishes every rank is the scalar engine's completed zero-buffering run.
"""

from __future__ import annotations

import numpy as np

from commdsl import collectives
from commdsl.dtypes import DTYPES
from commdsl.elementwise import random_init
from commdsl.fast.spmd import Rec, Spmd
from commdsl.fast.values import Unknown, Weak, absolute, as_array, at, combine, negate
from commdsl.limits import MEMORY_SHARE, physical_memory
from commdsl.simulate import _cast, judge

MAX_ELEMENTS = 1 << 28
"""Tensor elements over all ranks the fast path holds (data, undefined and unread marks)."""


def ragged(starts: np.ndarray, counts) -> np.ndarray:
    """Flat indices of the ranges [start, start + count), one after another."""
    if np.ndim(counts) and counts.size and counts[0] == counts[-1] and (counts == counts[0]).all():
        counts = counts[0]
    if np.ndim(counts) == 0:
        if counts == 1:
            return starts
        return (starts[:, None] + np.arange(int(counts))).ravel()
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    return np.repeat(starts - first, counts) + np.arange(total)


def layout(counts, n: int):
    """(position of each element's rank, its index `i` within the rank's view)."""
    if np.ndim(counts) == 0:
        c = int(counts)
        return np.repeat(np.arange(n), c), np.tile(np.arange(c, dtype=np.int64), n)
    rep = np.repeat(np.arange(n), counts)
    first = np.cumsum(counts) - counts
    return rep, np.arange(int(counts.sum()), dtype=np.int64) - first[rep]


class Machine:
    def __init__(self, s: Spmd, with_data: bool):
        self.s = s
        self.W = W = s.W
        self.recs = s.records
        self.data = with_data
        self.N = {name: numel for name, (_, _, numel) in s.tensors.items()}
        self.dtype = {name: dt for name, (dt, _, _) in s.tensors.items()}
        total = W * sum(self.N.values())
        if total > MAX_ELEMENTS:
            raise Unknown
        if with_data:
            need = W * sum(N * DTYPES[self.dtype[t]].itemsize for t, N in self.N.items())
            if need > int(physical_memory() * MEMORY_SHARE):
                raise Unknown  # N132
            self.buf = {t: self.initial(t) for t in self.N}
        self.und: dict[str, np.ndarray] = {}
        self.unr: dict[str, np.ndarray] | None = {} if s.lints else None
        groups = len(s.groups)
        self.tag_span = s.max_tag + 1
        if groups * W * W * self.tag_span >= 1 << 62:
            raise Unknown
        self.tables = {kind: {"K": slots, "key": np.full(W * slots, -1, dtype=np.int64),
                              "start": np.zeros(W * slots, dtype=np.int64),
                              "count": np.zeros(W * slots, dtype=np.int64),
                              "meta": np.zeros(W * slots, dtype=np.int64)}
                       for kind, slots in s.slots.items()}
        self.fresh = {"send": [], "recv": []}
        self.codes: dict[tuple, int] = {}
        self.names: list[tuple] = []
        if s.instances is not None:
            self.arrived = np.zeros(s.instances[0].size, dtype=np.int64)
        self.sequences()

    # set-up --------------------------------------------------------------------------------------
    def initial(self, t: str) -> np.ndarray:
        """Every rank's initial contents of tensor t, rank-major (`simulate.initial_value`)."""
        W, N, dtype = self.W, self.N[t], self.dtype[t]
        tree = self.s.inits.get(t)
        if tree is None:
            return np.zeros(W * N, dtype=DTYPES[dtype].numpy)
        if tree[0] == "rand":
            seeds = at(tree[1], None, W)
            return np.concatenate([_cast(random_init(int(seeds[r]), r, N, tree[2]), dtype) for r in range(W)]
                                  or [np.zeros(0, dtype=DTYPES[dtype].numpy)])
        value = self.ev(tree, _Ctx(None, W, N, None))
        return _cast(as_array(value, W * N), dtype).copy()

    def sequences(self):
        """Each rank's op sequence: the records of its rank sets, shared by ranks with the same sets."""
        W, R = self.W, len(self.recs)
        rec_mask = np.array([r.mask for r in self.recs], dtype=np.int64)
        masks = self.s.masks
        if len(masks) <= 1:
            self.flat = np.arange(R, dtype=np.int64)
            member = np.zeros(W, dtype=bool)
            if masks:
                member[masks[0]] = True
            self.base = np.zeros(W, dtype=np.int64)
            self.length = np.where(member, R, 0)
            return
        if len(masks) * W > 50_000_000:
            raise Unknown
        mm = np.zeros((len(masks), W), dtype=bool)
        for m, ranks in enumerate(masks):
            mm[m, ranks] = True
        cols, cls = np.unique(mm.T, axis=0, return_inverse=True)
        if cols.shape[0] * R > 20_000_000:
            raise Unknown
        seqs = [np.flatnonzero(col[rec_mask]) for col in cols]
        lens = np.array([len(q) for q in seqs], dtype=np.int64)
        self.flat = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
        self.base = (np.cumsum(lens) - lens)[cls.ravel()]
        self.length = lens[cls.ravel()]

    # the rounds ----------------------------------------------------------------------------------
    def run(self) -> bool:
        W = self.W
        pc = np.zeros(W, dtype=np.int64)
        posted = np.zeros(W, dtype=bool)
        self.remaining = remaining = np.zeros(W, dtype=np.int64)
        while True:
            live = pc < self.length
            if not live.any():
                return True
            free = np.flatnonzero(live & ~posted)
            progress = free.size > 0
            if progress:
                heads = self.flat[self.base[free] + pc[free]]
                for rid, G in _by_head(heads, free):
                    rec = self.recs[rid]
                    pos = None if G.size == rec.ranks.size else np.searchsorted(rec.ranks, G)
                    kind = rec.kind
                    if kind == "coll":
                        posted[G] = True
                        remaining[G] = 1
                        self.arrive(rec, G, pos)
                    elif kind == "batch" and pos is None and rec.pairs is not None:
                        self.exchange(rec, G)
                        pc[G] += 1
                    elif kind in ("send", "recv", "batch"):
                        posted[G] = True
                        remaining[G] = at(rec.count, pos, 0) if isinstance(rec.count, np.ndarray) else rec.count
                        self.post(rec, G, pos)
                    else:
                        self.local(rec, G, pos)
                        pc[G] += 1
            if self.fresh["send"] or self.fresh["recv"]:
                progress |= self.match()
            done = np.flatnonzero(posted & (remaining == 0))
            if done.size:
                pc[done] += 1
                posted[done] = False
                progress = True
            if not progress:
                return False

    # accesses (the checker's AccessTracker, element by element) ----------------------------------
    def span(self, v, G, pos):
        """(flat start of the view on each rank of G, its element count: scalar or per rank)."""
        off = at(v.off, pos, G.size) if isinstance(v.off, np.ndarray) else v.off
        count = at(v.numel, pos, G.size) if isinstance(v.numel, np.ndarray) else v.numel
        return G * self.N[v.tensor] + off, count

    def tracked(self, t: str) -> bool:
        """Does any access to t need looking at (undefined or unread elements exist)?"""
        return t in self.und or (self.unr is not None and t in self.unr)

    def read_access(self, t: str, idx: np.ndarray):
        u = self.und.get(t)
        if u is not None and (u[idx] >= 0).any():
            raise Unknown  # R504: reads what `reduce` left undefined
        if self.unr is not None:
            m = self.unr.get(t)
            if m is not None:
                m[idx] = False

    def write_access(self, t: str, start, count, idx: np.ndarray):
        if self.unr is not None:
            m = self.unr.get(t)
            if m is not None and m[idx].any():
                raise Unknown  # could overwrite a collective result nobody read (L705)
        u = self.und.get(t)
        if u is None or not (u[idx] >= 0).any():
            return
        N = self.N[t]
        count = np.broadcast_to(count, start.shape)
        keep = count > 0
        start, end = start[keep], start[keep] + count[keep]
        lo = (start // N) * N
        left = start > lo
        ls = np.where(left, start - 1, start)
        right = end < lo + N
        rs = np.where(right, end, end - 1)
        if (left & (u[ls] >= 0) & (u[ls] == u[start])).any() or (right & (u[rs] >= 0) & (u[rs] == u[end - 1])).any():
            raise Unknown  # a write that covers part of an undefined region leaves it undefined
        u[idx] = -1

    def views_access(self, views, G, pos, mode: str, rec: Rec):
        for v in views:
            t = v.tensor
            if mode in ("read", "write") and not self.tracked(t):
                continue
            start, count = self.span(v, G, pos)
            idx = ragged(start, count)
            if mode == "read":
                self.read_access(t, idx)
            elif mode == "write":
                self.write_access(t, start, count, idx)
            elif mode == "undefined":
                u = self.und.get(t)
                if u is None:
                    u = self.und[t] = np.full(self.W * self.N[t], -1, dtype=np.int32)
                u[idx] = rec.id
            elif self.unr is not None:  # "unread": a collective's fresh result
                m = self.unr.get(t)
                if m is None:
                    m = self.unr[t] = np.zeros(self.W * self.N[t], dtype=bool)
                m[idx] = True

    # local ops -----------------------------------------------------------------------------------
    def local(self, rec: Rec, G, pos):
        if rec.kind == "print":
            self.views_access(rec.views, G, pos, "read", rec)
            return
        target = rec.target if rec.kind == "compute" else rec.view
        self.views_access(rec.reads, G, pos, "read", rec)
        if rec.kind == "compute":
            if rec.op != "=":
                self.views_access([target], G, pos, "read", rec)
            self.views_access([target], G, pos, "write", rec)
        else:
            self.views_access([target], G, pos, "read", rec)
        if not self.data:
            return
        start, count = self.span(target, G, pos)
        idx = ragged(start, count)
        value = self.ev(rec.tree, _Ctx(pos, G.size, count, G))
        t = target.tensor
        current = self.buf[t][idx]
        if rec.kind == "expect":
            expected = as_array(value, idx.size)
            if not judge(current, expected, rec.cmp, self.dtype[t])[0]:
                raise Unknown  # V801
            return
        if rec.op != "=":
            value = combine(rec.op[0], current, value)
        self.buf[t][idx] = _cast(np.asarray(as_array(value, idx.size)), self.dtype[t])

    def ev(self, t, ctx: _Ctx):
        """An element tree's value on the elements of `ctx` (`elementwise.evaluate`, vectorised)."""
        tag = t[0]
        if tag == "c":
            v = t[1]
            return Weak(at(v, ctx.pos, ctx.n)[ctx.rep]) if isinstance(v, np.ndarray) else v
        if tag == "i":
            return ctx.i
        if tag == "v":
            v, one = t[1], t[2]
            start, count = self.span(v, ctx.G, ctx.pos)
            if one:
                return self.buf[v.tensor][start][ctx.rep]
            return self.buf[v.tensor][ragged(start, count)]
        if tag == "u":
            return negate(self.ev(t[1], ctx))
        if tag == "b":
            return combine(t[1], self.ev(t[2], ctx), self.ev(t[3], ctx))
        args = [self.ev(a, ctx) for a in t[2]]
        return absolute(args[0]) if t[1] == "abs" else combine(t[1], args[0], args[1])

    # point to point ----------------------------------------------------------------------------
    def post(self, rec: Rec, G, pos):
        """Post P2P ops into per-rank slots: slot j of a rank holds its j-th send (receive) of the op."""
        if rec.kind != "batch":
            parts = [(rec, pos, G)]
        else:
            parts = []
            for sr in rec.subs:
                if pos is None:
                    parts.append((sr, None, sr.ranks))
                elif sr.bpos is None:
                    parts.append((sr, pos, G))
                else:
                    sel = np.zeros(rec.ranks.size, dtype=bool)
                    sel[pos] = True
                    p = np.flatnonzero(sel[sr.bpos])
                    if p.size:
                        parts.append((sr, p, sr.ranks[p]))
        W = self.W
        for sr, p, R in parts:
            v = sr.view
            start, count = self.span(v, R, p)
            if self.tracked(v.tensor):
                idx = ragged(start, count)
                if sr.kind == "send":
                    self.read_access(v.tensor, idx)
                else:
                    self.write_access(v.tensor, start, count, idx)
            n = R.size
            peer = at(sr.peer, p, n)
            src, dst = (R, peer) if sr.kind == "send" else (peer, R)
            key = src * W + dst
            if sr.gid is not None:
                key = key + at(sr.gid, p, n) * (W * W)
            if self.tag_span > 1:
                key = key * self.tag_span + sr.tag if not isinstance(sr.tag, np.ndarray) else \
                    key * self.tag_span + at(sr.tag, p, n)
            tab = self.tables[sr.kind]
            K = tab["K"]
            f = R if K == 1 else R * K + at(sr.slot, p, n)
            tab["key"][f] = key
            tab["start"][f] = start
            tab["count"][f] = count
            tab["meta"][f] = self.code((v.tensor, sr.dtype))
            self.fresh[sr.kind].append((f, peer))

    def exchange(self, rec: Rec, G):
        """A self-matched batch posted by all its ranks at once: accesses, then every message moves."""
        for sd, rv, q in rec.pairs:
            for sr, writes in ((sd, False), (rv, True)):
                if self.tracked(sr.view.tensor):
                    start, count = self.span(sr.view, G, None)
                    idx = ragged(start, count)
                    if writes:
                        self.write_access(sr.view.tensor, start, count, idx)
                    else:
                        self.read_access(sr.view.tensor, idx)
        if not self.data:
            return
        for sd, rv, q in rec.pairs:
            start, count = self.span(sd.view, G, None)
            dst, _ = self.span(rv.view, G, None)
            if isinstance(dst, np.ndarray):
                dst = dst[q]
            self.buf[rv.view.tensor][ragged(dst, count)] = self.buf[sd.view.tensor][ragged(start, count)]

    def code(self, meta: tuple) -> int:
        """A small integer for a (tensor, dtype) pair: posted P2P slots are arrays."""
        c = self.codes.get(meta)
        if c is None:
            c = self.codes[meta] = len(self.names)
            self.names.append(meta)
        return c

    def match(self) -> bool:
        """Match the sends and receives posted this round against every pending one: a new send
        against the receives at its peer, then a new receive against the sends at its peer."""
        sends, recvs = self.fresh["send"], self.fresh["recv"]
        self.fresh = {"send": [], "recv": []}
        S, Rv = self.tables["send"], self.tables["recv"]
        found = False
        for mine, other, new in ((S, Rv, sends), (Rv, S, recvs)):
            K = other["K"]
            for f, peer in new:
                key = mine["key"][f]
                live = key >= 0
                if not live.all():
                    f, key, peer = f[live], key[live], peer[live]
                if not f.size:
                    continue
                if K == 1:
                    hit = other["key"][peer] == key
                    fo = peer
                else:
                    ok = other["key"].reshape(-1, K)[peer] == key[:, None]
                    hit = ok.any(axis=1)
                    fo = peer * K + ok.argmax(axis=1)
                if hit.all():
                    pair = (f, fo)
                elif hit.any():
                    pair = (f[hit], fo[hit])
                else:
                    continue
                self.pair(*(pair if mine is S else pair[::-1]))
                found = True
        return found

    def pair(self, fs, fr):
        """Complete matched sends (slots fs) and receives (slots fr): sizes, dtypes, data, bookkeeping."""
        S, Rv = self.tables["send"], self.tables["recv"]
        count = S["count"][fs]
        if (count != Rv["count"][fr]).any():
            raise Unknown  # P205
        ms, mr = S["meta"][fs], Rv["meta"][fr]
        m0, r0 = ms[0], mr[0]
        combos = [(m0, r0)] if (ms == m0).all() and (mr == r0).all() else \
            {(int(a), int(b)) for a, b in zip(ms, mr)}
        for a, b in combos:
            (src_t, src_d), (dst_t, dst_d) = self.names[a], self.names[b]
            if src_d != dst_d:
                raise Unknown  # P206
            if self.data:
                m = slice(None) if len(combos) == 1 else (ms == a) & (mr == b)
                c = count[m]
                self.buf[dst_t][ragged(Rv["start"][fr][m], c)] = self.buf[src_t][ragged(S["start"][fs][m], c)]
        S["key"][fs] = -1
        Rv["key"][fr] = -1
        for tab, f in ((S, fs), (Rv, fr)):
            if tab["K"] == 1:
                self.remaining[f] -= 1
            else:
                np.subtract.at(self.remaining, f // tab["K"], 1)

    # collectives ---------------------------------------------------------------------------------
    def arrive(self, rec: Rec, G, pos):
        """A call (the checker's accesses, in its order), and the instances it completes."""
        op = rec.op
        root = at(rec.is_root, pos, 0)
        reads = {"barrier": None, "broadcast": root, "scatter": root}.get(op, True)
        writes = {"barrier": None, "broadcast": ~root, "reduce": root, "gather": root}.get(op, True)
        for mask, views, mode in ((reads, rec.inputs, "read"), (writes, rec.outputs, "write"),
                                  (~root if op == "reduce" else None, rec.outputs, "undefined"),
                                  (writes, rec.outputs, "unread")):
            if mask is None or mode == "unread" and self.unr is None:
                continue
            if mask is True:
                self.views_access(views, G, pos, mode, rec)
                continue
            if mask.any():
                p = np.flatnonzero(mask)
                self.views_access(views, G[p], p if pos is None else pos[p], mode, rec)
        ids = at(rec.inst, pos, 0)
        np.add.at(self.arrived, ids, 1)
        starts, counts, member_rank, rec_of, mpos, recs = self.s.instances
        u = np.unique(ids)
        for k in u[self.arrived[u] == counts[u]]:
            sl = slice(starts[k], starts[k] + counts[k])
            if self.data:
                self.complete(member_rank[sl], rec_of[sl], mpos[sl], recs)
            self.remaining[member_rank[sl]] -= 1

    def complete(self, ranks, rec_of, mpos, recs):
        """The data of one collective instance, members in group order (`collectives.apply`)."""
        first = recs[int(rec_of[0])]
        op, size = first.op, ranks.size
        if op == "barrier":
            return
        if (rec_of != rec_of[0]).any():
            raise Unknown  # members issue it from different statements: not vectorised
        ri = None
        if first.root_gidx is not None:
            ri = int(at(first.root_gidx, mpos[:1], 0)[0])

        def rows(views, j, who=None):
            v = views[j]
            p = mpos if who is None else mpos[who:who + 1]
            g = ranks if who is None else ranks[who:who + 1]
            start, count = self.span(v, g, p)
            if np.ndim(count) and (count != count[0]).any():
                raise Unknown
            c = int(count if not np.ndim(count) else count[0])
            return self.buf[v.tensor][ragged(start, c)].reshape(len(g), c)

        def write(views, j, values, who=None):
            v = views[j]
            p = mpos if who is None else mpos[who:who + 1]
            g = ranks if who is None else ranks[who:who + 1]
            start, count = self.span(v, g, p)
            self.buf[v.tensor][ragged(start, count)] = _cast(np.ascontiguousarray(values).reshape(-1), first.dtype)

        redop, scale = first.redop, None
        if first.scale is not None:
            scale = float(at(first.scale, mpos[:1], 0)[0])
        if op == "broadcast":
            src = rows(first.inputs, 0, ri)
            write(first.outputs, 0, np.broadcast_to(src, (size, src.shape[1])))
        elif op in ("all_reduce", "reduce"):
            total = collectives.reduce_arrays(list(rows(first.inputs, 0)), redop, scale)
            if op == "all_reduce":
                write(first.outputs, 0, np.broadcast_to(total, (size, total.size)))
            else:
                write(first.outputs, 0, total, ri)
        elif op in ("all_gather", "gather"):
            parts = rows(first.inputs, 0)
            who = None if op == "all_gather" else ri
            n_out = size if who is None else 1
            if first.node.outputs_listed:
                for j in range(size):
                    write(first.outputs, j, np.broadcast_to(parts[j], (n_out, parts.shape[1])), who)
            else:
                write(first.outputs, 0, np.broadcast_to(parts.reshape(-1), (n_out, parts.size)), who)
        elif op == "scatter":
            if first.node.inputs_listed:
                parts = np.concatenate([rows(first.inputs, j, ri) for j in range(size)])
            else:
                parts = rows(first.inputs, 0, ri).reshape(size, -1)
            write(first.outputs, 0, parts)
        elif op == "reduce_scatter":
            if first.node.inputs_listed:
                per = np.stack([rows(first.inputs, j) for j in range(size)], axis=1)
            else:
                per = rows(first.inputs, 0).reshape(size, size, -1)
            out = [collectives.reduce_arrays([per[r, j] for r in range(size)], redop, scale) for j in range(size)]
            write(first.outputs, 0, np.stack(out) if out else np.zeros((0, 0)))
        elif op == "all_to_all":
            per = rows(first.inputs, 0).reshape(size, size, -1)
            write(first.outputs, 0, per.transpose(1, 0, 2))
        else:
            raise Unknown


class _Ctx:
    """Where an element tree is evaluated: record positions, rank count, element counts; each
    element's rank position (`rep`) and index (`i`) are made on first use."""

    __slots__ = ("G", "_layout", "count", "n", "pos")

    def __init__(self, pos, n, count, G):
        self.pos, self.n, self.count, self.G, self._layout = pos, n, count, G, None

    @property
    def rep(self):
        if self._layout is None:
            self._layout = layout(self.count, self.n)
        return self._layout[0]

    @property
    def i(self):
        if self._layout is None:
            self._layout = layout(self.count, self.n)
        return self._layout[1]


def _by_head(heads: np.ndarray, free: np.ndarray):
    """(record, ranks at it) for the ranks whose head ops are to run."""
    h0 = heads[0]
    if heads[-1] == h0 and (heads == h0).all():
        yield int(h0), free
        return
    order = np.argsort(heads, kind="stable")
    hs, fs = heads[order], free[order]
    cuts = np.flatnonzero(hs[1:] != hs[:-1]) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, hs.size]):
        yield int(hs[a]), fs[a:b]
