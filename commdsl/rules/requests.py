"""R5xx: async requests never or twice waited, buffers touched in flight, reads of undefined results.

The checks are still in `checker/rules/requests.py`.
"""

from commdsl.rules import Rule


class RequestNeverWaited(Rule):
    """an async op whose request is never waited

    ## What it does

    Reports an async op (`isend`, `irecv`, or a collective bound to a handle) whose request is never
    waited, neither by `wait h` nor by `wait all`.

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

    Measured on Gloo: an `isend` never waited, followed by process exit, loses the message; the receiver
    fails with `Connection closed by peer`.
    """

    code = "R501"
    name = "request-never-waited"


class RequestWaitedTwice(Rule):
    """a request waited a second time

    ## What it does

    Reports a request waited a second time: `wait h` after `h` was already waited (by `wait h` or by
    `wait all`) and not reassigned since.

    ## Why is this bad?

    The second wait does nothing, so it usually stands where a *different* request should be waited: a
    copied line that kept the old handle name, while the request that needed waiting is left in flight.

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
    """

    code = "R502"
    name = "request-waited-twice"


class BufferInFlight(Rule):
    """a buffer read or written while an async op on it is in flight

    ## What it does

    Reports a buffer read or written while an async op on it is still in flight: writing a buffer an
    `isend` is sending from, reading or writing one an `irecv` (or an async collective) is writing into,
    before the request is waited.

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
    """

    code = "R503"
    name = "buffer-in-flight"


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
    """

    code = "R504"
    name = "read-after-reduce"
