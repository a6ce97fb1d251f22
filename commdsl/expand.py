"""Checked Program × world size × params → Schedule: every statement expanded once for all ranks.

The body is walked once, not once per rank: `rank` is an array of the ranks that reach a statement,
`on` splits that set, and every expression is evaluated for all of them together (`commdsl.values`).
Each statement instance becomes one record of the Schedule, its per-rank fields arrays aligned with
its ranks. Loop bodies run once per iteration (their per-rank integer arithmetic computed ahead for a
block of iterations at once, `commdsl.hoist`); a loop whose bounds differ by rank runs each rank's own
iterations.

A mistake that depends on the world size or the rank (a view out of bounds, `n / world` not an
integer, a mesh that does not tile the world) stops the ranks it happens on, with a diagnostic naming
the world size and the first such rank; the other ranks go on, so one expansion reports every
distinct mistake.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import numpy as np

from commdsl.collectives import KINDS, Call
from commdsl.diagnostics import CommdslError, Diagnostic, Note
from commdsl.elementwise import FLOAT_MAX, category, fill_refuses, integer_division, refusal
from commdsl.hoist import Hoist, Plan, plan
from commdsl.limits import (
    MAX_COLLECTIVE_CALLS,
    MAX_OPS,
    MAX_READ_PASSES,
    MAX_RECORDS,
    MAX_TABLE,
    MAX_WHILE_ITERATIONS,
    Deadline,
    memory_problem,
    time_limit,
)
from commdsl.p2p import ANY_SOURCE
from commdsl.resolve import MAX_WORLD, Program, bound_handle_names, call_note, step_group_names
from commdsl.rules.names import BadReduceOp, InvalidBatch, InvalidView, WrongKindOfName
from commdsl.rules.sizes import (
    BadParamValue,
    BufferDoesNotFit,
    ConstantOutOfRange,
    DivisionByZero,
    ExpansionTooLarge,
    HandleNotAssigned,
    InvalidGroup,
    InvalidTensorSize,
    MeshDoesNotTileWorld,
    MixedDtypes,
    NotAnInteger,
    ShapeMismatch,
    UnsupportedElementOp,
    ViewOutOfBounds,
    WorldSizeNotDeclared,
)
from commdsl.schedule import (
    VIEW_FIELDS,
    VIEW_TUPLE_FIELDS,
    BatchRec,
    Coalesced,
    CollectiveRec,
    ComputeRec,
    ExpectRec,
    Group,
    NewGroupRec,
    P2PRec,
    PrintRec,
    ReadRec,
    Requests,
    Schedule,
    TensorInfo,
    VView,
    WaitRec,
    elem_reads,
    values_read,
)
from commdsl.syntax import nodes as n
from commdsl.values import (
    Failure,
    Unread,
    as_index_array,
    as_int,
    binary,
    call,
    distinct,
    fail_all,
    is_vec,
    item,
    log2,
    merge,
    sub,
    tidy,
    truthy,
    unary,
    uniform,
)

MAX_TENSOR_ELEMENTS = 1 << 34
_SMALL_INTS = tuple((t, int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int8, np.int16, np.int32))
"""The types `Expander.small` stores per-rank integers in, with their ranges, smallest first."""
VIEW_CACHE = 64
"""Views remembered by `Expander.view` (a loop iteration's worth)."""

Env = dict


@dataclass(frozen=True)
class Snapshots:
    """What runs of the schedule showed so far: a rank's tensors (flat, by name) when it made its n-th read from
    tensor data, at (rank, n). An expansion is a function of these: from a snapshot on, it reads that rank's
    values itself, until the rank receives data (`Expander.data_read`)."""

    at: dict[tuple[int, int], dict[str, np.ndarray]]


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


def _sub_env(env: Env, sel) -> Env:
    return {k: _sub_value(v, sel) for k, v in env.items()}


def _sub_value(v, sel):
    """A name's value on some of the ranks: a function's view parameter holds a view, per rank like any value."""
    if isinstance(v, VView):
        return VView(v.tensor, sub(v.offset, sel), tuple(sub(d, sel) for d in v.shape))
    return sub(v, sel)


def _range_text(dtype: str) -> str:
    """What a dtype holds, in the words of a label."""
    if dtype in ("float16", "bfloat16", "float32"):
        return f"{dtype} holds at most ±{FLOAT_MAX[dtype]:.5g}"
    info = np.iinfo(dtype)
    return f"{dtype} holds {info.min}..{info.max}"


def _ranks_text(ranks) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


class _Stop(Exception):
    """An error that stops the whole expansion (group and mesh set-up: every rank needs them)."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__()
        self.diagnostic = diagnostic


class Expander:
    """One expansion: the program's records at one world size."""

    def __init__(
        self,
        program: Program,
        world: int,
        params: dict[str, object],
        deadline: Deadline | None = None,
        snapshots: Snapshots | None = None,
    ):
        self.program = program
        self.deadline = deadline or Deadline(None)
        self.W = world
        self.params = params
        self.everyone = np.arange(world, dtype=np.int64)
        self.groups: list[Group] = [Group(0, "world", tuple(range(world)))]
        self.group_of: dict[tuple[str, str | None], tuple[np.ndarray, np.ndarray]] = {}
        self.tables: dict[str, np.ndarray] = {}  # each table's entries (int64, or Python ints past int64)
        self.tensor_names = {t.name for t in program.tensors}
        self.infos: dict[str, TensorInfo] = {}
        self.records: list = []
        self.top: list[int] = []
        self.op_count = 0
        self.steps = 0
        self.collective_calls = 0
        self.errors: dict[tuple, tuple[Diagnostic, int]] = {}
        self.alive = np.ones(world, dtype=bool)
        self.deaths = 0
        self.batch: list[P2PRec] | None = None
        self.handles: dict[tuple[str, int | None], np.ndarray] = {}  # (name, slot or None) → request per rank
        self.req_chunks: list[tuple[np.ndarray, int, np.ndarray, np.ndarray | int]] = []
        self.req_count = 0
        # outstanding requests (what `wait all` waits for) and their ranks, as posted: joined only by a `wait
        # all`, and a waited one marked in `waited`, so that requests never waited (an `isend` left in flight
        # at every step of a ring) cost no copy of all the others at each post
        self.live: list[tuple[np.ndarray, np.ndarray]] = []
        self.waited = np.zeros(0, dtype=bool)
        self.free: dict[int, tuple] = {}  # node id → (node, its text, the names it reads)
        self.views: dict[tuple, tuple] = {}  # the most recent views, see `view`
        self.scopes: list[tuple[set[str], set[str]]] = []  # per open block: its `let`s, outer `let`s it reassigned
        self.compacted: dict[int, tuple] = {}  # array id → (array, its int32 copy), see `compact`
        self.made = frozenset(step_group_names(program.body))  # names `new_group` binds: no rank has them yet
        self.made_count = np.zeros(world, dtype=np.int64)  # per rank, the `new_group` calls it has made
        self.made_groups: dict[tuple[int, ...], Group] = {}  # see `step_group`
        for name in self.made:
            self.group_of[(name, None)] = (np.full(world, -1, dtype=np.int64), np.full(world, -1, dtype=np.int64))
        self.functions = {f.name.name: f for f in program.functions}
        self.local_handles = {f.name.name: bound_handle_names(f.body) for f in program.functions}
        self.group_alias: dict[str, tuple[str, str | None]] = {}  # a group parameter → the group it was passed
        self.calling: list[n.CallStmt] = []  # the calls being inlined, outermost first
        self.renamed: dict[tuple, tuple] = {}  # see `in_group_named`
        self.reached: dict[str, dict[tuple, None]] = {}  # function → the call chains that ran its body, in order
        # integers read from tensor data (`T[k]`, `sum(E)`): see `data_read` and `expand`
        self.reads_data = program.reads_data
        self.snapshots = snapshots or Snapshots({})
        self.snapshot_ordinals: dict[int, list[int]] = {}  # per rank, the ordinals of its snapshots not yet used
        for r, o in sorted(self.snapshots.at):
            self.snapshot_ordinals.setdefault(r, []).append(o)
        self.snapshot_next = np.full(world, -1, dtype=np.int64)  # per rank, the ordinal of its next snapshot
        for r, later in self.snapshot_ordinals.items():
            self.snapshot_next[r] = later.pop(0)
        self.tensors = None  # the tensors of the ranks in `synced`, as the expansion goes (`data_read`)
        self.synced = np.ones(world, dtype=bool)
        self.read_count = np.zeros(world, dtype=np.int64)  # per rank, the reads it has made
        self.pending: list[ReadRec] = []  # reads made since the last record was added, added before it
        self.flushed = 0  # reads moved from `pending` to the records so far
        self.unread: dict[int, ReadRec] = {}  # rank → the read it stopped at, its value not known yet
        self.origin: dict[str, tuple[ReadRec, ...]] = {}  # a `let` or loop variable → the reads it came from
        self.here: tuple = ()  # the loop bindings of the statement being expanded
        self.hoisted: dict[int, Hoist] = {}  # expression id → the running loop that computed it ahead (`hoist`)
        self.loop_plans: dict[int, tuple[n.For, Plan]] = {}  # loop id → (loop, what its body may hoist)

    # ---- errors ---------------------------------------------------------------------------------
    def kill(self, A: np.ndarray, failure: Failure, stmt=None) -> None:
        """Stop the failing ranks of A, keeping the diagnostic of the first one (with the values it read from
        data for statement `stmt`)."""
        mask = np.ones(A.size, dtype=bool) if failure.mask is True else np.asarray(failure.mask, dtype=bool)
        where = np.flatnonzero(mask)
        if not where.size:
            raise AssertionError("a failure without a failing rank")  # pragma: no cover - a bug in commdsl
        if isinstance(failure, Unread):  # they stop at the read, without a diagnostic: see `expand`
            dead = A[mask]
            self.alive[dead] = False
            self.deaths += 1
            for r in dead.tolist():
                self.unread[r] = self.pending[-1]
            return
        k = int(where[0])
        d = failure.diagnostic(k)
        rank = int(A[k])
        if self.reads_data and stmt is not None:
            read = values_read(self.sources(stmt), [rank])
            d = replace(d, notes=d.notes + tuple(Note(message=m) for m in read))
        key = (d.code, d.span.start if d.span else -1)
        calls = (call_note(tuple(self.calling)),) if self.calling else ()
        if key not in self.errors or rank < self.errors[key][1]:
            earlier = self.errors[key][0].notes if key in self.errors else ()
            self.errors[key] = (_with_notes(d, calls + earlier), rank)
        elif calls:  # the same mistake reached through another call: name that call too
            first, at = self.errors[key]
            self.errors[key] = (_with_notes(first, calls), at)
        dead = A[mask]
        self.alive[dead] = False
        self.deaths += 1

    def survivors(self, A: np.ndarray, env: Env) -> tuple[np.ndarray, Env]:
        keep = self.alive[A]
        if keep.all():
            return A, env
        return A[keep], _sub_env(env, keep)

    # ---- set-up: groups and tensors ----------------------------------------------------------------
    def setup(self) -> None:
        env = dict(self.params, world=self.W)
        for t in self.program.tables:
            try:
                self.setup_table(t, env)
            except Failure as f:
                raise _Stop(f.diagnostic(0)) from None
        for g in self.program.groups:
            try:
                if isinstance(g, n.MeshDecl):
                    self.setup_mesh(g, env)
                elif g.split_key is None:
                    self.setup_list(g, env)
                else:
                    self.setup_split(g, env)
            except Failure as f:
                first = 0 if f.mask is True else int(np.argmax(f.mask))
                raise _Stop(f.diagnostic(first)) from None

    def setup_list(self, g: n.GroupDecl, env: Env) -> None:
        def too_many(count: int) -> Diagnostic:
            return InvalidGroup.diagnostic(
                f"group `{g.name}` names {count} ranks, more than the world's {self.W}",
                span=g.span,
                label="more members than ranks",
            )

        members = list(self.listed(g.members, np.zeros(0, dtype=np.int64), env, "a group member", self.W, too_many))
        bad = [m for m in members if not 0 <= m < self.W]
        if bad:
            raise _Stop(
                InvalidGroup.diagnostic(
                    f"group `{g.name}` names rank {bad[0]}, outside world {self.W}",
                    span=g.span,
                    label=f"ranks are 0..{self.W - 1}",
                )
            )
        twice = next((m for k, m in enumerate(members) if m in members[:k]), None)
        if twice is not None:
            raise _Stop(
                InvalidGroup.diagnostic(
                    f"group `{g.name}` names rank {twice} twice", span=g.span, label="duplicate member"
                )
            )
        # torch's new_group orders a group by global rank, whatever order the list is written in
        self.name_groups((g.name, None), [self.add_group(g.name, tuple(sorted(members)))] * self.W)

    def setup_table(self, t: n.TableDecl, env: Env) -> None:
        """A table's entries, the same on every rank (computed before groups: tables may be used in them)."""

        def too_long(count: int) -> Diagnostic:
            return ExpansionTooLarge.diagnostic(
                f"table `{t.name}` has {count} entries, over the limit of {MAX_TABLE:,}",
                span=t.span,
                label="too many entries",
                help="check the bounds of the list",
            )

        entries = self.listed(t.entries, np.zeros(0, dtype=np.int64), env, "a table entry", MAX_TABLE, too_long)
        if len(entries) > MAX_TABLE:
            raise fail_all(too_long(len(entries)))
        self.tables[t.name] = tidy(np.array(entries, dtype=object))

    def setup_split(self, g: n.GroupDecl, env: Env) -> None:
        keys = self.value(g.split_key, self.everyone, dict(env, rank=self.everyone))
        keys = keys.tolist() if is_vec(keys) else [keys] * self.W
        by_key: dict = {}
        for r, k in enumerate(keys):
            by_key.setdefault(k, []).append(r)
        made = {k: self.add_group(f"{g.name}[{k}]", tuple(rs)) for k, rs in sorted(by_key.items())}
        self.name_groups((g.name, None), [made[k] for k in keys])

    def setup_mesh(self, m: n.MeshDecl, env: Env) -> None:
        sizes = [as_int(self.value(d.size, np.zeros(0, dtype=np.int64), env), d, "a mesh dimension") for d in m.dims]
        if math.prod(sizes) != self.W or any(s < 1 for s in sizes):
            dims = " × ".join(f"{d.name}={s}" for d, s in zip(m.dims, sizes))
            raise _Stop(
                MeshDoesNotTileWorld.diagnostic(
                    f"mesh `{m.name}` is {dims} = {math.prod(sizes)} ranks, but the world has {self.W}",
                    span=m.span,
                    label="the mesh must tile the world exactly",
                )
            )
        coords = [tuple(int(c) for c in np.unravel_index(r, sizes)) for r in range(self.W)]
        for axis, d in enumerate(m.dims):
            by_rest: dict = {}
            for r, c in enumerate(coords):
                by_rest.setdefault(c[:axis] + c[axis + 1 :], []).append(r)
            made = {k: self.add_group(f"{m.name}.{d.name}{list(k)}", tuple(rs)) for k, rs in sorted(by_rest.items())}
            self.name_groups((m.name, d.name), [made[c[:axis] + c[axis + 1 :]] for c in coords])

    def add_group(self, name: str, ranks: tuple[int, ...], step: bool = False) -> Group:
        g = Group(len(self.groups), name, ranks, step)
        self.groups.append(g)
        return g

    def name_groups(self, key: tuple[str, str | None], per_rank: list[Group]) -> None:
        """(group id of each rank's group, each rank's index in it or -1)."""
        gid_of = np.array([g.id for g in per_rank], dtype=np.int64)
        idx_in = np.full(self.W, -1, dtype=np.int64)
        for g in {g.id: g for g in per_rank}.values():
            idx_in[list(g.ranks)] = np.arange(len(g.ranks))
        self.group_of[key] = (gid_of, idx_in)

    def setup_tensors(self) -> None:
        """Every tensor's shape and initialiser on every rank; a rank whose tensors are invalid stops."""
        A, env = self.everyone, dict(self.params, rank=self.everyone, world=self.W)
        for t in self.program.tensors:
            while A.size:
                try:
                    self.infos[t.name] = self.tensor(t, A, env)
                    break
                except Failure as f:
                    self.kill(A, f)
                    A, env = self.survivors(A, env)

    def tensor(self, t: n.TensorDecl, A: np.ndarray, env: Env) -> TensorInfo:
        shape = tuple(as_int(self.value(d, A, env), d, "a tensor dimension") for d in t.shape)
        neg = np.zeros(A.size, dtype=bool)
        for d in shape:
            neg |= np.asarray(d) < 0
        if neg.any():
            raise Failure(
                neg,
                lambda k: InvalidTensorSize.diagnostic(
                    f"tensor `{t.name}` has negative shape {[int(item(d, k)) for d in shape]}",
                    span=t.span,
                    label=f"on rank {A[k]}",
                ),
            )
        numel = np.ones(A.size, dtype=object)
        for d in shape:
            numel = numel * np.asarray(d, dtype=object)
        big = np.array([x > MAX_TENSOR_ELEMENTS for x in numel], dtype=bool) if A.size else np.zeros(0, dtype=bool)
        if big.any():
            raise Failure(
                big,
                lambda k: InvalidTensorSize.diagnostic(
                    f"tensor `{t.name}` has {numel[k]} elements, over the limit of {MAX_TENSOR_ELEMENTS}",
                    span=t.span,
                    label=f"shape {[int(item(d, k)) for d in shape]}",
                ),
            )
        shape = tuple(self.widen(d, A) for d in shape)
        init = None
        if t.init is not None:
            target = VView(t.name, 0, tuple(sub(d, A) for d in shape))
            value = self.elem(t.init, A, env, target.shape)
            self.fits(value, t.dtype.name, t.init, f"tensor `{t.name}`")
            init = self.widen_elem(value, A)
        return TensorInfo(t.name, t.dtype.name, shape, init, t.span)

    def widen(self, v, A: np.ndarray):
        """A per-rank value over A as a value over every rank (ranks outside A never use it)."""
        v = uniform(v)
        if not is_vec(v) or A.size == self.W:
            return v
        out = np.zeros(self.W, dtype=v.dtype)
        out[A] = v
        return out

    def widen_elem(self, e, A):
        tag = e[0]
        if tag == "c":
            return ("c", self.widen(e[1], A))
        if tag == "u":
            return ("u", e[1], self.widen_elem(e[2], A))
        if tag == "b":
            return ("b", e[1], self.widen_elem(e[2], A), self.widen_elem(e[3], A), e[4])
        if tag == "f":
            return ("f", e[1], tuple(self.widen_elem(a, A) for a in e[2]))
        if tag == "rand":
            return ("rand", self.widen(e[1], A), e[2])
        return e

    # ---- static values ----------------------------------------------------------------------------
    def value(self, e, A: np.ndarray, env: Env):
        """The value of a static expression on the ranks A (a scalar where they all agree): computed, or read
        from the loop that computed it ahead for this iteration (`hoist`)."""
        if self.hoisted:
            hoist = self.hoisted.get(id(e))
            if hoist is not None and (got := hoist.get(e, A)) is not None:
                return got
        return self.computed(e, A, env)

    def computed(self, e, A: np.ndarray, env: Env):
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return e.value
            case n.Name():
                if e.id not in env:
                    raise fail_all(
                        WrongKindOfName.diagnostic(
                            f"`{e.id}` has no value here", span=e.span, label="not known before expansion"
                        )
                    )
                return env[e.id]
            case n.Attr():
                return self.attr(e, A, env)
            case n.Unary():
                return unary(e, self.value(e.operand, A, env))
            case n.Call(func=n.Name(id=fname)) if fname in ("min", "max", "abs"):
                return call(fname, [self.value(a, A, env) for a in e.args])
            case n.Call(func=n.Name(id="log2")):
                return log2(e, self.value(e.args[0], A, env))
            case n.Call(func=n.Attr(attr="peer") as f):
                return self.peer(e, f, A, env)
            case n.Index(value=n.Name(id=name)) if name in self.tables:
                return self.entry(e, name, self.value(e.index, A, env), A)
            case n.Call(func=n.Name(id="sum")):
                return self.data_read(e, A, env)
            case n.Index() if self.is_view(e.value, env):
                return self.data_read(e, A, env)
            case n.Index() if "world" not in env:  # `resolve_params`: no table exists yet
                raise fail_all(
                    WrongKindOfName.diagnostic(
                        "a param's default cannot use a table", span=e.span, label="tables are computed from the params"
                    )
                )
            case n.Binary(op="and" | "or"):
                return self.logical(e, A, env)
            case n.Binary():
                return binary(e, self.value(e.left, A, env), self.value(e.right, A, env))
        raise fail_all(
            WrongKindOfName.diagnostic("this expression has no integer value", span=e.span, label="expected a number")
        )

    def logical(self, e: n.Binary, A: np.ndarray, env: Env):
        """`and`/`or` short-circuit: the right side is evaluated only on the ranks that need it."""
        left = truthy(self.value(e.left, A, env))
        need = left if e.op == "and" else ~left if is_vec(left) else (left if e.op == "and" else not left)
        if not is_vec(need):
            if not need:
                return left
            right = truthy(self.value(e.right, A, env))  # one value on every rank, or one per rank (`rank`)
            return right if is_vec(right) else bool(right)
        where = np.flatnonzero(need)
        try:
            right = truthy(self.value(e.right, A[where], _sub_env(env, where)))
        except Failure as failure:
            inner = failure  # `failure` is unbound when the except block ends; the lambda runs later
            mask = np.zeros(A.size, dtype=bool)
            mask[where] = True if inner.mask is True else inner.mask
            raise type(inner)(mask, lambda k: inner.diagnostic(int(np.searchsorted(where, k)))) from None
        out = left.copy()
        out[where] = right
        return out

    def attr(self, e: n.Attr, A: np.ndarray, env: Env):
        if e.attr in ("size", "rows") and self.is_view(e.value, env):
            v = self.view(e.value, A, env)
            return v.numel if e.attr == "size" else (v.shape[0] if v.shape else 1)
        gids, idx = self.group_info(e, A, env)
        ref = e.value
        name = self.group_name(ref.value.id if isinstance(ref, n.Attr) else ref.id, None)[0]
        if e.attr == "rank" or name in self.made:
            self.member_index(e, gids, idx, A)  # torch gives a non-member of a step's group no rank, no size
        if e.attr == "size":
            return uniform(np.array([len(g.ranks) for g in self.groups], dtype=np.int64)[gids])
        return idx

    def group_info(self, e: n.Attr, A: np.ndarray, env: Env) -> tuple[np.ndarray, np.ndarray]:
        """The `(group id, index in it)` on each rank of A of the group or mesh dimension `e.value` names."""
        if "rank" not in env:  # a param's default, a table, a group's members: the same on every rank
            raise fail_all(
                WrongKindOfName.diagnostic(
                    "params, tables and group members cannot use a group's attributes",
                    span=e.span,
                    label="computed before any group, the same on every rank",
                )
            )
        ref = e.value
        name, dim = (ref.value.id, ref.attr) if isinstance(ref, n.Attr) else (ref.id, None)
        return self.groups_on(name, dim, A, e.span)

    def member_index(self, e: n.Node, gids: np.ndarray, idx: np.ndarray, A: np.ndarray) -> np.ndarray:
        """Each rank's index in its group (`G.rank`); N127 on a rank outside it, which torch gives no group."""
        outside = idx < 0
        if outside.any():
            word = f"`.{e.attr}`" if isinstance(e, n.Attr) else "`.peer`"
            raise Failure(
                outside,
                lambda k: InvalidGroup.diagnostic(
                    f"rank {A[k]} is not in group `{self.groups[gids[k]].name}`, so it has no {word} there",
                    span=e.span,
                    label=f"members are {_ranks_text(self.groups[gids[k]].ranks)}",
                ),
            )
        return idx

    def group_name(self, name: str, dim: str | None) -> tuple[str, str | None]:
        """The group or mesh dimension `name.dim` means here: a function's group parameter stands for the
        group (or the mesh, or the mesh dimension) its call passed."""
        if name not in self.group_alias:
            return name, dim
        target, target_dim = self.group_alias[name]
        return target, target_dim if dim is None else dim

    def groups_on(self, name: str, dim: str | None, A: np.ndarray, span) -> tuple[np.ndarray, np.ndarray]:
        """(group id, index in it) of group `name` on each rank of A; a rank that has not made it yet (a
        `new_group` it has not run) stops with N127."""
        name, dim = self.group_name(name, dim)
        gid_of, idx_in = self.group_of[(name, dim)]
        gids = gid_of[A]
        unmade = gids < 0
        if unmade.any():
            raise Failure(
                unmade,
                lambda k: InvalidGroup.diagnostic(
                    f"rank {A[k]} uses group `{name}` before it makes it",
                    span=span,
                    label="no `new_group` has made it on this rank yet",
                    help=f"run `{name} = new_group [...]` on this rank before the ops that use it",
                ),
            )
        return gids, idx_in[A]

    def peer(self, e: n.Call, f: n.Attr, A: np.ndarray, env: Env):
        """`G.peer(k)`: the global rank of member k of each rank's group (torch's `dist.get_global_rank`);
        N127 naming k and the group's size where k is not a member's index."""
        gids, idx = self.group_info(f, A, env)
        self.member_index(e, gids, idx, A)
        k = as_int(self.value(e.args[0], A, env), e.args[0], "a member index")
        sizes = np.array([len(g.ranks) for g in self.groups], dtype=np.int64)[gids]
        ks = as_index_array(k, A.size)
        bad = ((ks < 0) | (ks >= sizes)).astype(bool)
        if bad.any():
            raise Failure(bad, lambda j: self.not_a_member(e, int(gids[j]), item(ks, j)))
        width = max(len(g.ranks) for g in self.groups)
        members = np.array([g.ranks + (-1,) * (width - len(g.ranks)) for g in self.groups], dtype=np.int64)
        return uniform(members[gids, ks.astype(np.int64)])

    def entry(self, e: n.Index, name: str, k, A: np.ndarray):
        """`TABLE[k]` on the ranks A; N120 naming k and the table's length where k is not an entry's index."""
        k = as_int(k, e.index, "a table index")
        table = self.tables[name]
        ks = as_index_array(k, 1 if not is_vec(k) else k.size)
        bad = ((ks < 0) | (ks >= len(table))).astype(bool)
        if bad.any():
            size = len(table)
            raise Failure(
                bad if is_vec(k) else True,
                lambda j: ViewOutOfBounds.diagnostic(
                    f"index {item(ks, j)} is outside table `{name}`, which has {size} entries",
                    span=e.span,
                    label=f"indices are 0..{size - 1}" if size else "the table is empty",
                ),
            )
        got = table[ks.astype(np.int64)]
        return uniform(tidy(got)) if is_vec(k) else item(got, 0)

    def not_a_member(self, e: n.Call, gid: int, k: int) -> Diagnostic:
        group = self.groups[gid]
        size = len(group.ranks)
        return InvalidGroup.diagnostic(
            f"member index {k} is outside group `{group.name}`, which has {size} members",
            span=e.span,
            label=f"indices are 0..{size - 1}",
            notes=[Note(message=f"its members are {_ranks_text(group.ranks)}")] if size <= 16 else [],
        )

    def is_view(self, e, env: Env) -> bool:
        match e:
            case n.Name():
                return isinstance(env.get(e.id), VView) or (e.id in self.tensor_names and e.id not in env)
            case n.Slice() | n.Index():
                return self.is_view(e.value, env)
            case n.Call(func=n.Attr(attr="chunk") as f):
                return self.is_view(f.value, env)
        return False

    def int_value(self, e, A, env, what: str):
        return as_int(self.value(e, A, env), e, what)

    # ---- integers read from tensor data ------------------------------------------------------------
    def data_read(self, e: n.Index | n.Call, A: np.ndarray, env: Env):
        """`T[k]` or `sum(E)` on the ranks A: a `ReadRec` (added before the statement's own record), and each
        rank's value. The expansion keeps the tensors of every rank that has received nothing yet (`tensors`, which
        runs their local ops): their reads it computes itself. A rank that has received data stops at its next
        read (`Unread`) until `expand` has run the schedule that far: from the snapshot of its tensors there,
        it is followed again."""
        if self.batch is not None:
            raise fail_all(
                InvalidBatch.diagnostic(
                    "a `batch` cannot read tensor data",
                    span=e.span,
                    label="a local read inside the batch",
                    help="read it in a `let` before the `batch`",
                )
            )
        if isinstance(e, n.Index):
            shape, value = None, ("v", self.view(e, A, env))
            many = np.asarray(value[1].numel) != 1
            if many.any():
                numel = value[1].numel
                raise Failure(
                    np.broadcast_to(many, A.shape),
                    lambda k: ShapeMismatch.diagnostic(
                        f"`{self.text(e)}` has {item(numel, k)} elements, not one",
                        span=e.span,
                        label="an integer is read from one element",
                        help=f"count them with `sum({self.text(e)})`, or index the row's element",
                    ),
                )
        else:
            first = next(_views_in(e.args[0], lambda x: self.is_view(x, env)), None)
            shape = None if first is None else self.view(first, A, env)
            value = self.elem(e.args[0], A, env, () if shape is None else shape.shape)
        ordinal = self.read_count[A].copy()
        self.read_count[A] += 1
        resume = np.flatnonzero(self.snapshot_next[A] == ordinal)
        for r, o in zip(A[resume].tolist(), ordinal[resume].tolist()):
            self.tensors.load_rank(r, self.snapshots.at[(r, o)])  # a run stopped here: go on from its tensors
            self.synced[r] = True
            later = self.snapshot_ordinals[r]
            self.snapshot_next[r] = later.pop(0) if later else -1
        have = self.synced[A]
        rec = ReadRec(e, A, self.here, value=value, shape=shape, reads=tuple(elem_reads(value)))
        got = np.zeros(A.size, dtype=np.int64)
        if have.any():
            where = np.flatnonzero(have)
            got[where] = self.tensors.read_sums(rec, A[where], where)
        rec.ordinal, rec.known, rec.text = ordinal, got, self.text(e)
        rec.missing = None if have.all() else ~have
        self.pending.append(rec)
        if rec.missing is not None:
            raise Unread(rec.missing, lambda k: None)
        return uniform(got)

    def mark_reads(self, A: np.ndarray):
        """Where the reads of a statement about to run on A start (`undo_reads`)."""
        if not self.reads_data:
            return None
        return self.flushed + len(self.pending), A, self.read_count[A].copy()

    def undo_reads(self, mark, survivors: np.ndarray) -> None:
        """A statement failed on some of its ranks and is redone on `survivors`: their reads of the failed
        attempt did not happen (the stopped ranks keep theirs, the last one a read they stopped at)."""
        if mark is None or not survivors.size:
            return
        start, A, counts = mark
        self.read_count[survivors] = counts[np.searchsorted(A, survivors)]
        for rec in self.pending[max(0, start - self.flushed) :]:
            keep = ~np.isin(rec.ranks, survivors)
            if not keep.all():
                _keep_rows(rec, keep)

    def follow(self, rec) -> None:
        """Keep `tensors` up to date for the ranks in `synced`: their assignments run on it; a rank that receives
        data (a receive, a collective, a batch, a wait) leaves `synced` (a send changes nothing of its own)."""
        if isinstance(rec, ComputeRec):
            where = np.flatnonzero(self.synced[rec.ranks])
            if where.size:
                self.tensors.local(rec, rec.ranks[where], None if where.size == rec.ranks.size else where)
        elif not isinstance(rec, (ExpectRec, PrintRec, NewGroupRec)) and not (isinstance(rec, P2PRec) and rec.is_send):
            self.synced[rec.ranks] = False

    def start_following(self) -> None:
        """Every rank's tensors as initialised: all ranks are followed from the start."""
        from commdsl.simulate import Data  # NumPy only: `check` still does not import torch

        shell = Schedule(
            program=self.program.name,
            path=self.program.path,
            world=self.W,
            params=self.params,
            backends=(),
            groups=self.groups,
            infos=self.infos,
            records=[],
            top=[],
            requests=None,
        )
        too_big = memory_problem(shell)  # before the simulator holds every rank's tensors, not after
        if too_big is not None:
            raise CommdslError([replace(too_big, worlds=(self.W,))])
        self.tensors = Data(shell)

    def flush_reads(self) -> None:
        """The reads made since the last record, as records of their own, before the next one."""
        pending, self.pending = self.pending, []
        self.flushed += len(pending)
        for rec in pending:
            if rec.ranks.size:
                self.add(rec)

    def sources(self, node) -> tuple[ReadRec, ...]:
        """The reads a statement's or expression's values came from: the pending reads of its own expressions
        and those of the `let`s and loop variables it names."""
        found = [r for name in _own_names(node) for r in self.origin.get(name, ())]
        found += [r for r in self.pending if r.ranks.size and _inside(r.node, node)]
        return tuple(dict.fromkeys(found))

    # ---- views --------------------------------------------------------------------------------------
    def view(self, e, A: np.ndarray, env: Env) -> VView:
        """The view `e` names on the ranks A. A statement often names the same chunk as the one before it
        (`recv tmp[0 : x.chunk(k, world).size]` then `x.chunk(k, world) += ...`): views are remembered by
        their text and the values of the names they read, so those share one computation and one array."""
        if self.hoisted:
            hoist = self.hoisted.get(id(e))
            if hoist is not None and (got := hoist.view(e, A)) is not None:
                return got
        names = self.free.get(id(e))
        if names is None:
            names = self.free[id(e)] = (e, self.text(e), tuple(sorted(n.names_read(e))))
        values = tuple(env.get(k) for k in names[2])
        key = (names[1], id(A)) + tuple(id(v) if is_vec(v) or isinstance(v, VView) else (type(v), v) for v in values)
        hit = self.views.get(key)
        if hit is not None:
            return hit[0]
        v = self.make_view(e, A, env)
        self.views[key] = (v, A, values)  # holding A and the values keeps their ids from being reused
        if len(self.views) > VIEW_CACHE:
            del self.views[next(iter(self.views))]
        return v

    def make_view(self, e, A: np.ndarray, env: Env) -> VView:
        match e:
            case n.Name() if isinstance(env.get(e.id), VView):  # a function's view parameter
                return env[e.id]
            case n.Name() if e.id in self.infos:
                info = self.infos[e.id]
                return VView(info.name, 0, tuple(uniform(sub(d, A)) for d in info.shape))
            case n.Slice():
                base = self.view(e.value, A, env)
                rows = self.rows(base, e)
                lo = 0 if e.lo is None else self.int_value(e.lo, A, env, "a slice bound")
                hi = rows if e.hi is None else self.int_value(e.hi, A, env, "a slice bound")
                bad = ~((0 <= np.asarray(lo)) & (np.asarray(lo) <= hi) & (np.asarray(hi) <= rows))
                if np.any(bad):
                    raise Failure(
                        np.broadcast_to(bad, A.shape),
                        lambda k: ViewOutOfBounds.diagnostic(
                            f"slice `[{item(lo, k)}:{item(hi, k)}]` is out of bounds for {item(rows, k)} rows",
                            span=e.span,
                            label=f"`{self.text(e.value)}` has shape {[item(d, k) for d in base.shape]}",
                        ),
                    )
                return self.rows_view(base, lo, hi if not is_vec(lo) and lo == 0 else hi - lo, keep=True)
            case n.Index():
                base = self.view(e.value, A, env)
                rows = self.rows(base, e)
                k_ = self.int_value(e.index, A, env, "an index")
                bad = ~((0 <= np.asarray(k_)) & (np.asarray(k_) < rows))
                if np.any(bad):
                    raise Failure(
                        np.broadcast_to(bad, A.shape),
                        lambda k: ViewOutOfBounds.diagnostic(
                            f"index {item(k_, k)} is out of bounds for {item(rows, k)} rows",
                            span=e.span,
                            label=f"`{self.text(e.value)}` has shape {[item(d, k) for d in base.shape]}",
                        ),
                    )
                return self.rows_view(base, k_, 1, keep=False)
            case n.Call(func=n.Attr(attr="chunk") as f):
                return self.chunk(e, f, A, env)
        raise fail_all(InvalidView.diagnostic("expected a tensor view", span=e.span, label="not a view"))

    def chunk(self, e: n.Call, f: n.Attr, A, env) -> VView:
        """`x.chunk(k, parts)`: torch.tensor_split's k-th of `parts` pieces along dim 0 (the first
        rows % parts pieces one row longer)."""
        base = self.view(f.value, A, env)
        rows = self.rows(base, e)
        k_ = self.int_value(e.args[0], A, env, "a chunk index")
        parts = self.int_value(e.args[1], A, env, "a chunk count")
        if _below(parts, 1):
            few = np.asarray(parts) < 1
            raise Failure(
                np.broadcast_to(few, A.shape),
                lambda k: ViewOutOfBounds.diagnostic(
                    f"`chunk` into {item(parts, k)} parts", span=e.span, label="needs at least 1 part"
                ),
            )
        if _below(k_, 0) or _at_least(k_, parts):
            bad = ~((0 <= np.asarray(k_)) & (np.asarray(k_) < parts))
            raise Failure(
                np.broadcast_to(bad, A.shape),
                lambda k: ViewOutOfBounds.diagnostic(
                    f"chunk index {item(k_, k)} is out of bounds for {item(parts, k)} parts",
                    span=e.span,
                    label=f"valid indices are 0..{item(parts, k) - 1}",
                ),
            )
        small, extra = np.divmod(rows, parts) if is_vec(rows) or is_vec(parts) else divmod(rows, parts)
        if not (is_vec(k_) or is_vec(extra) or is_vec(small)):
            start, count = k_ * small + min(k_, extra), small + int(k_ < extra)
        elif not is_vec(extra) and extra == 0:  # even pieces
            start, count = k_ * small, small
        else:
            start = np.minimum(k_, extra) if not is_vec(small) and small == 0 else k_ * small + np.minimum(k_, extra)
            count = small + (k_ < extra)
        return self.rows_view(base, uniform(start), uniform(count), keep=True)

    def rows(self, v: VView, node):
        if not v.shape:
            raise fail_all(
                ViewOutOfBounds.diagnostic(
                    "a 0-dimensional tensor cannot be sliced", span=node.span, label="has no rows"
                )
            )
        return v.shape[0]

    @staticmethod
    def rows_view(v: VView, start, count, keep: bool) -> VView:
        row = math.prod(v.shape[1:]) if len(v.shape) > 1 else 1
        step = start * row if not (isinstance(row, int) and row == 1) else start
        offset = step if isinstance(v.offset, int) and v.offset == 0 else v.offset + step
        shape = ((uniform(count),) if keep else ()) + v.shape[1:]
        return VView(v.tensor, uniform(offset), shape)

    def dtype_of(self, v: VView) -> str:
        return self.infos[v.tensor].dtype

    def text(self, e) -> str:
        return self.program.source.text[e.span.start : e.span.end]

    # ---- element expressions ----------------------------------------------------------------------
    def elem(self, e, A, env, target_shape: tuple):
        """An element expression: static parts folded to per-rank constants, views resolved."""
        match e:
            case n.IntLit() | n.FloatLit() | n.BoolLit():
                return ("c", e.value)
            case n.Name(id="i"):
                return ("i",)
            case n.Name() if self.is_view(e, env):
                return self.read(e, A, env, target_shape)
            case n.Index(value=n.Name(id=name)) if name in self.tables:
                return ("c", self.value(e, A, env))
            case n.Slice() | n.Index() | n.Call(func=n.Attr(attr="chunk")):
                return self.read(e, A, env, target_shape)
            case n.Call(func=n.Name(id="sum")):
                return ("c", self.data_read(e, A, env))
            case n.Call(func=n.Name(id=fname)) if fname in ("rand", "randn"):
                return ("rand", self.seed(fname, e.args[0], A, env), fname == "randn")
            case n.Call(func=n.Name(id=fname)):
                args = tuple(self.elem(a, A, env, target_shape) for a in e.args)
                if all(a[0] == "c" for a in args):
                    return ("c", self.value(e, A, env))
                self.torch_accepts(fname, [(a, x) for a, x in zip(e.args, args)], e)
                return ("f", fname, args)
            case n.Unary():
                inner = self.elem(e.operand, A, env, target_shape)
                if inner[0] == "c":
                    return ("c", self.value(e, A, env))
                if e.op == "-":
                    self.torch_accepts("-", [(e.operand, inner)], e)
                return ("u", e.op, inner)
            case n.Binary():
                return self.elem_binary(e, A, env, target_shape)
        return ("c", self.value(e, A, env))

    def seed(self, fname: str, arg, A, env):
        """The per-rank seed of `rand`/`randn`: an integer of 0 or more (NumPy's generators take no other)."""
        seed = self.int_value(arg, A, env, "a seed")
        negative = np.asarray(seed) < 0
        if negative.any():
            found = NotAnInteger.diagnostic(
                f"the seed of `{fname}` must be 0 or more", span=arg.span, label="negative here"
            )
            raise Failure(negative, lambda k: found) if is_vec(seed) else fail_all(found)
        return seed

    def elem_binary(self, e: n.Binary, A, env, target_shape: tuple):
        """A binary element operation: folded where both sides are per-rank constants; `**` takes a constant
        exponent only."""
        left = self.elem(e.left, A, env, target_shape)
        right = self.elem(e.right, A, env, target_shape)
        if left[0] == "c" and right[0] == "c":
            return ("c", binary(e, left[1], right[1]))
        if e.op == "**":
            if right[0] != "c":
                raise fail_all(
                    WrongKindOfName.diagnostic(
                        "the exponent of `**` must be a number known per rank",
                        span=e.right.span,
                        label="varies per element",
                        help="multiply instead, e.g. `x * x`",
                    )
                )
            right = ("c", _negative_powers_float(right[1]))
        self.torch_accepts(e.op, [(e.left, left), (e.right, right)], e)
        return ("b", e.op, left, right, e.span)

    def torch_accepts(self, op: str, operands: list, node) -> None:
        """Refuse, before launch, an element operation torch would refuse at run time (N135), and an integer
        division by a per-rank constant 0 (N122); a divisor read from a tensor is checked as the simulator
        runs (V802)."""
        cats = [category(x, self.dtype_of) for _, x in operands]
        why = refusal(op, cats)
        if why is not None:
            bools = [self.text(a) for (a, _), c in zip(operands, cats) if c[0] == "b"]
            raise fail_all(UnsupportedElementOp.refused(why, op, node.span, self.text(node), bools))
        divisor = operands[-1][1]
        if integer_division(op, cats) and divisor[0] == "c":
            zero = divisor[1] == 0
            if np.any(zero):
                found = DivisionByZero.diagnostic(
                    f"integer division by zero in `{op}`",
                    span=node.span,
                    label=f"`{self.text(operands[-1][0])}` is 0 here",
                    help="torch raises ZeroDivisionError for integer `//` and `%` by zero",
                )
                raise Failure(zero, lambda k: found) if is_vec(zero) else fail_all(found)

    def fits(self, value, dtype: str, node, target: str) -> None:
        """Refuse a number the target's dtype cannot hold where torch fills with it (`x = 300`, a tensor's
        initialiser of one number: `fill_` and `torch.full` check it, N138); computed values wrap instead."""
        if value[0] != "c":
            return
        refused = fill_refuses(value[1], dtype)
        if not refused.any():
            return
        number = value[1]

        def found(k: int) -> Diagnostic:
            return ConstantOutOfRange.diagnostic(
                f"{target} is {dtype}, which cannot hold {item(number, k)!r}",
                span=node.span,
                label=_range_text(dtype),
                help="torch's `fill_` and `torch.full` refuse it (`value cannot be converted ... without overflow`): "
                "use a wider dtype, or compute the value so that it wraps",
            )

        raise Failure(refused, found) if is_vec(number) else fail_all(found(0))

    def read(self, e, A, env, target_shape):
        v = self.view(e, A, env)
        same = _same_shape(v.shape, target_shape)
        one = np.asarray(v.numel) == 1
        bad = ~(same | one)
        if np.any(bad):
            raise Failure(
                np.broadcast_to(bad, A.shape),
                lambda k: ShapeMismatch.diagnostic(
                    f"shape {[item(d, k) for d in v.shape]} does not match {[item(d, k) for d in target_shape]}",
                    span=e.span,
                    label=f"`{self.text(e)}` has shape {[item(d, k) for d in v.shape]}",
                    help="operands of an element expression have the target's shape (or one element)",
                ),
            )
        return ("v", v)

    # ---- statements ---------------------------------------------------------------------------------
    def add(self, rec, top: bool = True):
        if self.reads_data and not isinstance(rec, ReadRec):
            rec.data = self.sources(rec.node)
            self.flush_reads()
            self.follow(rec)
        if len(self.records) >= MAX_RECORDS:
            raise fail_all(
                ExpansionTooLarge.diagnostic(
                    f"the program expands to over {MAX_RECORDS:,} statement instances at world {self.W}",
                    span=rec.span,
                    label="this statement pushes it over the limit",
                    help="check the loop bounds and params; commdsl expands every statement instance in memory",
                )
            )
        if self.deadline.passed():
            raise time_limit(self.deadline, rec.span, f"expanding the program at world {self.W}")
        self.compact(rec)
        rec.id = len(self.records)
        rec.base = self.op_count
        self.op_count += int(rec.ranks.size)
        self.records.append(rec)
        if top:
            self.top.append(rec.id)
        self.spend(int(rec.ranks.size), rec.node)
        return rec

    def compact(self, rec) -> None:
        """Store a record's per-rank integers in the smallest type that holds them (a ring at world 4096 keeps
        about 25,000 records of such arrays). The arrays the expansion computes with stay int64: this is a copy,
        and every reader widens a field to int64 before it computes with it."""
        for name in VIEW_FIELDS:
            v = getattr(rec, name, None)
            if v is not None:
                setattr(rec, name, self.small_view(v))
        for name in VIEW_TUPLE_FIELDS:
            vs = getattr(rec, name, None)
            if vs:
                setattr(rec, name, tuple(self.small_view(v) for v in vs))
        if getattr(rec, "value", None):
            rec.value = self.small_elem(rec.value)
        for name in ("peer", "tag", "root", "contribution"):
            v = getattr(rec, name, None)
            if is_vec(v):
                setattr(rec, name, self.small(v))

    def small_view(self, v: VView) -> VView:
        return VView(v.tensor, self.small(v.offset), tuple(self.small(d) for d in v.shape))

    def small_elem(self, e):
        tag = e[0]
        if tag == "v":
            return ("v", self.small_view(e[1]))
        if tag == "u":
            return ("u", e[1], self.small_elem(e[2]))
        if tag == "b":
            return ("b", e[1], self.small_elem(e[2]), self.small_elem(e[3]), e[4])
        if tag == "f":
            return ("f", e[1], tuple(self.small_elem(a) for a in e[2]))
        return e  # constants keep their dtype: a per-rank constant's dtype is part of what it computes

    def small(self, a):
        """The array in the smallest signed integer type that holds it (readers widen before arithmetic)."""
        if not is_vec(a) or a.dtype != np.int64 or not a.size:
            return a
        hit = self.compacted.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        lo, hi = int(a.min()), int(a.max())
        out = a
        for dtype, least, most in _SMALL_INTS:
            if least <= lo and hi <= most:
                out = a.astype(dtype)
                break
        self.remember_small(a, out)
        return out

    def remember_small(self, a: np.ndarray, out: np.ndarray) -> None:
        """`out` is what `small` makes of `a` (the hoist makes a block of them at once)."""
        self.compacted[id(a)] = (a, out)  # holding `a` keeps its id from being reused
        if len(self.compacted) > VIEW_CACHE * 4:
            del self.compacted[next(iter(self.compacted))]

    def spend(self, steps: int, node) -> None:
        self.steps += steps
        if self.steps > MAX_OPS:
            raise fail_all(
                ExpansionTooLarge.diagnostic(
                    f"the program expands to over {MAX_OPS:,} loop steps and ops at world {self.W}",
                    span=node.span,
                    label="this loop pushes it over the limit"
                    if isinstance(node, (n.For, n.While))
                    else "this op pushes it over the limit",
                    help="check the loop bounds and params; commdsl expands every rank's ops in memory",
                )
            )

    def block(self, stmts, A: np.ndarray, env: Env, bindings: tuple) -> tuple[np.ndarray, Env, set[str]]:
        """Run a block; gives its surviving ranks, its final names, and the names of enclosing `let`s it
        reassigned (which `carry` writes back to the block around it)."""
        env = dict(env)  # `let`s are block-scoped
        self.scopes.append((set(), set()))
        try:
            seen = self.deaths
            for s in stmts:
                if self.deaths != seen:
                    A, env = self.survivors(A, env)
                    seen = self.deaths
                if not A.size:
                    break
                A, env = self.stmt(s, A, env, bindings)
            if self.deaths != seen:
                A, env = self.survivors(A, env)
        finally:
            _, reassigned = self.scopes.pop()
        return A, env, reassigned

    def stmt(self, s, A: np.ndarray, env: Env, bindings: tuple) -> tuple[np.ndarray, Env]:
        """One statement for the ranks A; ranks it fails on stop, the statement is redone for the rest (whose
        names, a `let` among them, the block goes on with)."""
        while A.size:
            mark = self.mark_reads(A)
            try:
                self.here = bindings
                self.run_stmt(s, A, env, bindings)
                break
            except Failure as f:
                self.kill(A, f, s)
                A, env = self.survivors(A, env)
                self.undo_reads(mark, A)
        return A, env

    def run_stmt(self, s, A, env, b) -> None:
        match s:
            case n.Let():
                self.let(s, A, env)
            case n.Assign(target=n.Name(id=name)) if name in env and not isinstance(env[name], VView):  # a `let`
                self.reassign(s, name, A, env)
            case n.Assign():
                target = self.view(s.target, A, env)
                value = self.elem(s.value, A, env, target.shape)
                if s.op != "=":  # `x -= y` is `x - y` stored in x
                    self.torch_accepts(s.op[:-1], [(s.target, ("v", target)), (s.value, value)], s)
                else:
                    self.fits(value, self.dtype_of(target), s.value, f"`{self.text(s.target)}`")
                self.add(ComputeRec(s, A, b, target=target, op=s.op, value=value, reads=tuple(elem_reads(value))))
            case n.Expect():
                view = self.view(s.cond.left, A, env)
                value = self.elem(s.cond.right, A, env, view.shape)
                self.add(ExpectRec(s, A, b, view=view, cmp=s.cond.op, value=value, reads=tuple(elem_reads(value))))
            case n.Print():
                views = tuple(self.view(v, A, env) for v in s.views)
                self.add(PrintRec(s, A, b, views=views, texts=tuple(self.text(v) for v in s.views)))
            case n.Send() | n.Recv():
                self.p2p(s, A, env, b)
            case n.Collective():
                self.collective(s, A, env, b)
            case n.Wait():
                self.wait(s, A, env, b)
            case n.NewGroup():
                self.new_group(s, A, env, b)
            case n.For() | n.While() | n.On() | n.Batch() | n.Coalesced() | n.CallStmt():
                self.compound(s, A, env, b)

    def compound(self, s, A, env, b) -> None:
        """A statement that runs a block: a loop, an `on`, a `batch`, a `coalesced`, or a call (its function's body)."""
        match s:
            case n.For():
                self.loop(s, A, env, b)
            case n.While():
                self.while_loop(s, A, env, b)
            case n.On():
                self.on(s, A, env, b)
            case n.Batch():
                self.batch_block(s, A, env, b)
            case n.Coalesced():
                self.coalesced_block(s, A, env, b)
            case n.CallStmt():
                self.call(s, A, env, b)

    def call(self, s: n.CallStmt, A, env: Env, b) -> None:
        """Inline a `def` on the ranks A. Each argument is evaluated here, as the caller sees it: a view is
        bound as a view, a group as the group it names, anything else as an integer per rank (as a loop
        variable is). The body sees the program's declarations and its parameters, not the caller's `let`s;
        the handles it binds are its own, per call (a request it leaves unwaited is still this rank's, for a
        later `wait all`)."""
        f = self.functions[s.name.name]
        inner = dict(self.params, world=self.W, rank=env["rank"])
        aliases = {}
        for p, a in zip(f.params, s.args, strict=True):
            if self.is_view(a, env):
                inner[p.name] = self.view(a, A, env)
            elif (group := self.group_argument(a)) is not None:
                aliases[p.name] = group
            else:
                inner[p.name] = self.value(a, A, env)
        local = self.local_handles[f.name.name]
        outer = {k: self.handles.pop(k) for k in [k for k in self.handles if k[0] in local]}
        outer_alias, self.group_alias = self.group_alias, aliases
        self.calling.append(s)
        self.reached.setdefault(f.name.name, {})[tuple(self.calling)] = None
        try:
            self.block(f.body, A, inner, b)
        finally:
            self.calling.pop()
            self.group_alias = outer_alias
            for k in [k for k in self.handles if k[0] in local]:
                del self.handles[k]
            self.handles.update(outer)

    def in_group_named(self, s):
        """`s` as its record holds it: `in ring`, with `ring` a function's group parameter, names the group the call
        passed (the engine finds a record's group by its name, as the program declared or made it)."""
        if s.group is None or s.group.name not in self.group_alias:
            return s
        name, dim = self.group_name(s.group.name, s.group.dim)
        key = (id(s), name, dim)
        if key not in self.renamed:  # one node per statement and group: records of one statement share it
            ref = n.GroupRef(span=s.group.span, name=name, dim=dim)
            self.renamed[key] = (s, replace(s, group=ref))  # holding `s` keeps its id from reuse
        return self.renamed[key][1]

    def group_argument(self, a) -> tuple[str, str | None] | None:
        """(name, dimension) of the group, mesh or mesh dimension an argument names; None for an integer."""
        match a:
            case n.Name():  # a group, or a mesh
                name, dim = self.group_name(a.id, None)
                return (name, dim) if any(k[0] == name for k in self.group_of) else None
            case n.Attr(value=n.Name() as base):  # a mesh dimension, not `g.size` or `g.rank`
                name, dim = self.group_name(base.id, a.attr)
                return (name, dim) if (name, dim) in self.group_of else None
        return None

    def let(self, s: n.Let, A, env: Env) -> None:
        env[s.name] = self.value(s.value, A, env)
        self.scopes[-1][0].add(s.name)
        if self.reads_data:
            self.origin[s.name] = self.sources(s.value)

    def loop(self, s: n.For, A, env, b) -> None:
        lo = self.int_value(s.lo, A, env, "a loop bound")
        hi = self.int_value(s.hi, A, env, "a loop bound")
        if self.reads_data:
            self.origin[s.var] = self.sources(s.lo) + self.sources(s.hi)
        count = np.maximum(0, np.asarray(hi, dtype=object if _objectish(lo, hi) else np.int64) - lo + 1)
        self.spend(int(np.sum(count)) if is_vec(count) else int(count) * int(A.size), s)
        if not is_vec(lo) and not is_vec(hi):
            hoist = self.hoist(s, A, env, lo, hi - lo + 1)
            try:
                for value in range(lo, hi + 1):
                    alive = self.alive[A]
                    if not alive.all():
                        if not alive.any():
                            return
                        G, genv = A[alive], _sub_env(env, alive)
                        hoist = self.unhoist(hoist)  # computed for A
                    else:
                        G, genv = A, env
                    if hoist is not None:
                        hoist[0].enter(value - lo)
                    self.carry(env, A, *self.block(s.body, G, dict(genv, **{s.var: value}), b + ((s.var, value),)))
            finally:
                self.unhoist(hoist)
            return
        # bounds that differ by rank: iteration t runs lo + t on every rank that has that many
        lo_a = np.broadcast_to(np.asarray(lo), A.shape)
        count = np.broadcast_to(count, A.shape).astype(np.int64)
        for t in range(int(count.max()) if count.size else 0):
            mask = (count > t) & self.alive[A]
            if not mask.any():
                continue
            G = A if mask.all() else A[mask]
            genv = env if mask.all() else _sub_env(env, mask)
            value = uniform(lo_a[mask] + t)
            self.carry(
                env, A, *self.block(s.body, G, dict(genv, **{s.var: value}), b + ((s.var, self.widen(value, G)),))
            )

    def hoist(self, s: n.For, A, env: Env, lo: int, count: int) -> tuple[Hoist, dict] | None:
        """Compute the loop body's integer expressions ahead, a block of iterations at a time (`commdsl.hoist`):
        the hoist, and what it replaced in `hoisted` (a loop run again inside itself, by a call). Not where the
        expansion reads tensor data: a `let` may hold what a read gave."""
        if self.reads_data or count < 2:
            return None
        got = self.loop_plans.get(id(s))
        if got is None:
            got = self.loop_plans[id(s)] = (s, plan(s))  # holding `s` keeps its id from being reused
        if not got[1].steps:
            return None
        hoist = Hoist(self, got[1], A, env, s.var, lo, count)
        ids = hoist.nodes()
        replaced = {k: self.hoisted.get(k) for k in ids}
        self.hoisted.update(dict.fromkeys(ids, hoist))
        return hoist, replaced

    def unhoist(self, hoist: tuple[Hoist, dict] | None) -> None:
        """Put back what `hoist` replaced."""
        if hoist is None:
            return
        for k, before in hoist[1].items():
            if before is None:
                self.hoisted.pop(k, None)
            else:
                self.hoisted[k] = before

    def carry(self, env: Env, A, G, genv: Env, names: set[str]) -> None:
        """After a block ran on the ranks G of A: the enclosing `let`s it reassigned take their new values on
        those ranks (the others keep theirs), and count as reassigned by this block in turn."""
        if not names:
            return
        positions = np.arange(A.size) if G.size == A.size else np.searchsorted(A, G)
        for name in names:
            env[name] = merge(env[name], positions, genv[name], A.size)
        locals_, outer = self.scopes[-1]
        outer |= names - locals_

    def reassign(self, s: n.Assign, name: str, A, env: Env) -> None:
        """`d = EXPR` or `d <<= EXPR` on a `let`: its value from here to the end of the block that declared it."""
        value = self.value(s.value, A, env)
        if s.op != "=":
            node = n.Binary(span=s.span, op=s.op[:-1], left=s.target, right=s.value)
            value = binary(node, env[name], value)
        env[name] = value
        if self.reads_data:
            self.origin[name] = tuple(dict.fromkeys(self.origin.get(name, ()) + self.sources(s.value)))
        locals_, reassigned = self.scopes[-1]
        if name not in locals_:
            reassigned.add(name)

    def while_loop(self, s: n.While, A, env: Env, b) -> None:
        """Each iteration runs on the ranks whose condition still holds, its ops bound to the values of the
        `let`s the condition reads; the `let`s its body reassigns are written back to this block's names rank
        by rank. At most MAX_WHILE_ITERATIONS iterations (N133), so a loop whose condition never turns false
        still ends the check (a condition that reads tensor data is bounded by that alone)."""
        looping = np.ones(A.size, dtype=bool)
        counters = sorted(
            k for k in n.names_read(s.cond) if k in env and k not in self.params and k not in ("rank", "world")
        )
        for iteration in itertools.count():
            looping &= self.alive[A]
            where = np.flatnonzero(looping)
            if not where.size:
                break
            mark = self.mark_reads(A[where])
            try:
                cond = truthy(self.value(s.cond, A[where], _sub_env(env, where)))
            except Failure as f:
                self.kill(A[where], f)
                self.undo_reads(mark, A[where][self.alive[A[where]]])
                continue
            from_data = mark is not None and self.flushed + len(self.pending) > mark[0]  # it read tensor data
            looping[where] = np.broadcast_to(np.asarray(cond, dtype=bool), where.shape)
            where = np.flatnonzero(looping)
            if not where.size:
                break
            if iteration == MAX_WHILE_ITERATIONS:
                raise fail_all(
                    ExpansionTooLarge.diagnostic(
                        f"this `while` loop runs over {MAX_WHILE_ITERATIONS:,} iterations at world {self.W}",
                        span=s.cond.span,
                        label="still true after that many iterations",
                        help="reassign a name the condition reads in the loop body, so the condition turns false",
                    )
                )
            if self.deadline.passed():
                raise time_limit(self.deadline, s.span, f"expanding the program at world {self.W}")
            self.spend(int(where.size), s)
            G, genv = A[where], _sub_env(env, where)
            before = [np.copy(uniform(genv[k])) for k in counters]
            shown = tuple((k, self.widen(genv[k], G)) for k in counters)  # as a `for` loop binds its variable
            self.carry(env, A, *self.block(s.body, G, genv, b + shown))
            if not from_data:  # a condition read from data can change with no `let` changed
                self.check_progress(s, G, before, _sub_env(env, where), counters)

    def check_progress(self, s: n.While, G, before: list, after: Env, counters: list[str]) -> None:
        """N133 at once for a rank whose iteration changed none of the `let`s the condition reads: its next
        iteration is the same one again (the condition reads nothing else that can change), forever."""
        same = self.alive[G].copy()
        for k, old in zip(counters, before, strict=True):
            same &= np.broadcast_to(uniform(after[k]) == old, G.shape)
        if not same.any():
            return
        rank = int(G[np.flatnonzero(same)[0]])
        reads = ", ".join(f"`{k}`" for k in counters)
        raise fail_all(
            ExpansionTooLarge.diagnostic(
                f"this `while` loop never ends on rank {rank} at world {self.W}: "
                + (f"an iteration left {reads} as it was" if counters else "its condition reads no `let`"),
                span=s.cond.span,
                label="true again, with nothing changed",
                help="reassign a name the condition reads in the loop body, so the condition turns false",
            )
        )

    def on(self, s: n.On, A, env, b) -> None:
        """Every branch's condition first (a rank evaluates only the conditions before the branch it takes),
        then each branch's body on its ranks."""
        taken: list[tuple[tuple, np.ndarray]] = []
        rest = np.ones(A.size, dtype=bool)
        for br in s.branches:
            where = np.flatnonzero(rest)
            if not where.size:
                break
            try:
                everyone = where.size == A.size
                cond = truthy(
                    self.value(br.cond, A if everyone else A[where], env if everyone else _sub_env(env, where))
                )
            except Failure as f:
                mask = np.zeros(A.size, dtype=bool)
                mask[where] = True if f.mask is True else f.mask
                raise type(f)(mask, lambda k, f=f, where=where: f.diagnostic(int(np.searchsorted(where, k)))) from None
            cond = np.broadcast_to(np.asarray(cond, dtype=bool), where.shape)
            picked = where[cond]
            taken.append((br.body, picked))
            rest[picked] = False
        taken.append((s.orelse, np.flatnonzero(rest)))
        for body, where in taken:
            if where.size:
                G, genv = (A, env) if where.size == A.size else (A[where], _sub_env(env, where))
                self.carry(env, A, *self.block(body, G, genv, b))

    def coalesced_block(self, s: n.Coalesced, A, env, b) -> None:
        """The block's collectives are records of their own, stepped in order like any collective: nothing
        else stands between them (resolve sees to it), so issuing them one by one or as one call at the end
        waits for the same ranks. Each learns its place in the block, which members must agree on (the engine
        compares it) and which the runtime turns into one coalesced call."""
        slot = self.slot(s.handle, A, env)
        start = len(self.records)
        self.carry(env, A, *self.block(s.body, A, env, b))
        members = [r for r in self.records[start:] if isinstance(r, CollectiveRec)]
        for i, rec in enumerate(members):
            rec.block = Coalesced(s, i, len(members), members[0].redop)
        if s.handle is None or not members:
            return
        # bound: one request per rank for the one call, done when all the rank's collectives in it are
        ranks = members[-1].ranks
        if any(m.ranks is not ranks for m in members):
            ranks = distinct(np.concatenate([m.ranks for m in members]))
        parts = np.zeros(ranks.size, dtype=np.int64)
        for m in members:
            parts[np.searchsorted(ranks, m.ranks)] += 1
        req = self.new_requests(ranks, members[-1].id, parts)
        for m in members:
            m.req = req[np.searchsorted(ranks, m.ranks)]
        if slot is not None and is_vec(slot) and ranks.size != A.size:
            slot = slot[np.searchsorted(A, ranks)]
        self.track(s.handle, slot, ranks, req)

    def batch_block(self, s: n.Batch, A, env, b) -> None:
        """The batch's ops are records of their own; the batch holds them, and its ranks are the ranks that
        post at least one of them. Bound to a handle, the batch gives each of its ranks one request, shared
        by the rank's ops in it (torch's list of works, waited together)."""
        slot = self.slot(s.handle, A, env)
        self.batch = []
        try:
            self.carry(env, A, *self.block(s.body, A, env, b))
            ops = tuple(self.batch)
        finally:
            self.batch = None
        if not ops:
            return
        ranks = ops[0].ranks
        if any(op.ranks is not ranks for op in ops[1:]):
            ranks = distinct(np.concatenate([op.ranks for op in ops]))
            ranks = A if ranks.size == A.size else ranks
        rec = BatchRec(s, ranks, b, ops=ops)
        if s.handle is not None:
            parts = np.zeros(ranks.size, dtype=np.int64)
            for op in ops:
                parts[np.searchsorted(ranks, op.ranks)] += 1
            rec.req = self.new_requests(ranks, len(self.records), parts)
            for op in ops:
                op.req = rec.req[np.searchsorted(ranks, op.ranks)]
        self.add(rec)
        if rec.req is not None:
            if slot is not None and is_vec(slot) and ranks.size != A.size:
                slot = slot[np.searchsorted(A, ranks)]
            self.track(s.handle, slot, ranks, rec.req)

    # ---- communication ----------------------------------------------------------------------------
    def group_ids(self, ref: n.GroupRef | None, A):
        """(group id per rank, index in it per rank) of `in GROUP`, or of the world."""
        if ref is None:
            return 0, A
        gids, idx = self.groups_on(ref.name, ref.dim, A, ref.span)
        return uniform(gids), idx

    def new_group(self, s: n.NewGroup, A, env, b) -> None:
        """Each rank of A makes the group its list names, which `s.name` means on it from now on (torch makes a
        new process group at every call, even of a list made before)."""
        members = self.listed(s.members, A, env, "a group member")
        if not members:
            raise fail_all(
                InvalidGroup.diagnostic("`new_group` names no rank", span=s.span, label="the list of members is empty")
            )
        lists = np.stack([np.broadcast_to(np.asarray(m, dtype=np.int64), A.shape) for m in members], axis=1)
        outside = ((lists < 0) | (lists >= self.W)).any(axis=1)
        if outside.any():
            raise Failure(
                outside,
                lambda k: InvalidGroup.diagnostic(
                    f"`new_group` names rank {next(int(r) for r in lists[k] if not 0 <= r < self.W)}, "
                    f"outside world {self.W}",
                    span=s.span,
                    label=f"ranks are 0..{self.W - 1}",
                ),
            )
        rows = np.sort(lists, axis=1)  # torch's new_group orders a group by global rank
        twice = (rows[:, 1:] == rows[:, :-1]).any(axis=1)
        if twice.any():
            raise Failure(
                twice,
                lambda k: InvalidGroup.diagnostic(
                    "`new_group` names a rank twice", span=s.span, label=f"ranks {_ranks_text(lists[k].tolist())}"
                ),
            )
        # torch names a group by its place in the sequence of `new_group` calls, which every rank counts: ranks
        # whose k-th call names the same ranks make one group, whichever statement they make it at
        keys = np.column_stack([self.made_count[A], rows])
        self.made_count[A] += 1
        distinct, which = np.unique(keys, axis=0, return_inverse=True)
        made = np.array([self.step_group(s.name.name, tuple(int(r) for r in key)).id for key in distinct])
        gids = made[which.reshape(-1)]
        gid_of, idx_in = (x.copy() for x in self.group_of[(s.name.name, None)])
        gid_of[A] = gids
        idx_in[A] = [
            self.groups[g].ranks.index(r) if r in self.groups[g].ranks else -1
            for g, r in zip(gids.tolist(), A.tolist())
        ]
        self.group_of[(s.name.name, None)] = (gid_of, idx_in)
        self.add(NewGroupRec(s, A, b, made=uniform(gids)))

    def step_group(self, name: str, key: tuple[int, ...]) -> Group:
        """The group of `key` (the call's place in its ranks' `new_group` sequence, then the members)."""
        g = self.made_groups.get(key)
        if g is None:
            g = self.made_groups[key] = self.add_group(name, key[1:], step=True)
        return g

    def p2p(self, s: n.Send | n.Recv, A, env, b) -> None:
        view = self.view(s.buffer, A, env)
        peer = ANY_SOURCE if s.peer is None else uniform(self.int_value(s.peer, A, env, "a peer rank"))
        tag = uniform(self.int_value(s.tag, A, env, "a tag")) if s.tag is not None else 0
        gid = self.group_ids(s.group, A)[0] if s.group is not None else None
        slot = self.slot(s.handle, A, env)
        batched = self.batch is not None
        req = None
        if not s.blocking and not batched:
            req = self.new_requests(A, len(self.records))
        rec = P2PRec(
            self.in_group_named(s),
            A,
            b,
            is_send=isinstance(s, n.Send),
            view=view,
            dtype=self.dtype_of(view),
            peer=peer,
            tag=tag,
            gid=gid,
            blocking=s.blocking and not batched,
            req=req,
            batched=batched,
        )
        if batched:
            self.batch.append(self.add(rec, top=False))
            return
        self.add(rec)
        if req is not None:
            self.track(s.handle, slot, A, req)

    def new_requests(self, A, record_id: int, parts: np.ndarray | int = 1) -> np.ndarray:
        ids = np.arange(self.req_count, self.req_count + A.size, dtype=np.int64)
        self.req_chunks.append((A, record_id, ids, parts))
        self.req_count += int(A.size)
        return ids

    def slot(self, h: n.HandleRef | None, A, env):
        """The slot of `h[i]` on the ranks A (a number, or one per rank); None for a plain handle."""
        if h is None or h.index is None:
            return None
        return uniform(self.int_value(h.index, A, env, "a handle index"))

    def slots(self, name: str, slot) -> list[tuple[np.ndarray | slice, np.ndarray]]:
        """[(which of the ranks, the requests per rank of that slot)] for a slot that may differ by rank."""
        if not is_vec(slot):
            return [(slice(None), self.held_by(name, slot))]
        values, inverse = np.unique(slot, return_inverse=True)
        order = np.argsort(inverse, kind="stable")  # the ranks of each slot together: linear, not ranks × slots
        cuts = np.cumsum(np.bincount(inverse, minlength=values.size))[:-1]
        return [(which, self.held_by(name, u)) for u, which in zip(values.tolist(), np.split(order, cuts))]

    def held_by(self, name: str, slot) -> np.ndarray:
        """The request each rank's handle `name` (slot `slot`, or None) holds, -1 where none: made at its first use."""
        held = self.handles.get((name, slot))
        if held is None:
            held = self.handles[(name, slot)] = np.full(self.W, -1, dtype=np.int64)
        return held

    def track(self, handle: n.HandleRef | None, slot, A, req: np.ndarray) -> None:
        if handle is not None:
            for which, held in self.slots(handle.name, slot):
                held[A[which]] = req[which]
        self.live.append((req, A))

    def outstanding(self) -> tuple[np.ndarray, np.ndarray]:
        """The requests posted and not yet waited, and their ranks, in posting order."""
        if not self.live:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        live, live_rank = (np.concatenate(parts) for parts in zip(*self.live))
        keep = np.ones(live.size, dtype=bool)
        marked = live < self.waited.size  # requests posted since `waited` last grew are not waited
        keep[marked] = ~self.waited[live[marked]]
        return live[keep], live_rank[keep]

    def wait(self, s: n.Wait, A, env, b) -> None:
        if s.all:
            live, live_rank = self.outstanding()
            mine = np.isin(live_rank, A)
            if s.array is not None:  # `wait all h`: the requests this rank's slots of `h` hold, not yet waited
                held = [slots[A] for (name, _), slots in self.handles.items() if name == s.array.name]
                mine &= np.isin(live, np.concatenate(held) if held else live[:0])
            reqs, owners = live[mine], live_rank[mine]
            self.live = [(live[~mine], live_rank[~mine])]
            order = np.lexsort((reqs, owners))
            reqs, owners = reqs[order], owners[order]
            starts = np.searchsorted(owners, np.append(A, self.W)).astype(np.int64)
            starts[-1] = reqs.size
            self.add(WaitRec(s, A, b, starts=starts, reqs=reqs, all=s.array is None))
            return
        columns = []
        for h in s.handles:
            slot = self.slot(h, A, env)
            got = np.full(A.size, -1, dtype=np.int64)
            for which, held in self.slots(h.name, slot):
                got[which] = held[A[which]]
            missing = got < 0
            if missing.any():
                raise Failure(
                    missing,
                    lambda k, h=h, slot=slot: HandleNotAssigned.diagnostic(
                        f"handle `{h.name}{_slot_text(slot, k)}` has no request on rank {A[k]}",
                        span=h.span,
                        label="not assigned on this rank before this point",
                        help="assign it with `h = isend ...` (or another async op) on every rank that waits",
                    ),
                )
            columns.append(got)
        reqs = np.stack(columns, axis=1).reshape(-1)
        if self.waited.size < self.req_count:
            self.waited = np.concatenate([self.waited, np.zeros(max(self.req_count, self.waited.size), dtype=bool)])
        self.waited[reqs] = True
        starts = np.arange(0, reqs.size + 1, len(columns), dtype=np.int64)
        self.add(WaitRec(s, A, b, starts=starts, reqs=reqs))

    def collective(self, s: n.Collective, A, env, b) -> None:
        kind = KINDS[s.op]
        gid, me = self.group_ids(s.group, A)
        inputs = tuple(self.view(v, A, env) for v in s.inputs)
        outputs = tuple(self.view(v, A, env) for v in s.outputs)
        root = uniform(self.int_value(s.root, A, env, "a root rank")) if s.root is not None else None
        dtypes = {self.dtype_of(v) for v in inputs + outputs}
        if len(dtypes) > 1:
            raise fail_all(
                MixedDtypes.diagnostic(
                    f"`{s.op}` mixes dtypes {', '.join(sorted(dtypes))}",
                    span=s.span,
                    label="input and output buffers differ in dtype",
                    help="collectives move bytes: give every buffer of one op the same dtype",
                )
            )
        dtype = dtypes.pop() if dtypes else "float32"
        redop = scale = None
        if kind.reducing:
            redop = s.redop.name.name if s.redop else "sum"
            if s.redop is not None and s.redop.scale is not None:
                v = self.value(s.redop.scale, A, env)
                scale = uniform(np.asarray(v, dtype=np.float64)) if is_vec(v) else float(v)
        elif s.redop is not None:
            raise fail_all(
                BadReduceOp.diagnostic(
                    f"`{s.op}` takes no reduce op", span=s.redop.span, label="only reducing collectives take `op`"
                )
            )
        in_splits, out_splits = self.sizes(s.in_splits, A, env), self.sizes(s.out_splits, A, env)
        if len(in_splits) != len(out_splits):
            raise fail_all(
                InvalidView.diagnostic(
                    "`splits` needs two lists of the same length (input, output)",
                    span=s.span,
                    label=f"{len(in_splits)} input sizes, {len(out_splits)} output sizes at world {self.W}",
                    help="give one input and one output size per member of the group",
                )
            )
        rec = CollectiveRec(
            self.in_group_named(s),
            A,
            b,
            kind=kind,
            gid=gid,
            dtype=dtype,
            inputs=inputs,
            outputs=outputs,
            inputs_listed=s.inputs_listed,
            outputs_listed=s.outputs_listed,
            root=root,
            redop=redop,
            scale=scale,
            in_splits=in_splits,
            out_splits=out_splits,
        )
        self.check_fit(rec, kind, A, gid, me, root)
        if kind.name != "barrier":
            self.collective_calls += int(A.size)
            if self.collective_calls > MAX_COLLECTIVE_CALLS:
                raise fail_all(
                    ExpansionTooLarge.diagnostic(
                        f"the program expands to over {MAX_COLLECTIVE_CALLS:,} collective calls at world {self.W}",
                        span=s.span,
                        label="this collective pushes it over the limit",
                        notes=(
                            Note(
                                message="the simulator computes every rank's part of a collective on its own: "
                                "that many would take minutes"
                            ),
                        ),
                        help="check the loop bounds and params, or check a smaller world size with `--world`",
                    )
                )
        slot = self.slot(s.handle, A, env)
        if s.handle is not None:
            rec.req = self.new_requests(A, len(self.records))
        self.add(rec)
        if rec.req is not None:
            self.track(s.handle, slot, A, rec.req)

    def sizes(self, items: tuple, A, env) -> tuple:
        """A `splits` list: its sizes in order, each an integer per rank."""
        return self.listed(items, A, env, "a split size")

    def listed(self, items: tuple, A, env, what: str, limit: int | None = None, too_long=None) -> tuple:
        """A list `[E, ...]` or `[E for j in LO .. HI]` (one value per j, as many on every rank of A): its
        integers in order, each per rank (a scalar where the ranks agree). `too_long(count)` is the
        diagnostic for a computed list of more than `limit` values, found before any is computed."""
        out = []
        for x in items:
            if not isinstance(x, n.ListFor):
                out.append(uniform(self.int_value(x, A, env, what)))
                continue
            lo = uniform(self.int_value(x.lo, A, env, "a bound of the list"))
            hi = uniform(self.int_value(x.hi, A, env, "a bound of the list"))
            if is_vec(lo) or is_vec(hi):
                raise fail_all(
                    InvalidView.diagnostic(
                        "the list of split sizes must have the same length on every rank of the call",
                        span=x.span,
                        label="its bounds differ between ranks",
                        help="bound it by the group's size, e.g. `for j in 0 .. g.size - 1`",
                    )
                )
            if limit is not None and hi - lo + 1 > limit:
                raise fail_all(too_long(hi - lo + 1))
            self.spend(max(0, hi - lo + 1) * max(1, int(A.size)), x)
            out.extend(uniform(self.int_value(x.value, A, dict(env, **{x.var: j}), what)) for j in range(lo, hi + 1))
        return tuple(out)

    def check_fit(self, rec: CollectiveRec, kind, A, gid, me, root) -> None:
        """N131 on the members whose buffers cannot serve their group (non-members and a root outside the
        group are the engine's to report)."""
        sizes = np.array([len(g.ranks) for g in self.groups], dtype=np.int64)
        size = sizes[gid] if is_vec(gid) else int(sizes[gid])
        gid_a = np.broadcast_to(np.asarray(gid), A.shape)
        member = np.asarray(me) >= 0
        is_root = np.zeros(A.size, dtype=bool)
        if root is not None:
            root_a = np.broadcast_to(np.asarray(root), A.shape)
            in_world = (0 <= root_a) & (root_a < self.W)
            at_root = np.where(in_world, root_a, 0)
            if rec.node.group is None:
                member &= in_world
            else:
                gid_of, idx_in = self.group_of[(rec.node.group.name, rec.node.group.dim)]
                member &= in_world & (gid_of[at_root] == gid_a) & (idx_in[at_root] >= 0)
            is_root = root_a == A
        call = Call(rec, size, me, is_root, int(A.size))
        rec.contribution = uniform(kind.contribution(call))
        if not member.any():
            return
        problem = kind.fit(call)
        if problem is None:
            return
        bad = problem.mask & member
        if bad.any():
            raise Failure(
                bad,
                lambda k: BufferDoesNotFit.diagnostic(
                    problem.message(k),
                    span=rec.span,
                    label=f"on rank {A[k]}, group of {item(size, k)}",
                    help="size the buffers for the group: see docs/language.md, Collectives",
                ),
            )

    # ---- the result ---------------------------------------------------------------------------------
    def requests(self) -> Requests:
        if not self.req_chunks:
            empty = np.zeros(0, dtype=np.int32)
            return Requests(empty, empty, empty, empty)
        # int32: a ring of `isend`s at world 4096 posts 33.5 million requests (four int64 columns: 1.1 GB)
        sizes = np.array([c[0].size for c in self.req_chunks], dtype=np.int64)
        rank = np.concatenate([c[0] for c in self.req_chunks]).astype(np.int32)
        record = np.repeat(np.array([c[1] for c in self.req_chunks], dtype=np.int32), sizes)
        first = (np.cumsum(sizes) - sizes).astype(np.int32)  # each chunk's first request
        pos = np.arange(int(sizes.sum()), dtype=np.int32) - np.repeat(first, sizes)
        parts = np.concatenate([np.broadcast_to(np.asarray(c[3], dtype=np.int32), c[0].shape) for c in self.req_chunks])
        return Requests(rank, record, pos, parts)


def _with_notes(d: Diagnostic, notes: tuple) -> Diagnostic:
    """`d` with those of `notes` it does not have yet."""
    extra = tuple(x for x in notes if x not in d.notes)
    return replace(d, notes=d.notes + extra) if extra else d


def _slot_text(slot, k: int) -> str:
    """`[3]` for rank k's slot of an array of handles, nothing for a plain handle."""
    return "" if slot is None else f"[{item(slot, k)}]"


def _own_names(node) -> set[str]:
    """The names a statement's own expressions read (not those of the blocks inside it); of an expression, its
    names."""
    if not isinstance(node, n.Node) or isinstance(node, (n.Name, n.Attr, n.Call, n.Slice, n.Index, n.Unary, n.Binary)):
        return n.names_read(node) if isinstance(node, n.Node) else set()
    out: set[str] = set()
    for field in fields(node):
        if field.name in ("body", "orelse", "branches", "span"):
            continue
        value = getattr(node, field.name)
        for x in value if isinstance(value, tuple) else (value,):
            if isinstance(x, n.Node):
                out |= _own_names(x)
    return out


def _views_in(e, is_view):
    """The views an element expression reads, outermost first."""
    if is_view(e):
        yield e
        return
    for c in n.children(e):
        yield from _views_in(c, is_view)


def _inside(inner, outer) -> bool:
    """Is node `inner` within node `outer` (by source span)?"""
    a, b = inner.span, outer.span
    return a.path == b.path and b.start <= a.start and a.end <= b.end


def _keep_rows(rec: ReadRec, keep: np.ndarray) -> None:
    """A read record restricted to the ranks `keep` marks."""
    rec.ranks = rec.ranks[keep]
    rec.value = _sub_elem(rec.value, keep)
    rec.shape = None if rec.shape is None else rec.shape.sub(keep)
    rec.reads = tuple(elem_reads(rec.value))
    rec.ordinal, rec.known = rec.ordinal[keep], rec.known[keep]
    rec.missing = None if rec.missing is None or not rec.missing[keep].any() else rec.missing[keep]


def _sub_elem(e, sel):
    tag = e[0]
    if tag == "c":
        return ("c", sub(e[1], sel))
    if tag == "v":
        return ("v", e[1].sub(sel))
    if tag == "u":
        return ("u", e[1], _sub_elem(e[2], sel))
    if tag == "b":
        return ("b", e[1], _sub_elem(e[2], sel), _sub_elem(e[3], sel), e[4])
    if tag == "f":
        return ("f", e[1], tuple(_sub_elem(a, sel) for a in e[2]))
    return e


def _below(v, bound) -> bool:
    """Is v below `bound` on some rank (scalars or arrays on either side)?"""
    if not is_vec(v) and not is_vec(bound):
        return bool(v < bound)
    if is_vec(v) and not is_vec(bound):
        return bool(v.size) and v.min() < bound
    return bool(np.any(np.asarray(v) < bound))


def _at_least(v, bound) -> bool:
    if not is_vec(v) and not is_vec(bound):
        return bool(v >= bound)
    if is_vec(v) and not is_vec(bound):
        return bool(v.size) and v.max() >= bound
    return bool(np.any(np.asarray(v) >= bound))


def _objectish(*vals) -> bool:
    return any(is_vec(v) and v.dtype == object for v in vals)


def _negative_powers_float(v):
    """As in `2 ** -1`: a negative integer power is a fraction."""
    if is_vec(v):
        if v.dtype.kind == "i" and (v < 0).any():
            return v.astype(np.float64)
        return v
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        return float(v)
    return v


def _same_shape(a: tuple, b: tuple):
    if len(a) != len(b):
        return False
    same = True
    for x, y in zip(a, b):
        same = same & (np.asarray(x) == np.asarray(y))
    return same


def resolve_params(program: Program, overrides: Mapping[str, object] | None) -> dict[str, object]:
    """Defaults, then `--set` overrides (strings are parsed); N125 for an unknown or bad value."""
    overrides = dict(overrides or {})
    declared = {p.name: p for p in program.params}
    problems = []
    for k, v in overrides.items():
        if k not in declared:
            names = ", ".join(declared) or "none"
            problems.append(
                BadParamValue.diagnostic(
                    f"`--set {k}`: the program has no param `{k}`", notes=(Note(message=f"its params: {names}"),)
                )
            )
        elif isinstance(v, str) and parse_param_value(v) is None:
            problems.append(
                BadParamValue.diagnostic(
                    f"`--set {k}={v}`: not an integer, number or true/false",
                    span=declared[k].span,
                    label=f"`{k}` is declared here",
                )
            )
    if problems:
        raise CommdslError(problems)
    env: dict[str, object] = {}
    probe = Expander(program, 1, {})
    nobody = np.zeros(0, dtype=np.int64)
    for p in program.params:
        if p.name in overrides:
            v = overrides[p.name]
            env[p.name] = parse_param_value(v) if isinstance(v, str) else v
        else:
            try:
                env[p.name] = probe.value(p.default, nobody, env)
            except Failure as f:
                raise CommdslError([f.diagnostic(0)]) from None
    return env


def expand(
    program: Program, world: int, params: Mapping[str, object] | None = None, deadline: Deadline | None = None
) -> Schedule:
    """The Schedule of `program` at `world` ranks; raises CommdslError with every expansion error, and
    TimeLimitReached when `deadline` passes first.

    A program that reads integers from tensor data is expanded beside the simulator, to a fixed point: an
    expansion stops each rank at its first read it cannot compute itself (one after the rank received data);
    the simulator runs that partial schedule, and the next expansion goes on from the stopped ranks' tensors
    there. Each run takes at least one rank past a read, or the schedule stalls before them: then the last
    expansion is the result, its `unread` naming the ranks that stopped, for the checker to report what blocks
    them. Every stage reads this one result."""
    env = _checked_params(program, world, params)
    snapshots = Snapshots({})
    for _ in range(MAX_READ_PASSES):
        schedule = _expand_once(program, world, env, deadline, snapshots)
        if not schedule.unread:
            return schedule
        too_big = memory_problem(schedule)  # the simulator is about to hold every rank's tensors
        if too_big is not None:
            raise CommdslError([replace(too_big, worlds=(world,))])
        learnt = _run_to_reads(schedule, deadline)
        if not learnt:
            return schedule  # the schedule stalls before every stopped rank's read
        snapshots = Snapshots({**snapshots.at, **learnt})
    first = min(schedule.unread.values(), key=lambda r: r.span.start)
    raise CommdslError(
        [
            replace(
                ExpansionTooLarge.diagnostic(
                    f"learning the values read from tensor data takes over {MAX_READ_PASSES} runs of the schedule "
                    f"at world {world}",
                    span=first.span,
                    label="still not read after that many runs",
                    help="each run reaches the next read on some rank: read fewer values inside loops",
                ),
                worlds=(world,),
            )
        ]
    )


def _run_to_reads(schedule: Schedule, deadline: Deadline | None) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """Run a schedule whose ranks stopped at reads (Gloo's model: buffered sends let every rank go as far as it
    can); the tensors of each stopped rank that reached its read, there (its last op), by (rank, ordinal)."""
    from commdsl.engine import GLOO, run_engine
    from commdsl.simulate import Data

    data = Data(schedule)
    run_engine(schedule, GLOO, data, deadline=deadline)
    made = np.zeros(schedule.world, dtype=np.int64)  # per rank, the reads it made in this run
    for ranks, ordinals, _ in data.read_values:
        np.maximum.at(made, ranks, ordinals + 1)
    out = {}
    for rank, rec in schedule.unread.items():
        ordinal = int(rec.ordinal[int(np.searchsorted(rec.ranks, rank))])
        if made[rank] > ordinal:
            out[(rank, ordinal)] = data.rank_state(rank)
    return out


def _checked_params(program: Program, world: int, params: Mapping[str, object] | None) -> dict[str, object]:
    if not program.accepts(world) or not 1 <= world <= MAX_WORLD:
        span = program.world.span if program.world else None
        raise CommdslError(
            [
                WorldSizeNotDeclared.diagnostic(
                    f"world size {world} is outside the program's declared sizes ({program.describe_world()})",
                    span=span,
                    label="declared here" if span else "",
                    help="run at a declared size, or widen the `world` line",
                )
            ]
        )
    return resolve_params(program, params)


def set_up(ex: Expander) -> None:
    """Tables, groups, meshes and tensors of `ex` at its world, nothing expanded; CommdslError when a table,
    group or mesh fails there (every rank needs them). A tensor's own failure is kept in `ex.errors`."""
    try:
        ex.setup()
    except _Stop as stop:
        raise CommdslError([_at_world(stop.diagnostic, ex.W, None)]) from None
    ex.setup_tensors()


def _expand_once(
    program: Program, world: int, env: dict[str, object], deadline: Deadline | None, snapshots: Snapshots
) -> Schedule:
    """One expansion with what runs so far showed of the reads from data (`expand`)."""
    ex = Expander(program, world, env, deadline, snapshots)
    set_up(ex)
    if ex.reads_data:
        ex.start_following()
    A = ex.everyone[ex.alive]
    try:
        ex.block(program.body, A, dict(env, rank=A, world=world), ())
    except Failure as f:  # the step budget: it stops the whole expansion
        ex.kill(ex.everyone[ex.alive], f)
    if ex.reads_data:
        ex.flush_reads()
    if ex.errors:
        raise CommdslError([_at_world(d, world, rank) for d, rank in ex.errors.values()])
    return Schedule(
        program=program.name,
        path=program.path,
        world=world,
        params=env,
        backends=program.backends,
        groups=ex.groups,
        infos=ex.infos,
        records=ex.records,
        top=ex.top,
        requests=ex.requests(),
        group_of=ex.group_of,
        made=ex.made,
        reached={name: tuple(chains) for name, chains in ex.reached.items()},
        unread=ex.unread,
    )


def _at_world(d: Diagnostic, world: int, rank: int | None) -> Diagnostic:
    """The world size goes in `worlds` (merged across sizes by the checker, rendered as a note), the rank
    in a note of its own: a note saying "at world size 2" would hide the merged list of sizes."""
    notes = d.notes + ((Note(message=f"on rank {rank}"),) if rank is not None else ())
    return replace(d, notes=notes, worlds=(world,))


__all__ = ["expand", "resolve_params", "parse_param_value", "MAX_TENSOR_ELEMENTS"]
