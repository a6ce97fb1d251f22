"""D4xx: ranks that wait for each other in a cycle, whatever the buffering or only without it.

Both read the wait-for analysis's cycles (`commdsl.checker.waits`); C308 (two groups) is in collectives.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from commdsl.checker.waits import Making, Pending, Waiting
from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.engine import run_engine
from commdsl.rules import Rule, rank_list

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class Deadlock(Rule):
    """a wait-for cycle that hangs whatever the buffering

    ## What it does

    Reports a wait-for cycle that hangs whatever the backend buffers: every rank in the cycle waits for
    the next one, for instance each in a blocking `recv` whose matching `send` comes later on the other
    rank. The note lists the cycle, each edge with its line.

    ## Why is this bad?

    No rank in the cycle can ever continue, so the job hangs until the process-group timeout (by default
    30 minutes on Gloo, 10 on NCCL) and then fails with a timeout that names none of the lines involved.
    Order the operations so one side of each pair goes first (send on even ranks first, receive on odd
    ranks first), or post the exchange in a `batch:` block.

    ## Example

    ```comm
    program swap
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    recv y from (rank + 1) % world
    send x to (rank + 1) % world
    ```

    ## Use instead

    ```comm
    program swap
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    on rank == 0:
        send x to 1
        recv y from 1
    else:
        recv y from 0
        send x to 0
    ```

    ## Backend notes

    On NCCL a rank's point-to-point ops on one communicator run in the order they were issued, async or
    not, so `isend` and `irecv` do not help there: two ranks that each post `irecv` then `isend` without a
    `batch` wait for each other (pytorch#109401), while Gloo completes the same program. Under NCCL's rules
    the checker reports such cycles here, with a note saying so.

    On Gloo a member of a group returns from `new_group` only once every member has called it (measured:
    a member that came 2 s late held the other member 2 s; a non-member returns at once). A member stuck
    there on a member that waits for it, say in a `recv` whose `send` comes after the `new_group`, is a
    cycle too: it hangs past the process-group timeout, as the wait inside `new_group` is a store wait.
    """

    code = "D401"
    name = "deadlock"
    backend_doc = "p2p-completion"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for cycle in _deadlocks(ctx):
            if not ctx.waits.definite(cycle):
                continue
            span, label, labels, notes, ranks = cycle_parts(ctx, cycle)
            if any(isinstance(e.thing, Making) for e in cycle):
                help = "have every member call `new_group` before it waits for another member"
            elif in_stream_order(ctx, cycle):
                help = "post each rank's exchange in one `batch:` block"
            elif "nccl" in ctx.backends:  # async ops run in issue order there: only a batch lets them overlap
                help = "reorder the ops so one side of each pair goes first, or post the exchange in a `batch:` block"
            else:
                help = "reorder the ops so one side of each pair goes first, or use isend/irecv or `batch`"
            yield cls.diagnostic(
                f"deadlock: ranks {ranks} wait for each other",
                span=span,
                label=label,
                labels=labels,
                notes=notes,
                help=help,
            )


class BufferingHazard(Rule):
    """a cycle of blocking sends: hangs when sends wait for their receive

    ## What it does

    Reports a wait-for cycle of blocking sends: every rank sends first and receives afterwards, so the
    program completes only if sends return before their receive is posted. That is a *buffering hazard*:
    whether it hangs depends on the backend and the message size.

    ## Why is this bad?

    A backend may buffer small messages (NCCL does, up to a size), so the program passes a small test and
    hangs in production with bigger tensors. On Gloo it hangs at every size: see the backend notes.
    Post the exchange in a `batch:` block, use `isend`, or alternate the order by rank parity.

    ## Example

    ```comm
    program swap
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    send x to (rank + 1) % world
    recv y from (rank + 1) % world
    ```

    ## Use instead

    ```comm
    program swap
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to (rank + 1) % world
        recv y from (rank + 1) % world
    ```

    ## Backend notes

    Measured on Gloo: a blocking `send` returns only once the receiver has posted the matching `recv`, for
    1 element, 1 KiB, 64 KiB, 1 MiB and 64 MiB alike. Two ranks that both `send` first and `recv`
    afterwards deadlock at every size, until `Timed out waiting ... for send operation to complete`. With
    `isend` on both sides, then `recv`, the exchange completes.

    NCCL's send is "blocking for the GPU" (NCCL user guide): it may complete before its receive is posted
    when the message fits the peer's buffer (`NCCL_BUFFSIZE`, 4 MiB by default) and the two ranks have
    exchanged before, and waits for the receive otherwise (sources only, not measured).
    """

    code = "D402"
    name = "buffering-hazard"
    backend_doc = "p2p-completion"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for cycle in _deadlocks(ctx):
            if ctx.waits.definite(cycle):
                continue
            span, label, labels, notes, ranks = cycle_parts(ctx, cycle)
            notes += (Note(message=BUFFERING[ctx.backend]),)
            if ctx.shared("completes-buffered", _completes_buffered):
                notes += (Note(message="where sends return before their receive is posted, the program completes"),)
            yield cls.diagnostic(
                f"deadlock: ranks {ranks} all block in `send` waiting for each other",
                span=span,
                label=label,
                labels=labels,
                notes=notes,
                help=UNBLOCK["nccl" if "nccl" in ctx.backends else "gloo"],
            )


BUFFERING = {
    "gloo": "on Gloo a blocking `send` returns only once the receiver posts its `recv`, at every message size: "
    "this always hangs there",
    "nccl": "on NCCL a `send` can finish before its `recv` is posted only when the message fits the peer's "
    "buffer (under NCCL_BUFFSIZE, 4 MiB by default) and the pair has exchanged before: this may pass small "
    "tests and hang with bigger tensors",
}
"""What each backend's blocking send does, the reason a send cycle is a hazard there."""

UNBLOCK = {
    "gloo": "post the exchange in a `batch:` block, use `isend`, or alternate send/recv order by rank parity",
    "nccl": "post the exchange in a `batch:` block, or alternate send/recv order by rank parity (on NCCL an `isend` "
    "runs in issue order like a `send`)",
}
"""The fixes that break a send cycle on each backend (docs/backend-support.md#nccl-streams); a program checked
for both gets NCCL's, which work on Gloo too."""


def _completes_buffered(ctx: Context) -> bool:
    """Whether the program runs to its end when every send returns at once (infinite buffering)."""
    from commdsl.checker import MODELS

    model = dataclasses.replace(MODELS[ctx.backend], eager_sends=True, name=f"{ctx.backend}-buffered")
    return run_engine(ctx.schedule, model).completed


CHAIN = 6
"""Steps of a cycle spelled out in its note; a longer cycle shows its first steps and its last."""


def _deadlocks(ctx: Context):
    """The cycles that are not collectives on two groups in different orders (C308's)."""
    for cycle in ctx.waits.cycles:
        groups = {e.thing.gid for e in cycle if isinstance(e.thing, Waiting)}
        if not (all(isinstance(e.thing, Waiting) for e in cycle) and len(groups) >= 2):
            yield cycle


def cycle_parts(ctx: Context, cycle):
    """(span, label, labels, notes, ranks text) of a wait-for cycle: the first edge is the primary span,
    each other statement of the cycle a secondary one."""

    def what(e):
        rec, _ = ctx.locate(e.op)
        text = f"rank {e.rank} at line {rec.span.line} `{ctx.text(rec.span)}`"
        if isinstance(e.thing, Pending):  # a wait: name the send or receive it is held by
            op = ctx.record(ctx.outcome.unmatched.rec[e.thing.row])
            if op.span != rec.span:
                text += f" (its `{ctx.text(op.span)}` at line {op.span.line})"
        return text

    steps = [f"{what(e)} waits for rank {e.target}" for e in cycle]
    if len(steps) > CHAIN:
        steps = steps[: CHAIN - 1] + ["…", steps[-1]]
    first = cycle[0]
    first_span = ctx.locate(first.op)[0].span
    labels, seen = [], {first_span}
    for e in cycle[1:]:
        span = ctx.locate(e.op)[0].span
        if span not in seen:
            seen.add(span)
            labels.append(Label(span=span, message=f"rank {e.rank} waits here for rank {e.target}"))
    ranks = rank_list([e.rank for e in cycle]) if len(cycle) > 8 else str([e.rank for e in cycle])
    notes = [Note(message="cycle: " + "; ".join(steps))]
    if any(isinstance(e.thing, Making) for e in cycle):
        notes.append(Note(message=MEMBERS_MEET))
    if in_stream_order(ctx, cycle):
        notes.append(Note(message=STREAM_ORDER))
    return (first_span, f"rank {first.rank} waits here for rank {first.target}", tuple(labels), tuple(notes), ranks)


MEMBERS_MEET = (
    "a member of a group returns from `new_group` only once every member has called it (Gloo connects the "
    "members to each other as it makes the group; a non-member returns at once): see "
    "docs/backend-support.md#groups-made-at-run-time"
)

STREAM_ORDER = (
    "on NCCL a rank's point-to-point ops run one after another in issue order, async or not: an "
    "`irecv` holds back the `isend`s posted after it until its message arrives; only a `batch:` lets "
    "them progress together (NCCL user guide, point-to-point communication)"
)


def in_stream_order(ctx: Context, cycle) -> bool:
    """Does a rank of the cycle hold an op that never started because NCCL runs ops in issue order?"""
    if not ctx.outcome.behind:
        return False
    ranks = {e.rank for e in cycle}
    return any(int(ctx.record(rid).ranks[pos]) in ranks for rid, pos in ctx.outcome.behind)
