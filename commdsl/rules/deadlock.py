"""D4xx: ranks that wait for each other in a cycle, whatever the buffering or only without it.

The checks are still in `checker/rules/deadlock.py`.
"""

from commdsl.rules import Rule


class Deadlock(Rule):
    """a wait-for cycle that hangs whatever the buffering

    ## What it does

    Reports a wait-for cycle that hangs whatever the backend buffers: every rank in the cycle waits for
    the next one, for instance each in a blocking `recv` whose matching `send` comes later on the other
    rank. The note lists the cycle, each edge with its line.

    ## Why is this bad?

    No rank in the cycle can ever continue, so the job hangs until the process-group timeout (30 minutes
    by default) and then fails with a timeout that names none of the lines involved. Order the operations
    so one side of each pair goes first (send on even ranks first, receive on odd ranks first), or post
    the exchange in a `batch:` block.

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
    """

    code = "D401"
    name = "deadlock"


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
    """

    code = "D402"
    name = "buffering-hazard"
