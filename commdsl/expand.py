"""Checked Program × world size × params → Schedule (per-rank lists of concrete ops).

Each rank walks the program body with its own bindings (`rank`, `let`, loop variables), so every
peer, tag, root, view and group in the output is an integer. Mistakes that depend on the world size
(a view out of bounds, `n / world` not an integer, a mesh that does not tile the world) are
diagnostics with the world size and rank named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from commdsl.collectives import fit_problem
from commdsl.diagnostics import CommdslError, Diagnostic, Note
from commdsl.elementwise import BINARY
from commdsl.resolve import MAX_WORLD, Program
from commdsl.schedule import (Batch, Collective, Compute, Expect, Group, Print, Recv, Schedule, Send,
                              TensorSpec, View, Wait)
from commdsl.syntax import nodes as n

MAX_TENSOR_ELEMENTS = 1 << 34
MAX_POWER_BITS = 4096
"""`a ** b` on integers known per rank stops here: `10 ** 10 ** 10` is an error, not an hour of arithmetic."""
MAX_STEPS = 20_000_000
"""Loop iterations plus ops over all ranks of one expansion: a hostile `for` bound ends here, not in swap."""


class _Stop(Exception):
    """One expansion error: stops the rank being expanded; expansion goes on with the next rank."""

    def __init__(self, diagnostic: Diagnostic):
        self.diagnostic = diagnostic


def _fail(code: str, message: str, node: n.Node, label: str = "", help: str | None = None):
    raise _Stop(Diagnostic(code=code, message=message, span=node.span, label=label, help=help))


def parse_param_value(text: str) -> int | float | bool | None:
    """A `--set k=v` value: an integer, a number, or true/false; None if it is none of those."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    for conv in (int, float):
        try:
            value = conv(text)
        except ValueError:
            continue
        return value if conv is int or math.isfinite(value) else None
    return None


_COMPILED: dict[int, object] = {}
_KEEP: list = []  # the nodes behind _COMPILED's ids stay alive, so an id is never reused


def _compile_static(e):
    """A closure evaluating a static expression for a `_Rank`: the tree is dispatched once, not per rank."""
    match e:
        case n.IntLit() | n.FloatLit() | n.BoolLit():
            v = e.value
            return lambda r: v
        case n.Name():
            key = e.id

            def name(r):
                try:
                    return r.env[key]
                except KeyError:
                    _fail("N103", f"`{key}` has no value here", e, label="not known before expansion")
            return name
        case n.Attr():
            return lambda r: r.group_attr(e)
        case n.Unary():
            inner = _compile_static(e.operand)
            if e.op == "-":
                return lambda r: -inner(r)
            if e.op == "not":
                return lambda r: not inner(r)
            return inner
        case n.Call(func=n.Name(id=fname)) if fname in ("min", "max", "abs"):
            args = [_compile_static(a) for a in e.args]
            fn = {"min": min, "max": max, "abs": abs}[fname]
            if fname == "abs":
                return lambda r: abs(args[0](r))
            return lambda r: fn(a(r) for a in args)
        case n.Binary(op="and"):
            left, right = _compile_static(e.left), _compile_static(e.right)
            return lambda r: bool(left(r)) and bool(right(r))
        case n.Binary(op="or"):
            left, right = _compile_static(e.left), _compile_static(e.right)
            return lambda r: bool(left(r)) or bool(right(r))
        case n.Binary():
            left, right = _compile_static(e.left), _compile_static(e.right)
            return lambda r: _arith(e, left(r), right(r))
    return lambda r: _fail("N103", "this expression has no integer value", e, label="expected a number")


def _as_int(value, node: n.Node, what: str) -> int:
    if isinstance(value, bool):
        _fail("N121", f"{what} must be an integer, not a condition", node, label="a true/false value")
    if isinstance(value, float):
        if not value.is_integer():
            _fail("N121", f"{what} must be an integer, but it is {value:g}", node, label=f"{value:g}",
                  help="use `//` for integer division")
        return int(value)
    return value


