"""L7xx (warnings): hand-written patterns a built-in collective does better, and wasted results.

Found in one pass over the records (`_idioms`), a statement getting one idiom at most; only `commdsl lint` reports them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.diagnostics import Diagnostic, Label
from commdsl.rules import Rule
from commdsl.schedule import BatchRec, Collective, CollectiveRec, P2PRec, Recv, Send
from commdsl.values import at

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class SendLoopIsBroadcast(Rule):
    """one rank sends the same buffer to every other rank

    ## What it does

    Reported by `commdsl lint`. Finds a rank that sends the same buffer to every other rank, one blocking
    `send` after another: a hand-written `broadcast`.

    ## Why is this bad?

    The root sends `world - 1` messages one after the other, and on Gloo each `send` waits for its
    receiver, so the last rank waits for all the others. A `broadcast` is one call the backend can
    implement with a tree or pipeline, and it states the intent.

    ## Example

    ```comm
    program one_to_many
    world 3..4
    tensor t: float32[4] = rank
    on rank == 0:
        for dst in 1 .. world - 1:
            send t to dst
    else:
        recv t from 0
    ```

    ## Use instead

    ```comm
    program one_to_many
    world 3..4
    tensor t: float32[4] = rank
    broadcast t from 0
    ```
    """

    code = "L701"
    name = "send-loop-is-broadcast"
    severity = "warning"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for code, d in ctx.shared("idioms", _idioms):
            if code == cls.code:
                yield d


class RecvLoopIsGather(Rule):
    """one rank receives a piece from every other rank

    ## What it does

    Reported by `commdsl lint`. Finds a rank that receives a piece from every other rank into different
    parts of one buffer, one blocking `recv` after another: a hand-written `gather`.

    ## Why is this bad?

    The receives complete one at a time, in rank order, so a slow rank delays every rank after it. A
    `gather` is one call the backend can schedule as it likes, and it states the intent.

    ## Example

    ```comm
    program many_to_one
    world 3..4
    tensor piece: float32[2] = rank
    tensor all: float32[world, 2] = 0
    on rank == 0:
        all[0] = piece
        for src in 1 .. world - 1:
            recv all[src] from src
    else:
        send piece to 0
    ```

    ## Use instead

    ```comm
    program many_to_one
    world 3..4
    tensor piece: float32[2] = rank
    tensor all: float32[world, 2] = 0
    gather piece into all to 0
    ```
    """

    code = "L702"
    name = "recv-loop-is-gather"
    severity = "warning"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for code, d in ctx.shared("idioms", _idioms):
            if code == cls.code:
                yield d


class PairwiseExchangeIsAllToAll(Rule):
    """every rank exchanges with every other rank by P2P

    ## What it does

    Reported by `commdsl lint`. Finds a `batch` in which a rank sends a piece to every other rank and
    receives one from each: a hand-written `all_to_all`.

    ## Why is this bad?

    `2 × (world - 1)` separate point-to-point operations per rank, written out by hand with the indexing
    that entails. `all_to_all` is one collective that the backend can schedule, and it states the intent.

    ## Example

    ```comm
    program exchange
    world 3..4
    tensor src: float32[world, 2] = rank
    tensor dst: float32[world, 2] = 0
    dst[rank] = src[rank]
    batch:
        for peer in 0 .. world - 1:
            on peer != rank:
                send src[peer] to peer
                recv dst[peer] from peer
    ```

    ## Use instead

    ```comm
    program exchange
    world 3..4
    tensor src: float32[world, 2] = rank
    tensor dst: float32[world, 2] = 0
    all_to_all src into dst
    ```
    """

    code = "L703"
    name = "pairwise-exchange-is-all-to-all"
    severity = "warning"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for code, d in ctx.shared("idioms", _idioms):
            if code == cls.code:
                yield d


class ReduceThenBroadcast(Rule):
    """`reduce` to a root followed by `broadcast` from it

    ## What it does

    Reported by `commdsl lint`. Finds a `reduce` to a root directly followed by a `broadcast` of the same
    buffer from that root, on the same group.

    ## Why is this bad?

    That is an `all_reduce` in two steps, with every byte going through the root twice. A single
    `all_reduce` gives the same result on every rank with no root bottleneck, and it is one collective
    instead of two.

    ## Example

    ```comm
    program sum_everywhere
    world 2..4
    tensor x: float32[4] = rank
    reduce x to 0
    broadcast x from 0
    ```

    ## Use instead

    ```comm
    program sum_everywhere
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    ```
    """

    code = "L704"
    name = "reduce-then-broadcast"
    severity = "warning"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for code, d in ctx.shared("idioms", _idioms):
            if code == cls.code:
                yield d


class CollectiveResultUnused(Rule):
    """a collective's result overwritten before it is read

    ## What it does

    Reported by `commdsl lint`. Finds a collective whose result is overwritten before anything reads it
    on every rank it left a result on. A result is read by anything that takes its value: an
    assignment's right side (even one element of it), an `expect`, a `print`, a `send`, a later
    collective's input. Only results count: a `reduce` leaves none off its root, a `gather` none off its
    root, a `broadcast` none on its root. Silent when

    * some rank reads the result (an `all_reduce` of a loss that rank 0 alone prints: the others
      overwrite theirs at the next step, by design);
    * a rank keeps the result to the end of the program;
    * the overwrite covers part of the result only.

    ## Why is this bad?

    The communication is wasted, and it usually means a bug nearby: the result was meant to be read (the
    assignment overwrites the wrong tensor), or the collective was meant for another buffer.

    ## Example

    ```comm
    program unused
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    x = rank
    ```

    ## Use instead

    ```comm
    program unused
    world 2..4
    tensor x: float32[4] = rank
    tensor total: float32[4] = 0
    all_reduce x
    total = x
    x = rank
    ```
    """

    code = "L705"
    name = "collective-result-unused"
    severity = "warning"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for code, d in ctx.shared("idioms", _idioms):
            if code == cls.code:
                yield d


# ---- the idioms, found in one pass over every rank's ops (records in order, ranks as arrays) -----------

SEND_RUN, RECV_RUN = 1, 2


def _idioms(ctx: Context) -> list[tuple[str, Diagnostic]]:
    """(code, finding) in the order of the per-rank scan; a statement gets one idiom at most."""
    s, W = ctx.schedule, ctx.world
    found: dict[str, list] = {"runs": [], "L703": [], "L704": []}
    if W >= 3:
        _runs_and_exchanges(ctx, found)
    _reduce_then_broadcast(ctx, found)
    out, seen = [], set()
    for rank, first, code, make in sorted(found["runs"] + found["L703"], key=lambda f: (f[0], f[1])):
        d = make()
        if d is not None and d.span not in seen:
            seen.add(d.span)
            out.append((code, d))
    for code, d in found["L704"]:
        if d.span not in seen:
            seen.add(d.span)
            out.append((code, d))
    out.extend(_unused_results(ctx, seen))
    return out


def _unused_results(ctx: Context, seen: set) -> Iterator[tuple[str, Diagnostic]]:
    """Collective calls whose result is overwritten unread on every rank that received one (a result some rank
    reads, or keeps to the end, was worth communicating: `all_reduce` of a loss that rank 0 prints)."""
    wasted: dict[int, list] = {}
    for dead in ctx.access.dead_stores:
        producer, _ = ctx.locate(dead.producer)
        if isinstance(producer, CollectiveRec):
            wasted.setdefault(producer.id, []).append(dead)
    for rid, deads in wasted.items():
        producer = ctx.record(rid)
        if producer.span in seen or len({d.rank for d in deads}) < ctx.access.receivers.get(rid, 0):
            continue
        seen.add(producer.span)
        first = min(deads, key=lambda d: d.rank)
        overwriter, _ = ctx.locate(first.overwriter)
        n, kind = len({d.rank for d in deads}), producer.kind.name
        one_place = len({ctx.locate(d.overwriter)[0].span for d in deads}) == 1
        where = "overwritten here" if one_place else f"overwritten here on rank {first.rank}"
        message = (
            f"the result of `{kind}` on rank {first.rank} is overwritten before it is read"
            if n == 1
            else f"the result of `{kind}` is overwritten before it is read, on every rank"
            if n == ctx.world
            else f"the result of `{kind}` is overwritten before it is read, on each of the {n} ranks it reached"
        )
        yield (
            "L705",
            CollectiveResultUnused.diagnostic(
                message,
                span=producer.span,
                label="result never read",
                labels=(Label(span=overwriter.span, message=where),),
                help="remove the collective, or read its result before overwriting it",
            ),
        )


def _runs_and_exchanges(ctx: Context, found: dict) -> None:
    """Runs of consecutive blocking sends (receives) without tag or group, per rank; a run as long as the
    world is a candidate, checked exactly on that rank's ops when it ends."""
    s, W = ctx.schedule, ctx.world
    kind = np.zeros(W, dtype=np.int64)
    start = np.zeros(W, dtype=np.int64)
    length = np.zeros(W, dtype=np.int64)
    step = np.zeros(W, dtype=np.int64)  # each rank's position in its own sequence

    active = [0]  # ranks in a run: when none are, a record that starts none needs no work

    def close(ranks: np.ndarray) -> None:
        if not active[0]:
            return
        done = ranks[(kind[ranks] > 0) & (length[ranks] >= W - 1)]
        for r in done.tolist():
            ops = s.ops[r][int(start[r]) : int(start[r] + length[r])]
            found["runs"].append(
                (
                    r,
                    int(start[r]),
                    "L701" if kind[r] == SEND_RUN else "L702",
                    lambda r=r, ops=ops: _run_finding(r, ops, W),
                )
            )
        kind[ranks] = 0
        length[ranks] = 0
        active[0] = int((kind > 0).sum())

    for rid in s.top:
        rec = s.records[rid]
        G = rec.ranks
        if isinstance(rec, P2PRec) and rec.blocking and rec.gid is None:
            run = np.zeros(G.size, dtype=np.int64)
            run[at(rec.tag, None, G.size) == 0] = SEND_RUN if rec.is_send else RECV_RUN
            extend = (run > 0) & (kind[G] == run)
            close(G[~extend])
            fresh = (run > 0) & ~extend
            kind[G[fresh]] = run[fresh]
            start[G[fresh]] = step[G[fresh]]
            length[G[run > 0]] += 1
            active[0] = int((kind > 0).sum())
        else:
            close(G)
        if isinstance(rec, BatchRec) and len(rec.ops) >= 2 * (W - 1):  # fewer ops cannot reach every other rank
            _exchange(ctx, rec, found)
        step[G] += 1
    close(np.arange(W))


