"""SPMD expansion: the checked AST walked once for all ranks, `rank` a NumPy array of the active ranks.

`on` splits the active set, `for` iterates once for every rank (bounds that differ by rank iterate
min..max with a mask), and each statement instance becomes one record of arrays aligned with the
ranks that execute it. The semantics are `commdsl.expand`'s (chunk = tensor_split along dim 0,
inclusive ranges, exact-integer `/`, views as flat element ranges, groups from its own set-up);
anything it would report, and anything these arrays cannot express exactly, raises `Unknown`.

Static properties of the schedule are checked here, where they are cheap: bad peers and roots,
group membership, buffer fit (N131), the step budget (N133), races inside a batch, collective
agreement (every member, same call), backend reduce-op support and, for `lint`, the idiom lints.
"""

from __future__ import annotations

import math

import numpy as np

from commdsl.checker.rules.backend import unsupported
from commdsl.collectives import REDUCING
from commdsl.expand import MAX_STEPS, MAX_TENSOR_ELEMENTS, _Expander, _Stop
from commdsl.fast.values import (Unknown, as_int, at, binary, call, checked, kind, sub, truthy, unary,
                                  within)
from commdsl.syntax import nodes as n

MAX_BATCH = 32
"""P2P ops of one batch checked pairwise for races; more gives up."""


class VView:
    """A view on the ranks of a record: `off`, `lead` (rows, None for 0-d) scalar or per-rank arrays."""

    __slots__ = ("lead", "off", "rest", "tensor")

    def __init__(self, tensor: str, off, lead, rest: tuple):
        self.tensor, self.off, self.lead, self.rest = tensor, off, lead, rest

    @property
    def numel(self):
        return (1 if self.lead is None else self.lead) * math.prod(self.rest)

    @property
    def ndim(self) -> int:
        return len(self.rest) + (self.lead is not None)


class Rec:
    """One statement instance: its kind, the AST node, the ranks that run it, per-kind fields."""

    def __init__(self, kind: str, node, ranks: np.ndarray, **fields):
        self.kind, self.node, self.ranks = kind, node, ranks
        self.__dict__.update(fields)


