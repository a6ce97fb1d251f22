"""B6xx: operations the chosen backend cannot run (measured: docs/backend-support.md).

The table of what each backend rejects is `unsupported`; issue 12 extends it with what NCCL refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from commdsl.diagnostics import Diagnostic, Note
from commdsl.dtypes import DTYPES
from commdsl.rules import Rule
from commdsl.schedule import CollectiveRec

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class UnsupportedReduceOp(Rule):
    """a reduce op the backend rejects for this dtype

    ## What it does

    Reports a reduce op that one of the program's backends (its `backend` line, or `--backend`) rejects
    for the dtype it is used on.

    ## Why is this bad?

    The collective raises at run time on every rank, after everything before it has run. Which
    combinations fail is backend-specific; see the backend notes.

    ## Example

    ```comm
    program counts
    world 2
    tensor count: int64[1] = rank
    all_reduce count op avg
    ```

    ## Use instead

    ```comm
    program counts
    world 2
    tensor count: int64[1] = rank
    all_reduce count op sum
    ```

    ## Backend notes

    Measured on Gloo (`all_reduce`; `reduce` and `reduce_scatter` agree on `float32`):

    | op | floating point | integers | bool |
    |---|---|---|---|
    | `sum`, `product`, `min`, `max` | ok | ok | ok |
    | `band`, `bor`, `bxor` | `RuntimeError: Cannot use ReduceOp.BAND with non-integral dtype` | ok | ok |
    | `avg` | ok | `RuntimeError` (result type Float can't be cast) | `RuntimeError` |
    | `premul_sum` | `RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo` | same | same |

    NCCL has no bitwise reduce ops, and its `avg` is defined for floating point only.
    """

    code = "B601"
    name = "unsupported-reduce-op"
    backend_doc = "reduce-ops"


    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()
        for rec in ctx.schedule.records:
            if not isinstance(rec, CollectiveRec) or rec.redop is None or rec.span in seen:
                continue
            why = unsupported(ctx.backend, rec.redop, rec.dtype)
            if why:
                seen.add(rec.span)
                yield cls.diagnostic(
                    f"`{rec.kind.name}` with `op {rec.redop}` on {rec.dtype} is not supported by {ctx.backend}",
                    span=rec.span, label=f"`{rec.redop}` on {rec.dtype}", notes=(Note(message=why),),
                    help="use `sum` with a scale, or an integer dtype for bitwise ops")


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
