"""R5xx: async requests never or twice waited, buffers touched in flight, reads of undefined results, ranks
that end at set-up.

R501, R502 and R505 read the engine's requests; R503 and R504 the access tracker (`checker.access`); R506 the
schedule's records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.p2p import form
from commdsl.rules import LISTED, Rule
from commdsl.schedule import Batch, BatchRec, Collective, CollectiveRec, P2PRec, Send

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class RequestNeverWaited(Rule):
    """an async op whose request is never waited

    ## What it does

    Reports an async op (`isend`, `irecv`, a collective or a batch bound to a handle) whose request is never
    waited, neither by `wait h` nor by `wait all`. For a handle bound in a loop (`h[k] = isend ...`), the
    note names the loop values of the request left in flight.

    ## Why is this bad?

    Until its request is waited, an async op may still be reading or writing its buffer, and the rank does
    not know whether it has completed. A rank that exits first can lose the message: see the backend
    notes. An `irecv` never waited may leave its buffer unwritten when it is read.

    ## Example

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
        wait h
    else:
        recv x from 0
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 2): an `isend` never waited, its rank then exiting, loses the
    message when the receiver posts its `recv` later (the receiver fails with `Connection closed by peer`),
    and also when the receiver had already posted it, for a large message (4 MiB lost, 1 element
    delivered). An async collective never waited, its rank then exiting: the peers fail with `Connection
    closed by peer`.

    On NCCL `wait` does not block the CPU either: it orders the rank's later work after the op. The op
    runs on the GPU whether waited or not, but a rank that exits before it completes takes it down, and
    the peer waits until NCCL's watchdog fires.
    """

    code = "R501"
    name = "request-never-waited"
    backend_doc = "async-ops"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        """One finding per statement, worded for the first rank of its first record left unwaited; the loop
        values of its first `LISTED` such records, and how many more (a ring of `isend`s at world 4096
        leaves 4,095 records of 4,096 requests each)."""
        req, never = ctx.schedule.requests, ctx.outcome.never_waited
        records, first = np.unique(req.record[never], return_index=True)  # each record's first unwaited request
        statements: dict[object, list] = {}
        for rid, q in zip(records.tolist(), never[first].tolist()):
            op = ctx.op(rid, req.pos[q])
            span = op.block.span if getattr(op, "block", None) is not None else op.span
            statements.setdefault(span, []).append((int(req.rank[q]), op))
        for span, posts in statements.items():
            rank, op = posts[0]
            posted = [", ".join(f"{k} = {v}" for k, v in o.bindings) for _, o in posts]  # a loop's iteration
            named = [f"the one posted at {p}" for p in posted[:LISTED] if p]
            if len(posted) > LISTED and posted[-1]:
                named.append(f"and {len(posted) - LISTED} more, the last posted at {posted[-1]}")
            yield cls.diagnostic(
                f"the request of `{_word(op)}` on rank {rank} is never waited",
                span=span,
                label="never waited",
                notes=tuple(
                    Note(message=m) for m in dict.fromkeys([*named[:1], _unwaited(ctx.backend, op), *named[1:]])
                ),
                help="`wait` its handle (or `wait all`) before the buffer is reused or the program ends",
            )


def _unwaited(backend: str, op) -> str:
    """What becomes of an async op nobody waits for, per backend (docs/backend-support.md#async-ops)."""
    if type(op) is Batch:
        return (
            "`batch_isend_irecv` returns its requests without waiting: until they are waited its sends may "
            "not be through and its receives may not have landed, and a rank that exits first loses them"
        )
    if backend == "nccl":
        return (
            "on NCCL the op runs on its stream whether waited or not, but nothing orders the rank's later work "
            "after it, and a rank that exits before it completes takes it down: the peer waits until the "
            "watchdog fires"
        )
    if type(op) is Send:
        return (
            "on Gloo the message is lost if the rank exits before it is through: always when the receive is "
            "posted later (the peer fails with `Connection closed by peer`), and for a large message even when "
            "it was posted first"
        )
    if type(op) is Collective:
        return (
            "on Gloo the collective runs on a worker thread: if the rank exits before it ends, the other "
            "members fail with `Connection closed by peer`"
        )
    return (
        "on Gloo the receive goes on after the rank moves past it: its buffer may be read before the data "
        "lands, and if the rank exits first the sender fails with `Connection closed by peer`"
    )


class RequestWaitedTwice(Rule):
    """an `isend` or `irecv` waited a second time on Gloo

    ## What it does

    Reports a point-to-point request waited a second time on Gloo: `wait h` after `h`, bound to an `isend`,
    an `irecv` or a batch, was already waited (by `wait h`, `wait all` or `wait all` of its array) and not
    reassigned since. (A second wait on a collective's request, or on any request on NCCL, does nothing:
    that is `R505`.)

    ## Why is this bad?

    Gloo's send and receive requests wait on their buffer again, for a message that will not come: the
    rank blocks for the process group's timeout and then raises `Timed out waiting ... for send
    operation to complete` (or `recv`), while its peers wait for it. The second wait usually stands where
    a *different* request should be waited: a copied line that kept the old handle name.

    ## Example

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
        wait h
        wait h
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
        wait h
    else:
        recv x from 0
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13): after `h = dist.isend(x, 1); h.wait()`, a second `h.wait()` raises
    `RuntimeError: ... unbound_buffer.cc:129] Timed out waiting 5000ms for send operation to complete`
    after the 5 s process-group timeout; `irecv` the same for its receive. On NCCL, and for collectives
    on both backends, the work is already complete and a second `wait()` returns at once.
    """

    code = "R502"
    name = "request-waited-twice"
    backend_doc = "waiting-twice"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rank, op, wait_span, first_span in _double_waits(ctx):
            if ctx.backend == "gloo" and type(op) is not Collective:
                yield cls.diagnostic(
                    f"`{_word(op)}` request on rank {rank} is waited twice: on Gloo the second wait times out",
                    span=wait_span,
                    label="second wait: blocks for the process group's timeout, then raises",
                    labels=(Label(span=first_span, message="first waited here"),),
                    notes=(
                        Note(
                            message="Gloo's send and receive requests wait for their message again; on NCCL, "
                            "and for collectives, a second wait returns at once"
                        ),
                    ),
                    help="wait each request once: did this line mean another handle?",
                )


class RequestWaitedAgain(Rule):
    """a request waited again where the second wait does nothing

    ## What it does

    Reports a second wait on a request where torch makes it a no-op: a collective's request on any
    backend, or an `isend`/`irecv` on NCCL. (On Gloo a second wait on an `isend` or `irecv` hangs until
    the timeout: that is `R502`.)

    ## Why is this bad?

    Nothing goes wrong at run time, but the line is dead, and it usually stands where a *different*
    request should be waited: a copied line that kept the old handle name, while the request that needed
    waiting is left in flight.

    ## Example

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    h = all_reduce x
    wait h
    wait h
    ```

    ## Use instead

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    h = all_reduce x
    wait h
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13): a second `wait()` on a completed `all_reduce(..., async_op=True)` work
    returns at once. On NCCL every completed work's `wait()` returns at once (it only synchronises the
    current stream with the work's end event).
    """

    code = "R505"
    name = "request-waited-again"
    severity = "warning"
    backend_doc = "waiting-twice"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rank, op, wait_span, first_span in _double_waits(ctx):
            if ctx.backend == "gloo" and type(op) is not Collective:
                continue  # R502
            yield cls.diagnostic(
                f"request of `{_word(op)}` on rank {rank} is waited again: the second wait does nothing",
                span=wait_span,
                label="second wait",
                labels=(Label(span=first_span, message="first waited here"),),
                help="wait each request once: did this line mean another handle?",
            )


def _double_waits(ctx: Context):
    """(rank, op, the second wait's span, the first wait's span) of every request waited twice."""
    req = ctx.schedule.requests
    for q, wait_rid, _ in ctx.outcome.double_waits:
        rank, op = int(req.rank[q]), ctx.op(req.record[q], req.pos[q])
        first, _ = ctx.locate(int(ctx.outcome.req_waited[q]))
        yield rank, op, ctx.record(wait_rid).span, first.span


class BufferInFlight(Rule):
    """a buffer read or written while an async op on it is in flight

    ## What it does

    Reports a buffer read or written while an async op on it is still in flight: writing a buffer an
    `isend` is sending from, reading or writing one an `irecv` (or an async collective) is writing into,
    before the request is waited. The ops of a batch bound to a handle (`b = batch:`) are in flight until
    `wait b`; two ops of one batch on overlapping elements race too. A `barrier` of an async collective's
    group ends it on the rank (torch's barrier waits for the group's earlier collectives): after it, its
    buffers are no longer in flight. On NCCL any later blocking collective or `batch` of the group does, and a
    later collective or batch of the group runs after it (one stream, in issue order).

    ## Why is this bad?

    It is a data race: the result depends on timing. An `isend` may transmit the old values, the new ones
    or a mix; a read of an `irecv` buffer may see the data or not. It works in tests and fails under load.
    `wait` the request before touching the buffer.

    ## Example

    ```comm
    program race
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
        x += 1
        wait h
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program race
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
        wait h
        x += 1
    else:
        recv x from 0
    ```

    ## Backend notes

    On Gloo an `isend` or `irecv` is posted at once and the transport reads or writes its buffer on its own
    thread whenever the peer is ready; an async collective runs on one of the process group's worker
    threads, two per group, so a later collective of the group may run beside it (measured). On NCCL the op
    runs on its communicator's stream: `wait` makes the rank's later work wait for it, and so, for an async
    collective or batch, does any later blocking collective or batch of its group (torch's
    `WorkNCCL::synchronize` makes the current stream wait for that one, which ran after it on the group's
    stream); a later collective or batch of the group runs after it too. From torch's sources, not measured.
    On both, the ops of one `batch` run together.
    """

    code = "R503"
    name = "buffer-in-flight"
    backend_doc = "async-ops"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()
        for race in sorted(ctx.access.races):
            if race.nccl_ordered and ctx.backend == "nccl":
                continue  # NCCL's stream order runs the in-flight collective first
            rec, _ = ctx.locate(race.op)
            w_rec, w_pos = ctx.locate(race.inflight)
            key = (rec.span, w_rec.span)
            if key in seen:
                continue
            seen.add(key)
            window = ctx.schedule.op_at(w_rec, w_pos)
            word = w_rec.word if isinstance(w_rec, P2PRec) else _word(window)  # `send` in a batch, as written
            kind = "writes" if race.writes else "reads"
            flight = "receives into" if race.window_writes else "sends from"
            batched = race.same_batch
            yield cls.diagnostic(
                f"rank {race.rank} {kind} a buffer while `{word}` {flight} it",
                span=rec.span,
                label=f"{kind} `{race.tensor}` here",
                labels=(
                    Label(
                        span=w_rec.span, message="in the same batch" if batched else "still in flight (not yet waited)"
                    ),
                ),
                notes=(Note(message=_in_flight(ctx.backend, window, batched)),),
                help="`wait` the request before touching the buffer"
                if not batched
                else "use separate buffers for the ops of one batch",
            )


def _in_flight(backend: str, window, batched: bool) -> str:
    """Why touching a buffer an async op holds is a race on the backend (docs/backend-support.md#async-ops)."""
    if batched:
        return (
            "the ops of a batch run together (on NCCL as one group, on Gloo as separate `isend`s and `irecv`s): "
            "which one touches the elements first depends on timing"
        )
    if backend == "nccl":
        return (
            "on NCCL the op runs on its communicator's stream, and only `wait` (or, for a collective or a batch, "
            "a later blocking collective or batch of its group) orders the rank's later work after it: the two "
            "run concurrently, and the result depends on timing"
        )
    if type(window) is Collective:
        return "on Gloo the collective runs on a worker thread until it ends: the result depends on timing"
    return (
        "on Gloo the transport reads or writes the buffer on its own thread whenever the peer is ready: the "
        "result depends on timing"
    )


class ReadAfterReduce(Rule):
    """a non-root buffer read after `reduce` left it undefined

    ## What it does

    Reports a read, on a rank other than the root, of a buffer that `reduce` left undefined: after
    `reduce x to 0` only rank 0's `x` holds the result.

    ## Why is this bad?

    torch documents only the root's buffer after `reduce`; the others hold whatever the algorithm left
    there, which is neither the input nor the result (see the backend notes). Read the result on the root
    only, or use `all_reduce` if every rank needs it.

    ## Example

    ```comm
    program reduce_root
    world 2..4
    tensor x: float32[4] = rank
    reduce x to 0
    expect x == world * (world - 1) / 2
    ```

    ## Use instead

    ```comm
    program reduce_root
    world 2..4
    tensor x: float32[4] = rank
    reduce x to 0
    on rank == 0:
        expect x == world * (world - 1) / 2
    ```

    ## Backend notes

    Measured on Gloo at world size 4 with inputs `rank + 1`: the root got `[10, ...]`, while rank 1 ended
    with `[9, 9, 10, 10]`, rank 2 with `[7, 7, 8, 8]` and rank 3 with `[4, 4, 5, 5]`: partial sums.

    On NCCL torch passes the tensor as both send and receive buffer, and NCCL writes the receive buffer on
    the root only: a non-root rank keeps its own input, so the read gets that, not the result (from the
    sources, not measured).
    """

    code = "R504"
    name = "read-after-reduce"
    backend_doc = "reduce-buffers"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()
        for u in sorted(ctx.access.undefined_reads):
            rec, _ = ctx.locate(u.op)
            red_rec, red_pos = ctx.locate(u.reduce)
            key = (rec.span, red_rec.span)
            if key in seen:
                continue
            seen.add(key)
            reduce = ctx.schedule.op_at(red_rec, red_pos)
            yield cls.diagnostic(
                f"rank {u.rank} reads `{reduce.inputs[0].tensor}` after `reduce` to rank {reduce.root} "
                "left it undefined",
                span=rec.span,
                label="reads an undefined buffer",
                labels=(Label(span=red_rec.span, message=f"only rank {reduce.root} gets the result"),),
                notes=(Note(message=NON_ROOT_AFTER_REDUCE[ctx.backend]),),
                help="read it only on the root, or use `all_reduce`",
            )


NON_ROOT_AFTER_REDUCE = {
    "gloo": "Gloo uses the non-root buffers for its ring and leaves partial sums in them",
    "nccl": "on NCCL the non-root buffer keeps this rank's own input (NCCL writes the root's only): the read gets "
    "the input, not the result",
}
"""What a non-root rank's buffer holds after `reduce`, per backend (docs/backend-support.md#reduce-buffers)."""


def _word(op) -> str:
    if type(op) is Collective:
        return "coalesced" if op.block is not None else op.kind
    if type(op) is Batch:
        return "batch"
    return form(type(op) is Send, op.blocking).word


class IdleRank(Rule):
    """a rank that sends, receives and calls no collective, so it ends right after set-up

    ## What it does

    Reports the ranks that take part in no communication at a world size the program declares: no `send`,
    `recv`, batch or collective (a `barrier` counts; making a group with `new_group` does not). The
    diagnostic points at the `world` line and names the ranks. Silent at a size where the checker finds an
    error (that is the one to fix: a rank that skips its collective is often why another waits), and when
    no rank communicates (a program of local ops).

    ## Why is this bad?

    A torch rank ends when its program does, and on Gloo ending closes its connections, also those a
    slower rank is still making in `init_process_group` (Gloo connects every pair of ranks there). That
    rank's set-up then fails with `Connection closed by peer`, now and then: more often the more loaded
    the machine. A rank with nothing to do ends first. Usually the world is larger than the program uses
    (a tutorial's two-rank exchange launched on four), or a condition leaves a rank out by mistake.

    ## Example

    ```comm
    program idle
    world 4
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    else on rank == 1:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program idle
    world 4
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    else on rank == 1:
        recv x from 0
    barrier
    ```

    Or launch only the ranks the program uses (`world 2`).

    ## Backend notes

    Measured on Gloo (torch 2.13.0+cpu, world 4, four launches at once on a 2-core host), a program whose
    ranks 1–3 have nothing to do: 3 of 60 torchrun launches of the plain torch script failed in set-up with
    `Gloo connectFullMesh failed with ... Connection closed by peer`, and 2 of 80 `commdsl run` launches; with
    a closing `barrier`, 0 of 60. A rank that communicates can end before a peer has connected too, but only
    after that peer's message or collective, so much later: the rule does not report it.

    On NCCL torch creates a communicator at the first op that needs it, among the ranks that use it, so a
    rank without ops joins none: not reported there (not measured: NCCL across ranks needs a GPU each).
    """

    code = "R506"
    name = "idle-rank"
    severity = "warning"
    quiet_beside_errors = True
    backend_doc = "ending-early"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.backend != "gloo" or ctx.world < 2:
            return
        idle = np.ones(ctx.world, dtype=bool)
        for rec in _communicating(ctx.schedule.records):
            if rec.ranks.size == ctx.world:  # every rank runs it (the usual SPMD step): none is idle
                return
            idle[rec.ranks] = False
        ranks = np.flatnonzero(idle).tolist()
        if not ranks or len(ranks) == ctx.world:  # a program of local ops alone: no rank is left out
            return
        some = ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
        they, take, sets_up, ends = (
            ("ranks", "take", "set up", "end") if len(ranks) > 1 else ("rank", "takes", "sets up", "ends")
        )
        world = ctx.program.world
        yield cls.diagnostic(
            f"{they} {some} {take} part in no communication at world {ctx.world}",
            span=world.span if world is not None else None,
            label=f"at world {ctx.world}, {they} {some} only {sets_up} and {ends}",
            notes=(
                Note(
                    message="on Gloo a rank that ends closes its connections, also those a slower rank is still "
                    "making in `init_process_group`: that rank's set-up then fails with `Connection closed by "
                    "peer`, now and then"
                ),
            ),
            help="end the program with a `barrier`, which keeps every rank until all are connected, or declare "
            "only the world sizes the program uses",
        )


def _communicating(records):
    """The sends, receives and collectives among `records`, a batch's ops one by one."""
    for rec in records:
        if isinstance(rec, BatchRec):
            yield from rec.ops
        elif isinstance(rec, (P2PRec, CollectiveRec)):
            yield rec
