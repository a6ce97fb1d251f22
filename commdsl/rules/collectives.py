"""C3xx: members of a group that do not call the same collective, with the same arguments, in the same order.

The checks are still in `checker/rules/collective.py` (C308, a cycle, in `deadlock.py`).
"""

from commdsl.rules import Rule


class CollectiveKindMismatch(Rule):
    """members of a group call different collectives at the same step

    ## What it does

    Reports members of a group that call different collectives at the same step: one rank in
    `all_reduce` while another is in `broadcast` on the same group.

    ## Why is this bad?

    A collective completes only when every member calls it. Different collectives at the same step never
    complete together: see the backend notes. It usually comes from a collective inside an `on` block
    that should be outside it.

    ## Example

    ```comm
    program mixed
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x
    else:
        broadcast x from 0
    ```

    ## Use instead

    ```comm
    program mixed
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Backend notes

    Measured on Gloo: `all_reduce` against `broadcast` on two ranks hangs until the timeout. Only
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` turns it into an error (a fingerprint mismatch), and that mode makes
    a small `all_reduce` about 14 times slower.
    """

    code = "C301"
    name = "collective-kind-mismatch"


class CollectiveOrderSwap(Rule):
    """members of a group call the same collectives in different orders

    ## What it does

    Reports members of a group that call the same collectives on it in a different order: rank 0 does
    `all_reduce` then `broadcast`, rank 1 does `broadcast` then `all_reduce`.

    ## Why is this bad?

    Collectives on a group match in call order. With the order swapped, each rank waits in a collective
    the other has not reached: the job hangs (see the backend notes). When the swapped collectives happen
    to share a kind, they match each other instead, and their buffers get mixed up silently.

    ## Example

    ```comm
    program swapped
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    on rank == 0:
        all_reduce x
        broadcast y from 0
    else:
        broadcast y from 0
        all_reduce x
    ```

    ## Use instead

    ```comm
    program swapped
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    all_reduce x
    broadcast y from 0
    ```

    ## Backend notes

    Measured on Gloo: collectives in swapped order hang until the timeout; with
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` torch reports an error instead.
    """

    code = "C302"
    name = "collective-order-swap"


class RootMismatch(Rule):
    """members disagree on the root (src/dst) of a rooted collective

    ## What it does

    Reports members of a group that disagree on the root (the `from` of `broadcast` and `scatter`, the
    `to` of `reduce` and `gather`).

    ## Why is this bad?

    Every member must agree on who the root is. `broadcast x from rank`, where each rank names itself, is
    the classic case: every rank believes it is the source. See the backend notes: even torch's debug
    mode does not catch it.

    ## Example

    ```comm
    program bcast
    world 2..4
    tensor x: float32[4] = rank
    broadcast x from rank
    ```

    ## Use instead

    ```comm
    program bcast
    world 2..4
    tensor x: float32[4] = rank
    broadcast x from 0
    ```

    ## Backend notes

    Measured on Gloo: a broadcast with a different `src` per rank hangs until the timeout, and
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` does **not** detect it.
    """

    code = "C303"
    name = "root-mismatch"


class ReduceOpMismatch(Rule):
    """members reduce with different reduce ops

    ## What it does

    Reports members of a group that call a reducing collective (`all_reduce`, `reduce`, `reduce_scatter`)
    with different reduce ops, or `premul_sum` with different scales.

    ## Why is this bad?

    The reduce op is not exchanged between ranks, so nothing notices that they disagree: every rank gets
    a wrong result, silently. See the backend notes.

    ## Example

    ```comm
    program reduce_ops
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x op max
    else:
        all_reduce x op sum
    ```

    ## Use instead

    ```comm
    program reduce_ops
    world 2
    tensor x: float32[4] = rank
    all_reduce x op max
    ```

    ## Backend notes

    Measured on Gloo: `SUM` on one rank and `MAX` on the other completes with a **silently wrong result
    on every rank**, and `TORCH_DISTRIBUTED_DEBUG=DETAIL` does **not** detect it.
    """

    code = "C304"
    name = "reduce-op-mismatch"


