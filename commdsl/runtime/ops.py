"""One small function per op kind: a concrete Schedule op becomes a ready-to-call torch.distributed step.

Everything that does not change between calls — tensor views, the process group, the reduce op, the
`P2POp` list of a batch — is built once by `build_steps`, so the timed loop in `worker.py` only calls
closures and its overhead over a hand-written loop stays in the microseconds.

A view is a flat element range of a contiguous tensor: `flat[offset : offset + numel].view(shape)`
shares storage, so writes through any view land in the tensor, exactly as the simulator assumes.
Element expressions run through the simulator's own evaluator (`commdsl.elementwise`) on torch
tensors; `expect`s are judged on host copies with the simulator's `judge`, so both agree by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from commdsl.collectives import KINDS
from commdsl.elementwise import NUMPY, ArrayLib, evaluate
from commdsl.schedule import Batch, Collective, Compute, Expect, Print, Recv, Send, View, Wait
from commdsl.simulate import judge

Step = Callable[[], None]

REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
              "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
              "bxor": dist.ReduceOp.BXOR, "avg": dist.ReduceOp.AVG}


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
    sync: Step | None = None  # NCCL: wait for the GPU, so "returned" means "done" as in the simulator

    def view(self, v: View) -> torch.Tensor:
        return self.buffers[v.tensor][v.offset : v.offset + v.numel].view(v.shape)

    def host(self, v: View) -> np.ndarray:
        """A NumPy copy of a view, in the simulator's representation (bfloat16 as float32)."""
        return _to_numpy(self.view(v))

    def host_flat(self, name: str) -> np.ndarray:
        return _to_numpy(self.buffers[name])


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

    return ArrayLib(lambda n: torch.arange(n, dtype=torch.int64, device=device),
                    both(torch.minimum), both(torch.maximum), torch.abs)


def allocate(specs, rank: int, world: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of this rank, initialised exactly as the simulator does (`initial_value`)."""
    from commdsl.simulate import initial_value

    out = {}
    for name, spec in specs.items():
        values = torch.from_numpy(np.ascontiguousarray(initial_value(spec, rank, world)))
        out[name] = values.to(device=device, dtype=getattr(torch, spec.dtype)).reshape(-1).contiguous()
    return out


def build_steps(ops, ctx: Context) -> list[Step]:
    """One closure per op, in order."""
    builders = {Compute: _compute, Expect: _expect, Print: _print, Send: _p2p, Recv: _p2p, Batch: _batch,
                Wait: _wait, Collective: _collective}
    return [builders[type(op)](op, index, ctx) for index, op in enumerate(ops)]


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
    in_place = {"+=": "add_", "-=": "sub_", "*=": "mul_"}.get(kind)
    if (in_place and value[0] == "v" and not value[1].overlaps(op.target)
            and ctx.dtypes[value[1].tensor] == ctx.dtypes[op.target.tensor]):
        # `x.chunk(k, world) += tmp`: one pass and no temporaries, where copy, add, copy back cost a ring
        # all-reduce half its time (docs/benchmarks.md, Bench); same dtype, so no promotion to mimic
        update, source = getattr(target, in_place), ctx.view(value[1])
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

    def step():
        actual = ctx.host(op.view)
        expected = np.broadcast_to(np.asarray(evaluate(op.value, ctx.host, op.view.shape, NUMPY)), op.view.shape)
        ok, detail = judge(actual, expected, op.cmp, dtype)
        ctx.emit("expect", {"index": index, "ok": ok, "detail": detail})
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
    t, peer, tag, group = ctx.view(op.view), op.peer, op.tag, _group(op.group, ctx)
    if op.blocking:
        fn = dist.send if isinstance(op, Send) else dist.recv
        return _blocking(lambda: fn(t, peer, group=group, tag=tag), ctx)
    fn = dist.isend if isinstance(op, Send) else dist.irecv
    reqs, req = ctx.reqs, op.req

    def post():
        reqs[req] = fn(t, peer, group=group, tag=tag)
    return post


def _batch(op: Batch, index: int, ctx: Context) -> Step:
    p2p = [dist.P2POp(dist.isend if isinstance(o, Send) else dist.irecv, ctx.view(o.view), o.peer,
                      _group(o.group, ctx), o.tag) for o in op.ops]

    def step():
        for work in dist.batch_isend_irecv(p2p):
            work.wait()
    return _blocking(step, ctx)


def _wait(op: Wait, index: int, ctx: Context) -> Step:
    reqs, ids = ctx.reqs, op.reqs

    def step():
        for r in ids:
            work = reqs.get(r)
            if work is None:
                raise RuntimeError(f"request {r} was never posted")
            work.wait()  # a second wait is torch's too: a no-op, or on Gloo's send and recv a timeout (R502)
    return _blocking(step, ctx)


# ---- collectives ----------------------------------------------------------------------------------

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
    call = kind.torch_call(op, [ctx.view(v) for v in op.inputs], [ctx.view(v) for v in op.outputs],
                           _group(op.group, ctx), red, op.root == ctx.rank, len(op.group.ranks), device_ids)
    if op.req is None:
        return _blocking(lambda: call(False), ctx)
    reqs, req = ctx.reqs, op.req

    def post():
        reqs[req] = call(True)
    return post
