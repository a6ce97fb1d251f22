"""N101–N114: names, kinds and declarations: what can be decided once, without a world size.

Raised by `resolve.py`, and by `syntax/transform.py` where the tree alone shows the mistake (a handle
bound to a blocking op, a malformed `splits`).
"""

from commdsl.rules import Rule


class UndefinedName(Rule):
    """a name that is not declared

    ## What it does

    Reports a name that is not declared: a tensor, group, param, `let` binding or loop variable that does
    not exist where it is used, or a function or mesh dimension that does not exist. When a declared name
    is close, the help line names it.

    ## Why is this bad?

    The program does not mean anything until every name refers to something. In a Python script the same
    typo raises `NameError` on the ranks that reach it, while the other ranks wait for them until the
    process-group timeout (30 minutes by default).

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send y to 1
    else:
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

    code = "N101"
    name = "undefined-name"


class DuplicateDeclaration(Rule):
    """a name declared twice, or a built-in redeclared

    ## What it does

    Reports a name declared twice (two tensors, groups or params with one name, a header line such as
    `world` given twice, a mesh dimension repeated), and a declaration that reuses a built-in name:
    `rank`, `world` or `i`.

    ## Why is this bad?

    Every later use of the name would be ambiguous. A built-in cannot be shadowed: `rank` must mean the
    rank everywhere, or the rank conditions that decide who sends and who receives stop meaning what
    they say.

    ## Example

    ```comm
    program twice
    world 2
    tensor x: float32[4] = rank
    tensor x: float32[8] = 0
    all_reduce x
    ```

    ## Use instead

    ```comm
    program twice
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[8] = 0
    all_reduce x
    ```
    """

    code = "N102"
    name = "duplicate-declaration"


class WrongKindOfName(Rule):
    """a name used where a different kind is needed (a tensor as a rank, ...)

    ## What it does

    Reports a name used where a different kind of thing is needed: a tensor where a rank, size or tag is
    expected, a group or handle used as a number, a mesh where one of its dimensions is needed, `i` (the
    element index) outside an element expression, `rand` outside a tensor initialiser, a handle, table or
    function passed to a function, a call of a name that is no function.

    ## Why is this bad?

    Ranks, sizes, tags and roots are integers known before anything runs, which is what lets commdsl
    check every message statically. Tensor *contents* are data: a peer taken from a tensor would make the
    communication pattern depend on data, which the language does not allow.

    ## Example

    ```comm
    program kinds
    world 2
    tensor x: float32[4] = rank
    tensor dst: int64[1] = 1
    on rank == 0:
        send x to dst
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program kinds
    world 2
    tensor x: float32[4] = rank
    let dst = 1
    on rank == 0:
        send x to dst
    else:
        recv x from 0
    ```
    """

    code = "N103"
    name = "wrong-kind-of-name"


class UnknownDtype(Rule):
    """a dtype Gloo and NCCL do not move

    ## What it does

    Reports a tensor declared with a dtype commdsl does not know. The dtypes are those Gloo and NCCL move:
    `float16`, `bfloat16`, `float32`, `float64`, `int8`, `uint8`, `int32`, `int64` and `bool`.

    ## Why is this bad?

    The dtype decides how many bytes each message carries and which reduce ops apply, so nothing about the
    tensor can be checked without it. torch's short aliases (`float`, `double`, `half`, `int`, `long`) are
    not accepted: write the sized name (`float32`, `float64`, `float16`, `int32`, `int64`).

    ## Example

    ```comm
    program dtypes
    world 2
    tensor x: float[4] = rank
    all_reduce x
    ```

    ## Use instead

    ```comm
    program dtypes
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    ```
    """

    code = "N104"
    name = "unknown-dtype"


class BadReduceOp(Rule):
    """an unknown reduce op, or one on a collective that does not reduce

    ## What it does

    Reports an unknown reduce op, a `premul_sum` without its scale factor, or a scale given to an op that
    takes none. The reduce ops are `sum`, `product`, `min`, `max`, `band`, `bor`, `bxor`, `avg` and
    `premul_sum(SCALE)`, as in `torch.distributed.ReduceOp`.

    ## Why is this bad?

    The reduce op decides the result of `all_reduce`, `reduce` and `reduce_scatter`; an op torch does not
    have cannot be run. A common slip is `mean`: torch calls it `AVG`.

    ## Example

    ```comm
    program average
    world 2
    tensor x: float32[4] = rank
    all_reduce x op mean
    ```

    ## Use instead

    ```comm
    program average
    world 2
    tensor x: float32[4] = rank
    all_reduce x op avg
    ```

    ## Backend notes

    Which reduce ops a backend runs on which dtype is checked separately (B601): Gloo has no
    `premul_sum`, and its `avg` fails on integer tensors.
    """

    code = "N105"
    name = "bad-reduce-op"


class MisplacedDeclaration(Rule):
    """a header or declaration inside a block or after statements

    ## What it does

    Reports a declaration in the wrong place: a `tensor`, `group`, `mesh`, `param` or `def` inside a block,
    a `new_group` inside a function's body, or a header line (`program`, `world`, `backend`) after the
    program's statements have begun.

    ## Why is this bad?

    Tensors and groups exist on every rank for the whole program; that is what lets every op name them
    and what lets the runtime create every group in the same order on every rank (in torch, `new_group`
    called by only some ranks, or in a different order, hangs). A declaration inside `on rank == 0:`
    would exist on some ranks only.

    ## Example

    ```comm
    program scratch
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        tensor y: float32[4] = 0
        send x to 1
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program scratch
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    on rank == 0:
        send x to 1
    else:
        recv x from 0
    ```
    """

    code = "N106"
    name = "misplaced-declaration"


class InvalidView(Rule):
    """an expression that is not a view where a tensor view is needed

    ## What it does

    Reports an expression that is not a tensor view where a view is needed, or a malformed one. A view is
    `x`, `x[lo:hi]`, `x[k]` or `x.chunk(k, parts)`; `chunk` takes exactly two arguments, and the
    attributes are `.size` and `.rows` of a view and `.rank` and `.size` of a group.

    ## Why is this bad?

    Communication ops move the contents of a buffer that already exists; they cannot send the value of an
    expression. A view also has to be computable for every rank before anything runs, so that message
    sizes can be compared.

    ## Example

    ```comm
    program halves
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x.chunk(0) to 1
    else:
        recv x.chunk(0, 2) from 0
    ```

    ## Use instead

    ```comm
    program halves
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x.chunk(0, 2) to 1
    else:
        recv x.chunk(0, 2) from 0
    ```
    """

    code = "N107"
    name = "invalid-view"


class MisusedHandle(Rule):
    """a handle bound to a blocking op, or used as the other kind of handle

    ## What it does

    Reports a handle bound to an op that returns none, such as `h = send x to 1` (a blocking `send`
    completes before the next statement), or a handle bound with an augmented assignment (`h += isend ...`).
    Also one name used both as a handle (`h = ...`, `wait h`) and as an array of handles (`h[k] = ...`,
    `wait h[k]`, `wait all h`).

    ## Why is this bad?

    Only async ops (`isend`, `irecv`, collectives and batches bound to a handle) leave a request to wait
    for. In torch the same mistake is `h = dist.send(x, 1)` followed by `h.wait()`: `send` returns `None`,
    and the rank dies with an `AttributeError` while its peers wait for it. Waiting a list of requests as
    one (`reqs.wait()`) is the same `AttributeError`.

    ## Example

    ```comm
    program handles
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = send x to 1
        wait h
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program handles
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = isend x to 1
        wait h
    else:
        recv x from 0
    ```
    """

    code = "N108"
    name = "misused-handle"


class InvalidExpect(Rule):
    """`expect` without a comparison

    ## What it does

    Reports an `expect` that is not a comparison. `expect` takes `VIEW OP VALUE` with one of `==`, `!=`,
    `<`, `<=`, `>`, `>=`; the value may use `rank`, `world`, params and `i`, the element index.

    ## Why is this bad?

    An `expect` states what every rank must hold at that point, and is checked by the simulator and again
    on a real run. Without a comparison there is nothing to check.

    ## Example

    ```comm
    program sums
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    expect x
    ```

    ## Use instead

    ```comm
    program sums
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    expect x == 1
    ```
    """

    code = "N109"
    name = "invalid-expect"


class UnknownBackend(Rule):
    """a backend other than gloo or nccl

    ## What it does

    Reports a `backend` line naming something other than `gloo` or `nccl`.

    ## Why is this bad?

    The backend decides which ops, dtypes and reduce ops are available and how messages match (NCCL
    ignores tags). commdsl checks and runs programs for Gloo and NCCL only.

    ## Example

    ```comm
    program backends
    world 2
    backend mpi
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Use instead

    ```comm
    program backends
    world 2
    backend gloo
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Backend notes

    MPI needs a torch built with MPI support, which the standard wheels are not.
    """

    code = "N110"
    name = "unknown-backend"


class InvalidBatch(Rule):
    """a statement that cannot be part of a `batch` block

    ## What it does

    Reports a statement that cannot be part of a `batch:` block: a collective, a `wait`, a nested `batch`,
    an assignment or an `expect`, or a P2P op inside the batch bound to a handle of its own.

    ## Why is this bad?

    A `batch:` block becomes one `torch.distributed.batch_isend_irecv` call, which takes a list of
    `isend`/`irecv` operations only, posts them all at once and waits for all of them at the end of the
    block. Collectives cannot be part of that list, and nothing inside the batch can wait for a single op.

    ## Example

    ```comm
    program exchange
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to (rank + 1) % world
        recv y from (rank + 1) % world
        all_reduce y
    ```

    ## Use instead

    ```comm
    program exchange
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    batch:
        send x to (rank + 1) % world
        recv y from (rank + 1) % world
    all_reduce y
    ```
    """

    code = "N111"
    name = "invalid-batch"


class InvalidWorld(Rule):
    """an empty `world` declaration, or a size below 1 or above 65536

    ## What it does

    Reports a `world` line that declares no usable size: a size below 1, an empty range such as
    `world 4..2`, or a size listed twice.

    ## Why is this bad?

    The `world` line lists the sizes the program must be correct for, and `commdsl check` checks each of
    them. An empty declaration would make every check pass vacuously.

    ## Example

    ```comm
    program sizes
    world 4..2
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Use instead

    ```comm
    program sizes
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    ```
    """

    code = "N112"
    name = "invalid-world"


class RecursiveFunction(Rule):
    """a function that calls itself, directly or through others

    ## What it does

    Reports a cycle of `def` calls: a function whose body calls itself, or calls a function that (through
    any number of others) calls it back. The message names the whole cycle.

    ## Why is this bad?

    A function is a macro: each call is replaced by its body before anything runs, so the Schedule stays
    a flat list of ops per rank. A recursive call would be replaced by the same body again, without end.
    Repeat with `for` or `while`, whose bounds the checker evaluates per rank.

    ## Example

    ```comm
    program countdown
    world 2
    tensor x: float32[4] = rank
    def spin(k):
        all_reduce x
        spin(k - 1)
    spin(3)
    ```

    ## Use instead

    ```comm
    program countdown
    world 2
    tensor x: float32[4] = rank
    def spin(k):
        for j in 1 .. k:
            all_reduce x
    spin(3)
    ```
    """

    code = "N113"
    name = "recursive-function"


class WrongArgumentCount(Rule):
    """a call of a `def` with more or fewer arguments than it has parameters

    ## What it does

    Reports a call `NAME(...)` whose number of arguments differs from the number of parameters of
    `def NAME(...)`, and points at the definition.

    ## Why is this bad?

    Each parameter is bound to its argument, in order, where the body is inlined; a missing argument
    leaves a name in the body with no meaning, an extra one has nowhere to go. Python raises the same
    mistake as a `TypeError` at run time, on the ranks that reach the call, while the others wait.

    ## Example

    ```comm
    program swap
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    def exchange(out, into, peer):
        batch:
            send out to peer
            recv into from peer
    exchange(x, y)
    ```

    ## Use instead

    ```comm
    program swap
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = 0
    def exchange(out, into, peer):
        batch:
            send out to peer
            recv into from peer
    exchange(x, y, 1 - rank)
    ```
    """

    code = "N114"
    name = "wrong-argument-count"


class InvalidCoalesced(Rule):
    """a statement that cannot be part of a `coalesced:` block

    ## What it does

    Reports a statement inside a `coalesced:` block that torch cannot coalesce: anything but `all_reduce`,
    `all_gather x into y` (one output tensor) and `reduce_scatter x into y` (one input tensor); a
    collective bound to a handle; a collective on another group than the block's first; a loop, an `on`,
    a nested block, an assignment or any other statement.

    ## Why is this bad?

    A `coalesced:` block is `torch.distributed._coalescing_manager`: inside it, `all_reduce`,
    `all_gather_into_tensor` and `reduce_scatter_tensor` on the manager's group are only recorded, and
    issued together as one backend call at the block's end. Any other collective runs at once, in the
    middle of the block, out of the order the block reads in; a collective of another group is not
    coalesced either; an async collective inside returns a request whose `wait()` raises `ValueError`
    (measured, torch 2.13).

    ## Example

    ```comm
    program buckets
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    coalesced:
        all_reduce x
        broadcast y from 0
    ```

    ## Use instead

    ```comm
    program buckets
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    coalesced:
        all_reduce x
    broadcast y from 0
    ```
    """

    code = "N115"
    name = "invalid-coalesced"
