"""P2xx: point-to-point messages that never match, or match with the wrong size, dtype or peer.

The checks are still in `checker/rules/p2p.py` (P208 also in `collective.py`).
"""

from commdsl.rules import Rule


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
