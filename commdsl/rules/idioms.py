"""L7xx (warnings): hand-written patterns a built-in collective does better, and wasted results.

Found in one pass over the records (`_idioms`), a statement getting one idiom at most; only `commdsl lint` reports them.
A pattern is reported only when it is the collective exactly (the same buffer everywhere, blocks by rank), and
L701-L703 only when they show at every checked world size from 3 on (`Rule.every_world_from`): a binomial tree is
a star at 3 ranks, a neighbour exchange reaches every rank at 3, and neither is the collective the lint names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.diagnostics import Diagnostic, Label
from commdsl.rules import Rule
from commdsl.schedule import BatchRec, Collective, CollectiveRec, P2PRec, Recv, Send, View
from commdsl.values import at, distinct, item

if TYPE_CHECKING:
    from commdsl.checker.context import Context


class SendLoopIsBroadcast(Rule):
    """one rank sends the same buffer to every other rank

    ## What it does

    Reported by `commdsl lint`. Finds a rank that sends the same buffer to every other rank, one blocking
    `send` after another, where each of them receives it into that same view of the same tensor: a
    hand-written `broadcast`. It says nothing when

    * the sends carry different buffers or slices (that is a `scatter`), or carry a tag or a group;
    * a receiver takes the message into another buffer, or its matching receive is not the one the loop
      meant (a pipeline stage taking its input, the pieces of an all-gather);
    * the program is a star at some of the checked world sizes only: a binomial tree is rank 0 sending
      to ranks 1 and 2 at 3 ranks, and not at 4 to 8. The sizes are those declared by `world` (or given
      with `--world`), so a tree checked at 3 ranks alone is a star there, and reported.

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
    every_world_from = 3  # at 2 ranks one message is no loop
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

    Reported by `commdsl lint`. Finds a rank that receives a piece from every other rank, one blocking
    `recv` after another, the piece of rank p into block p of one buffer (blocks of the pieces' size),
    each sent from the same tensor on every sender: a hand-written `gather`. When every rank receives
    the others' pieces that way, the help names `all_gather`. It says nothing when the pieces go to
    blocks other than their senders' ranks, into different buffers, come from different tensors, or
    when the program is a star at some of the checked world sizes only (a binomial gather tree at 3
    ranks).

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
    every_world_from = 3  # at 2 ranks one message is no loop
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

    Reported by `commdsl lint`. Finds a `batch` in which every rank sends block p of one buffer to each
    other rank p and receives block p of another buffer from it, all blocks of one size: a hand-written
    `all_to_all`. It says nothing about a neighbour (halo) exchange, which reaches every rank at 3 ranks
    but sends the edges of a buffer, not blocks by peer, and reaches only two ranks at 4 and more; nor
    about a batch that sends the whole buffer to everyone (an all-gather), puts pieces in blocks other
    than the peer's, or receives into separate buffers. Like L701, it must show at every checked world
    size from 3 on.

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
    every_world_from = 3  # at 2 ranks one message is no loop
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

    Reported by `commdsl lint`. Finds a `reduce` to a root directly followed, on that root, by a
    `broadcast` of the same buffer from it, on the same group. A step of the root's own between the two
    (`x /= world`, which makes it an average) or another buffer, root or group is something else.

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
    W = ctx.world
    found: dict[str, list] = {"runs": [], "L703": [], "L704": []}
    if W >= 3:
        _runs_and_exchanges(ctx, found)
    _reduce_then_broadcast(ctx, found)
    out, seen = [], set()
    for _rank, _first, code, make in sorted(found["runs"] + found["L703"], key=lambda f: (f[0], f[1])):
        for d in make():
            if d.span not in seen:
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
            rids = s.sequence(r)[int(start[r]) : int(start[r] + length[r])].tolist()
            found["runs"].append(
                (
                    r,
                    int(start[r]),
                    "L701" if kind[r] == SEND_RUN else "L702",
                    lambda r=r, rids=rids: _run_findings(ctx, r, rids),
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
        if isinstance(rec, BatchRec) and G.size == W and len(rec.ops) >= 2 * (W - 1):
            _exchange(ctx, rec, found)  # fewer ops, or fewer ranks, cannot be every rank reaching every other
        step[G] += 1
    close(np.arange(W))


def _run_findings(ctx: Context, rank: int, rids: list[int]) -> list[Diagnostic]:
    """The stars in one rank's run: stretches of `world - 1` ops, one to (from) each other rank, that make a
    broadcast (a gather) as `_broadcast` (`_gather`) checks; taken from the left, never overlapping."""
    s, W = ctx.schedule, ctx.world
    ops = [(s.records[rid], s.op_at(s.records[rid], int(np.searchsorted(s.records[rid].ranks, rank)))) for rid in rids]
    check = _broadcast if isinstance(ops[0][1], Send) else _gather
    out, free = [], 0
    for i in _stretches([op.peer for _, op in ops], W - 1, rank):
        if i >= free:
            d = check(ctx, rank, ops[i : i + W - 1])
            if d is not None:
                out.append(d)
                free = i + W - 1
    return out


def _stretches(peers: list[int], m: int, rank: int) -> Iterator[int]:
    """The starts of the windows of `m` consecutive peers that are `m` distinct ranks other than `rank` (with
    `m = world - 1`: each other rank once), by a sliding count."""
    count: dict[int, int] = {}
    for j, p in enumerate(peers):
        count[p] = count.get(p, 0) + 1
        if j >= m:
            q = peers[j - m]
            count[q] -= 1
            if not count[q]:
                del count[q]
        if j >= m - 1 and len(count) == m and rank not in count:
            yield j - m + 1


def _broadcast(ctx: Context, rank: int, stretch) -> Diagnostic | None:
    """One buffer, sent unchanged (the sends are consecutive) to each other rank, and received by each into the
    same view it was sent from: what `broadcast` does. Receivers that take it into other buffers are not."""
    view = stretch[0][1].view
    if any(op.view != view for _, op in stretch):
        return None
    for rec, op in stretch:
        got = _matching(ctx, rank, rec.id, op.peer, is_send=True)
        if got is None or got != view:
            return None
    rec = stretch[0][0]
    text = _whole(ctx, view) or _src(ctx, rec.node.buffer)
    return SendLoopIsBroadcast.diagnostic(
        f"rank {rank} sends the same buffer to every other rank one by one",
        span=rec.span,
        label=f"`{text}` to each other rank in turn, received into `{text}`",
        help=f"use `broadcast {text} from {rank}`: it takes log(world) steps instead of world - 1 on the root",
    )


def _gather(ctx: Context, rank: int, stretch) -> Diagnostic | None:
    """Pieces of one size received into one buffer, the piece of rank p in its block p, each sent from the same
    buffer on every sender: what `gather` does. Pieces placed in another order are not."""
    W = ctx.world
    views = [op.view for _, op in stretch]
    layout = _blocks(views, [op.peer for _, op in stretch])
    if layout is None:
        return None
    tensor, n, base = layout
    pieces = set()
    for rec, op in stretch:
        sent = _matching(ctx, rank, rec.id, op.peer, is_send=False)
        if sent is None:
            return None
        pieces.add((sent.tensor, sent.numel))
    if len(pieces) != 1:
        return None
    [(piece, _)] = pieces
    whole = base == 0 and _numel(ctx, tensor, range(W)) == {W * n}
    into = tensor if whole else "ALL"
    piece_text = piece if _numel(ctx, piece, range(W)) == {n} else "PIECE"
    if all(_receives_blocks(ctx, q, tensor, n, base) for q in range(W) if q != rank):
        help = f"every rank receives the others' pieces this way: use `all_gather {piece_text} into {into}`"
    else:
        help = f"use `gather {piece_text} into {into} to {rank}`: one collective the backend can schedule"
    return RecvLoopIsGather.diagnostic(
        f"rank {rank} receives a piece from every other rank one by one",
        span=stretch[0][0].span,
        label=f"the piece of each other rank p into block p of `{tensor}`",
        help=help,
    )


def _receives_blocks(ctx: Context, rank: int, tensor: str, n: int, base: int) -> bool:
    """Rank receives, in some order and by any kind of receive, block p of `tensor` from each other rank p."""
    chans = _channels(ctx, rank)[0]
    return all(
        any(v.tensor == tensor and v.numel == n and v.offset == base + p * n for v in chans.get((False, p), ()))
        for p in range(ctx.world)
        if p != rank
    )


def _exchange(ctx: Context, rec: BatchRec, found: dict) -> None:
    """A batch in which every rank sends block p of one buffer to each other rank p and receives block p of
    another from it (candidates by count first): what `all_to_all` does. A neighbour exchange that reaches every
    rank at a small world size does not lay its pieces out by peer."""
    W = ctx.world
    G = rec.ranks
    sends = np.zeros(G.size, dtype=np.int64)
    recvs = np.zeros(G.size, dtype=np.int64)
    for op in rec.ops:
        where = np.searchsorted(G, op.ranks)
        (sends if op.is_send else recvs)[where] += 1
    if not ((sends == W - 1) & (recvs == W - 1)).all():
        return
    layouts = set()
    for k in range(W):
        batch = ctx.schedule.op_at(rec, k)
        others = set(range(W)) - {k}
        out = [o for o in batch.ops if type(o) is Send]
        into = [o for o in batch.ops if type(o) is Recv]
        if not ({o.peer for o in out} == {o.peer for o in into} == others and len(batch.ops) == 2 * len(others)):
            return
        a = _blocks([o.view for o in out], [o.peer for o in out])
        b = _blocks([o.view for o in into], [o.peer for o in into])
        if a is None or b is None or a[1] != b[1]:
            return
        layouts.add((a[0], b[0], a[1], a[2], b[2]))
    if len({lay[:3] for lay in layouts}) != 1:
        return
    src, dst, n = next(iter(layouts))[:3]
    whole = {lay[3:] for lay in layouts} == {(0, 0)} and _numel(ctx, src, range(W)) == _numel(ctx, dst, range(W)) == {
        W * n
    }
    help = (
        f"use `all_to_all {src} into {dst}`" if whole else "use `all_to_all SRC into DST` (blocks of the two buffers)"
    )
    d = PairwiseExchangeIsAllToAll.diagnostic(
        "every rank exchanges a piece with every other rank by P2P",
        span=rec.span,
        label=f"block p of `{src}` to each other rank p, block p of `{dst}` from it",
        help=f"{help}: one collective the backend can schedule",
    )
    found["L703"].append((0, rid_step(ctx, rec, 0), "L703", lambda d=d: [d]))


def _blocks(views, peers) -> tuple[str, int, int] | None:
    """(tensor, block size, offset of block 0) when the views are blocks of one tensor, the one for peer p at
    block p; else None."""
    if len({v.tensor for v in views}) != 1:
        return None
    n = views[0].numel
    if n == 0 or any(v.numel != n for v in views):
        return None
    bases = {v.offset - p * n for v, p in zip(views, peers)}
    if len(bases) != 1:
        return None
    return views[0].tensor, n, bases.pop()


def _channels(ctx: Context, rank: int) -> tuple[dict, dict]:
    """Rank's untagged point-to-point ops on the world group, blocking, async or batched: by (is a send, peer),
    their views in posting order, the order a channel matches in; and by record id, the position in its channel."""
    memo = ctx.memo.setdefault("idiom-channels", {})
    if rank in memo:
        return memo[rank]
    s = ctx.schedule
    views: dict[tuple[bool, int], list[View]] = {}
    index: dict[int, int] = {}

    def add(rec: P2PRec, k: int) -> None:
        if rec.gid is None and item(rec.tag, k) == 0:
            channel = views.setdefault((rec.is_send, int(item(rec.peer, k))), [])
            index[rec.id] = len(channel)
            channel.append(rec.view.at(k))

    for rid in s.sequence(rank).tolist():
        rec = s.records[rid]
        if isinstance(rec, P2PRec):
            add(rec, int(np.searchsorted(rec.ranks, rank)))
        elif isinstance(rec, BatchRec):
            for op, k in rec.members(rank):
                add(op, k)
    memo[rank] = views, index
    return memo[rank]


def _matching(ctx: Context, rank: int, rid: int, peer: int, is_send: bool) -> View | None:
    """The view of the op on `peer` that matches rank's op of record `rid` (the n-th send on a channel meets the
    n-th receive), or None when the peer posts none."""
    n = _channels(ctx, rank)[1][rid]
    theirs = _channels(ctx, peer)[0].get((not is_send, rank), [])
    return theirs[n] if n < len(theirs) else None


def _numel(ctx: Context, tensor: str, ranks) -> set[int]:
    sizes = ctx.schedule.infos[tensor].numel_array(ctx.world)
    return {int(sizes[r]) for r in ranks}


def _whole(ctx: Context, view: View) -> str | None:
    """The tensor's name when the view is all of it (on every rank), else None."""
    return view.tensor if view.offset == 0 and _numel(ctx, view.tensor, range(ctx.world)) == {view.numel} else None


def _src(ctx: Context, node) -> str:
    return " ".join(ctx.program.source.text[node.span.start : node.span.end].split())


def rid_step(ctx: Context, rec, rank: int) -> int:
    """A record's position in a rank's sequence (orders findings as a rank-by-rank scan would)."""
    return int(np.searchsorted(ctx.schedule.sequence(rank), rec.id))


def _reduce_then_broadcast(ctx: Context, found: dict) -> None:
    """`reduce` directly followed, on its root, by `broadcast` of the same buffer from that root (a step of the
    root's own between the two, `x /= world`, makes it something else)."""
    s = ctx.schedule
    last = np.full(s.world, -1, dtype=np.int64)
    for rid in s.top:
        rec = s.records[rid]
        if isinstance(rec, CollectiveRec) and rec.kind.name == "broadcast":
            prev = last[rec.ranks]
            for p in distinct(prev[prev >= 0]).tolist():
                red = s.records[p]
                if not (isinstance(red, CollectiveRec) and red.kind.name == "reduce"):
                    continue
                for k in np.flatnonzero(prev == p).tolist():
                    b: Collective = s.op_at(rec, k)
                    a: Collective = s.op_at(red, int(np.searchsorted(red.ranks, rec.ranks[k])))
                    if a.root == b.root == int(rec.ranks[k]) and a.group == b.group and a.inputs[0] == b.inputs[0]:
                        node = red.node
                        call = " ".join(
                            ["all_reduce", _src(ctx, node.inputs[0])]
                            + ([_src(ctx, node.redop)] if node.redop is not None else [])
                            + ([f"in {node.group.text}"] if node.group is not None else [])
                        )
                        found["L704"].append(
                            (
                                "L704",
                                ReduceThenBroadcast.diagnostic(
                                    "`reduce` followed by `broadcast` from the same root is an `all_reduce`",
                                    span=a.span,
                                    label="reduce",
                                    labels=(Label(span=b.span, message="then broadcast"),),
                                    help=f"use `{call}`: one collective, no root bottleneck",
                                ),
                            )
                        )
                        break
        last[rec.ranks] = rid