class _Rank:
    """Expands the program for one rank."""

    def __init__(self, ex: "_Expander", rank: int):
        self.ex = ex
        self.rank = rank
        self.env: dict[str, object] = dict(ex.params)
        self.env["rank"] = rank
        self.env["world"] = ex.world
        self.ops: list = []
        self.bindings: tuple[tuple[str, int], ...] = ()
        self.handles: dict[str, int] = {}
        self.outstanding: dict[int, None] = {}
        self.next_req = 0
        self.tensors = ex.tensors_for(rank)

    @classmethod
    def probe(cls, ex: "_Expander | None", rank: int | None, env: dict) -> "_Rank":
        """A rank with bindings only: evaluates header expressions (params, groups, tensor shapes)."""
        r = cls.__new__(cls)
        r.ex, r.rank, r.env, r.tensors = ex, rank, env, {}
        return r

    # static expressions --------------------------------------------------------------------------
    def value(self, e, env=None):
        """The value of a static expression on this rank (compiled once per node, then reused)."""
        if env is not None:  # evaluation in another environment (params before any rank exists)
            saved, self.env = self.env, env
            try:
                return self.value(e)
            finally:
                self.env = saved
        fn = _COMPILED.get(id(e))
        if fn is None:
            fn = _compile_static(e)
            _COMPILED[id(e)] = fn
            _KEEP.append(e)
        return fn(self)

    def int_value(self, e, what: str) -> int:
        return _as_int(self.value(e), e, what)

    def group_attr(self, e: n.Attr):
        if self.ex is None:
            _fail("N103", "a param's default cannot use groups or tensors", e, label="not known when params are set")
        if e.attr in ("size", "rows") and self._is_view(e.value):
            v = self.view(e.value)
            return v.numel if e.attr == "size" else (v.shape[0] if v.shape else 1)
        g = self.group_of(e.value.value.id if isinstance(e.value, n.Attr) else e.value.id,
                          e.value.attr if isinstance(e.value, n.Attr) else None, e)
        if e.attr == "size":
            return len(g.ranks)
        if self.rank not in g.ranks:
            _fail("N127", f"rank {self.rank} is not in group `{g.name}`, so it has no `.rank` there", e,
                  label=f"members are {_ranks_text(g.ranks)}")
        return g.index(self.rank)

    def _is_view(self, e) -> bool:
        match e:
            case n.Name():
                return e.id in self.ex.tensor_names and e.id not in self.env
            case n.Slice() | n.Index():
                return self._is_view(e.value)
            case n.Call(func=n.Attr(attr="chunk") as f):
                return self._is_view(f.value)
        return False

    def group_of(self, name: str, dim: str | None, node: n.Node) -> Group:
        return self.ex.group_for(name, dim, self.rank, node)

    # views and element expressions ---------------------------------------------------------------
    def view(self, e) -> View:
        match e:
            case n.Name():
                t = self.tensors[e.id]
                return View(t.name, 0, t.shape, t.numel)
            case n.Slice():
                base = self.view(e.value)
                rows = self._rows(base, e)
                lo = 0 if e.lo is None else self.int_value(e.lo, "a slice bound")
                hi = rows if e.hi is None else self.int_value(e.hi, "a slice bound")
                if not 0 <= lo <= hi <= rows:
                    _fail("N120", f"slice `[{lo}:{hi}]` is out of bounds for {rows} rows", e,
                          label=f"`{_text(self, e.value)}` has shape {list(base.shape)}")
                return self._rows_view(base, lo, hi - lo, keep=True)
            case n.Index():
                base = self.view(e.value)
                rows = self._rows(base, e)
                k = self.int_value(e.index, "an index")
                if not 0 <= k < rows:
                    _fail("N120", f"index {k} is out of bounds for {rows} rows", e,
                          label=f"`{_text(self, e.value)}` has shape {list(base.shape)}")
                return self._rows_view(base, k, 1, keep=False)
            case n.Call(func=n.Attr(attr="chunk") as f):
                base = self.view(f.value)
                rows = self._rows(base, e)
                k = self.int_value(e.args[0], "a chunk index")
                parts = self.int_value(e.args[1], "a chunk count")
                if parts < 1:
                    _fail("N120", f"`chunk` into {parts} parts", e, label="needs at least 1 part")
                if not 0 <= k < parts:
                    _fail("N120", f"chunk index {k} is out of bounds for {parts} parts", e,
                          label=f"valid indices are 0..{parts - 1}")
                small, extra = divmod(rows, parts)
                start = k * small + min(k, extra)
                return self._rows_view(base, start, small + (k < extra), keep=True)
        _fail("N107", "expected a tensor view", e, label="not a view")

    def _rows(self, v: View, node) -> int:
        if not v.shape:
            _fail("N120", "a 0-dimensional tensor cannot be sliced", node, label="has no rows")
        return v.shape[0]

    @staticmethod
    def _rows_view(v: View, start: int, count: int, keep: bool) -> View:
        row = math.prod(v.shape[1:])
        shape = ((count,) if keep else ()) + v.shape[1:]
        return View(v.tensor, v.offset + start * row, shape, count * row)

    def dtype_of(self, v: View) -> str:
        return self.tensors[v.tensor].dtype

    def elem(self, e, reads: list[View], target_shape: tuple[int, ...]):
        """Compile an element expression: static parts folded to constants, views resolved."""
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return ("c", e.value)
            case n.Name(id="i"):
                return ("i",)
            case n.Name() if e.id in self.tensors and e.id not in self.env:
                return self._read(e, reads, target_shape)
            case n.Slice() | n.Index() | n.Call(func=n.Attr(attr="chunk")):
                return self._read(e, reads, target_shape)
            case n.Call(func=n.Name(id=fname)) if fname in ("rand", "randn"):
                return ("rand", self.int_value(e.args[0], "a seed"), fname == "randn")
            case n.Call(func=n.Name(id=fname)):
                args = tuple(self.elem(a, reads, target_shape) for a in e.args)
                if all(a[0] == "c" for a in args):
                    return ("c", self.value(e))
                return ("f", fname, args)
            case n.Unary():
                inner = self.elem(e.operand, reads, target_shape)
                return ("c", self.value(e)) if inner[0] == "c" else ("u", e.op, inner)
            case n.Binary():
                left = self.elem(e.left, reads, target_shape)
                right = self.elem(e.right, reads, target_shape)
                if left[0] == "c" and right[0] == "c":
                    return ("c", _arith(e, left[1], right[1]))
                if e.op == "**":
                    if right[0] != "c":
                        _fail("N103", "the exponent of `**` must be a number known per rank", e.right,
                              label="varies per element", help="multiply instead, e.g. `x * x`")
                    if isinstance(right[1], int) and not isinstance(right[1], bool) and right[1] < 0:
                        right = ("c", float(right[1]))  # as in `2 ** -1`: a negative power is a fraction
                return ("b", e.op, left, right)
        return ("c", self.value(e))

    def _read(self, e, reads: list[View], target_shape):
        v = self.view(e)
        if v.shape != target_shape and v.numel != 1:
            _fail("N123", f"shape {list(v.shape)} does not match {list(target_shape)}", e,
                  label=f"`{_text(self, e)}` has shape {list(v.shape)}",
                  help="operands of an element expression have the target's shape (or one element)")
        reads.append(v)
        return ("v", v)

    # statements ----------------------------------------------------------------------------------
    def emit(self, op):
        self.ops.append(op)
        self.ex.steps += 1

    def block(self, stmts):
        saved = dict(self.env)
        for s in stmts:
            self.stmt(s)
        # lets are block-scoped: drop the ones this block introduced, keep loop-carried values
        for k in [k for k in self.env if k not in saved]:
            del self.env[k]
        for k, v in saved.items():
            self.env[k] = v

    def stmt(self, s):
        span, b = s.span, self.bindings
        match s:
            case n.Let():
                self.env[s.name] = self.value(s.value)
            case n.Assign():
                target = self.view(s.target)
                reads: list[View] = []
                value = self.elem(s.value, reads, target.shape)
                self.emit(Compute(span=span, bindings=b, target=target, op=s.op, value=value, reads=tuple(reads)))
            case n.Send() | n.Recv():
                op = self.p2p(s)
                if not s.blocking:
                    self.track(s.handle, op.req)
                self.emit(op)
            case n.Collective():
                self.emit(self.collective(s))
            case n.Wait():
                self.emit(self.wait(s))
            case n.Expect():
                view = self.view(s.cond.left)
                reads: list[View] = []
                value = self.elem(s.cond.right, reads, view.shape)
                self.emit(Expect(span=span, bindings=b, view=view, cmp=s.cond.op, value=value, reads=tuple(reads)))
            case n.Print():
                views = tuple(self.view(v) for v in s.views)
                texts = tuple(_text(self, v) for v in s.views)
                self.emit(Print(span=span, bindings=b, views=views, texts=texts))
            case n.For():
                lo = self.int_value(s.lo, "a loop bound")
                hi = self.int_value(s.hi, "a loop bound")
                self.ex.spend(max(0, hi - lo + 1), s)
                outer = self.bindings
                for value in range(lo, hi + 1):
                    self.env[s.var] = value
                    self.bindings = outer + ((s.var, value),)
                    self.block(s.body)
                self.bindings = outer
                self.env.pop(s.var, None)
            case n.On():
                for br in s.branches:
                    if self.value(br.cond):
                        self.block(br.body)
                        break
                else:
                    self.block(s.orelse)
            case n.Batch():
                before = len(self.ops)
                self.block(s.body)
                posted = self.ops[before:]
                del self.ops[before:]
                if posted:
                    self.emit(Batch(span=span, bindings=b, ops=tuple(posted)))

    def p2p(self, s) -> Send | Recv:
        view = self.view(s.buffer)
        peer = self.int_value(s.peer, "a peer rank")
        tag = self.int_value(s.tag, "a tag") if s.tag is not None else 0
        group = self.group_of(s.group.name, s.group.dim, s.group) if s.group else None
        req = None
        if not s.blocking or self._in_batch(s):
            req = self.next_req
            self.next_req += 1
        cls = Send if isinstance(s, n.Send) else Recv
        return cls(span=s.span, bindings=self.bindings, view=view, dtype=self.dtype_of(view), peer=peer, tag=tag,
                   group=group, blocking=s.blocking and req is None, req=req)

    def _in_batch(self, s) -> bool:
        return s.span.start in self.ex.batched

    def track(self, handle: n.Ident | None, req: int):
        if handle is not None:
            self.handles[handle.name] = req
        self.outstanding[req] = None

    def wait(self, s: n.Wait) -> Wait:
        if s.all:
            reqs = tuple(self.outstanding)
            self.outstanding.clear()
            return Wait(span=s.span, bindings=self.bindings, reqs=reqs, all=True)
        reqs = []
        for h in s.handles:
            if h.name not in self.handles:
                _fail("N129", f"handle `{h.name}` has no request on rank {self.rank}", h,
                      label="not assigned on this rank before this point",
                      help="assign it with `h = isend ...` (or another async op) on every rank that waits")
            req = self.handles[h.name]
            self.outstanding.pop(req, None)
            reqs.append(req)
        return Wait(span=s.span, bindings=self.bindings, reqs=tuple(reqs))

    def collective(self, s: n.Collective) -> Collective:
        group = self.group_of(s.group.name, s.group.dim, s.group) if s.group else self.ex.world_group
        inputs = tuple(self.view(v) for v in s.inputs)
        outputs = tuple(self.view(v) for v in s.outputs)
        root = self.int_value(s.root, "a root rank") if s.root is not None else None
        dtypes = {self.dtype_of(v) for v in inputs + outputs}
        if len(dtypes) > 1:
            _fail("N130", f"`{s.op}` mixes dtypes {', '.join(sorted(dtypes))}", s,
                  label="input and output buffers differ in dtype",
                  help="collectives move bytes: give every buffer of one op the same dtype")
        dtype = dtypes.pop() if dtypes else "float32"
        redop = scale = None
        if s.op in ("all_reduce", "reduce", "reduce_scatter"):
            redop = s.redop.name.name if s.redop else "sum"
            if s.redop is not None and s.redop.scale is not None:
                scale = float(self.value(s.redop.scale))
        elif s.redop is not None:
            _fail("N105", f"`{s.op}` takes no reduce op", s.redop, label="only reducing collectives take `op`")
        in_splits = tuple(self.int_value(x, "a split size") for x in s.in_splits)
        out_splits = tuple(self.int_value(x, "a split size") for x in s.out_splits)
        req = None
        if s.handle is not None:
            req = self.next_req
            self.next_req += 1
            self.track(s.handle, req)
        op = Collective(span=s.span, bindings=self.bindings, kind=s.op, group=group, dtype=dtype, inputs=inputs,
                        outputs=outputs, inputs_listed=s.inputs_listed, outputs_listed=s.outputs_listed,
                        root=root, redop=redop, scale=scale, in_splits=in_splits, out_splits=out_splits, req=req)
        if self.rank in group.ranks and (root is None or root in group.ranks):
            problem = fit_problem(op, group.index(self.rank), self.tensors)
            if problem:
                _fail("N131", problem, s, label=f"on rank {self.rank}, group of {len(group.ranks)}",
                      help="size the buffers for the group: see docs/language.md, Collectives")
        return op


