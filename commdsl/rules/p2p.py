"""P2xx: point-to-point messages that never match, or match with the wrong size, dtype or peer.

Each rule's `check` reads the engine's outcome and the wait-for analysis (`commdsl.checker`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.engine import NOT_MEMBER, PEER_NOT_IN_GROUP, PEER_OUT_OF_RANGE, SELF
from commdsl.rules import Rule
from commdsl.schedule import P2PRec

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class UnmatchedSend(Rule):
    """a send that no receive ever matches

    ## What it does

    Reports a `send` or `isend` that no receive ever matches: the destination finishes, or reaches a
    point it never leaves, without posting a `recv` from this rank with the same tag (and group).

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
    message size (measured from 1 element to 64 MiB), so an unmatched `send` always hangs there. An
    `isend` never waited, followed by process exit, loses the message; the receiver, if any, sees
    `Connection closed by peer`.
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
    never leaves, without posting a `send` to this rank with the same tag (and group).

    ## Why is this bad?

    The receiver blocks until the process-group timeout, 30 minutes by default, and its buffer is never
    written. The other ranks usually finish normally, so the job looks stuck rather than failed.

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
    """

    code = "P202"
    name = "unmatched-recv"


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
                span=send_op.span, label=f"tag {send_op.tag}",
                labels=(Label(span=recv_op.span, message=f"tag {recv_op.tag}"),),
                notes=(Note(message="messages match by (peer, tag): neither side ever completes"),),
                help="use the same tag on both sides")


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
    receiving process (SIGABRT). `TORCH_DISTRIBUTED_DEBUG=DETAIL` does not check point-to-point sizes.
    """

    code = "P205"
    name = "message-size-mismatch"
    backend_doc = "message-mismatch"


    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for s, r in _mismatched_pairs(ctx):
            if s.dtype == r.dtype and s.view.numel != r.view.numel:
                what = ("the last elements stay untouched, silently" if r.view.numel > s.view.numel
                        else "the receiver aborts (`Received data size doesn't match`)")
                yield cls.diagnostic(
                    f"rank {s.rank} sends {s.view.numel} elements but rank {r.rank} receives {r.view.numel}",
                    span=s.span, label=f"sends {s.view.numel} elements",
                    labels=(Label(span=r.span, message=f"receives {r.view.numel}"),),
                    notes=(Note(message=f"on Gloo {what}"),), help="size both views alike")


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
    leaves garbage in the receive buffer.
    """

    code = "P206"
    name = "message-dtype-mismatch"
    backend_doc = "message-mismatch"


    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for s, r in _mismatched_pairs(ctx):
            if s.dtype != r.dtype:
                yield cls.diagnostic(
                    f"rank {s.rank} sends {s.dtype} but rank {r.rank} receives {r.dtype}", span=s.span,
                    label=f"sends {s.dtype}", labels=(Label(span=r.span, message=f"receives {r.dtype}"),),
                    notes=(Note(message="Gloo reinterprets the bytes: the receiver gets garbage, silently"),),
                    help="give both buffers the same dtype")


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
                span=send.span, label=f"tag {send.tag}",
                labels=(Label(span=gloo.span, message=f"Gloo matches it here, by tag {gloo.tag}"),
                        Label(span=nccl.span, message="NCCL matches it here, in posting order")),
                notes=(Note(message="NCCL ignores tags: messages between two ranks match in the order they are posted"),),
                help="post sends and receives in the same order on both ranks instead of relying on tags")


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
                yield cls.diagnostic(f"`{rec.word}` on rank {rank} names rank {op.peer}, outside world {W}",
                                     span=op.span, label=f"ranks are 0..{W - 1}",
                                     help="wrap the peer with `% world`, or guard the op with `on`")
            else:
                yield cls.diagnostic(f"`{op.kind}` root {op.root} is outside world {W}", span=op.span,
                                     label=f"ranks are 0..{W - 1}")


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

    Measured on Gloo: `send` to the own rank raises `ValueError: Invalid destination rank`; `recv` from
    the own rank, and `isend` to it, raise `RuntimeError: Pair is not connected`.
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
            yield cls.diagnostic(f"rank {rank} `{rec.word}`s {direction} itself", span=op.span,
                                 label=f"peer is rank {op.peer}, the rank itself",
                                 notes=(Note(message="Gloo raises `Invalid destination rank` or `Pair is not connected`"),),
                                 help="copy locally with `=`, or fix the peer expression")


class PeerNotInGroup(Rule):
    """a P2P op `in GROUP` whose peer or sender is not a member

    ## What it does

    Reports a point-to-point op `in GROUP` whose peer is not a member of the group, or which runs on a
    rank that is not a member itself.

    ## Why is this bad?

    Peers of a P2P op in a group are global ranks that must belong to the group. torch raises an error
    when it translates a non-member peer into a group rank; on a rank outside the group it only warns
    (`Running send on global rank 2 which does not belong to the given group.`) and does nothing, so the
    peer waits for a message that never comes.

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
            yield cls.diagnostic(f"`{rec.word}` in group `{op.group.name}`: {who} is not a member", span=op.span,
                                 label=f"members are {list(op.group.ranks)}")


# ---- what the P2P rules share ---------------------------------------------------------------------

def _unmatched(ctx: Context, rule: type[Rule], sends: bool) -> Iterator[Diagnostic]:
    posts = ctx.outcome.unmatched
    for row, reason in ctx.waits.unmatched:
        if bool(posts.send[row]) != sends:
            continue
        rec = ctx.record(posts.rec[row])
        op = ctx.op(posts.rec[row], posts.pos[row])
        rank, peer = int(posts.rank[row]), op.peer
        other = "recv" if sends else "send"
        fate = "finishes without posting one" if reason == "finished" else "never posts one"
        tag = f" with tag {op.tag}" if op.tag else ""
        yield rule.diagnostic(
            f"`{rec.word}` on rank {rank} {'to' if sends else 'from'} rank {peer} has no matching `{other}`",
            span=op.span, label=f"rank {peer} {fate}",
            notes=(Note(message=f"a matching `{other}` on rank {peer} would name rank {rank}{tag}"),),
            help=_peer_hint(ctx, row))


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
        self.rank = int(rows.rank[k])
        op = ctx.op(rows.rec[k], rows.pos[k])
        self.span, self.view, self.dtype = op.span, op.view, op.dtype


def _mismatched_pairs(ctx: Context):
    """Matched sends and receives whose sizes or dtypes differ, once per pair of statements."""
    sends, recvs = ctx.outcome.mismatched_messages
    seen = set()
    for k in range(len(sends)):
        key = (int(sends.rec[k]), int(recvs.rec[k]))
        if key in seen:
            continue
        seen.add(key)
        yield _Side(ctx, sends, k), _Side(ctx, recvs, k)


def _op_ids(ctx: Context, rows) -> np.ndarray:
    bases = ctx.schedule.op_bases
    return bases[rows.rec] + rows.pos


def _rank_of(ctx: Context, op_id: int) -> int:
    rec, pos = ctx.locate(op_id)
    return int(rec.ranks[pos])
