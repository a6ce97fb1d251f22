"""C314–C317: `coalesced:` blocks that torch refuses, computes wrongly, or that the members do not share.

A block is one backend call at its end (`torch.distributed._coalescing_manager`, measured on Gloo with torch
2.13: docs/backend-support.md#coalesced). Within one rank's block the collectives must be one kind, and
`all_reduce`s one dtype, or torch raises; their reduce ops must agree, or torch silently applies the first
one's to all (C314, C315: read from the records), and no collective of the block sees what an earlier one writes
(C317). Across the members, every rank must coalesce the same
collectives in the same places (C316: the engine compares each call's place in its block, and the checker's
classification of member disagreements words it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.rules import Rule
from commdsl.schedule import CollectiveRec

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class CoalescedMixedCollectives(Rule):
    """a `coalesced:` block mixes collective kinds, or `all_reduce`s of different dtypes

    ## What it does

    Reports a `coalesced:` block holding collectives of different kinds (`all_reduce` with `all_gather`),
    or `all_reduce`s of different dtypes.

    ## Why is this bad?

    Torch issues the block as one backend call of one kind at its end. With mixed kinds it raises
    `RuntimeError: Coalescing manager requires all collectives to be the same type` on every rank; Gloo's
    coalesced all-reduce flattens its tensors into one buffer and raises `tensors must all have the same
    type` for mixed dtypes. See the backend notes.

    ## Example

    ```comm
    program buckets
    world 2
    tensor grad: float32[4] = rank
    tensor shard: float32[2] = rank
    tensor full: float32[4] = 0
    coalesced:
        all_reduce grad
        all_gather shard into full
    ```

    ## Use instead

    ```comm
    program buckets
    world 2
    tensor grad: float32[4] = rank
    tensor shard: float32[2] = rank
    tensor full: float32[4] = 0
    coalesced:
        all_reduce grad
    all_gather shard into full
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 2 and 4): `all_reduce` with `all_gather_into_tensor` in one block
    raises `RuntimeError` on every rank at the block's end, before anything is sent; float32 and int64
    `all_reduce`s raise `ProcessGroupGloo::allreduce_coalesced: tensors must all have the same type`.
    `all_gather_into_tensor`s of different dtypes coalesce fine. The kind check is torch's own
    (`_coalescing_manager` in c10d.py of torch 2.13). Torch 2.11 has none: on NCCL it runs the mixed block without an
    error, all-reducing the `all_gather`'s input and never writing its output (measured at world 1); NCCL
    refuses mixed `all_reduce` dtypes with `TypeError: Tensors must have identical type`.
    """

    code = "C314"
    name = "coalesced-mixed-collectives"
    backend_doc = "coalesced"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        def differs(first, rec):
            return rec.kind is not first.kind or (rec.kind.name == "all_reduce" and rec.dtype != first.dtype)

        for first, rec in _first_of_each_block(_pairs(ctx), differs):
            if rec.kind is not first.kind:
                yield _diagnostic(
                    cls,
                    f"`coalesced` block mixes `{first.kind.name}` and `{rec.kind.name}`",
                    rec,
                    first,
                    f"`{rec.kind.name}` here",
                    f"the block's first collective is `{first.kind.name}`",
                    "torch 2.13 raises `RuntimeError` at the block's end; torch 2.11 runs every tensor of the block "
                    "through the first one's kind, silently",
                    "give each kind of collective a `coalesced:` block of its own",
                )
            else:
                yield _diagnostic(
                    cls,
                    f"`coalesced` block all-reduces {first.dtype} and {rec.dtype} tensors",
                    rec,
                    first,
                    f"{rec.dtype} here",
                    f"the block's first `all_reduce` is {first.dtype}",
                    "Gloo's coalesced all-reduce raises `RuntimeError: tensors must all have the same type`",
                    "all-reduce each dtype in a `coalesced:` block of its own",
                )


class CoalescedMixedReduceOps(Rule):
    """collectives of one `coalesced:` block reduce with different reduce ops

    ## What it does

    Reports a `coalesced:` block whose reducing collectives name different reduce ops (`op sum` then
    `op max`).

    ## Why is this bad?

    The block is one backend call, and torch gives it the reduce op of the block's first collective: every
    collective of the block is reduced with that op, whatever it names. Nothing warns; the results are
    silently wrong. The simulator computes what torch does, so an `expect` written for the named op fails.

    ## Example

    ```comm
    program stats
    world 2
    tensor total: float32[4] = rank + 1
    tensor peak: float32[4] = rank + 1
    coalesced:
        all_reduce total op sum
        all_reduce peak op max
    ```

    ## Use instead

    ```comm
    program stats
    world 2
    tensor total: float32[4] = rank + 1
    tensor peak: float32[4] = rank + 1
    coalesced:
        all_reduce total op sum
    all_reduce peak op max
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 2 and 4): `all_reduce a op sum` then `all_reduce b op max` in one
    block leaves the **sum** in both on every rank, without an error; the same for `reduce_scatter_tensor`.
    Torch builds the coalesced call's options from `op_list[0].redop` (`_coalescing_manager` in c10d.py),
    so NCCL does the same; its docstring warns that mixed reduce ops are not supported.
    """

    code = "C315"
    name = "coalesced-mixed-reduce-ops"
    backend_doc = "coalesced"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        def differs(first, rec):
            return rec.kind is first.kind and rec.redop != first.redop

        for first, rec in _first_of_each_block(_pairs(ctx), differs):
            yield _diagnostic(
                cls,
                f"`{rec.kind.name}` asks for `{rec.redop}` but its `coalesced` block reduces with `{first.redop}`",
                rec,
                first,
                f"reduced with `{first.redop}`, not `{rec.redop}`",
                f"the block's first collective sets `{first.redop}` for all",
                "torch issues the block as one call with the first collective's reduce op: the results are "
                "silently wrong",
                "put collectives with another reduce op in a `coalesced:` block of their own",
            )


class CoalescedMismatch(Rule):
    """members of a group coalesce different collectives

    ## What it does

    Reports members of a group that do not coalesce the same collectives: one rank calls a collective
    inside a `coalesced:` block while another calls it outside one, or their blocks hold different numbers
    of collectives.

    ## Why is this bad?

    A coalesced block is one backend call with all its tensors flattened into one buffer; a collective
    outside a block is a call of its own. Members that group their collectives differently issue calls that
    do not line up: a hang, an abort where the sizes differ, or data silently added to the wrong tensors
    where the totals happen to agree. See the backend notes.

    ## Example

    ```comm
    program buckets
    world 2
    tensor a: float32[4] = rank
    tensor b: float32[2] = rank
    on rank == 0:
        coalesced:
            all_reduce a
            all_reduce b
    else:
        all_reduce a
        all_reduce b
    ```

    ## Use instead

    ```comm
    program buckets
    world 2
    tensor a: float32[4] = rank
    tensor b: float32[2] = rank
    coalesced:
        all_reduce a
        all_reduce b
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13): rank 0 coalescing two `all_reduce`s (2 and 3 elements) while rank 1
    calls them one by one aborts rank 1 (`Received data size doesn't match expected size`). Blocks of 2
    and 1 `all_reduce`s: the shorter ranks complete with **wrong data**, rank 0 fails when they exit.
    Blocks with the same total size split differently (2 + 4 against 4 + 2 elements, or the order swapped)
    complete **silently with mixed-up data**. `TORCH_DISTRIBUTED_DEBUG=DETAIL` was not measured here.
    """

    code = "C316"
    name = "coalesced-mismatch"
    backend_doc = "coalesced"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        from commdsl.rules.collectives import _findings

        yield from _findings(ctx, cls)


class CoalescedReadsEarlierOutput(Rule):
    """a collective of a `coalesced:` block reads a buffer an earlier one in the block writes

    ## What it does

    Reports a collective in a `coalesced:` block whose input overlaps the output of an earlier collective of
    the same block: `all_reduce x` twice, or `all_gather` from a buffer an earlier `all_reduce` of the block
    reduces into.

    ## Why is this bad?

    The block is one backend call issued at its end: torch reads every collective's input then, before
    writing any output. Written one after another, the later collective would read the earlier one's
    result; in the block it reads the value from before the block. `all_reduce x` twice in a block sums
    once. The simulator computes what torch does, so an `expect` written for the sequential reading fails.

    ## Example

    ```comm
    program twice
    world 2
    tensor x: float32[4] = rank + 1
    coalesced:
        all_reduce x
        all_reduce x
    ```

    ## Use instead

    ```comm
    program twice
    world 2
    tensor x: float32[4] = rank + 1
    all_reduce x
    all_reduce x
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 4): `all_reduce x` twice in one block leaves the sum of the inputs
    once on every rank ([10, 14] where one after the other gives [40, 56]). Gloo's coalesced all-reduce
    copies every tensor into one flat buffer, reduces it and copies the results back. On NCCL the block is
    one NCCL group, and nothing orders one of its collectives after another's writes (not measured).
    """

    code = "C317"
    name = "coalesced-reads-earlier-output"
    backend_doc = "coalesced"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        records = ctx.schedule.records
        for rec in records:
            if not isinstance(rec, CollectiveRec) or rec.block is None or rec.block.index == 0:
                continue
            for earlier in records[rec.id - rec.block.index : rec.id]:
                assert isinstance(earlier, CollectiveRec)  # a block holds collectives only (resolve, N115)
                shared = _shared(earlier, rec)
                if shared is not None:
                    yield cls.diagnostic(
                        f"`{rec.kind.name}` reads `{shared}`, which the `{earlier.kind.name}` before it in the "
                        "same `coalesced` block writes",
                        span=rec.span,
                        label="reads the value from before the block",
                        labels=(Label(span=earlier.span, message=f"writes `{shared}` only at the block's end"),),
                        notes=(
                            Note(
                                message="torch issues the block as one call at its end, reading every input "
                                "before writing any output"
                            ),
                        ),
                        help="move the collective that reads the result after the `coalesced:` block",
                    )
                    break


def _shared(earlier: CollectiveRec, later: CollectiveRec) -> str | None:
    """The tensor of an output of `earlier` that an input of `later` overlaps on some rank running both, or None."""
    if earlier.ranks is not later.ranks and not np.array_equal(earlier.ranks, later.ranks):
        return None  # ranks that failed in between: their finding is another's
    for out in earlier.outputs:
        for inp in later.inputs:
            if out.tensor != inp.tensor:
                continue
            a, n = np.asarray(out.offset, dtype=np.int64), np.asarray(out.numel, dtype=np.int64)
            b, m = np.asarray(inp.offset, dtype=np.int64), np.asarray(inp.numel, dtype=np.int64)
            if np.any((a < b + m) & (b < a + n) & (n > 0) & (m > 0)):
                return out.tensor
    return None


def place(block) -> str:
    """A call's place in its block, as the messages word it."""
    if block is None:
        return "outside any `coalesced` block"
    return f"{_ordinal(block.index + 1)} of {block.count} in a `coalesced` block"


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def _pairs(ctx: Context) -> Iterator[tuple[CollectiveRec, CollectiveRec]]:
    """(the block's first collective, a later one) for each later collective of every `coalesced:` block."""
    records = ctx.schedule.records
    for rec in records:
        if isinstance(rec, CollectiveRec) and rec.block is not None and rec.block.index > 0:
            first = records[rec.id - rec.block.index]
            assert isinstance(first, CollectiveRec)  # a block holds collectives only (resolve, N115)
            yield first, rec


def _first_of_each_block(pairs, differs) -> Iterator[tuple[CollectiveRec, CollectiveRec]]:
    """The first pair of each block for which `differs` holds: one finding per block."""
    done = set()
    for first, rec in pairs:
        if first.id not in done and differs(first, rec):
            done.add(first.id)
            yield first, rec


def _diagnostic(rule, message, rec, first, label, first_label, note, help) -> Diagnostic:
    return rule.diagnostic(
        message,
        span=rec.span,
        label=label,
        labels=(Label(span=first.span, message=first_label),),
        notes=(Note(message=note),),
        help=help,
    )