def _run_finding(rank: int, ops, W: int) -> Diagnostic | None:
    others = set(range(W)) - {rank}
    if {op.peer for op in ops} != others:
        return None
    if isinstance(ops[0], Send):
        if len({op.view for op in ops}) != 1:
            return None
        t = ops[0].view.tensor
        return SendLoopIsBroadcast.diagnostic(
            f"rank {rank} sends the same buffer to every other rank one by one",
            span=ops[0].span,
            label=f"{len(ops)} sends of `{t}`",
            help=f"use `broadcast {t} from {rank}`: it takes log(world) steps instead of world - 1 on the root",
        )
    views = [op.view for op in ops]
    if len({v.tensor for v in views}) != 1 or len(set(views)) != len(views):
        return None
    return RecvLoopIsGather.diagnostic(
        f"rank {rank} receives a piece from every other rank one by one",
        span=ops[0].span,
        label=f"{len(ops)} receives into `{views[0].tensor}`",
        help=f"use `gather PIECE into {views[0].tensor} to {rank}`",
    )


def _exchange(ctx: Context, rec: BatchRec, found: dict) -> None:
    """A batch in which a rank sends to and receives from every other rank (candidates by count first)."""
    W = ctx.world
    G = rec.ranks
    sends = np.zeros(G.size, dtype=np.int64)
    recvs = np.zeros(G.size, dtype=np.int64)
    for op in rec.ops:
        where = np.searchsorted(G, op.ranks)
        (sends if op.is_send else recvs)[where] += 1
    for k in np.flatnonzero((sends == W - 1) & (recvs == W - 1)).tolist():
        rank = int(G[k])
        batch = ctx.schedule.op_at(rec, k)
        others = set(range(W)) - {rank}
        if {o.peer for o in batch.ops if type(o) is Send} == {
            o.peer for o in batch.ops if type(o) is Recv
        } == others and len(batch.ops) == 2 * len(others):
            d = PairwiseExchangeIsAllToAll.diagnostic(
                f"rank {rank} exchanges a piece with every other rank by P2P",
                span=rec.span,
                label=f"{len(others)} sends and {len(others)} receives",
                help="use `all_to_all SRC into DST`: one collective the backend can schedule",
            )
            found["L703"].append((rank, rid_step(ctx, rec, rank), "L703", lambda d=d: d))


