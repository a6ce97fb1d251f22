"""B6xx: operations the chosen backend cannot run (measured: docs/backend-support.md).

The checks are still in `checker/rules/backend.py`.
"""

from commdsl.rules import Rule


class UnsupportedReduceOp(Rule):
    """a reduce op the backend rejects for this dtype

    ## What it does

    Reports a reduce op that one of the program's backends (its `backend` line, or `--backend`) rejects
    for the dtype it is used on.

    ## Why is this bad?

    The collective raises at run time on every rank, after everything before it has run. Which
    combinations fail is backend-specific; see the backend notes.

    ## Example

    ```comm
    program counts
    world 2
    tensor count: int64[1] = rank
    all_reduce count op avg
    ```

    ## Use instead

    ```comm
    program counts
    world 2
    tensor count: int64[1] = rank
    all_reduce count op sum
    ```

    ## Backend notes

    Measured on Gloo (`all_reduce`; `reduce` and `reduce_scatter` agree on `float32`):

    | op | floating point | integers | bool |
    |---|---|---|---|
    | `sum`, `product`, `min`, `max` | ok | ok | ok |
    | `band`, `bor`, `bxor` | `RuntimeError: Cannot use ReduceOp.BAND with non-integral dtype` | ok | ok |
    | `avg` | ok | `RuntimeError` (result type Float can't be cast) | `RuntimeError` |
    | `premul_sum` | `RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo` | same | same |

    NCCL has no bitwise reduce ops, and its `avg` is defined for floating point only.
    """

    code = "B601"
    name = "unsupported-reduce-op"
