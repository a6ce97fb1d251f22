"""The rule about `# commdsl: noqa` comments themselves (applied by `checker/noqa.py`)."""

from __future__ import annotations

from commdsl.rules import Rule


class UnusedNoqa(Rule):
    """a `noqa` comment that suppresses nothing, or names a code that does not exist

    ## What it does

    Under `commdsl lint`, reports a `# commdsl: noqa` comment on a line where no finding was suppressed,
    a code it lists that had no finding there, and a listed code that is not a commdsl code.

    ## Why is this bad?

    A suppression outlives the finding it was written for: after a fix, it silently hides the next real
    bug on that line. A misspelled code (`D41` for `D401`) suppresses nothing while looking as if it did.

    ## Example

    ```comm
    program quiet
    world 2
    tensor x: float32[4] = rank
    all_reduce x    # commdsl: noqa: D401
    expect x == 1
    ```

    ## Use instead

    ```comm
    program quiet
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    expect x == 1
    ```
    """

    code = "L706"
    name = "unused-noqa"
    severity = "warning"
