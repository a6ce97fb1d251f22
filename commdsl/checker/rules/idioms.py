"""L7xx (warnings): hand-written patterns that a built-in collective does better, and wasted results."""

from __future__ import annotations

from collections.abc import Iterator

from commdsl.checker.context import Context
from commdsl.diagnostics import Diagnostic, Label
from commdsl.schedule import Batch, Collective, Recv, Send


def _runs(ops, kind):
    """Maximal runs of consecutive blocking P2P ops of one kind, without tags or groups."""
    run = []
    for op in ops:
        if type(op) is kind and op.blocking and op.group is None and op.tag == 0:
            run.append(op)
            continue
        if run:
            yield run
        run = []
    if run:
        yield run


def check(ctx: Context) -> Iterator[Diagnostic]:
    W = ctx.schedule.world
    seen: set = set()
    if W >= 3:
        for rank, ops in enumerate(ctx.schedule.ops):
            others = set(range(W)) - {rank}
            for run in _runs(ops, Send):
                if {op.peer for op in run} == others and len({op.view for op in run}) == 1 and run[0].span not in seen:
                    seen.add(run[0].span)
                    yield Diagnostic(
                        code="L701", severity="warning", span=run[0].span,
                        message=f"rank {rank} sends the same buffer to every other rank one by one",
                        label=f"{len(run)} sends of `{run[0].view.tensor}`",
                        help=f"use `broadcast {run[0].view.tensor} from {rank}`: it takes log(world) steps instead of "
                             "world - 1 on the root")
            for run in _runs(ops, Recv):
                views = [op.view for op in run]
                if ({op.peer for op in run} == others and len({v.tensor for v in views}) == 1
                        and len(set(views)) == len(views) and run[0].span not in seen):
                    seen.add(run[0].span)
                    yield Diagnostic(
                        code="L702", severity="warning", span=run[0].span,
                        message=f"rank {rank} receives a piece from every other rank one by one",
                        label=f"{len(run)} receives into `{views[0].tensor}`",
                        help=f"use `gather PIECE into {views[0].tensor} to {rank}`")
            yield from _exchange(ops, rank, others, seen)
    for ops in ctx.schedule.ops:
        for a, b in zip(ops, ops[1:]):
            if (type(a) is Collective and type(b) is Collective and a.kind == "reduce" and b.kind == "broadcast"
                    and a.root == b.root and a.group == b.group and a.inputs[0] == b.inputs[0] and a.span not in seen):
                seen.add(a.span)
                yield Diagnostic(code="L704", severity="warning", span=a.span,
                                 message="`reduce` followed by `broadcast` from the same root is an `all_reduce`",
                                 label="reduce", labels=(Label(span=b.span, message="then broadcast"),),
                                 help=f"use `all_reduce {a.inputs[0].tensor}`: one collective, no root bottleneck")
    for d in ctx.access.dead_stores:
        if type(d.producer) is not Collective or d.producer.span in seen:
            continue
        seen.add(d.producer.span)
        yield Diagnostic(code="L705", severity="warning", span=d.producer.span,
                         message=f"the result of `{d.producer.kind}` on rank {d.rank} is overwritten before it is read",
                         label="result never read", labels=(Label(span=d.overwriter.span, message="overwritten here"),),
                         help="remove the collective, or read its result before overwriting it")


def _exchange(ops, rank, others, seen) -> Iterator[Diagnostic]:
    for op in ops:
        if type(op) is not Batch:
            continue
        sends = {o.peer for o in op.ops if type(o) is Send}
        recvs = {o.peer for o in op.ops if type(o) is Recv}
        if sends == recvs == others and len(op.ops) == 2 * len(others) and op.span not in seen:
            seen.add(op.span)
            yield Diagnostic(code="L703", severity="warning", span=op.span,
                             message=f"rank {rank} exchanges a piece with every other rank by P2P",
                             label=f"{len(others)} sends and {len(others)} receives",
                             help="use `all_to_all SRC into DST`: one collective the backend can schedule")
