"""B6xx: reductions and receives the chosen backend refuses, or runs with a meaning of its own.

What each backend does with each reduce op and dtype is one table, `reduction`, sourced in
docs/backend-support.md#reduce-ops (Gloo measured with torch 2.13; NCCL from ProcessGroupNCCL's
`getNcclReduceOp` and NCCL's `hostToDevRedOp`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

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
    for the dtype it is used on: Gloo's bitwise ops on floating point, its `avg` on integers and bool and
    its missing `premul_sum`; NCCL's missing bitwise ops, its `premul_sum` on integers and bool and its
    `avg` on bool.

    ## Why is this bad?

    The collective raises at run time on every rank, after everything before it has run. Which
    combinations fail is backend-specific: see the backend notes. The help names a rewrite that works on
    the backend at hand.

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
    tensor mean: float32[1] = 0
    all_reduce count op sum
    mean = count
    mean /= world
    ```

    ## Backend notes

    Measured on Gloo (`all_reduce`; `reduce` and `reduce_scatter` agree on `float32`):

    | op | floating point | integers | bool |
    |---|---|---|---|
    | `sum`, `product`, `min`, `max` | ok | ok | ok |
    | `band`, `bor`, `bxor` | `RuntimeError: Cannot use ReduceOp.BAND with non-integral dtype` | ok | ok |
    | `avg` | ok | `RuntimeError` (result type Float can't be cast) | `RuntimeError` |
    | `premul_sum` | `RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo` | same | same |

    On NCCL (torch's `ProcessGroupNCCL::getNcclReduceOp`):

    | op | floating point | integers | bool |
    |---|---|---|---|
    | `sum`, `product`, `min`, `max` | ok | ok | ok (run on uint8; `sum` as MAX) |
    | `band`, `bor`, `bxor` | `ValueError: Cannot use ReduceOp.BAND with NCCL` | same | same |
    | `avg` | ok | runs, truncating (`B602`) | `TypeError: Cannot use ReduceOp.AVG with boolean inputs` |
    | `premul_sum` | ok | `TypeError: PreMulSum Data type must be half, float, bfloat16 or double` | same |
    """

    code = "B601"
    name = "unsupported-reduce-op"
    about_backends = True
    backend_doc = "reduce-ops"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rec in _reducing(ctx):
            r = reduction(ctx.backend, rec.redop, rec.dtype)
            if r.refused:
                by = " or ".join(b for b in ctx.backends if reduction(b, rec.redop, rec.dtype).refused)
                yield cls.diagnostic(
                    f"`{rec.kind.name}` with `op {rec.redop}` on {rec.dtype} is not supported by {by}",
                    span=rec.span,
                    label=f"`{rec.redop}` on {rec.dtype}",
                    notes=(Note(message=r.why),),
                    help=r.help,
                )


class IntegerAvgTruncates(Rule):
    """`avg` on an integer tensor, which NCCL rounds toward zero

    ## What it does

    Checked when the program's backends include `nccl`. Reports a reduction with `op avg` on an integer
    tensor (int8, uint8, int32, int64).

    ## Why is this bad?

    NCCL does not refuse it, and does not compute a mean either: it adds the members' integers and divides
    the sum by the group size, truncating toward zero, in the tensor's own dtype (the sum may overflow
    first). The average of 1 and 2 is 1, of -1 and -2 is -1. Gloo refuses the same call (`B601`), so the
    program is not portable either. Reduce with `sum` and divide in floating point, or average a floating
    point tensor.

    ## Example

    ```comm
    program counts
    world 2
    backend nccl
    tensor count: int64[1] = rank
    all_reduce count op avg
    ```

    ## Use instead

    ```comm
    program counts
    world 2
    backend nccl
    tensor count: int64[1] = rank
    tensor mean: float32[1] = 0
    all_reduce count op sum
    mean = count
    mean /= world
    ```

    ## Backend notes

    NCCL maps `ncclAvg` on integer types to `SumPostDiv` with the rank count (`hostToDevRedOp`, NCCL
    `src/enqueue.cc`); its division truncates toward zero. Floating-point `avg` is a sum pre-multiplied by
    `1 / n`. The simulator computes NCCL's integer result, so `expect`s see what NCCL gives.
    """

    code = "B602"
    name = "integer-avg-truncates"
    severity = "warning"
    about_backends = True
    backend_doc = "reduce-ops"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rec in _reducing(ctx):
            r = reduction(ctx.backend, rec.redop, rec.dtype)
            if r.truncates:
                yield cls.diagnostic(
                    f"`{rec.kind.name}` with `op avg` on {rec.dtype} rounds the mean toward zero on nccl",
                    span=rec.span,
                    label="integer sum // group size",
                    notes=(Note(message=r.why),),
                    help=r.help,
                )