class CollectiveDtypeMismatch(Rule):
    """members pass buffers of different dtypes

    ## What it does

    Reports members of a group that pass buffers of different dtypes to the same collective.

    ## Why is this bad?

    Collectives move bytes. A `float32` buffer on one rank and an `int32` buffer on another are combined
    as if both were one dtype: the bits are reinterpreted and the result is garbage, silently (see the
    backend notes).

    ## Example

    ```comm
    program dtypes
    world 2
    tensor a: float32[4] = rank
    tensor b: int32[4] = rank
    on rank == 0:
        all_reduce a
    else:
        all_reduce b
    ```

    ## Use instead

    ```comm
    program dtypes
    world 2
    tensor a: float32[4] = rank
    all_reduce a
    ```

    ## Backend notes

    Measured on Gloo: `float32` against `int32` in one `all_reduce` gives silent garbage; only
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` reports it.
    """

    code = "C305"
    name = "collective-dtype-mismatch"


class CollectiveSizeMismatch(Rule):
    """members contribute different numbers of elements

    ## What it does

    Reports members of a group that contribute different numbers of elements to the same collective, for
    instance tensors sized by `rank`.

    ## Why is this bad?

    Every member must contribute the same number of elements (per peer, for `all_gather`, `gather`,
    `scatter`, `reduce_scatter` and `all_to_all`). What happens otherwise depends on the world size, and
    includes a silently wrong result: see the backend notes. Use `all_to_all` with `splits` for uneven
    exchanges.

    ## Example

    ```comm
    program sizes
    world 2..4
    tensor x: float32[rank + 1] = rank
    all_reduce x
    ```

    ## Use instead

    ```comm
    program sizes
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Backend notes

    Measured on Gloo, `all_reduce` with shapes `[4]` and `[8]`: at world size 2 one rank aborts
    (`Received data size doesn't match expected size`); at world size 4 **rank 0 silently gets a wrong
    result** while the others die. Shapes `[2, 2]` and `[4]` (same element count) succeed silently, which
    is why commdsl compares element counts, not shapes.
    """

    code = "C306"
    name = "collective-size-mismatch"


class MissingParticipant(Rule):
    """a member of the group never calls the collective

    ## What it does

    Reports a collective that some member of its group never calls: the member finishes, or waits
    forever somewhere else, while the others wait in the collective.

    ## Why is this bad?

    A collective completes only when every member of the group calls it, so the ranks that did call it
    hang until the timeout (30 minutes by default). The usual cause is a collective inside an `on` block:
    every rank of the group must reach it.

    ## Example

    ```comm
    program missing
    world 2..4
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x
    ```

    ## Use instead

    ```comm
    program missing
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    ```
    """

    code = "C307"
    name = "missing-participant"


class CrossGroupOrder(Rule):
    """collectives on two groups issued in different orders: a cycle

    ## What it does

    Reports collectives on two (or more) groups issued in different orders on different ranks, so that
    each rank waits in a collective on one group for a rank that waits in a collective on the other: a
    cycle. The note lists each edge of the cycle with its line.

    ## Why is this bad?

    Each collective blocks until all its members arrive. Rank 0 waits in group `a` for rank 1, which
    waits in group `b` for rank 0: neither ever continues, and the job hangs until the timeout. Overlapping
    groups (data- and tensor-parallel groups of a mesh) must be used in one global order on every rank.

    ## Example

    ```comm
    program groups
    world 2
    group a = [0, 1]
    group b = [0, 1]
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x in a
        all_reduce x in b
    else:
        all_reduce x in b
        all_reduce x in a
    ```

    ## Use instead

    ```comm
    program groups
    world 2
    group a = [0, 1]
    group b = [0, 1]
    tensor x: float32[4] = rank
    all_reduce x in a
    all_reduce x in b
    ```
    """

    code = "C308"
    name = "cross-group-order"


