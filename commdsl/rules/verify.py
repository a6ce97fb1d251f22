"""V8xx: what the simulator proves with data: every `expect` holds on every rank.

Raised from the simulation's verdicts by `checker/rules/verify.py`.
"""

from commdsl.rules import Rule


class ExpectFailed(Rule):
    """an `expect` that does not hold in the simulation

    ## What it does

    Reports an `expect` that does not hold in the simulation, at some world size, on some ranks. The label
    and notes show the first failing ranks and elements with the value found.

    ## Why is this bad?

    The program runs to completion but computes something other than what it states. The simulator
    follows Gloo's semantics (including the undefined non-root buffers of `reduce`), so the same
    expectation would fail on a real run, where `commdsl run` checks it again.

    ## Example

    ```comm
    program sums
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    expect x == world
    ```

    ## Use instead

    ```comm
    program sums
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    expect x == world * (world - 1) / 2
    ```
    """

    code = "V801"
    name = "expect-failed"