class NcclRecvFromAny(Rule):
    """a receive from any source, which NCCL does not have

    ## What it does

    Checked when the program's backends include `nccl`. Reports each `recv ... from any` and
    `irecv ... from any`.

    ## Why is this bad?

    torch's NCCL process group has no receive from any source: the call raises on the receiving rank, and
    its senders then wait for a receive that never comes. Name the source, or, when the order of arrival
    truly does not matter, receive from each sender in turn.

    ## Example

    ```comm
    program master
    world 2
    backend nccl
    tensor x: float32[2] = rank
    on rank == 0:
        recv x from any
    else:
        send x to 0
    ```

    ## Use instead

    ```comm
    program master
    world 2
    backend nccl
    tensor x: float32[2] = rank
    on rank == 0:
        recv x from 1
    else:
        send x to 0
    ```

    ## Backend notes

    `ProcessGroupNCCL::recvAnysource` raises `ProcessGroupNCCL does not support recvAnysource` (PGNCCL);
    `dist.recv(tensor)` and `dist.irecv(tensor)` with no `src` call it.
    """

    code = "B603"
    name = "nccl-recv-from-any"
    about_backends = True
    backend_doc = "receive-from-any"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.backend != "nccl":
            return
        seen = set()
        for op in ctx.schedule.p2p_records():
            if op.from_any and op.span not in seen:
                seen.add(op.span)
                yield cls.diagnostic(
                    f"`{op.word} from any` is not supported by nccl",
                    span=op.span,
                    label="no source rank",
                    notes=(Note(message="NCCL raises `ProcessGroupNCCL does not support recvAnysource`"),),
                    help="name the source rank",
                )


def _reducing(ctx: Context) -> Iterator[CollectiveRec]:
    """Each reducing collective statement once (its records repeat it per loop iteration)."""
    seen = set()
    for rec in ctx.schedule.records:
        if isinstance(rec, CollectiveRec) and rec.redop is not None and rec.span not in seen:
            seen.add(rec.span)
            yield rec


class Reduction(NamedTuple):
    """What a backend does with one reduce op on one dtype: refuses it, runs it with a rounding of its own, or
    runs it (`why` and `help` are empty then)."""

    refused: bool = False
    truncates: bool = False
    why: str = ""
    help: str = ""


SUM_THEN_DIVIDE = (
    "reduce with `op sum`, then divide in a floating-point tensor (`mean = x`, then `mean /= world`), "
    "or average a floating-point tensor"
)


def reduction(backend: str, redop: str, dtype: str) -> Reduction:
    """`redop` on `dtype` under `backend` (docs/backend-support.md#reduce-ops)."""
    d = DTYPES[dtype]
    bitwise = redop in ("band", "bor", "bxor")
    flags = (
        "for bool or 0/1 flags `op max` is OR and `op min` is AND; otherwise gather the values and combine them locally"
        if redop != "bxor"
        else "gather the values and combine them locally"
    )
    if backend == "gloo":
        if redop == "premul_sum":
            return Reduction(
                True,
                why="Gloo has no PREMUL_SUM (`Cannot use ReduceOp.PREMUL_SUM with Gloo`)",
                help="scale the tensor first (`x *= s`), then reduce with `op sum`",
            )
        if bitwise and d.is_float:
            return Reduction(
                True,
                why=f"Gloo applies `{redop}` to integers and bool only (`Cannot use "
                f"ReduceOp.{redop.upper()} with non-integral dtype`)",
                help="reduce an integer copy of the tensor, or use `max`/`min` for flags",
            )
        if redop == "avg" and not d.is_float:
            kind = "bool" if d.is_bool else "integer"
            return Reduction(
                True,
                why=f"Gloo's AVG fails on {kind} tensors (`result type Float can't be cast`); "
                "NCCL instead returns the integer sum divided by the group size, truncated "
                "toward zero",
                help=SUM_THEN_DIVIDE if not d.is_bool else "reduce an int or float copy with `op sum`",
            )
    if backend == "nccl":
        if bitwise:
            return Reduction(
                True,
                why=f"NCCL has no bitwise reductions (`Cannot use ReduceOp.{redop.upper()} with NCCL`), on any dtype",
                help=flags,
            )
        if redop == "premul_sum" and not d.is_float:
            return Reduction(
                True,
                why="NCCL's premul_sum takes floating point only (`PreMulSum Data type must be "
                "half, float, bfloat16 or double`)",
                help="scale and reduce a floating-point copy, or reduce with `op sum` and multiply",
            )
        if redop == "avg" and d.is_bool:
            return Reduction(
                True,
                why="NCCL refuses AVG on bool (`Cannot use ReduceOp.AVG with boolean inputs`)",
                help="reduce an int or float copy with `op sum`; for flags, `op max` is OR",
            )
        if redop == "avg" and d.is_int:
            return Reduction(
                truncates=True,
                why="NCCL adds the integers and divides the sum by the group size in "
                f"{dtype}, truncating toward zero (the sum may overflow first)",
                help=SUM_THEN_DIVIDE,
            )
    return Reduction()