class _Expander:
    def __init__(self, program: Program, world: int, params: dict[str, object]):
        self.program = program
        self.world = world
        self.params = params
        self.world_group = Group(0, "world", tuple(range(world)))
        self.groups: list[Group] = [self.world_group]
        self.named: dict[tuple[str, str | None], object] = {}
        self.batched = _batched_starts(program.body)
        self.tensor_names = {t.name for t in program.tensors}
        self.steps = 0
        self._tensor_cache: dict[tuple, dict[str, TensorSpec]] = {}

    def setup(self):
        probe = _Rank.probe(self, None, dict(self.params, world=self.world))
        for g in self.program.groups:
            if isinstance(g, n.MeshDecl):
                self.setup_mesh(g, probe)
            elif g.split_key is None:
                members = [_as_int(probe.value(m), m, "a group member") for m in g.members]
                bad = [m for m in members if not 0 <= m < self.world]
                if bad:
                    _fail("N127", f"group `{g.name}` names rank {bad[0]}, outside world {self.world}", g,
                          label=f"ranks are 0..{self.world - 1}")
                if len(set(members)) != len(members):
                    _fail("N127", f"group `{g.name}` names a rank twice", g, label="duplicate member")
                # torch's new_group orders a group by global rank, whatever order the list is written in
                self.named[(g.name, None)] = self.add_group(g.name, tuple(sorted(members)))
            else:
                keys = []
                for r in range(self.world):
                    probe.env["rank"] = r
                    keys.append(probe.value(g.split_key))
                probe.env.pop("rank")
                by_key: dict = {}
                for r, k in enumerate(keys):
                    by_key.setdefault(k, []).append(r)
                made = {k: self.add_group(f"{g.name}[{k}]", tuple(rs)) for k, rs in sorted(by_key.items())}
                self.named[(g.name, None)] = [made[k] for k in keys]

    def setup_mesh(self, m: n.MeshDecl, probe: _Rank):
        sizes = [_as_int(probe.value(d.size), d, "a mesh dimension") for d in m.dims]
        if math.prod(sizes) != self.world or any(s < 1 for s in sizes):
            dims = " × ".join(f"{d.name}={s}" for d, s in zip(m.dims, sizes))
            _fail("N126", f"mesh `{m.name}` is {dims} = {math.prod(sizes)} ranks, but the world has {self.world}",
                  m, label="the mesh must tile the world exactly")
        coords = [_unravel(r, sizes) for r in range(self.world)]
        for axis, d in enumerate(m.dims):
            by_rest: dict = {}
            for r, c in enumerate(coords):
                by_rest.setdefault(c[:axis] + c[axis + 1 :], []).append(r)
            made = {k: self.add_group(f"{m.name}.{d.name}{list(k)}", tuple(rs)) for k, rs in sorted(by_rest.items())}
            self.named[(m.name, d.name)] = [made[c[:axis] + c[axis + 1 :]] for c in coords]

    def spend(self, steps: int, node: n.Node):
        self.steps += steps
        if self.steps > MAX_STEPS:
            _fail("N133", f"the program expands to over {MAX_STEPS:,} loop steps and ops at world {self.world}", node,
                  label="this loop pushes it over the limit",
                  help="check the loop bounds and params; commdsl expands every rank's ops in memory")

    def add_group(self, name: str, ranks: tuple[int, ...]) -> Group:
        g = Group(len(self.groups), name, ranks)
        self.groups.append(g)
        return g

    def group_for(self, name: str, dim: str | None, rank: int, node: n.Node) -> Group:
        entry = self.named[(name, dim)]
        if isinstance(entry, list):
            if rank is None:
                _fail("N103", f"`{name}` differs per rank; it cannot be used here", node, label="depends on rank")
            return entry[rank]
        return entry

    def tensors_for(self, rank: int) -> dict[str, TensorSpec]:
        probe = _Rank.probe(self, rank, dict(self.params, rank=rank, world=self.world))
        shapes = []
        for t in self.program.tensors:
            shape = tuple(_as_int(probe.value(d), d, "a tensor dimension") for d in t.shape)
            if any(d < 0 for d in shape):
                _fail("N128", f"tensor `{t.name}` has negative shape {list(shape)}", t, label=f"on rank {rank}")
            shapes.append(shape)
        key = tuple(shapes)
        cached = self._tensor_cache.get(key)
        uses_rank = self.inits_use_rank
        if cached is not None and not uses_rank:
            return cached
        out = {}
        probe.tensors = out
        for t, shape in zip(self.program.tensors, shapes):
            numel = math.prod(shape)
            if numel > MAX_TENSOR_ELEMENTS:
                _fail("N128", f"tensor `{t.name}` has {numel} elements, over the limit of {MAX_TENSOR_ELEMENTS}",
                      t, label=f"shape {list(shape)}")
            init = None
            if t.init is not None:
                init = probe.elem(t.init, [], shape)
            out[t.name] = TensorSpec(t.name, t.dtype.name, shape, numel, init, t.span)
        if not uses_rank:
            self._tensor_cache[key] = out
        return out

    @property
    def inits_use_rank(self) -> bool:
        return any(t.init is not None and _mentions(t.init, "rank") for t in self.program.tensors)