class AsyncMismatch(Rule):
    """some members call a collective blocking, others async

    ## What it does

    Reports a collective that some members call blocking and others call async (bound to a handle and
    waited later).

    ## Why is this bad?

    Members then disagree on when the buffer holds the result: the async rank goes on to other
    operations before its `wait`, the blocking ranks do not, and a program whose ranks do different
    things around one collective is what the checker cannot vouch for. torch itself pairs a blocking call
    with an async one (the blocking form waits at once), so the mismatch does not hang by itself; it
    usually means one branch of an `on` block was changed and the other was not. Make the collective
    async on every member or on none.

    ## Example

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = all_reduce x
        wait h
    else:
        all_reduce x
    ```

    ## Use instead

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    h = all_reduce x
    wait h
    ```
    """

    code = "C309"
    name = "async-mismatch"
    severity = "warning"


class GroupNonmember(Rule):
    """a rank calls a collective on a group it is not in

    ## What it does

    Reports a rank that calls a collective on a group it is not a member of.

    ## Why is this bad?

    torch does not run a collective on a non-member: it warns (`Running all_reduce on global rank 2 which
    does not belong to the given group.`) and returns at once, leaving the buffer as it was. The program
    then reads that buffer as if it held the result. Guard the call with `on` so that only members issue it.

    ## Example

    ```comm
    program subgroup
    world 4
    group g = [0, 1]
    tensor x: float32[4] = rank
    all_reduce x in g
    ```

    ## Use instead

    ```comm
    program subgroup
    world 4
    group g = [0, 1]
    tensor x: float32[4] = rank
    on rank < 2:
        all_reduce x in g
    ```
    """

    code = "C310"
    name = "group-nonmember"


class RootNotInGroup(Rule):
    """the root of a rooted collective is not a member of its group

    ## What it does

    Reports a rooted collective (`broadcast`, `scatter`, `reduce`, `gather`) on a group whose root is not
    a member of that group.

    ## Why is this bad?

    The root is a global rank that must belong to the group (as with point-to-point ops in a group, torch
    takes global rank numbers). A root outside the group cannot take part: torch raises an error on the
    members when it translates the root into a group rank. Writing the root as a position in the group
    (`from 0` meaning "the group's first member") is the usual mistake.

    ## Example

    ```comm
    program subgroup
    world 4
    group g = [2, 3]
    tensor x: float32[4] = rank
    on rank >= 2:
        broadcast x from 0 in g
    ```

    ## Use instead

    ```comm
    program subgroup
    world 4
    group g = [2, 3]
    tensor x: float32[4] = rank
    on rank >= 2:
        broadcast x from 2 in g
    ```
    """

    code = "C311"
    name = "root-not-in-group"


class AllToAllSplitsMismatch(Rule):
    """uneven all_to_all splits that disagree between ranks

    ## What it does

    Reports an uneven `all_to_all` whose `splits` disagree between ranks: rank *a* sends
    `in_splits[b]` rows to rank *b*, which must expect exactly that many, `out_splits[a]`.

    ## Why is this bad?

    Each rank computes its own splits and nothing checks them against the other side. A rank that
    expects fewer rows than arrive, or more, gets a crash or a partly written, silently wrong output.
    It is the typical bug of hand-rolled token routing in mixture-of-experts layers.

    ## Example

    ```comm
    program routing
    world 2
    tensor tokens: float32[4] = rank
    tensor routed: float32[4] = 0
    on rank == 0:
        all_to_all tokens into routed splits [1, 3], [1, 3]
    else:
        all_to_all tokens into routed splits [1, 3], [3, 1]
    ```

    ## Use instead

    ```comm
    program routing
    world 2
    tensor tokens: float32[4] = rank
    tensor routed: float32[4] = 0
    on rank == 0:
        all_to_all tokens into routed splits [1, 3], [1, 3]
    else:
        all_to_all tokens into routed splits [3, 1], [3, 1]
    ```

    ## Backend notes

    Gloo runs `all_to_all_single` with uneven splits (measured). Each rank passes only its own splits,
    so nothing compares them across ranks before the data moves.
    """

    code = "C312"
    name = "all-to-all-splits-mismatch"