def rid_step(ctx: Context, rec, rank: int) -> int:
    """A record's position in a rank's sequence (orders findings as a rank-by-rank scan would)."""
    return int(np.searchsorted(ctx.schedule.sequence(rank), rec.id))


def _reduce_then_broadcast(ctx: Context, found: dict) -> None:
    """`reduce` directly followed, on a rank, by `broadcast` of the same buffer from the same root."""
    s = ctx.schedule
    last = np.full(s.world, -1, dtype=np.int64)
    for rid in s.top:
        rec = s.records[rid]
        if isinstance(rec, CollectiveRec) and rec.kind.name == "broadcast":
            prev = last[rec.ranks]
            for p in np.unique(prev[prev >= 0]).tolist():
                red = s.records[p]
                if not (isinstance(red, CollectiveRec) and red.kind.name == "reduce"):
                    continue
                for k in np.flatnonzero(prev == p).tolist():
                    b: Collective = s.op_at(rec, k)
                    a: Collective = s.op_at(red, int(np.searchsorted(red.ranks, rec.ranks[k])))
                    if a.root == b.root and a.group == b.group and a.inputs[0] == b.inputs[0]:
                        found["L704"].append(
                            (
                                "L704",
                                ReduceThenBroadcast.diagnostic(
                                    "`reduce` followed by `broadcast` from the same root is an `all_reduce`",
                                    span=a.span,
                                    label="reduce",
                                    labels=(Label(span=b.span, message="then broadcast"),),
                                    help=f"use `all_reduce {a.inputs[0].tensor}`: one collective, no root bottleneck",
                                ),
                            )
                        )
                        break
        last[rec.ranks] = rid
