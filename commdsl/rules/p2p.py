"""P2xx: point-to-point messages that never match, or match with the wrong size, dtype or peer.

Each rule's `check` reads the engine's outcome and the wait-for analysis (`commdsl.checker`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.engine import NOT_MEMBER, PEER_NOT_IN_GROUP, PEER_OUT_OF_RANGE, SELF, Outcome, first_of_each_pair
from commdsl.p2p import ANY_SOURCE
from commdsl.rules import LISTED, Rule, rank_list
from commdsl.schedule import BatchRec, P2PRec, Schedule

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class UnmatchedSend(Rule):
    """a send that no receive ever matches

    ## What it does

    Reports a `send` or `isend` that no receive ever matches: the destination finishes, or reaches a
    point it never leaves, without posting a `recv` from this rank with the same tag (and group). A
    statement whose sends go unmatched on many ranks (or iterations) is one finding, worded for its first:
    the notes say what the receives of its first eight such sends' peers would name, and count the others.

    ## Why is this bad?

    A message needs both sides. The sender blocks in `send` (or in the `wait` of its `isend`) until the
    process-group timeout, 30 minutes by default; an `isend` that is never waited is simply lost.
    The usual cause is a peer expression that is wrong on one side (`recv x from rank + 1` for a message
    sent `to rank + 1`), or an `on` condition that skips the receiver.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    ```

    ## Use instead

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    else:
        recv x from 0
    ```

    ## Backend notes

    On Gloo a blocking `send` returns only once the receiver has posted the matching `recv`, at every
    message size (measured from 1 element to 64 MiB), so an unmatched `send` always hangs there, until the
    process group's timeout (30 minutes by default). An `isend` never waited, followed by process exit,
    loses the message.

    On NCCL the call returns to Python at once, but the send's kernel waits for its receive: the ops the
    rank issues after it on that stream never run, and NCCL's watchdog ends the process after its timeout
    (10 minutes by default). A send to the rank itself inside a `batch` needs the receive from itself in
    the same batch, or NCCL raises `ncclInvalidUsage` (`Trying to send to self without a matching recv`).
    """

    code = "P201"
    name = "unmatched-send"
    backend_doc = "p2p-completion"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _unmatched(ctx, cls, sends=True)


class UnmatchedRecv(Rule):
    """a receive that no send ever matches

    ## What it does

    Reports a `recv` or `irecv` that no send ever matches: the source finishes, or reaches a point it
    never leaves, without posting a `send` to this rank with the same tag (and group). A statement whose
    receives go unmatched on many ranks (or iterations) is one finding, worded for its first: the notes say
    what the sends of its first eight such receives' peers would name, and count the others.

    ## Why is this bad?

    The receiver waits for ever (until the process group's timeout) and its buffer is never written. The
    other ranks usually finish normally, so the job looks stuck rather than failed.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 1:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    else:
        recv x from 0
    ```

    ## Backend notes

    On Gloo the `recv` (or the `wait` of an `irecv`) blocks until the process group's timeout, 30 minutes
    by default, then raises. On NCCL the call returns to Python at once, but the receive's kernel never
    ends: the ops issued after it on that stream never run, and NCCL's watchdog ends the process after its
    timeout (10 minutes by default).
    """

    code = "P202"
    name = "unmatched-recv"
    backend_doc = "p2p-completion"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _unmatched(ctx, cls, sends=False)


class TagMismatch(Rule):
    """a send and a receive between the same ranks that differ only in tag

    ## What it does

    Reports a send and a receive between the same two ranks that would match except for their tags.

    ## Why is this bad?

    Messages match by (peer, tag), so neither side ever completes: both wait until the timeout. Tags are
    easy to get wrong when they are computed (`tag s` on one side, `tag s + 1` on the other).

    ## Example

    ```comm
    program tags
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1 tag 1
    else:
        recv x from 0 tag 2
    ```

    ## Use instead

    ```comm
    program tags
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1 tag 1
    else:
        recv x from 0 tag 1
    ```

    ## Backend notes

    Measured on Gloo: a send with tag 5 against a receive with tag 7 times out on both sides. NCCL ignores
    tags, so the same program completes there; that difference is itself a hazard (P207).
    """

    code = "P204"
    name = "tag-mismatch"
    backend_doc = "p2p-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        posts = ctx.outcome.unmatched
        for row, near, peer in ctx.waits.tag_mismatches:
            mine, other = ctx.op(posts.rec[row], posts.pos[row]), ctx.op(*near)
            rank = int(posts.rank[row])
            is_send = bool(posts.send[row])
            send_op, recv_op = (mine, other) if is_send else (other, mine)
            s_rank, r_rank = (rank, peer) if is_send else (peer, rank)
            yield cls.diagnostic(
                f"rank {s_rank} sends with tag {send_op.tag} but rank {r_rank} receives with tag {recv_op.tag}",
                span=send_op.span,
                label=f"tag {send_op.tag}",
                labels=(Label(span=recv_op.span, message=f"tag {recv_op.tag}"),),
                notes=(Note(message="Gloo matches messages by (peer, tag): neither side ever completes"),),
                help="use the same tag on both sides",
            )


class MessageSizeMismatch(Rule):
    """a matched send and receive with different element counts

    ## What it does

    Reports a send and the receive it matches whose buffers hold different numbers of elements.

    ## Why is this bad?

    Neither torch nor Gloo checks point-to-point sizes reliably. What happens depends on which side is
    bigger, and one of the outcomes is silent: see the backend notes. Size both views alike (slice the
    larger buffer).

    ## Example

    ```comm
    program sizes
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[8] = 0
    on rank == 0:
        send x to 1
    else:
        recv y from 0
    ```

    ## Use instead

    ```comm
    program sizes
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[8] = 0
    on rank == 0:
        send x to 1
    else:
        recv y[0:4] from 0
    ```

    ## Backend notes

    Measured on Gloo: a receive that posts 8 elements for a 4-element send completes **silently** and
    leaves the last 4 elements untouched; a receive that posts 2 elements for a 4-element send aborts the
    receiving process (SIGABRT, Gloo's `op.preamble.length <= op.nbytes` check).
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` does not check point-to-point sizes.

    NCCL requires the same count on both sides and checks nothing: a larger receive has been reported to
    hang, or to complete with its last elements unwritten (pytorch#113376); a smaller one to complete
    without an error (NVIDIA/nccl#1938).
    """

    code = "P205"
    name = "message-size-mismatch"
    backend_doc = "message-mismatch"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for s, r in _mismatched_pairs(ctx, dtypes=False):
            if s.view.numel != r.view.numel:
                larger = r.view.numel > s.view.numel
                unit = "element" if s.view.numel == 1 else "elements"
                yield cls.diagnostic(
                    f"rank {s.rank} sends {s.view.numel} {unit} but rank {r.rank} receives {r.view.numel}",
                    span=s.span,
                    label=f"sends {s.view.numel} {unit}",
                    labels=(Label(span=r.span, message=f"receives {r.view.numel}"),),
                    notes=(Note(message=SIZE_MISMATCH[ctx.backend, larger]),),
                    help="size both views alike",
                )


SIZE_MISMATCH = {
    ("gloo", True): "on Gloo the receive completes silently and its last elements keep their old values",
    ("gloo", False): "on Gloo the receiving process aborts (SIGABRT: `op.preamble.length <= op.nbytes`)",
    ("nccl", True): "NCCL requires equal counts and checks nothing: the receive may hang waiting for the rest, or "
    "complete with its last elements unwritten",
    ("nccl", False): "NCCL requires equal counts and checks nothing: the receive may complete without an error, "
    "holding part of the message",
}
"""What a receive larger (True) or smaller than its send does, per backend (docs/backend-support.md)."""


class MessageDtypeMismatch(Rule):
    """a matched send and receive with different dtypes

    ## What it does

    Reports a send and the receive it matches whose buffers have different dtypes.

    ## Why is this bad?

    Point-to-point messages carry bytes, not typed values. The receiver reinterprets the sender's bytes
    as its own dtype, so a `float32` received into an `int32` buffer is garbage, and nothing reports it.

    ## Example

    ```comm
    program dtypes
    world 2
    tensor x: float32[4] = rank
    tensor y: int32[4] = 0
    on rank == 0:
        send x to 1
    else:
        recv y from 0
    ```

    ## Use instead

    ```comm
    program dtypes
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    on rank == 0:
        send x to 1
    else:
        recv y from 0
    ```

    ## Backend notes

    Measured on Gloo: `float32` sent and `int32` or `float64` posted completes without any error and
    leaves garbage in the receive buffer. NCCL requires the same datatype on both sides and checks nothing:
    it reads the count in the receiver's datatype, so the bytes are garbage, and a different byte count
    behaves as a size mismatch (`P205`).
    """

    code = "P206"
    name = "message-dtype-mismatch"
    backend_doc = "message-mismatch"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for s, r in _mismatched_pairs(ctx, dtypes=True):
            if s.dtype != r.dtype:
                yield cls.diagnostic(
                    f"rank {s.rank} sends {s.dtype} but rank {r.rank} receives {r.dtype}",
                    span=s.span,
                    label=f"sends {s.dtype}",
                    labels=(Label(span=r.span, message=f"receives {r.dtype}"),),
                    notes=(Note(message=DTYPE_MISMATCH[ctx.backend]),),
                    help="give both buffers the same dtype",
                )


DTYPE_MISMATCH = {
    "gloo": "Gloo moves bytes: the receiver reinterprets them as its dtype and gets garbage, silently",
    "nccl": "NCCL requires the same datatype on both sides and checks nothing: the receiver gets garbage, and "
    "where the byte counts differ the transfer is a size mismatch",
}


class NcclTagReorder(Rule):
    """tags that reorder messages on Gloo, which NCCL ignores

    ## What it does

    Checked when the program's backends include `nccl`. Reports messages between two ranks that are posted
    in a different order on the two sides and matched correctly only because their tags differ.

    ## Why is this bad?

    Gloo matches by (peer, tag), so the tags put the messages right. NCCL ignores tags and matches the
    messages between two ranks in the order they are posted, so on NCCL the first send lands in the first
    receive: the wrong buffer, possibly of the wrong size. A program correct on Gloo is then wrong on NCCL.

    ## Example

    ```comm
    program tags
    world 2
    backend gloo, nccl
    tensor a: float32[4] = 1
    tensor b: float32[8] = 2
    on rank == 0:
        ha = isend a to 1 tag 1
        hb = isend b to 1 tag 2
        wait ha, hb
    else:
        recv b from 0 tag 2
        recv a from 0 tag 1
    ```

    ## Use instead

    ```comm
    program tags
    world 2
    backend gloo, nccl
    tensor a: float32[4] = 1
    tensor b: float32[8] = 2
    on rank == 0:
        ha = isend a to 1 tag 1
        hb = isend b to 1 tag 2
        wait ha, hb
    else:
        recv a from 0 tag 1
        recv b from 0 tag 2
    ```

    ## Backend notes

    Measured on Gloo: with `isend`, sends tagged 1, 2 against receives tagged 2, 1 complete correctly;
    with blocking sends the same order deadlocks (the first send waits for a receive that comes second).
    """

    code = "P207"
    name = "nccl-tag-reorder"
    about_backends = True
    backend_doc = "p2p-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.tagged is None or ctx.outcome.matches is None:
            return
        gloo_s, gloo_r = ctx.tagged.matches
        nccl_s, nccl_r = ctx.outcome.matches
        gloo_recv = dict(zip(_op_ids(ctx, gloo_s).tolist(), _op_ids(ctx, gloo_r).tolist()))
        seen = set()
        for send_id, recv_id in zip(_op_ids(ctx, nccl_s).tolist(), _op_ids(ctx, nccl_r).tolist()):
            other = gloo_recv.get(send_id)
            if other is None or other == recv_id or send_id in seen:
                continue
            seen.add(send_id)
            send, gloo, nccl = (ctx.schedule.op_at(*ctx.locate(i)) for i in (send_id, other, recv_id))
            yield cls.diagnostic(
                f"on NCCL, this send from rank {_rank_of(ctx, send_id)} matches a different receive than on Gloo",
                span=send.span,
                label=f"tag {send.tag}",
                labels=(
                    Label(span=gloo.span, message=f"Gloo matches it here, by tag {gloo.tag}"),
                    Label(span=nccl.span, message="NCCL matches it here, in posting order"),
                ),
                notes=(
                    Note(message="NCCL ignores tags: messages between two ranks match in the order they are posted"),
                ),
                help="post sends and receives in the same order on both ranks instead of relying on tags",
            )


class PeerOutOfRange(Rule):
    """a peer or root rank outside 0..world-1

    ## What it does

    Reports a peer (the destination of a send, the source of a receive) or a root that is outside
    `0 .. world - 1` at some world size and rank, typically `rank + 1` or `rank - 1` without `% world`.

    ## Why is this bad?

    There is no such rank. torch does not reject it up front: see the backend notes. The job hangs for the
    full timeout, and a negative rank can then crash the process as well.

    ## Example

    ```comm
    program ring
    world 2..4
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to rank + 1
        recv y from rank - 1
    ```

    ## Use instead

    ```comm
    program ring
    world 2..4
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to (rank + 1) % world
        recv y from (rank - 1) % world
    ```

    ## Backend notes

    Measured on Gloo: a peer equal to the world size, or -1, waits in the store for the full timeout;
    with -1 the process then crashes at teardown (double free).
    """

    code = "P208"
    name = "peer-out-of-range"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        W = ctx.world
        for rank, rid, pos, problem in ctx.outcome.bad:
            if problem != PEER_OUT_OF_RANGE:
                continue
            rec = ctx.record(rid)
            op = ctx.op(rid, pos)
            if isinstance(rec, P2PRec):
                yield cls.diagnostic(
                    f"`{rec.word}` on rank {rank} names rank {op.peer}, outside world {W}",
                    span=op.span,
                    label=f"ranks are 0..{W - 1}",
                    help="wrap the peer with `% world`, or guard the op with `on`",
                )
            else:
                yield cls.diagnostic(
                    f"`{op.kind}` root {op.root} is outside world {W}", span=op.span, label=f"ranks are 0..{W - 1}"
                )


class P2pWithSelf(Rule):
    """a send to or a receive from the rank itself

    ## What it does

    Reports a send to, or a receive from, the rank itself at some world size and rank. A ring at world
    size 1 (`(rank + 1) % world` is the rank itself) is the usual cause.

    ## Why is this bad?

    torch's point-to-point ops do not talk to their own rank: they raise, see the backend notes. To move
    data within a rank, assign it (`y = x`); to support world size 1, guard the exchange with
    `on world > 1:` or declare `world 2..`.

    ## Example

    ```comm
    program ring
    world 1..4
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to (rank + 1) % world
        recv y from (rank - 1) % world
    ```

    ## Use instead

    ```comm
    program ring
    world 2..4
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to (rank + 1) % world
        recv y from (rank - 1) % world
    ```

    ## Backend notes

    torch refuses `send` to the own rank on every backend (`ValueError: Invalid destination rank`). Measured
    on Gloo: `recv` from the own rank, and `isend` to it, raise `RuntimeError: Pair is not connected`, and so
    does a `batch` holding a send to self and the receive from self.

    NCCL accepts a send to self and a receive from self inside one `batch`, and only there: alone, NCCL
    raises `ncclInvalidUsage` (`Trying to send to self without a matching recv`, or `recv ... send`). Under
    NCCL's rules the checker reports the unbatched ones only (a batched send to self without its receive is
    `P201`).
    """

    code = "P209"
    name = "p2p-with-self"
    backend_doc = "self-p2p"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rank, rid, pos, problem in ctx.outcome.bad:
            if problem != SELF:
                continue
            rec, op = ctx.record(rid), ctx.op(rid, pos)
            direction = "to" if rec.is_send else "from"
            yield cls.diagnostic(
                f"rank {rank} `{rec.word}`s {direction} itself",
                span=op.span,
                label=f"peer is rank {op.peer}, the rank itself",
                notes=(Note(message=_self_refused(ctx.backend, rec)),),
                help="copy locally with `=`, or fix the peer expression",
            )


def _self_refused(backend: str, rec) -> str:
    """What torch and the backend raise for a P2P op with the rank itself (docs/backend-support.md#self-p2p)."""
    if rec.word == "send":
        return "torch raises `ValueError: Invalid destination rank` on every backend"
    if backend == "gloo":
        return "Gloo raises `RuntimeError: Pair is not connected`, inside a `batch` too"
    other = "recv" if rec.is_send else "send"
    return (
        f"NCCL raises `ncclInvalidUsage` (`Trying to {rec.word.lstrip('i')} to self without a matching "
        f"{other}`): it allows P2P with self only as a send and a receive in one `batch`"
    )


class PeerNotInGroup(Rule):
    """a P2P op `in GROUP` whose peer or sender is not a member

    ## What it does

    Reports a point-to-point op `in GROUP` whose peer is not a member of the group, or which runs on a
    rank that is not a member itself.

    ## Why is this bad?

    Peers of a P2P op in a group are global ranks that must belong to the group. torch raises
    `ValueError: Global rank 3 is not part of group` when it translates a non-member peer into a group
    rank. On a rank outside the group, a `send` or `isend` (and any op of a `batch`, whose `P2POp` translates
    its peer when it is made) raises `ValueError: Invalid process group specified`; a `recv` or `irecv`
    only warns (`Running recv on global rank 3 which does not belong to the given group.`) and returns
    without receiving, so the buffer keeps its value (an `irecv` returns None for its request: the `wait`
    raises). Measured on Gloo, torch 2.13.

    ## Example

    ```comm
    program subgroup
    world 4
    group pair = [0, 1]
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 2 in pair
    else on rank == 2:
        recv x from 0 in pair
    ```

    ## Use instead

    ```comm
    program subgroup
    world 4
    group pair = [0, 2]
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 2 in pair
    else on rank == 2:
        recv x from 0 in pair
    barrier
    ```

    ## Backend notes

    P2P inside a subgroup takes global rank numbers (measured on Gloo): `send x to 2 in pair` sends to
    global rank 2, not to the group's third member.
    """

    code = "P210"
    name = "peer-not-in-group"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rank, rid, pos, problem in ctx.outcome.bad:
            rec = ctx.record(rid)
            if problem not in (PEER_NOT_IN_GROUP, NOT_MEMBER) or not isinstance(rec, P2PRec):
                continue
            op = ctx.op(rid, pos)
            who = f"rank {op.peer}" if problem == PEER_NOT_IN_GROUP else f"rank {rank} itself"
            yield cls.diagnostic(
                f"`{rec.word}` in group `{op.group.name}`: {who} is not a member",
                span=op.span,
                label=f"members are {list(op.group.ranks)}",
                notes=(Note(message=cls.outcome(rec, op, rank, problem)),),
            )

    @staticmethod
    def outcome(rec: P2PRec, op, rank: int, problem: int) -> str:
        """What torch does with the op on `rank` (the rule's docstring says where each comes from)."""
        if problem == PEER_NOT_IN_GROUP:
            return f"torch raises on rank {rank}: `ValueError: Global rank {op.peer} is not part of group`"
        if rec.is_send or rec.batched:
            return f"torch raises on rank {rank}: `ValueError: Invalid process group specified`"
        skipped = f"torch skips the receive on rank {rank} (a UserWarning)"
        if op.req is None:
            return f"{skipped}; its buffer keeps its value"
        return f"{skipped} and returns None for its request: the `wait` on it raises there"


class MessageRace(Rule):
    """a receive from any source that messages from two senders can meet

    ## What it does

    Reports a `recv ... from any` (or `irecv`) that sends from two different ranks can meet on its channel
    (group, destination, tag), naming the receive and both competing sends. A send competes when nothing
    orders it after the receive's completion and no earlier receive takes it first, also when its rank
    is slower and posts it later: "ordered" means a chain of happens-before from the receiving rank, past
    the receive, to the send (program order, messages, collectives whose result holds the other
    member's data, `new_group` among its members).

    ## Why is this bad?

    Which of the two messages the receive takes depends on which arrives first, so the data it holds,
    and the message left for the next receive, change from run to run. A run that passed says nothing
    about the next. The simulator shows one of the possible outcomes (of the sends waiting when the
    receive is matched, the lowest rank's); an `expect` that holds there may fail on the real backend.
    Give each sender its own tag (`tag rank`) and receive `from any tag T`, order the senders (a
    `barrier` between rounds), or name the source.

    ## Example

    ```comm
    program master
    world 3
    tensor x: float32[2] = rank
    on rank == 0:
        for j in 1 .. world - 1:
            recv x from any
    else:
        send x to 0
    ```

    ## Use instead

    ```comm
    program master
    world 3
    tensor x: float32[2] = rank
    on rank == 0:
        for j in 1 .. world - 1:
            recv x from any tag j
    else:
        send x to 0 tag rank
    ```

    ## Backend notes

    torch's `recv(tensor)` with no `src` (Gloo's `recvAnysource`) takes the first message to arrive on the
    tag from any rank of the group and returns its sender; measured, the order changes from run to run.
    NCCL has no receive from any source (`B603`). Only data flow orders: a blocking send's return once its
    receive is posted (Gloo's rendezvous) and a gather's non-root leaving once the root has called are not
    counted, so a race those alone would rule out on Gloo is still reported. A receive naming its source
    that the rank posts before the receive from any completes takes that source's message first, as the
    checker matches messages (docs/language.md §8).
    """

    code = "P211"
    name = "message-race"
    backend_doc = "receive-from-any"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from cls.from_outcome(ctx.outcome)

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> Iterator[Diagnostic]:
        """The races of one run, once per receive and pair of send statements (`commdsl sim` reports them too)."""
        s = outcome.schedule
        seen = set()
        for recv, took, other in outcome.races:
            r_op, a, b = s.op_at(s.records[recv[0]], recv[1]), _Sender(s, took), _Sender(s, other)
            if (r_op.span, a.span, b.span) in seen:
                continue
            seen.add((r_op.span, a.span, b.span))
            rank = int(s.records[recv[0]].ranks[recv[1]])
            word = s.records[recv[0]].word
            if a.span == b.span:
                labels = (Label(span=a.span, message=f"ranks {a.rank} and {b.rank} both send here"),)
            else:
                labels = (
                    Label(span=a.span, message=f"rank {a.rank} sends here"),
                    Label(span=b.span, message=f"rank {b.rank} sends here too"),
                )
            tag = f" tag {r_op.tag}" if r_op.tag else ""
            yield cls.diagnostic(
                f"`{word} from any{tag}` on rank {rank} can take the message of rank {a.rank} (line "
                f"{a.span.line}) or of rank {b.rank} (line {b.span.line})",
                span=r_op.span,
                label="takes whichever message arrives first",
                labels=labels,
                notes=(
                    Note(
                        message="the data received depends on arrival order; the simulator shows one outcome, "
                        f"in which rank {a.rank}'s message arrives first"
                    ),
                ),
                help="give each sender its own tag and receive `from any tag T`, or name the source",
            )


class _Sender:
    """A send that a receive from any source can meet: its rank and statement."""

    def __init__(self, schedule: Schedule, where: tuple[int, int]):
        rec = schedule.records[where[0]]
        self.rank = int(rec.ranks[where[1]])
        self.span = rec.span


# ---- what the P2P rules share ---------------------------------------------------------------------


def _unmatched(ctx: Context, rule: type[Rule], sends: bool) -> Iterator[Diagnostic]:
    """One finding per statement whose sends (or receives) never met, worded for its first rank: what a
    matching op on the peer would name, for its first `LISTED` such ops, then how many more (a ring with a
    wrong peer at world 4096 has 4096 such ranks on one line)."""
    posts = ctx.outcome.unmatched
    statements: dict[int, list[tuple[int, str]]] = {}
    for row, reason in ctx.waits.unmatched:
        if bool(posts.send[row]) == sends:
            statements.setdefault(ctx.record(posts.rec[row]).span.start, []).append((row, reason))
    for rows in statements.values():
        row, reason = rows[0]
        rec = ctx.record(posts.rec[row])
        op = ctx.op(posts.rec[row], posts.pos[row])
        rank, peer = int(posts.rank[row]), op.peer
        other = "recv" if sends else "send"
        fate = "finishes without posting one" if reason == "finished" else "never posts one"
        if peer == ANY_SOURCE:
            who = "any rank"
            fate = "every other rank finishes without one" if reason == "finished" else "no other rank posts one"
        else:
            who, fate = f"rank {peer}", f"rank {peer} {fate}"
        named = [_would_name(ctx, r, other) for r, _ in rows[:LISTED]]
        rest = rows[LISTED:]
        if rest:
            ranks = {int(posts.rank[r]) for r, _ in rest}
            named.append(f"the same on {len(rest)} more of its ops, on ranks {rank_list(ranks)}")
        yield rule.diagnostic(
            f"`{rec.word}` on rank {rank} {'to' if sends else 'from'} {who} has no matching `{other}`",
            span=op.span,
            label=fate,
            notes=tuple(
                Note(message=m)
                for m in dict.fromkeys([named[0], _never_met(ctx.backend, rec, self_=peer == rank), *named[1:]])
            ),
            help=None if peer == ANY_SOURCE else _peer_hint(ctx, row),
        )


def _would_name(ctx: Context, row: int, other: str) -> str:
    """What the op that would have met row `row` of the unmatched posts names."""
    posts = ctx.outcome.unmatched
    op = ctx.op(posts.rec[row], posts.pos[row])
    whom = "another rank" if op.peer == ANY_SOURCE else f"rank {op.peer}"
    tag = f" with tag {op.tag}" if op.tag else ""
    return f"a matching `{other}` on {whom} would name rank {int(posts.rank[row])}{tag}"


def _never_met(backend: str, rec, self_: bool) -> str:
    """What the backend does with a send or receive whose partner never comes (docs/backend-support.md)."""
    word = rec.word
    if backend == "nccl":
        if self_:
            other = "recv" if rec.is_send else "send"
            return (
                f"NCCL raises `ncclInvalidUsage` (`Trying to {word.lstrip('i')} to self without a matching "
                f"{other}`): a P2P op with self needs its partner in the same `batch`"
            )
        return (
            "on NCCL the call returns to Python, but its kernel never ends: what the rank issues after it on "
            "that stream never runs, and the watchdog ends the process after its timeout (10 minutes by default)"
        )
    if rec.blocking:
        return f"on Gloo this `{word}` blocks until the process group's timeout (30 minutes by default), then raises"
    lost = (
        "never waited, the message is lost when the rank exits"
        if rec.is_send
        else "never waited, the buffer is never written"
    )
    return (
        f"on Gloo the `wait` of this `{word}` blocks until the process group's timeout (30 minutes by "
        f"default), then raises; {lost}"
    )


def _peer_hint(ctx: Context, row: int) -> str | None:
    """Point at a receive (or send) on another rank that expected this message, if there is one."""
    posts = ctx.outcome.unmatched
    rank = int(posts.rank[row])
    peer = int(posts.dst[row] if posts.send[row] else posts.src[row])
    want = 1 - int(posts.send[row])
    for q, _ in ctx.waits.unmatched:
        q_peer = int(posts.dst[q] if posts.send[q] else posts.src[q])
        if int(posts.send[q]) == want and q_peer == rank and int(posts.rank[q]) != peer:
            verb = "receives from" if want == 0 else "sends to"
            line = ctx.record(posts.rec[q]).span.line
            return f"rank {int(posts.rank[q])} {verb} rank {rank} at line {line}: check the peer expression"
    return None


class _Side:
    """One side of a matched message, as the rules word it."""

    def __init__(self, ctx: Context, rows, k: int):
        self.rank, rid, pos = (_cell(rows, c, k) for c in ("rank", "rec", "pos"))
        op = ctx.op(rid, pos)
        self.span, self.view, self.dtype = op.span, op.view, op.dtype


def _cell(rows, column: str, k: int) -> int:
    """Row k's value in `column`, without making a column that is one value an array (of every row)."""
    v = rows.piece(column)
    return int(v[k] if isinstance(v, np.ndarray) else v)


TAG_MAX = 2**31 - 1
"""The largest tag torch passes on: its bindings take the tag as a C++ `int`."""


class TagOutOfRange(Rule):
    """a tag that torch or the backend refuses: negative on Gloo, above 2^31 - 1 anywhere

    ## What it does

    Reports a send or receive (blocking, async or in a `batch`) whose tag is above 2147483647 (2^31 - 1) on
    any backend, or negative on Gloo, naming the first rank that uses it.

    ## Why is this bad?

    torch hands the tag to the process group as a C++ `int`: a larger one fails in Python, `TypeError:
    send(): incompatible function arguments` (or `recv()`), before anything is sent. Gloo also refuses a
    negative tag, `RuntimeError: Tag must be nonnegative`. Either way the rank raises and its peer waits.

    ## Example

    ```comm
    program tags
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1 tag -1
    else:
        recv x from 0 tag -1
    ```

    ## Use instead

    ```comm
    program tags
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1 tag 1
    else:
        recv x from 0 tag 1
    ```

    ## Backend notes

    Measured on Gloo, torch 2.13: tag -1 raises on both ranks, 2147483647 is delivered, 2147483648 raises, in
    a `batch` too. NCCL ignores tags (`P207`), so a negative one runs there; the `int` limit is torch's own
    and holds on every backend.
    """

    code = "P212"
    name = "tag-out-of-range"
    backend_doc = "p2p-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()
        for op in ctx.schedule.p2p_records():
            if op.span in seen:
                continue
            if not isinstance(op.tag, np.ndarray) and 0 <= op.tag <= TAG_MAX:  # most ops: one tag in range
                continue
            tags = np.broadcast_to(np.asarray(op.tag, dtype=np.int64), op.ranks.shape)
            bad = (tags > TAG_MAX) | ((tags < 0) & (ctx.backend == "gloo"))  # NCCL ignores tags (P207)
            if not bad.any():
                continue
            seen.add(op.span)
            k = int(np.argmax(bad))
            tag, rank = int(tags[k]), int(op.ranks[k])
            call = "send" if op.is_send else "recv_anysource" if op.from_any else "recv"  # the binding torch calls
            if tag > TAG_MAX:
                problem = "above 2^31 - 1"
                what = f"torch raises `TypeError: {call}(): incompatible function arguments`"
            else:
                problem, what = "negative", "Gloo raises `RuntimeError: Tag must be nonnegative`"
            yield cls.diagnostic(
                f"`{op.word}` on rank {rank} has tag {tag}, {problem}",
                span=op.span,
                label=f"tag {tag}",
                notes=(Note(message=what),),
                help=f"use a tag from 0 to {TAG_MAX}",
            )


class BatchAcrossGroups(Rule):
    """a `batch` whose sends and receives are on different groups

    ## What it does

    Reports a `batch:` in which one rank's ops name different groups (`in g` on some, another group or the
    world on others), naming the first such rank and two of its ops.

    ## Why is this bad?

    torch runs a batch on one process group: `batch_isend_irecv` checks that every op uses the same one and
    raises `ValueError: All ops need to use the same group.` before anything is posted, on every backend. The
    rank stops there and its peers wait for messages that never come. Split the batch into one per group, or
    name the peers in one group.

    ## Example

    ```comm
    program mixed
    world 2
    group g = split by 0
    tensor x: float32[4] = rank
    tensor y: float32[4]
    on rank == 0:
        batch:
            send x to 1 in g
            recv y from 1
    else:
        batch:
            recv y from 0 in g
            send x to 0
    ```

    ## Use instead

    ```comm
    program mixed
    world 2
    group g = split by 0
    tensor x: float32[4] = rank
    tensor y: float32[4]
    on rank == 0:
        batch:
            send x to 1 in g
            recv y from 1 in g
    else:
        batch:
            recv y from 0 in g
            send x to 0 in g
    ```

    ## Backend notes

    Measured on Gloo, torch 2.13: both ranks raise the `ValueError` (torch's `_check_p2p_op_list`, in Python,
    before the backend is called: NCCL the same). The world named or left out is one group to torch.
    """

    code = "P213"
    name = "batch-across-groups"
    backend_doc = "batches"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        s = ctx.schedule
        seen = set()
        for rec in s.records:
            if not isinstance(rec, BatchRec) or rec.span in seen or len(rec.ops) < 2:
                continue
            found = _groups_differ(rec, s.world)
            if found is None:
                continue
            seen.add(rec.span)
            rank, first, other, g1, g2 = found
            name1, name2 = s.groups[g1].name, s.groups[g2].name
            yield cls.diagnostic(
                f"rank {rank}'s `batch` has ops on `{name1}` and on `{name2}`",
                span=other.span,
                label=f"on `{name2}`",
                labels=(Label(span=first.span, message=f"on `{name1}`"),),
                notes=(Note(message="torch raises `ValueError: All ops need to use the same group.`"),),
                help="put the ops of one group in a batch of their own, or use one group for all of them",
            )


def _groups_differ(rec: BatchRec, world: int) -> tuple[int, P2PRec, P2PRec, int, int] | None:
    """(rank, its first op, an op on another group, their groups) for the lowest rank of `rec` whose ops in the
    batch name two groups; None where each rank's ops share one."""
    groups = [0 if op.gid is None else op.gid for op in rec.ops]  # None: the world, group 0
    if not any(isinstance(g, np.ndarray) for g in groups) and len(set(groups)) == 1:
        return None  # one group on every rank: the common case, without a pass over the ranks
    first_gid = np.full(world, -1, dtype=np.int64)
    first_op = np.zeros(world, dtype=np.int64)
    found = None
    for i, (op, g) in enumerate(zip(rec.ops, groups)):
        gids = np.broadcast_to(np.asarray(g, dtype=np.int64), op.ranks.shape)
        known = first_gid[op.ranks]
        clash = (known >= 0) & (known != gids)
        if clash.any():
            k = int(np.argmax(clash))
            rank = int(op.ranks[k])
            if found is None or rank < found[0]:
                found = (rank, rec.ops[int(first_op[rank])], op, int(known[k]), int(gids[k]))
        new = known < 0
        first_gid[op.ranks[new]] = gids[new]
        first_op[op.ranks[new]] = i
    return found


def _mismatched_pairs(ctx: Context, dtypes: bool):
    """The first matched send and receive, in the order they met, per pair of statements, whose dtypes differ
    (`dtypes`: P206's) or whose dtypes agree and sizes differ (P205's). Found with whole-array passes: a bug on
    every rank of a loop mismatches ranks × iterations messages (33 million in the ring at world 4096)."""
    sends, recvs = ctx.outcome.mismatched_messages
    if not len(sends):
        return
    ds, dr = sends.const("dtype"), recvs.const("dtype")
    if ds is not None and dr is not None:
        rows = np.arange(len(sends)) if (ds != dr) == dtypes else np.zeros(0, dtype=np.int64)
    else:
        rows = np.flatnonzero((sends.column("dtype") != recvs.column("dtype")) == dtypes)
    if not rows.size:
        return
    seen = set()
    for k in first_of_each_pair(sends, recvs, rows).tolist():
        spans = (ctx.record(_cell(sends, "rec", k)).span.start, ctx.record(_cell(recvs, "rec", k)).span.start)
        if spans not in seen:
            seen.add(spans)
            yield _Side(ctx, sends, k), _Side(ctx, recvs, k)


def _op_ids(ctx: Context, rows) -> np.ndarray:
    bases = ctx.schedule.op_bases
    return bases[rows.rec] + rows.pos


def _rank_of(ctx: Context, op_id: int) -> int:
    rec, pos = ctx.locate(op_id)
    return int(rec.ranks[pos])
