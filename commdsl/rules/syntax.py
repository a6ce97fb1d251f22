"""S0xx: the file does not parse, so nothing else is checked until it does.

Raised by `syntax/parser.py` (Lark's errors, common mistakes named by LALR state) and by
`syntax/transform.py` (a file nested deeper than the later passes can recurse).
"""

from commdsl.rules import Rule


class UnexpectedToken(Rule):
    """a token the grammar does not allow here

    ## What it does

    Reports a token the grammar does not allow where it stands: an `=` where a comparison `==` belongs,
    a keyword in the wrong place, a second expression where the line should end. The message lists what
    the parser expected at that point.

    ## Why is this bad?

    The file cannot be parsed, so nothing in it is checked, simulated or run. commdsl stops at the first
    syntax error, as the parser cannot know what the rest of the line meant.

    ## Example

    ```comm
    program check_result
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    expect x = 1
    ```

    ## Use instead

    ```comm
    program check_result
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    expect x == 1
    ```
    """

    code = "S001"
    name = "unexpected-token"


class UnexpectedCharacter(Rule):
    """a character that is not part of the language

    ## What it does

    Reports a character that is not part of the language at all, such as `!`, `;`, `~` or `$`.

    ## Why is this bad?

    The file cannot be parsed. The usual cause is syntax borrowed from another language: conditions use
    `and`, `or` and `not` (`&&` is two bitwise `&`, a syntax error of its own), statements end at the end
    of the line, and comments start with `#`.

    ## Example

    ```comm
    program pairs
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1;
    else on rank == 1:
        recv x from 0;
    ```

    ## Use instead

    ```comm
    program pairs
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    else on rank == 1:
        recv x from 0
    ```
    """

    code = "S002"
    name = "unexpected-character"


class InconsistentDedent(Rule):
    """a line's indentation matches no enclosing block

    ## What it does

    Reports a line whose indentation matches no enclosing block: it is indented less than the block it
    follows, but not as little as any block around it.

    ## Why is this bad?

    Blocks (`on`, `else`, `for`, `batch`) are delimited by indentation, as in Python. A line that belongs
    to no block leaves it unclear which ranks run it, so commdsl refuses to guess.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        x += 1
        send x to 1
      print x
    else:
        recv x from 0
    ```

    ## Use instead

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        x += 1
        send x to 1
        print x
    else:
        recv x from 0
    ```
    """

    code = "S003"
    name = "inconsistent-dedent"


class UnexpectedEndOfFile(Rule):
    """the file ends in the middle of a statement

    ## What it does

    Reports a file that ends in the middle of a statement or right after a block header, for instance
    an `on rank == 0:` with no indented body.

    ## Why is this bad?

    The file cannot be parsed. A truncated file (an editor that saved half a change, a copy that stopped
    early) is the usual cause; the caret points after the last character.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
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

    code = "S004"
    name = "unexpected-end-of-file"


class MissingColon(Rule):
    """a block header (`for`, `on`, `else`, `batch`, `def`) without `:`

    ## What it does

    Reports a block header (`for`, `while`, `on`, `else`, `else on`, `batch`, `def`) that does not end with `:`.

    ## Why is this bad?

    The file cannot be parsed: the `:` is what tells the parser that an indented block follows.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0
        send x to 1
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

    code = "S005"
    name = "missing-colon"


class SendWithoutDestination(Rule):
    """`send`/`isend` without `to RANK`

    ## What it does

    Reports a `send` or `isend` without its destination, `to RANK`.

    ## Why is this bad?

    The file cannot be parsed. There is no default destination: every message names its receiver, as
    `torch.distributed.send(tensor, dst)` does.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x
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

    code = "S006"
    name = "send-without-destination"


class RecvWithoutSource(Rule):
    """`recv`/`irecv` without `from RANK`

    ## What it does

    Reports a `recv` or `irecv` without its source, `from RANK`.

    ## Why is this bad?

    The file cannot be parsed. commdsl has no wildcard source: a receive from "whoever sends first" makes
    the match depend on timing, which is what static checking has to rule out. Name the sender.

    ## Example

    ```comm
    program p2p
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        send x to 1
    else:
        recv x
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

    torch's `recv(tensor, src=None)` does accept any sender on Gloo (it returns the sender's rank), but a
    program that relies on it is correct only for some interleavings.
    """

    code = "S007"
    name = "recv-without-source"


class ProgramTooLong(Rule):
    """a program over 20,000 lines

    ## What it does

    Reports a program file with more than 20,000 lines (or, whatever its lines, more characters than
    commdsl reads), at the first line past the limit, before parsing anything.

    ## Why is this bad?

    A program that long is almost always generated, one line per op, where a `for` loop or an `on`
    condition says the same in one line. The bound keeps the parser's memory bounded whatever the
    input: Lark keeps state for every line it reads, about 600 bytes per blank or comment line, and a
    3 MB file of blank lines once took 1.4 GB (docs/security.md).

    ## Example

    ```console
    $ python -c "print('program long\\nworld 2\\ntensor x: float32[1]\\n' + 'barrier\\n' * 20001)" > long.comm
    $ commdsl lint long.comm
    ```

    ## Use instead

    ```comm
    program long
    world 2
    tensor x: float32[1]
    for s in 0 .. 20000:
        barrier
    ```
    """

    code = "S008"
    name = "program-too-long"
    example_too_large = True
