"""One small function per op kind: a concrete Schedule op becomes a ready-to-call torch.distributed step.

Everything that does not change between calls — tensor views, the process group, the reduce op, the
`P2POp` list of a batch — is built once by `build_steps`, so the timed loop in `worker.py` only calls
closures and its overhead over a hand-written loop stays in the microseconds.

A view is a flat element range of a contiguous tensor: `flat[offset : offset + numel].view(shape)`
shares storage, so writes through any view land in the tensor, exactly as the simulator assumes.
Element expressions run through the simulator's own evaluator (`commdsl.elementwise`) on torch
tensors; `expect`s are judged on host copies with the simulator's `judge`, so both agree by construction.

Memory: a rank holds its tensors once, plus at most a chunk's worth (CHUNK elements) of temporaries. The
initial values of a large tensor and an `expect` over one are computed CHUNK elements at a time, the
element index `i` counting from the chunk's start (`_from`); NumPy's float64 temporaries over a whole
tensor once made a rank use about 11 times its tensors' bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from commdsl.collectives import KINDS
from commdsl.elementwise import IN_PLACE, NUMPY, ArrayLib, TensorValues, evaluate, in_place, tensor_values
from commdsl.p2p import ANY_SOURCE, form
from commdsl.schedule import Batch, Collective, Compute, Expect, NewGroup, Print, Read, Recv, Send, View, Wait
from commdsl.simulate import judge

Step = Callable[[], None]

REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
    "avg": dist.ReduceOp.AVG,
}


@dataclass
class Context:
    """What the steps of one rank share: its tensors, process groups, open requests and output."""

    rank: int
    backend: str
    device: torch.device
    buffers: dict[str, torch.Tensor]  # flat (1-D) tensors by name
    dtypes: dict[str, str]  # the program's dtype name of each tensor
    groups: list  # process group handle by Group.id; None for the world (the default group)
    emit: Callable[[str, dict], None]  # records a print or an expect result for the launcher
    reqs: dict[int, object] = field(default_factory=dict)
    coalescing: tuple | None = None  # a `coalesced:` block's open `_coalescing_manager` and its works, between steps
    sync: Step | None = None  # NCCL: wait for the GPU, so "returned" means "done" as in the simulator
    views: dict[View, torch.Tensor] = field(default_factory=dict)  # `view`'s, made once: the buffers never move

    def view(self, v: View) -> torch.Tensor:
        """The tensor of view `v`, sharing its buffer's storage; made on first use and kept, so a step that
        reads views every call (a local op's operands, a data read) pays for indexing once, not per call."""
        t = self.views.get(v)
        if t is None:
            t = self.views[v] = self.buffers[v.tensor][v.offset : v.offset + v.numel].view(v.shape)
        return t

    def host(self, v: View) -> np.ndarray:
        """A NumPy copy of a view, in the simulator's representation (bfloat16 as float32)."""
        return _to_numpy(self.view(v))

    def host_flat(self, name: str) -> np.ndarray:
        return _to_numpy(self.buffers[name])


def write_tensor(path: str, t: torch.Tensor) -> dict:
    """A flat tensor's bytes, in the simulator's representation (bfloat16 as float32), into file `path`, a
    chunk at a time; returns the record that names it (`records.decode_array` maps it back)."""
    dtype = np.float32 if t.dtype == torch.bfloat16 else None
    with open(path, "wb") as f:
        for start in range(0, t.numel(), CHUNK):
            part = _to_numpy(t[start : start + CHUNK])
            dtype = part.dtype
            f.write(memoryview(np.ascontiguousarray(part)).cast("B"))
    if dtype is None:
        dtype = _to_numpy(t[:0]).dtype
    return {"dtype": np.dtype(dtype).str, "shape": [int(t.numel())], "file": os.path.basename(path)}


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.cpu().numpy().copy()


def torch_lib(device: torch.device) -> ArrayLib:
    """The array functions `evaluate` needs, on torch tensors of `device`."""

    def both(fn):
        def call(a, b):
            if not torch.is_tensor(a) and not torch.is_tensor(b):
                return fn(torch.as_tensor(a), torch.as_tensor(b)).item()
            return fn(torch.as_tensor(a, device=device), torch.as_tensor(b, device=device))

        return call

    return ArrayLib(
        lambda n: torch.arange(n, dtype=torch.int64, device=device), both(torch.minimum), both(torch.maximum), torch.abs
    )


CHUNK = 1 << 20
"""Elements per chunk when a large tensor is initialised, judged by an `expect` or written out."""


def allocate(specs, rank: int, world: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of this rank, initialised exactly as the simulator does (`initial_value`), a chunk at a time."""
    from dataclasses import replace

    from commdsl.simulate import initial_value

    out = {}
    for name, spec in specs.items():
        dtype = getattr(torch, spec.dtype)
        if spec.init is None:
            out[name] = torch.zeros(spec.numel, dtype=dtype, device=device)
            continue
        if spec.numel <= CHUNK:
            out[name] = _tensor(initial_value(spec, rank, world), dtype, device)
            continue
        buf = out[name] = torch.empty(spec.numel, dtype=dtype, device=device)
        if spec.init[0] == "rand":  # one generator per rank, drawn a chunk at a time: the same stream
            rng, normal = np.random.default_rng([spec.init[1], rank]), spec.init[2]
            for start in range(0, spec.numel, CHUNK):
                n = min(CHUNK, spec.numel - start)
                draws = rng.standard_normal(n) if normal else rng.random(n)
                part = replace(spec, shape=(n,), numel=n, init=("c", draws))  # cast as the simulator casts
                buf[start : start + n].copy_(_tensor(initial_value(part, rank, world), dtype, device))
            continue
        for start in range(0, spec.numel, CHUNK):
            n = min(CHUNK, spec.numel - start)
            part = replace(spec, shape=(n,), numel=n, init=_from(spec.init, start))
            buf[start : start + n].copy_(_tensor(initial_value(part, rank, world), dtype, device))
    return out


def _tensor(values: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values)).to(device=device, dtype=dtype).reshape(-1).contiguous()


def _from(e, start: int):
    """Element expression `e` for the elements from `start` on: the element index `i` counts from `start`."""
    if start == 0:
        return e
    tag = e[0]
    if tag == "i":
        return ("b", "+", e, ("c", start))
    if tag in ("c", "v"):
        return e
    if tag == "u":
        return ("u", e[1], _from(e[2], start))
    if tag == "b":
        return ("b", e[1], _from(e[2], start), _from(e[3], start))
    if tag == "f":
        return ("f", e[1], tuple(_from(a, start) for a in e[2]))
    raise ValueError(f"element expression {tag!r}")


def build_steps(ops, ctx: Context) -> list[Step]:
    """One closure per op, in order; an op on a group that `new_group` makes as a step is built when it runs."""
    return [(_late if _on_step_group(op) else _builder(op))(op, index, ctx) for index, op in enumerate(ops)]


def _builder(op):
    builders = {
        Compute: _compute,
        Expect: _expect,
        Print: _print,
        Send: _p2p,
        Recv: _p2p,
        Batch: _batch,
        Wait: _wait,
        Collective: _collective,
        NewGroup: _new_group,
        Read: _read,
    }
    return builders[type(op)]


def _on_step_group(op) -> bool:
    ops = op.ops if isinstance(op, Batch) else () if isinstance(op, NewGroup) else (op,)
    return any(getattr(o, "group", None) is not None and o.group.step for o in ops)


def _late(op, index: int, ctx: Context) -> Step:
    """The op's step, built the first time it runs: its group exists by then (the checker makes sure)."""
    built: list[Step] = []

    def step():
        if not built:
            built.append(_builder(op)(op, index, ctx))
        built[0]()

    return step


def _blocking(call: Step, ctx: Context) -> Step:
    sync = ctx.sync
    if sync is None:
        return call

    def step():
        call()
        sync()

    return step


def _group(g, ctx: Context):
    return None if g is None or g.id == 0 else ctx.groups[g.id]


# ---- local ops ------------------------------------------------------------------------------------


def _compute(op: Compute, index: int, ctx: Context) -> Step:
    target = ctx.view(op.target)
    lib, read, shape, value, kind = torch_lib(ctx.device), ctx.view, op.target.shape, op.value, op.op
    combine = {"+=": torch.add, "-=": torch.sub, "*=": torch.mul, "/=": torch.true_divide}.get(kind)
    if in_place(kind, value, op.target, lambda v: ctx.dtypes[v.tensor]):
        # `x.chunk(k, world) += tmp`: one pass and no temporaries, where copy, add, copy back cost a ring
        # all-reduce half its time (docs/benchmarks.md, Bench)
        update, source = getattr(target, IN_PLACE[kind]), ctx.view(value[1])
        return lambda: update(source)

    copy_first = kind == "=" and value[0] == "v"  # `x[1:3] = x[0:2]`: copy_ refuses overlapping views

    def step():
        v = evaluate(value, read, shape, lib)
        if copy_first:
            v = v.clone()
        if combine is not None:
            v = combine(target, v)  # promotes like NumPy (int += 0.5 computes in float), cast back below
        if torch.is_tensor(v):
            target.copy_(v)
        else:
            target.fill_(v)

    return step


def _expect(op: Expect, index: int, ctx: Context) -> Step:
    dtype = ctx.dtypes[op.view.tensor]
    numel = op.view.numel

    def host(v: View) -> TensorValues:  # the simulator's arithmetic on host copies: torch's, in NumPy
        return tensor_values(ctx.host(v), ctx.dtypes[v.tensor], v.shape)

    def whole():
        actual = ctx.host(op.view)
        expected = np.broadcast_to(np.asarray(evaluate(op.value, host, op.view.shape, NUMPY)), op.view.shape)
        ok, detail = judge(actual, expected, op.cmp, dtype)
        ctx.emit("expect", {"index": index, "ok": ok, "detail": detail})

    def chunked():
        """The same verdict, CHUNK elements at a time: every view the expression reads is as large as the
        expect's (or one element, which is read whole), so chunk k of each lines up."""
        ok, detail = True, ""
        for start in range(0, numel, CHUNK):
            n = min(CHUNK, numel - start)

            def read(v: View, start=start, n=n) -> TensorValues:
                if v.numel != numel:
                    return host(v)
                part = _to_numpy(ctx.buffers[v.tensor][v.offset + start : v.offset + start + n])
                return tensor_values(part, ctx.dtypes[v.tensor], v.shape)

            with np.errstate(all="ignore"):
                expected = np.broadcast_to(np.asarray(evaluate(_from(op.value, start), read, (n,), NUMPY)), (n,))
                ok, detail = judge(np.asarray(read(op.view)), expected, op.cmp, dtype)
            if not ok:
                detail = re.sub(r"^element (\d+)", lambda m, start=start: f"element {start + int(m.group(1))}", detail)
                break
        ctx.emit("expect", {"index": index, "ok": ok, "detail": detail})

    return whole if numel <= CHUNK else chunked


class DataReadMismatch(RuntimeError):
    """A value read from tensor data on the real run is not the one the checked schedule was expanded with: every
    op after it (sizes, peers, bounds) would differ from what was checked, so the rank stops here."""


def _read(op: Read, index: int, ctx: Context) -> Step:
    """`int(t[k])` / `int(E.sum())`, compared with the value the checker and simulator assumed."""
    lib = torch_lib(ctx.device)

    def step():
        value = evaluate(op.value, ctx.view, op.shape, lib)
        if not (torch.is_tensor(value) and value.shape == op.shape):  # a scalar, or broadcast to the shape
            value = torch.broadcast_to(torch.as_tensor(value, device=ctx.device), op.shape)
        got = int(value) if value.numel() == 1 else int(value.sum())
        if got != op.expected:
            assumed = "no value (no simulated run got there)" if op.expected is None else op.expected
            raise DataReadMismatch(
                f"`{op.text}` is {got} on this rank, but the checked schedule was expanded with {assumed}"
            )

    return step


def _print(op: Print, index: int, ctx: Context) -> Step:
    def step():
        lines = [f"{text} = {_repr(ctx.view(v))}" for text, v in zip(op.texts, op.views, strict=True)]
        ctx.emit("print", {"index": index, "lines": lines})

    return step


def _repr(t: torch.Tensor) -> str:
    """torch's own repr, as under torch's default dtype (the worker computes with float64 as default)."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        return repr(t.detach().cpu())
    finally:
        torch.set_default_dtype(saved)


# ---- point-to-point -------------------------------------------------------------------------------


def _p2p(op: Send | Recv, index: int, ctx: Context) -> Step:
    t, tag, group = ctx.view(op.view), op.tag, _group(op.group, ctx)
    peer = None if op.peer == ANY_SOURCE else op.peer  # torch's src=None: a receive from any source
    fn = form(isinstance(op, Send), op.blocking).function
    if op.blocking:
        return _blocking(lambda: fn(t, peer, group=group, tag=tag), ctx)
    reqs, req = ctx.reqs, op.req

    def post():
        reqs[req] = fn(t, peer, group=group, tag=tag)

    return post


def _batch(op: Batch, index: int, ctx: Context) -> Step:
    p2p = [
        dist.P2POp(
            form(isinstance(o, Send), o.blocking).batched.function,
            ctx.view(o.view),
            o.peer,
            _group(o.group, ctx),
            o.tag,
        )
        for o in op.ops
    ]

    if op.req is not None:  # `b = batch:` its list of works is waited by a later `wait b`
        reqs, req = ctx.reqs, op.req

        def post():
            reqs[req] = dist.batch_isend_irecv(p2p)

        return post

    def step():
        for work in dist.batch_isend_irecv(p2p):
            work.wait()

    return _blocking(step, ctx)


def _wait(op: Wait, index: int, ctx: Context) -> Step:
    reqs, ids = ctx.reqs, op.reqs

    def step():
        for r in ids:
            if r not in reqs:
                raise RuntimeError(f"request {r} was never posted")
            work = reqs[r]
            # a second wait is torch's too: a no-op, or on Gloo's send and recv a timeout (R502); torch's request
            # from a rank outside the op's group is None, whose wait raises AttributeError here as in a script
            for w in work if isinstance(work, list) else (work,):  # a batch's request is its list of works
                w.wait()

    return _blocking(step, ctx)


# ---- collectives ----------------------------------------------------------------------------------


def _new_group(op: NewGroup, index: int, ctx: Context) -> Step:
    """`torch.distributed.new_group`, when the rank gets here: members and non-members alike call it."""
    groups, g = ctx.groups, op.group

    def step():
        groups[g.id] = dist.new_group(list(g.ranks))

    return step


def _redop(op: Collective, ctx: Context):
    if op.redop == "premul_sum":
        if ctx.backend != "nccl":
            raise RuntimeError(f"reduce op `premul_sum` needs NCCL; this run uses {ctx.backend}")
        from torch.distributed.distributed_c10d import _make_nccl_premul_sum

        return _make_nccl_premul_sum(op.scale)
    return REDUCE_OPS[op.redop]


def _collective(op: Collective, index: int, ctx: Context) -> Step:
    kind = KINDS[op.kind]
    red = _redop(op, ctx) if kind.reducing else None
    device_ids = [ctx.device.index] if ctx.backend == "nccl" else None
    call = kind.torch_call(
        op,
        [ctx.view(v) for v in op.inputs],
        [ctx.view(v) for v in op.outputs],
        _group(op.group, ctx),
        red,
        op.root == ctx.rank,
        len(op.group.ranks),
        device_ids,
    )
    if op.block is not None:
        return _coalesced(op, call, _group(op.group, ctx), ctx)
    if op.req is None:
        return _blocking(lambda: call(False), ctx)
    reqs, req = ctx.reqs, op.req

    def post():
        reqs[req] = call(True)

    return post


def _coalesced(op: Collective, call, group, ctx: Context) -> Step:
    """A collective of a `coalesced:` block, one step per collective as for any other: the block's first opens
    torch's `_coalescing_manager` on the group, each records its collective in it, and the last closes it,
    which issues them all as one backend call and waits for it; in a block bound to a handle (`h = coalesced:`)
    the call is async and the manager, whose `wait()` waits for it, is the request `wait h` waits."""
    first, last, req = op.block.index == 0, op.block.last, op.req

    def step():
        if first:
            manager = dist._coalescing_manager(group, async_ops=req is not None)
            ctx.coalescing = (manager, manager.__enter__())
        call(False)
        if last:
            (manager, works), ctx.coalescing = ctx.coalescing, None
            manager.__exit__(None, None, None)
            if req is not None:
                ctx.reqs[req] = works

    return step if req is not None else _blocking(step, ctx)
