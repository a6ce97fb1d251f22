"""B6xx: ops, reduce ops and dtypes the chosen backend cannot run (measured: docs/backend-support.md)."""

from __future__ import annotations

from collections.abc import Iterator

from commdsl.checker.context import Context
from commdsl.diagnostics import Diagnostic, Note
from commdsl.dtypes import DTYPES
from commdsl.schedule import Collective


def unsupported(backend: str, redop: str, dtype: str) -> str | None:
    """Why `backend` rejects `redop` on `dtype`, or None (Gloo: measured with torch 2.13)."""
    d = DTYPES[dtype]
    if backend == "gloo":
        if redop == "premul_sum":
            return "Gloo has no PREMUL_SUM (`Cannot use ReduceOp.PREMUL_SUM with Gloo`)"
        if redop in ("band", "bor", "bxor") and d.is_float:
            return f"Gloo rejects `{redop}` on floating point (`Cannot use ReduceOp.{redop.upper()} with non-integral dtype`)"
        if redop == "avg" and not d.is_float:
            return "Gloo's AVG fails on integer and bool tensors (`result type Float can't be cast`)"
    if backend == "nccl":
        if redop in ("band", "bor", "bxor"):
            return f"NCCL has no bitwise reduce op (`Cannot use ReduceOp.{redop.upper()} with NCCL`)"
        if redop == "avg" and not d.is_float:
            return "NCCL's AVG is only defined for floating point"
    return None


def check(ctx: Context) -> Iterator[Diagnostic]:
    seen = set()
    for rank_ops in ctx.schedule.ops:
        for op in rank_ops:
            if type(op) is not Collective or op.redop is None or op.span in seen:
                continue
            for backend in ctx.backends:
                why = unsupported(backend, op.redop, op.dtype)
                if why:
                    seen.add(op.span)
                    yield Diagnostic(code="B601", span=op.span,
                                     message=f"`{op.kind}` with `op {op.redop}` on {op.dtype} is not supported by {backend}",
                                     label=f"`{op.redop}` on {op.dtype}", notes=(Note(message=why),),
                                     help="use `sum` with a scale, or an integer dtype for bitwise ops")
                    break