def _mentions(e, name: str) -> bool:
    if isinstance(e, n.Name):
        return e.id == name
    return any(_mentions(c, name) for c in n.children(e))


def _batched_starts(stmts) -> set[int]:
    """Span starts of every P2P statement inside a `batch:` block (they post without blocking)."""
    out: set[int] = set()

    def walk(body, inside):
        for s in body:
            if isinstance(s, (n.Send, n.Recv)) and inside:
                out.add(s.span.start)
            elif isinstance(s, n.Batch):
                walk(s.body, True)
            elif isinstance(s, n.For):
                walk(s.body, inside)
            elif isinstance(s, n.On):
                for br in s.branches:
                    walk(br.body, inside)
                walk(s.orelse, inside)

    walk(stmts, False)
    return out


def _unravel(rank: int, sizes: list[int]) -> tuple[int, ...]:
    coords = []
    for s in reversed(sizes):
        coords.append(rank % s)
        rank //= s
    return tuple(reversed(coords))


def _arith(e: n.Binary, a, b):
    """Python semantics for per-rank integers, with `/` exact when it divides and guarded powers."""
    op = e.op
    if op == "/" and isinstance(a, int) and isinstance(b, int) and b != 0 and a % b == 0:
        return a // b
    if op == "**" and isinstance(a, int) and isinstance(b, int) and b > 0 \
            and b * (abs(a).bit_length() - 1) > MAX_POWER_BITS:
        _fail("N121", "this value is too large", e, label=f"`{a} ** {b}` has over {MAX_POWER_BITS} bits")
    if op not in BINARY:
        _fail("N107", f"unknown operator `{op}`", e)
    try:
        value = BINARY[op](a, b)
    except ZeroDivisionError:
        _fail("N122", f"division by zero in `{op}`", e, label="the right-hand side is 0 here")
    except OverflowError:
        _fail("N121", "this value is too large", e, label="overflow")
    if isinstance(value, complex):
        _fail("N121", "this value is not a real number", e, label=f"`{a} ** {b}` is complex")
    return value