class Spmd:
    """The records of one program at one world size, in emission order."""

    def __init__(self, program, world: int, params: dict, backends: tuple[str, ...], lints: bool):
        self.W = world
        self.backends = backends
        self.lints = lints
        ex = _Expander(program, world, params)
        try:
            ex.setup()
        except _Stop:
            raise Unknown from None
        self.ex = ex
        self.groups = ex.groups
        self.group_size = np.array([len(g.ranks) for g in ex.groups], dtype=np.int64)
        self.tables: dict = {}
        self.free: dict = {}
        self.views: dict = {}
        self.records: list[Rec] = []
        self.mask_ids: dict = {}
        self.mask_keep: list = []
        self.masks: list[np.ndarray] = []
        self.steps = 0
        self.batch: list | None = None
        self.max_tag = 0
        self.slots = {"send": 1, "recv": 1}
        if len(self.groups) * world > 50_000_000:
            raise Unknown
        self.coll_count = np.zeros(len(self.groups) * world, dtype=np.int64)
        self.arrivals: list[tuple] = []
        self.static_sigs: dict = {}
        if lints:
            self.run_send = np.zeros(world, dtype=np.int64)
            self.run_recv = np.zeros(world, dtype=np.int64)
            self.last_reduce = np.zeros(world, dtype=bool)
            self.runs = self.reduced = False
        everyone = np.arange(world, dtype=np.int64)
        env = dict(params, rank=everyone, world=world)
        for v in params.values():
            checked(v)
        self.tensors: dict[str, tuple[str, tuple[int, ...], int]] = {}
        self.inits: dict = {}
        for t in program.tensors:
            shape = []
            for d in t.shape:
                v = as_int(self.value(d, env))
                if isinstance(v, np.ndarray):
                    if (v != v[0]).any():
                        raise Unknown  # shapes that differ by rank
                    v = int(v[0])
                shape.append(v)
            numel = math.prod(shape)
            if any(d < 0 for d in shape) or numel > MAX_TENSOR_ELEMENTS:
                raise Unknown
            self.tensors[t.name] = (t.dtype.name, tuple(shape), numel)
        for t in program.tensors:
            if t.init is not None:
                self.inits[t.name] = self.init_tree(t.init, env)
        self.block(program.body, everyone, env)
        if self.steps > MAX_STEPS:
            raise Unknown  # N133 can fire at a later rank's loop in `expand`, which counts rank by rank
        self.finish_collectives()

    # static values -------------------------------------------------------------------------------
    def value(self, e, env):
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return checked(e.value)
            case n.Name():
                if e.id not in env:
                    raise Unknown
                return env[e.id]
            case n.Attr():
                return self.attr(e, env)
            case n.Unary():
                return unary(e.op, self.value(e.operand, env))
            case n.Call(func=n.Name(id=fname)) if fname in ("min", "max", "abs"):
                return call(fname, [self.value(a, env) for a in e.args])
            case n.Binary():
                return binary(e, self.value(e.left, env), self.value(e.right, env))
        raise Unknown

    def int_value(self, e, env):
        return as_int(self.value(e, env))

    def attr(self, e: n.Attr, env):
        if e.attr in ("size", "rows") and self.is_view(e.value, env):
            v = self.view(e.value, env)
            if e.attr == "size":
                return v.numel
            return 1 if v.lead is None else v.lead
        if isinstance(e.value, n.Attr):
            gid_of, idx_in = self.table(e.value.value.id, e.value.attr)
        else:
            gid_of, idx_in = self.table(e.value.id, None)
        ranks = env["rank"]
        if e.attr == "size":
            return self.group_size[gid_of[ranks]]
        idx = idx_in[ranks]
        if (idx < 0).any():
            raise Unknown  # N127: `.rank` of a group the rank is not in
        return idx

    def is_view(self, e, env) -> bool:
        match e:
            case n.Name():
                return e.id in self.tensors and e.id not in env
            case n.Slice() | n.Index():
                return self.is_view(e.value, env)
            case n.Call(func=n.Attr(attr="chunk") as f):
                return self.is_view(f.value, env)
        return False

    def table(self, name: str, dim: str | None):
        """(group id of each rank's group, each rank's index in it or -1) for a group or mesh dimension."""
        key = (name, dim)
        if key not in self.tables:
            entry = self.ex.named[key]
            W = self.W
            idx_in = np.full(W, -1, dtype=np.int64)
            if isinstance(entry, list):
                gid_of = np.array([g.id for g in entry], dtype=np.int64)
                for g in {g.id: g for g in entry}.values():
                    idx_in[list(g.ranks)] = np.arange(len(g.ranks))
            else:
                gid_of = np.full(W, entry.id, dtype=np.int64)
                idx_in[list(entry.ranks)] = np.arange(len(entry.ranks))
            self.tables[key] = (gid_of, idx_in)
        return self.tables[key]

    # views ---------------------------------------------------------------------------------------
    def view(self, e, env) -> VView:
        """The view `e` on the active ranks, remembered per node for the values of the names it reads
        (a statement often names the same chunk two or three times)."""
        names = self.free.get(id(e))
        if names is None:
            names = self.free[id(e)] = (e, tuple(sorted(_names(e))))
        key = tuple((v, type(v)) if not isinstance(v, np.ndarray) else id(v)
                    for v in (env.get(k) for k in names[1]))
        hit = self.views.get(id(e))
        if hit is not None and hit[0] == key:
            return hit[2]
        v = self.make_view(e, env)
        self.views[id(e)] = (key, [env.get(k) for k in names[1]], v)  # the values stay alive: ids stay theirs
        return v

    def make_view(self, e, env) -> VView:
        match e:
            case n.Name():
                _, shape, _ = self.tensors[e.id]
                return VView(e.id, 0, shape[0] if shape else None, shape[1:])
            case n.Slice():
                base = self.view(e.value, env)
                rows = self.rows(base)
                lo = 0 if e.lo is None else self.int_value(e.lo, env)
                hi = rows if e.hi is None else self.int_value(e.hi, env)
                if not (within(lo, 0, hi + 1) and within(hi, lo, rows + 1)):
                    raise Unknown
                return self.rows_view(base, lo, hi - lo, True)
            case n.Index():
                base = self.view(e.value, env)
                rows = self.rows(base)
                k = self.int_value(e.index, env)
                if not within(k, 0, rows):
                    raise Unknown
                return self.rows_view(base, k, 1, False)
            case n.Call(func=n.Attr(attr="chunk") as f):
                base = self.view(f.value, env)
                rows = self.rows(base)
                k = self.int_value(e.args[0], env)
                parts = self.int_value(e.args[1], env)
                if not (within(parts, 1, 1 << 62) and within(k, 0, parts)):
                    raise Unknown
                small, extra = rows // parts, rows % parts
                if not isinstance(extra, np.ndarray) and extra == 0:
                    start, count = (k if small == 1 else k * small), small
                elif isinstance(k, np.ndarray) or isinstance(extra, np.ndarray):
                    start = k * small + np.minimum(k, extra)
                    count = small + (k < extra).astype(np.int64)
                else:
                    start, count = k * small + min(k, extra), small + (k < extra)
                return self.rows_view(base, start, count, True)
        raise Unknown

    @staticmethod
    def rows(v: VView):
        if v.lead is None:
            raise Unknown  # N120: a 0-d view has no rows
        return v.lead

    @staticmethod
    def rows_view(v: VView, start, count, keep: bool) -> VView:
        row = math.prod(v.rest)
        step = start if row == 1 else start * row
        off = step if isinstance(v.off, int) and v.off == 0 else v.off + step
        if keep:
            return VView(v.tensor, off, count, v.rest)
        return VView(v.tensor, off, v.rest[0] if v.rest else None, v.rest[1:])

    def dtype(self, v: VView) -> str:
        return self.tensors[v.tensor][0]

    # element expressions -------------------------------------------------------------------------
    def elem(self, e, env, target: VView):
        """A tree like `expand._Rank.elem`'s, static parts folded to per-rank constants."""
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return ("c", checked(e.value))
            case n.Name(id="i"):
                return ("i",)
            case n.Name() if e.id in self.tensors and e.id not in env:
                return self.read(e, env, target)
            case n.Slice() | n.Index() | n.Call(func=n.Attr(attr="chunk")):
                return self.read(e, env, target)
            case n.Call(func=n.Name(id=fname)) if fname in ("min", "max", "abs"):
                args = tuple(self.elem(a, env, target) for a in e.args)
                if all(a[0] == "c" for a in args):
                    return ("c", self.value(e, env))
                return ("f", fname, args)
            case n.Unary():
                inner = self.elem(e.operand, env, target)
                if inner[0] == "c":
                    return ("c", self.value(e, env))
                if e.op == "not":
                    raise Unknown
                return inner if e.op == "+" else ("u", inner)
            case n.Binary():
                left = self.elem(e.left, env, target)
                right = self.elem(e.right, env, target)
                if e.op not in ("+", "-", "*", "/", "//", "%"):
                    raise Unknown  # comparisons, and/or, ** between tensors: not elementwise arithmetic
                if left[0] == "c" and right[0] == "c":
                    return ("c", binary(e, left[1], right[1]))
                return ("b", e.op, left, right)
            case n.Name() | n.Attr():
                return ("c", self.value(e, env))
        raise Unknown  # rand inside an expression, unknown calls

    def read(self, e, env, target: VView):
        v = self.view(e, env)
        same = self.same_shape(v, target)
        one = v.numel == 1
        if not np.all(same | one):
            raise Unknown  # N123
        if np.all(same):
            return ("v", v, False)
        if np.all(one) and v.ndim <= target.ndim:
            return ("v", v, True)
        raise Unknown

    @staticmethod
    def same_shape(a: VView, b: VView):
        """Per rank: do the two views have one shape (`expand` compares shapes, N123)?"""
        if (a.lead is None) != (b.lead is None) or a.rest != b.rest:
            return False
        return True if a.lead is None else a.lead == b.lead

    def init_tree(self, e, env):
        if isinstance(e, n.Call) and isinstance(e.func, n.Name) and e.func.id in ("rand", "randn"):
            return ("rand", as_int(self.value(e.args[0], env)), e.func.id == "randn")
        return self.elem(e, env, VView("", 0, None, ()))

    # statements ----------------------------------------------------------------------------------
    def block(self, stmts, A: np.ndarray, env: dict):
        env = dict(env)
        for s in stmts:
            if A.size:
                self.stmt(s, A, env)

    def stmt(self, s, A, env):
        match s:
            case n.Let():
                env[s.name] = self.value(s.value, env)
            case n.Assign():
                target = self.view(s.target, env)
                tree = self.elem(s.value, env, target)
                self.emit(Rec("compute", s, A, target=target, tree=tree, op=s.op, reads=_reads(tree)))
            case n.Expect():
                view = self.view(s.cond.left, env)
                tree = self.elem(s.cond.right, env, view)
                self.emit(Rec("expect", s, A, view=view, tree=tree, cmp=s.cond.op, reads=_reads(tree)))
            case n.Print():
                self.emit(Rec("print", s, A, views=[self.view(v, env) for v in s.views]))
            case n.Send() | n.Recv():
                rec = self.p2p(s, A, env)
                if self.batch is not None:
                    self.batch.append(rec)
                else:
                    self.emit(rec)
            case n.Collective():
                self.emit(self.collective(s, A, env))
            case n.For():
                self.loop(s, A, env)
            case n.On():
                rest, renv = A, env
                for br in s.branches:
                    c = truthy(self.value(br.cond, renv))
                    if isinstance(c, np.ndarray):
                        self.block(br.body, rest[c], {k: sub(v, c) for k, v in renv.items()})
                        rest, renv = rest[~c], {k: sub(v, ~c) for k, v in renv.items()}
                    elif c:
                        self.block(br.body, rest, renv)
                        return
                    if not rest.size:
                        return
                self.block(s.orelse, rest, renv)
            case n.Batch():
                if self.batch is not None:
                    raise Unknown
                self.batch = []
                self.block(s.body, A, env)
                subs, self.batch = self.batch, None
                if subs:
                    self.emit(self.make_batch(s, subs))
            case _:
                raise Unknown  # wait, and anything new

    def loop(self, s: n.For, A, env):
        lo, hi = self.int_value(s.lo, env), self.int_value(s.hi, env)
        counts = np.maximum(0, hi - lo + 1)
        self.steps += int(counts.sum()) if isinstance(counts, np.ndarray) else int(counts) * A.size
        if self.steps > MAX_STEPS:
            raise Unknown  # N133
        if not isinstance(lo, np.ndarray) and not isinstance(hi, np.ndarray):
            if hi > lo and self.batch is None and _flat(s.body):
                try:
                    makers = self.plan(s, A, env, lo, hi - lo + 1)
                except Unknown:
                    makers = None  # e.g. an int on one iteration and a float on another: walk them one by one
                if makers is not None:
                    for t in range(hi - lo + 1):
                        for make in makers:
                            self.emit(make(t))
                    return
            for v in range(lo, hi + 1):
                self.block(s.body, A, dict(env, **{s.var: v}))
            return
        lo_a, hi_a = lo + 0 * A, hi + 0 * A
        first, last = int(lo_a.min()), int(hi_a.max())
        if last - first + 1 > 2 * int(np.max(counts)) + 64:
            raise Unknown  # sparse ranges: iterating min..max would cost more than the ops
        for v in range(first, last + 1):
            m = (lo_a <= v) & (v <= hi_a)
            if m.all():
                self.block(s.body, A, dict(env, **{s.var: v}))
            elif m.any():
                self.block(s.body, A[m], dict({k: sub(x, m) for k, x in env.items()}, **{s.var: v}))

    def plan(self, s: n.For, A, env, lo: int, T: int) -> list:
        """Evaluate a flat loop body once for all T iterations (the loop variable a column, the ranks
        a row); returns, per statement, a function building iteration t's record from row t."""
        env = {k: v[None, :] if isinstance(v, np.ndarray) else v for k, v in env.items()}
        env[s.var] = np.arange(lo, lo + T, dtype=np.int64)[:, None]
        makers = []
        for st in s.body:
            match st:
                case n.Let():
                    env[st.name] = self.value(st.value, env)
                case n.Assign():
                    target = self.view(st.target, env)
                    tree = self.elem(st.value, env, target)
                    makers.append(lambda t, st=st, v=target, tree=tree: Rec(
                        "compute", st, A, target=_view_row(v, t), tree=(tr := _tree_row(tree, t)), op=st.op,
                        reads=_reads(tr)))
                case n.Expect():
                    view = self.view(st.cond.left, env)
                    tree = self.elem(st.cond.right, env, view)
                    makers.append(lambda t, st=st, v=view, tree=tree: Rec(
                        "expect", st, A, view=_view_row(v, t), tree=(tr := _tree_row(tree, t)), cmp=st.cond.op,
                        reads=_reads(tr)))
                case n.Print():
                    views = [self.view(v, env) for v in st.views]
                    makers.append(lambda t, st=st, views=views: Rec("print", st, A,
                                                                    views=[_view_row(v, t) for v in views]))
                case n.Send() | n.Recv():
                    rec = self.p2p(st, A, env)
                    makers.append(lambda t, rec=rec: _p2p_row(rec, t))
                case n.Batch():
                    benv, subs = dict(env), []
                    for x in st.body:
                        if isinstance(x, n.Let):
                            benv[x.name] = self.value(x.value, benv)
                        else:
                            subs.append(self.p2p(x, A, benv))
                    if subs:
                        makers.append(lambda t, st=st, subs=subs: self.make_batch(st, [_p2p_row(r, t) for r in subs]))
        return makers

    # records -------------------------------------------------------------------------------------
    def emit(self, rec: Rec):
        A = rec.ranks
        self.steps += A.size
        key = id(A)
        mid = self.mask_ids.get(key)
        if mid is None:
            b = A.tobytes()
            mid = self.mask_ids.get(b)
            if mid is None:
                mid = self.mask_ids[b] = len(self.masks)
                self.masks.append(A)
            self.mask_ids[key] = mid
            self.mask_keep.append(A)
        rec.mask = mid
        rec.id = len(self.records)
        self.records.append(rec)
        if self.lints:
            self.idioms(rec)

    def idioms(self, rec: Rec):
        """Give up wherever an L70x lint could fire (L705 is watched by the engine)."""
        A, W = rec.ranks, self.W
        if rec.kind in ("send", "recv") and rec.gid is None:
            plain = np.asarray(rec.tag) == 0
            mine, other = (self.run_send, self.run_recv) if rec.kind == "send" else (self.run_recv, self.run_send)
            mine[A] = np.where(plain, mine[A] + 1, 0)
            other[A] = 0
            self.runs = True
            if W >= 3 and mine[A].max() >= W - 1:
                raise Unknown  # L701 / L702: a run of sends (receives) as long as the world
        elif self.runs:
            self.run_send[A] = 0
            self.run_recv[A] = 0
            self.runs = bool(self.run_send.any() or self.run_recv.any())
        if W >= 3 and rec.kind == "batch" and np.any(rec.count == 2 * (W - 1)):
            raise Unknown  # L703
        op = rec.op if rec.kind == "coll" else None
        if op == "reduce":
            self.reduced = True
        if self.reduced:
            if op == "broadcast" and self.last_reduce[A].any():
                raise Unknown  # L704
            self.last_reduce[A] = op == "reduce"

    def group_ref(self, ref, A):
        """(gid per rank, index in it per rank) of `in GROUP`, or of the world."""
        if ref is None:
            return 0, A
        gid_of, idx_in = self.table(ref.name, ref.dim)
        return gid_of[A], idx_in[A]

    def p2p(self, s, A, env) -> Rec:
        if not s.blocking:
            raise Unknown  # isend / irecv
        view = self.view(s.buffer, env)
        peer = self.int_value(s.peer, env)
        tag = self.int_value(s.tag, env) if s.tag is not None else 0
        W = self.W
        if not within(peer, 0, W) or np.any(peer == A):
            raise Unknown  # P208, P209
        if not within(tag, 0, 1 << 40):
            raise Unknown
        self.max_tag = max(self.max_tag, int(np.max(tag)))
        gid = None
        if s.group is not None:
            gid_of, idx_in = self.table(s.group.name, s.group.dim)
            gid = gid_of[A]
            pp = peer + 0 * A
            if (idx_in[A] < 0).any() or (idx_in[pp] < 0).any() or (gid_of[pp] != gid).any():
                raise Unknown  # P210
        return Rec("send" if isinstance(s, n.Send) else "recv", s, A, view=view, peer=peer, tag=tag, gid=gid,
                   dtype=self.dtype(view), slot=0, count=1)

    def make_batch(self, node, subs: list[Rec]) -> Rec:
        """One batch: its ranks, how many ops each posts, and each op's slot (its index among the
        rank's sends, or receives, in the batch)."""
        if len(subs) > MAX_BATCH:
            raise Unknown
        self.steps += sum(sr.ranks.size for sr in subs)
        ranks = subs[0].ranks
        if all(sr.ranks is ranks for sr in subs):
            count = len(subs)
            seen = {"send": 0, "recv": 0}
            for sr in subs:
                sr.bpos, sr.slot = None, seen[sr.kind]
                seen[sr.kind] += 1
        else:
            ranks = np.unique(np.concatenate([sr.ranks for sr in subs]))
            count = np.zeros(ranks.size, dtype=np.int64)
            seen = {"send": np.zeros(ranks.size, dtype=np.int64), "recv": np.zeros(ranks.size, dtype=np.int64)}
            for sr in subs:
                sr.bpos = np.searchsorted(ranks, sr.ranks)
                count[sr.bpos] += 1
                sr.slot = seen[sr.kind][sr.bpos]
                seen[sr.kind][sr.bpos] += 1
        for side in ("send", "recv"):
            self.slots[side] = max(self.slots[side], int(np.max(seen[side])))
        for a in range(len(subs)):
            for b in range(a + 1, len(subs)):
                _batch_pair(subs[a], subs[b])
        return Rec("batch", node, ranks, subs=subs, count=count, pairs=self.self_matched(ranks, subs))

    def self_matched(self, ranks, subs: list[Rec]):
        """[(send, receive, position of each send's receiver)] when every op of the batch meets its
        partner inside the batch itself (a ring step, a pairwise swap); else None. When all its ranks
        post it together, nothing else can be pending on those channels, so it completes at once."""
        if not all(sr.ranks is ranks for sr in subs):
            return None
        sends = [sr for sr in subs if sr.kind == "send"]
        recvs = [sr for sr in subs if sr.kind == "recv"]
        if len(sends) != len(recvs):
            return None
        n_ = ranks.size
        pairs = []
        for sd in sends:
            dst = at(sd.peer, None, n_)
            q = dst if n_ == self.W else np.searchsorted(ranks, dst)
            if n_ != self.W and ((q >= n_).any() or (ranks[np.minimum(q, n_ - 1)] != dst).any()):
                return None
            for rv in recvs:
                if (rv.dtype == sd.dtype and _agree(rv.peer, q, ranks) and _agree(rv.tag, q, sd.tag)
                        and _agree(-1 if rv.gid is None else rv.gid, q, -1 if sd.gid is None else sd.gid)
                        and _agree(rv.view.numel, q, sd.view.numel)):
                    pairs.append((sd, rv, q))
                    recvs.remove(rv)
                    break
            else:
                return None
        return pairs

    def collective(self, s: n.Collective, A, env) -> Rec:
        if s.handle is not None or s.in_splits or s.out_splits:
            raise Unknown  # async collectives, uneven all_to_all
        gid, gidx = self.group_ref(s.group, A)
        if np.any(gidx < 0):
            raise Unknown  # C310
        inputs = [self.view(v, env) for v in s.inputs]
        outputs = [self.view(v, env) for v in s.outputs]
        dtypes = {self.dtype(v) for v in inputs + outputs}
        if len(dtypes) > 1:
            raise Unknown  # N130
        dtype = dtypes.pop() if dtypes else "float32"
        size = self.group_size[gid]
        root = root_gidx = None
        if s.root is not None:
            root = self.int_value(s.root, env)
            if not np.all((0 <= root) & (root < self.W)):
                raise Unknown  # P208
            gid_of, idx_in = self.table(s.group.name, s.group.dim) if s.group else (None, None)
            rr = root + 0 * A
            root_gidx = rr if s.group is None else idx_in[rr]
            if s.group is not None and ((root_gidx < 0).any() or (gid_of[rr] != gid).any()):
                raise Unknown  # C311
        redop, scale = None, None
        if s.op in REDUCING:
            redop = s.redop.name.name if s.redop else "sum"
            if s.redop is not None and s.redop.scale is not None:
                scale = self.value(s.redop.scale, env)
                if kind(scale) == "b":
                    raise Unknown
                scale = scale.astype(np.float64) if isinstance(scale, np.ndarray) else float(scale)
                if np.isnan(scale).any():
                    raise Unknown  # NaN never equals itself: members would disagree (C304)
            if any(unsupported(b, redop, dtype) for b in self.backends):
                raise Unknown  # B601
        elif s.redop is not None:
            raise Unknown  # N105
        is_root = (gidx == root_gidx) if root is not None else np.zeros(A.size, dtype=bool)
        contribution = _fit(s, inputs, outputs, size, is_root, A.size)
        if self.lints and any(np.any(v.numel == 0) for v in outputs):
            raise Unknown  # an empty result could still count as overwritten (L705)
        flat = gid * self.W + A
        seq = self.coll_count[flat]
        self.coll_count[flat] += 1
        static = (s.op, redop, dtype, tuple(v.tensor for v in inputs), tuple(v.tensor for v in outputs),
                  s.inputs_listed, s.outputs_listed)
        code = self.static_sigs.setdefault(static, len(self.static_sigs))
        rec = Rec("coll", s, A, op=s.op, gid=gid, gidx=gidx, size=size, root=root, root_gidx=root_gidx,
                  is_root=is_root, inputs=inputs, outputs=outputs, redop=redop, scale=scale, dtype=dtype)
        n_ = A.size
        scale_bits = at(np.float64(np.nan) if scale is None else scale, None, n_).astype(np.float64).view(np.int64)
        sig = np.stack([np.full(n_, code), at(-1 if root is None else root, None, n_), scale_bits,
                        at(contribution, None, n_)])
        self.arrivals.append((rec, at(gid, None, n_), seq, at(gidx, None, n_), sig))
        return rec

    def finish_collectives(self):
        """Group the calls into instances (k-th call on a group); every member, one call, or Unknown."""
        if not self.arrivals:
            self.instances = None
            return
        recs = [a[0] for a in self.arrivals]
        sizes = [a[0].ranks.size for a in self.arrivals]
        rec_of = np.repeat(np.arange(len(recs)), sizes)
        pos = np.concatenate([np.arange(k) for k in sizes])
        gid = np.concatenate([a[1] for a in self.arrivals])
        seq = np.concatenate([a[2] for a in self.arrivals])
        gidx = np.concatenate([a[3] for a in self.arrivals])
        sig = np.concatenate([a[4] for a in self.arrivals], axis=1)
        key = gid * (int(seq.max()) + 1) + seq
        order = np.lexsort((gidx, key))
        key, gid, gidx, sig = key[order], gid[order], gidx[order], sig[:, order]
        rec_of, pos = rec_of[order], pos[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        counts = np.diff(np.r_[starts, key.size])
        if (counts != self.group_size[gid[starts]]).any():
            raise Unknown  # C307: a member never calls it
        inst = np.repeat(np.arange(starts.size), counts)
        if (sig != sig[:, starts[inst]]).any():
            raise Unknown  # C301..C306: members disagree
        unsorted = np.empty_like(inst)
        unsorted[order] = inst
        for rec, mine in zip(recs, np.split(unsorted, np.cumsum(sizes)[:-1])):
            rec.inst = mine
        member_rank = np.concatenate([rec.ranks for rec in recs])[order]
        self.instances = (starts, counts, member_rank, rec_of, pos, recs)


def _agree(theirs, q, mine) -> bool:
    """Does the partner's value (a scalar, or per rank: taken at the partners q) equal mine everywhere?"""
    if not isinstance(theirs, np.ndarray):
        return bool(np.all(theirs == mine))
    return bool(np.all(theirs[q] == mine))


def _flat(body) -> bool:
    """A loop body `plan` can evaluate for all iterations at once: no nested control, no collectives."""
    for st in body:
        if isinstance(st, n.Batch):
            if not all(isinstance(x, (n.Let, n.Send, n.Recv)) for x in st.body):
                return False
        elif not isinstance(st, (n.Let, n.Assign, n.Expect, n.Print, n.Send, n.Recv)):
            return False
    return True


def _row(v, t: int):
    """Iteration t's value of a planned value: a scalar, or an array over the ranks."""
    if not isinstance(v, np.ndarray) or v.ndim < 2:
        return v
    r = v[t] if v.shape[0] > 1 else v[0]
    return r.item() if r.shape[0] == 1 else r


def _view_row(v: VView, t: int) -> VView:
    return VView(v.tensor, _row(v.off, t), None if v.lead is None else _row(v.lead, t), v.rest)


def _tree_row(tree, t: int):
    tag = tree[0]
    if tag == "c":
        return ("c", _row(tree[1], t))
    if tag == "v":
        return ("v", _view_row(tree[1], t), tree[2])
    if tag == "u":
        return ("u", _tree_row(tree[1], t))
    if tag == "b":
        return ("b", tree[1], _tree_row(tree[2], t), _tree_row(tree[3], t))
    if tag == "f":
        return ("f", tree[1], tuple(_tree_row(a, t) for a in tree[2]))
    return tree


def _p2p_row(rec: Rec, t: int) -> Rec:
    return Rec(rec.kind, rec.node, rec.ranks, view=_view_row(rec.view, t), peer=_row(rec.peer, t),
               tag=_row(rec.tag, t), gid=_row(rec.gid, t), dtype=rec.dtype, slot=0, count=1)


def _names(e) -> set[str]:
    """The names an expression reads (its view is a function of their values)."""
    if isinstance(e, n.Name):
        return {e.id}
    out = set()
    for child in n.children(e):
        out |= _names(child)
    return out


def _reads(tree) -> list:
    """The views an element tree reads, in `expand`'s order."""
    out = []

    def walk(t):
        if t[0] == "v":
            out.append(t[1])
        elif t[0] == "u":
            walk(t[1])
        elif t[0] == "b":
            walk(t[2])
            walk(t[3])
        elif t[0] == "f":
            for a in t[2]:
                walk(a)

    walk(tree)
    return out


def _batch_pair(a: Rec, b: Rec):
    """Unknown if two ops of one batch race on a rank (R503) or share a channel (FIFO order matters)."""
    if a.ranks is b.ranks:
        ia = ib = None
        count = a.ranks.size
    else:
        common, ia, ib = np.intersect1d(a.ranks, b.ranks, assume_unique=True, return_indices=True)
        count = common.size
    if not count:
        return
    va, vb = a.view, b.view
    if a.kind == b.kind:
        same = at(a.peer, ia, count) == at(b.peer, ib, count)
        same &= at(a.tag, ia, count) == at(b.tag, ib, count)
        if a.gid is not None or b.gid is not None:
            same &= at(-1 if a.gid is None else a.gid, ia, count) == at(-1 if b.gid is None else b.gid, ib, count)
        if same.any():
            raise Unknown
    if (a.kind == "recv" or b.kind == "recv") and va.tensor == vb.tensor:
        oa, na = at(va.off, ia, count), at(va.numel, ia, count)
        ob, nb = at(vb.off, ib, count), at(vb.numel, ib, count)
        if ((oa < ob + nb) & (ob < oa + na) & (na > 0) & (nb > 0)).any():
            raise Unknown


def _fit(s: n.Collective, inputs, outputs, size, is_root, count: int):
    """`collectives.fit_problem` on every calling rank (Unknown if any buffer does not fit), and the
    contribution per rank that every member must agree on."""
    k = s.op
    ok = True
    if k in ("all_gather", "gather"):
        part = inputs[0].numel
        if k == "all_gather":
            ok = _parts(part, outputs, s.outputs_listed, size)
        else:
            ok = ~is_root | _parts(part, outputs, s.outputs_listed, size)
        contribution = part
    elif k == "scatter":
        part = outputs[0].numel
        ok = ~is_root | _parts(part, inputs, s.inputs_listed, size)
        contribution = part
    elif k == "reduce_scatter":
        part = outputs[0].numel
        ok = _parts(part, inputs, s.inputs_listed, size)
        contribution = part
    elif k == "all_to_all":
        src, dst = inputs[0].numel, outputs[0].numel
        ok = (src == dst) & (src % size == 0)
        contribution = src // size
    elif k == "barrier":
        contribution = 0
    else:
        contribution = inputs[0].numel
    if not np.all(ok):
        raise Unknown  # N131
    return contribution


def _parts(part, bufs, listed: bool, size):
    if listed:
        ok = len(bufs) == size
        for b in bufs:
            ok = ok & (b.numel == part)
        return ok
    return bufs[0].numel == size * part
