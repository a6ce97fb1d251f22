"""L7xx (warnings): hand-written patterns a built-in collective does better, and wasted results.

The checks are still in `checker/rules/idioms.py`; only `commdsl lint` reports them.
"""

from commdsl.rules import Rule


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


class CollectiveResultUnused(Rule):
    """a collective's result overwritten before it is read

    ## What it does

    Reported by `commdsl lint`. Finds a collective whose result is overwritten on some rank before
    anything reads it.

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