def _text(r: _Rank, e) -> str:
    src = r.ex.program.source.text
    return src[e.span.start : e.span.end]


def _ranks_text(ranks) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


def resolve_params(program: Program, overrides: Mapping[str, object] | None) -> dict[str, object]:
    """Defaults, then `--set` overrides (strings are parsed); N125 for an unknown or bad value."""
    overrides = dict(overrides or {})
    declared = {p.name: p for p in program.params}
    problems = []
    for k, v in overrides.items():
        if k not in declared:
            names = ", ".join(declared) or "none"
            problems.append(Diagnostic(code="N125", message=f"`--set {k}`: the program has no param `{k}`",
                                       notes=(Note(message=f"its params: {names}"),)))
        elif isinstance(v, str) and parse_param_value(v) is None:
            problems.append(Diagnostic(code="N125", message=f"`--set {k}={v}`: not an integer, number or true/false",
                                       span=declared[k].span, label=f"`{k}` is declared here"))
    if problems:
        raise CommdslError(problems)
    env: dict[str, object] = {}
    probe = _Rank.probe(None, None, env)
    for p in program.params:
        if p.name in overrides:
            v = overrides[p.name]
            env[p.name] = parse_param_value(v) if isinstance(v, str) else v
        else:
            try:
                env[p.name] = probe.value(p.default)
            except _Stop as stop:
                raise CommdslError([stop.diagnostic]) from None
    return env


def expand(program: Program, world: int, params: Mapping[str, object] | None = None) -> Schedule:
    """The Schedule of `program` at `world` ranks; raises CommdslError with every expansion error."""
    if not program.accepts(world) or not 1 <= world <= MAX_WORLD:
        span = program.world.span if program.world else None
        raise CommdslError([Diagnostic(
            code="N124", message=f"world size {world} is outside the program's declared sizes ({program.describe_world()})",
            span=span, label="declared here" if span else "",
            help="run at a declared size, or widen the `world` line")])
    env = resolve_params(program, params)
    ex = _Expander(program, world, env)
    try:
        ex.setup()
    except _Stop as stop:
        raise CommdslError([_at_world(stop.diagnostic, world, None)]) from None
    ops, tensors, errors = [], [], {}
    for rank in range(world):
        try:
            r = _Rank(ex, rank)
            r.block(program.body)
        except _Stop as stop:
            d = stop.diagnostic
            errors.setdefault((d.code, d.span.start if d.span else -1), (d, rank))
            ops.append([])
            tensors.append({})
            continue
        ops.append(r.ops)
        tensors.append(r.tensors)
    if errors:
        raise CommdslError([_at_world(d, world, rank) for d, rank in errors.values()])
    return Schedule(program=program.name, path=program.path, world=world, params=env, backends=program.backends,
                    groups=ex.groups, tensors=tensors, ops=ops)


def _at_world(d: Diagnostic, world: int, rank: int | None) -> Diagnostic:
    """The world size goes in `worlds` (merged across sizes by the checker, rendered as a note), the rank
    in a note of its own: a note saying "at world size 2" would hide the merged list of sizes."""
    notes = d.notes + ((Note(message=f"on rank {rank}"),) if rank is not None else ())
    return d.model_copy(update={"notes": notes, "worlds": (world,)})
