"""The long explanation of every diagnostic code: `commdsl explain CODE` and docs/diagnostics.md.

`EXPLANATIONS` maps a code to markdown with the sections of style.md §(d): `## What it does`,
`## Why is this bad?`, `## Example` (a complete `.comm` program that produces the code), `## Use instead`
(the fixed program, which does not), and optionally `## Backend notes` and `## References`. An example
that needs command-line flags shows them in a `console` block: `$ commdsl check example.comm --world 3`.
The title line (code, name, severity, summary) comes from the code table in `codes.py`.

docs/diagnostics.md is generated from the table and these texts (`commdsl explain --all`); a test fails
when it is stale, when a section is missing, or when an example does not behave.
"""

from __future__ import annotations

import re

from commdsl.diagnostics.codes import Code

REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead")
OPTIONAL_SECTIONS = ("Backend notes", "References")
EXAMPLE_FILE = "example.comm"
REGENERATE = "commdsl explain --all > docs/diagnostics.md"

FAMILIES = (
    ("S", "Syntax", "The file does not parse. Nothing else is checked until it does."),
    ("N", "Names, types and shapes",
     "The program parses but does not mean anything yet: a name, a kind, a dtype or a size is wrong. "
     "Names and kinds are checked once; sizes at every declared world size."),
    ("P", "Point-to-point", "A `send` and a `recv` that never meet, or meet with the wrong size, dtype or peer."),
    ("C", "Collectives", "Members of a group that do not call the same collective, with the same arguments, "
                         "in the same order."),
    ("D", "Deadlock and buffering", "Ranks that wait for each other in a cycle."),
    ("R", "Requests and local races", "Async requests never or twice waited, and buffers touched while an "
                                      "async op may still be using them."),
    ("B", "Backend support", "Operations the chosen backend cannot run."),
    ("L", "Idiom lints (warnings)", "Hand-written patterns a built-in collective does better, and wasted "
                                     "results. Reported by `commdsl lint` only."),
    ("V", "Verification", "What the simulator proves with data: every `expect` holds on every rank."),
)

EXPLANATIONS: dict[str, str] = {
    # ---- S0xx: syntax ---------------------------------------------------------------------------
    "S001": """\
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
""",
    "S002": """\
## What it does

Reports a character that is not part of the language at all, such as `&&`, `!`, `;` or `$`.

## Why is this bad?

The file cannot be parsed. The usual cause is an operator borrowed from another language: conditions
use `and`, `or` and `not`, statements end at the end of the line, and comments start with `#`.

## Example

```comm
program pairs
world 2..4
tensor x: float32[4] = rank
on rank == 0 && world > 1:
    send x to 1
else on rank == 1:
    recv x from 0
```

## Use instead

```comm
program pairs
world 2..4
tensor x: float32[4] = rank
on rank == 0 and world > 1:
    send x to 1
else on rank == 1:
    recv x from 0
```
""",
    "S003": """\
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
""",
    "S004": """\
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
""",
    "S005": """\
## What it does

Reports a block header (`for`, `on`, `else`, `else on`, `batch`) that does not end with `:`.

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
""",
    "S006": """\
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
""",
    "S007": """\
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
""",
    # ---- N1xx: names, types, shapes -------------------------------------------------------------
    "N101": """\
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
""",
    "N102": """\
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
""",
    "N103": """\
## What it does

Reports a name used where a different kind of thing is needed: a tensor where a rank, size or tag is
expected, a group or handle used as a number, a mesh where one of its dimensions is needed, `i` (the
element index) outside an element expression, `rand` outside a tensor initialiser.

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
""",
    "N104": """\
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
""",
    "N105": """\
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
""",
    "N106": """\
## What it does

Reports a declaration in the wrong place: a `tensor`, `group`, `mesh` or `param` inside a block, or a
header line (`program`, `world`, `backend`) after the program's statements have begun.

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
""",
    "N107": """\
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
""",
    "N108": """\
## What it does

Reports a handle bound to an op that returns none, such as `h = send x to 1` (a blocking `send`
completes before the next statement), or a handle bound with an augmented assignment (`h += isend ...`).

## Why is this bad?

Only async ops (`isend`, `irecv`, and collectives bound to a handle) leave a request to wait for. In
torch the same mistake is `h = dist.send(x, 1)` followed by `h.wait()`: `send` returns `None`, and the
rank dies with an `AttributeError` while its peers wait for it.

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
""",
    "N109": """\
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
""",
    "N110": """\
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
""",
    "N111": """\
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
""",
    "N112": """\
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
""",
    "N120": """\
## What it does

Reports a slice, index or chunk outside its tensor at some world size and rank: `x[0:8]` of a
4-element tensor, `x[k]` with `k` past the last row, a chunk index not below the number of parts.

## Why is this bad?

In Python, `x[0:8]` of a 4-element tensor silently gives 4 elements, so the message is smaller than
the program says; a receiver that posts the size the program says keeps the rest of its buffer
untouched (on Gloo, silently). An index past the end raises `IndexError` on the ranks that reach it,
while the others wait for them.

## Example

```comm
program bounds
world 2
tensor x: float32[4] = rank
on rank == 0:
    send x[0:8] to 1
else:
    recv x[0:8] from 0
```

## Use instead

```comm
program bounds
world 2
tensor x: float32[4] = rank
on rank == 0:
    send x[0:4] to 1
else:
    recv x[0:4] from 0
```
""",
    "N121": """\
## What it does

Reports a value that must be an integer (a tensor dimension, a rank, a tag, a loop bound, a slice
bound, a split size) but is not at some world size: `n / world` with `n = 10` and 4 ranks is 2.5, or
a condition used as a number.

## Why is this bad?

`/` is true division. A shape that divides evenly at the sizes you tried fails at the next one; in
Python, `torch.empty(n / world)` raises `TypeError`, and `int(n / world)` silently drops the
remainder, so some elements are never sent.

## Example

```comm
program shards
world 1..4
param n = 10
tensor shard: float32[n / world] = rank
all_reduce shard
```

## Use instead

```comm
program shards
world 1..4
param n = 10
tensor shard: float32[(n + world - 1) // world] = rank
all_reduce shard
```
""",
    "N122": """\
## What it does

Reports a division or modulo by zero at some world size, rank or param value: `n // (world - 1)` at
world size 1, `(rank + 1) % k` with `k = 0`.

## Why is this bad?

The program has no meaning at that size. In a Python script it is a `ZeroDivisionError`, often only at
the one world size nobody tried (a single-process debug run is the usual one).

## Example

```comm
program stages
world 1..4
param layers = 12
tensor stage: float32[layers // (world - 1)] = rank
all_reduce stage
```

## Use instead

```comm
program stages
world 2..4
param layers = 12
tensor stage: float32[layers // (world - 1)] = rank
all_reduce stage
```
""",
    "N123": """\
## What it does

Reports an element expression (an assignment or an `expect`) reading a view whose shape differs from
the target's. An operand must have the target's shape or hold a single element.

## Why is this bad?

Elementwise arithmetic needs one value per element. In torch, `y += x` with shapes `[2]` and `[4]`
raises a `RuntimeError` on the ranks that run it, and the others then wait for them.

## Example

```comm
program accumulate
world 2
tensor x: float32[4] = rank
tensor y: float32[2] = 0
on rank == 0:
    send x to 1
else:
    recv x from 0
    y += x
```

## Use instead

```comm
program accumulate
world 2
tensor x: float32[4] = rank
tensor y: float32[2] = 0
on rank == 0:
    send x to 1
else:
    recv x from 0
    y += x[0:2]
```
""",
    "N124": """\
## What it does

Reports a world size asked for on the command line (`--world N`, `--nproc N`) that the program's
`world` line does not declare.

## Why is this bad?

The `world` line is the program's contract: the sizes it is written and checked for. An algorithm
written for two ranks (a ping-pong, a pairwise exchange) usually leaves a third rank with no partner,
so commdsl refuses to run or check a program at a size it does not declare. Widen the `world` line
once the program is correct at the new sizes.

## Example

```console
$ commdsl check example.comm --world 3
```

```comm
program sums
world 2
tensor x: float32[4] = rank
all_reduce x
```

## Use instead

```console
$ commdsl check example.comm --world 3
```

```comm
program sums
world 2..4
tensor x: float32[4] = rank
all_reduce x
```
""",
    "N125": """\
## What it does

Reports a `--set KEY=VALUE` whose key is not a `param` of the program, or (from the library API) whose
value is not an integer, a number or `true`/`false`; on the command line such a value is a usage error
(exit 2) before any program is read.

## Why is this bad?

A misspelt key would otherwise be ignored, and the program would be checked (or run, or benchmarked)
with the default value while you believe it used yours.

## Example

```console
$ commdsl check example.comm --set size=8
```

```comm
program sized
world 2
param n = 4
tensor x: float32[n] = rank
all_reduce x
```

## Use instead

```console
$ commdsl check example.comm --set n=8
```

```comm
program sized
world 2
param n = 4
tensor x: float32[n] = rank
all_reduce x
```
""",
    "N126": """\
## What it does

Reports a `mesh` whose dimensions do not multiply to the world size, at some declared size.

## Why is this bad?

A device mesh arranges every rank exactly once: `mesh m = (dp=2, tp=2)` covers four ranks. At any
other size some ranks would have no coordinates (or coordinates no rank has), so the groups `m.dp` and
`m.tp` do not exist for them. Size the dimensions from `world`, or declare only the sizes the mesh fits.

## Example

```comm
program mesh2d
world 4..8
mesh m = (dp=2, tp=2)
tensor x: float32[4] = rank
all_reduce x in m.tp
```

## Use instead

```comm
program mesh2d
world [4, 6, 8]
mesh m = (dp=world // 2, tp=2)
tensor x: float32[4] = rank
all_reduce x in m.tp
```
""",
    "N127": """\
## What it does

Reports a group that names a rank outside the world (at some declared size) or a rank twice, and
`GROUP.rank` evaluated on a rank that is not a member of the group.

## Why is this bad?

A group is a set of existing ranks. A member outside the world can never arrive, so every collective
on the group would wait for it forever; a duplicate member would be counted twice.

## Example

```comm
program subgroup
world 4
group g = [0, 4]
tensor x: float32[4] = rank
on rank == 0 or rank == 3:
    all_reduce x in g
```

## Use instead

```comm
program subgroup
world 4
group g = [0, 3]
tensor x: float32[4] = rank
on rank == 0 or rank == 3:
    all_reduce x in g
```
""",
    "N128": """\
## What it does

Reports a tensor whose shape is negative at some world size or rank, or which would hold more elements
than commdsl allows (2^34).

## Why is this bad?

torch refuses to create a tensor with a negative dimension (`RuntimeError: Trying to create tensor
with negative dimension`), on the ranks where it happens; the other ranks then wait for them. Shapes
computed from `world` or `rank` are the usual cause: fine at small sizes, negative at large ones.

## Example

```comm
program halo
world 1..8
tensor x: float32[6 - world] = rank
all_reduce x
```

## Use instead

```comm
program halo
world 1..6
tensor x: float32[6 - world] = rank
all_reduce x
```
""",
    "N129": """\
## What it does

Reports a `wait h` on a rank that never assigned `h` before that point, typically because the async
op is inside `on rank == 0:` while the `wait` is outside it.

## Why is this bad?

On that rank there is no request to wait for. In a Python script it is an `UnboundLocalError` or
`NameError` on those ranks only; they die, and the ranks that did post the op lose their message
(`Connection closed by peer` on Gloo).

## Example

```comm
program handles
world 2
tensor x: float32[4] = rank
on rank == 0:
    h = isend x to 1
else:
    recv x from 0
wait h
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
""",
    "N130": """\
## What it does

Reports one collective whose input and output buffers have different dtypes, such as `all_gather x
into y` with `x: float32` and `y: int64`.

## Why is this bad?

Collectives copy elements between buffers without converting them: a `float32` value placed in an
`int64` buffer is reinterpreted bits, not a number. Give every buffer of one op the same dtype, and
convert with an assignment before or after.

## Example

```comm
program gather_dtypes
world 2
tensor x: float32[4] = rank
tensor y: int64[8] = 0
all_gather x into y
```

## Use instead

```comm
program gather_dtypes
world 2
tensor x: float32[4] = rank
tensor y: float32[8] = 0
all_gather x into y
```
""",
    "N131": """\
## What it does

Reports a collective whose buffers are sized wrongly for its group on some rank: an `all_gather` or
`gather` output that is not group size × input, a `reduce_scatter` or `scatter` input that is not
group size × output, a buffer list of the wrong length, `all_to_all` buffers that do not split evenly,
or `splits` that do not sum to the buffers' rows.

## Why is this bad?

The collective would write past the end of the output or leave part of it unwritten. torch checks
some of these sizes and raises on the ranks that get them wrong, leaving the rest of the group
waiting; the sizes it does not check give wrong data.

## Example

```comm
program gather_sizes
world 2
tensor x: float32[4] = rank
tensor y: float32[4] = 0
all_gather x into y
```

## Use instead

```comm
program gather_sizes
world 2
tensor x: float32[4] = rank
tensor y: float32[world * 4] = 0
all_gather x into y
```
""",
    "N132": """\
## What it does

Reports a program whose tensors, summed over every rank, need more memory than commdsl may use on
this machine (half of its physical memory). The simulator holds all ranks' tensors in one process,
and `commdsl run` starts every local rank on this node, so both need the sum.

## Why is this bad?

Allocating it would push the machine into swap or get the run killed by the OOM killer halfway
through, with no word on why. commdsl refuses before allocating and names the size and the limit.

## Example

```comm
program too_big
world 2
param n = 100000
tensor x: float32[n, n]
all_reduce x
```

## Use instead

```comm
program too_big
world 2
param n = 1000
tensor x: float32[n, n]
all_reduce x
```
""",
    "N133": """\
## What it does

Reports a program that expands to more than 20,000,000 loop steps and ops at one world size, usually
because a loop bound or a param is far larger than meant.

## Why is this bad?

commdsl expands every rank's op list in memory before checking, simulating or running it; a runaway
loop would take minutes and gigabytes before anything useful happens. The expansion stops at the
limit and points at the loop that crossed it.

## Example

```comm
program runaway
world 2
tensor x: float32[1]
for s in 0 .. 1000000000:
    x += 1
```

## Use instead

```comm
program runaway
world 2
tensor x: float32[1]
for s in 0 .. 9:
    x += 1
```
""",
    # ---- P2xx: point-to-point -------------------------------------------------------------------
    "P201": """\
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
""",
    "P202": """\
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
""",
    "P204": """\
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
""",
    "P205": """\
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
""",
    "P206": """\
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
""",
    "P207": """\
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
""",
    "P208": """\
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
""",
    "P209": """\
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
""",
    "P210": """\
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
""",
    # ---- C3xx: collectives ----------------------------------------------------------------------
    "C301": """\
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
""",
    "C302": """\
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
""",
    "C303": """\
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
""",
    "C304": """\
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
""",
    "C305": """\
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
""",
    "C306": """\
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
""",
    "C307": """\
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
""",
    "C308": """\
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
""",
    "C309": """\
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
""",
    "C310": """\
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
""",
    "C311": """\
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
""",
    "C312": """\
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
""",
    # ---- D4xx: deadlock and buffering -----------------------------------------------------------
    "D401": """\
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
""",
    "D402": """\
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
""",
    # ---- R5xx: requests and local races ---------------------------------------------------------
    "R501": """\
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
""",
    "R502": """\
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
""",
    "R503": """\
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
""",
    "R504": """\
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
""",
    # ---- B6xx: backend support ------------------------------------------------------------------
    "B601": """\
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
""",
    # ---- L7xx: idiom lints ----------------------------------------------------------------------
    "L701": """\
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
""",
    "L702": """\
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
""",
    "L703": """\
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
""",
    "L704": """\
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
""",
    "L705": """\
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
""",
    # ---- V8xx: verification ---------------------------------------------------------------------
    "V801": """\
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
""",
}


# ---- reading the texts ---------------------------------------------------------------------------

def all_codes() -> dict[str, Code]:
    """Every registered code, family by family in pipeline order (S, N, P, C, D, R, B, L, V), then by code.

    The checker families register their codes when they are imported, so this imports them.
    """
    import commdsl.checker.registry  # noqa: F401  (registers P, C, D, R, B, L, V)
    from commdsl.diagnostics.codes import CODES

    order = [f[0] for f in FAMILIES]

    def key(code: str):
        return (order.index(code[0]) if code[0] in order else len(order), code)

    return {c: CODES[c] for c in sorted(CODES, key=key)}


def lookup(text: str) -> Code | None:
    """A code from its code (any case) or its kebab-case name."""
    codes = all_codes()
    key = text.strip()
    if key.upper() in codes:
        return codes[key.upper()]
    return next((c for c in codes.values() if c.name == key.lower()), None)


def sections(markdown: str) -> dict[str, str]:
    """`## Title` → body (stripped), in order."""
    out: dict[str, str] = {}
    title = None
    for line in markdown.splitlines(keepends=True):
        m = re.match(r"## (.+?)\s*$", line)
        if m:
            title = m.group(1)
            out[title] = ""
        elif title is not None:
            out[title] += line
    return {k: v.strip() for k, v in out.items()}


def program_and_args(section: str) -> tuple[str, list[str]]:
    """The `.comm` program of an Example / Use instead section and the flags its console line adds."""
    programs = re.findall(r"^```comm\n(.*?)^```$", section, flags=re.M | re.S)
    if len(programs) != 1:
        raise ValueError(f"expected one ```comm block, found {len(programs)}")
    args: list[str] = []
    for line in re.findall(r"^\$ commdsl \w+ (.*)$", section, flags=re.M):
        words = line.split()
        args = words[words.index(EXAMPLE_FILE) + 1:] if EXAMPLE_FILE in words else words
    return programs[0], args


def title(code: Code) -> str:
    return f"{code.code} `{code.name}`"


def explanation(code: Code) -> str:
    """The whole explanation of one code, as `commdsl explain CODE` prints it."""
    body = EXPLANATIONS.get(code.code, "").rstrip()
    return f"# {title(code)}\n\n{_status(code)}\n\n{body}\n"


def _status(code: Code) -> str:
    return f"**{code.severity}** · {code.summary}"


# ---- docs/diagnostics.md -------------------------------------------------------------------------

_INTRO = """\
# Diagnostics reference

<!-- Generated from commdsl/diagnostics/codes.py and commdsl/diagnostics/explain.py: do not edit by hand.
     Regenerate with `{regenerate}`. -->

Every mistake commdsl can find has a stable code: a family letter and three digits. A code is never
reused; a retired rule keeps its code. `commdsl explain CODE` prints the entry for one code (the code or
its name: `commdsl explain P201`, `commdsl explain unmatched-send`), and `commdsl explain --list`
prints the table below.

Each entry has a program that produces the diagnostic and a fixed program that does not; a test runs
both through the checker, so they stay true. Backend notes cite what Gloo was measured to do.

## Reading a diagnostic

```text
error[P201]: `send` on rank 0 to rank 1 has no matching `recv`
 --> example.comm:5:5
  |
5 |     send x to 1
  |     ^^^^^^^^^^^ rank 1 finishes without posting one
  |
  = note: a matching `recv` on rank 1 would name rank 0
  = note: at world size 2
```

The header gives the severity, the code and a message that makes sense alone. `-->` points at the
culprit (`path:line:column`, 1-based); `^^^` marks it and `---` marks the other party (the matching
send, the other rank's collective, each edge of a deadlock cycle). `= note:` lines give facts (world
sizes, ranks, what the backend does), `= help:` suggests a fix. A finding that repeats across world
sizes and ranks is reported once, with the sizes listed.

Severity: **error** for anything that hangs, crashes or gives wrong data; **warning** for idiom lints
(L7xx), which only `commdsl lint` reports.

## Output formats

`commdsl check` and `commdsl lint` take `--format text|concise|json|sarif` (default `text`):

| format | what it prints |
|---|---|
| `text` | the layout above; coloured on a terminal (`--color auto\\|always\\|never`; `NO_COLOR` turns colour off) |
| `concise` | one line per finding: `path:line:col: CODE message` |
| `json` | one array of objects: `code`, `name`, `severity`, `message`, the span, `notes`, `help`, `rendered` |
| `sarif` | SARIF 2.1.0 for code scanning; each rule's `helpUri` links to its entry on this page (`#p201`) |

A JSON item's span is `path`, `line`, `column`, `end_line` and `end_column` (1-based); it also has the
primary `label`, the `worlds` it holds at, and `rendered`, the text form, as rustc's JSON does.
Diagnostics go to stdout. The `Found N errors.` summary (text and concise only) and log lines go to
stderr. `--statistics` prints one count per code instead.

## Selecting codes

`--select` and `--ignore` take comma-separated codes or prefixes: `--select P,D401` reports the P2xx
family and D401 only; `--ignore L705` drops one lint.

## Exit codes

| code | meaning |
|---|---|
| 0 | nothing to report: no error-level diagnostic (warnings alone exit 0 unless `--strict`) |
| 1 | findings: at least one error (or, with `--strict`, a warning); `--exit-zero` turns this into 0 |
| 2 | the job could not be done: a usage error, an unreadable file, an internal error |

The same rules hold for every command; `commdsl explain` exits 2 for an unknown code.
"""


def family_of(code: str) -> tuple[str, str, str]:
    for fam in FAMILIES:
        if code.startswith(fam[0]):
            return fam
    letter = code[:1]
    return (letter, f"Other ({letter})", "")


def render_docs() -> str:
    """docs/diagnostics.md: the intro, an index table, then every code grouped by family."""
    codes = all_codes()
    out = [_INTRO.replace("{regenerate}", REGENERATE)]
    out.append("\n## All codes\n\n| code | name | severity | summary |\n|---|---|---|---|\n")
    for c in codes.values():
        out.append(f"| [{c.code}](#{c.code.lower()}) | `{c.name}` | {c.severity} | {_cell(c.summary)} |\n")
    by_family: dict[tuple, list[Code]] = {}
    for c in codes.values():
        by_family.setdefault(family_of(c.code), []).append(c)
    for (letter, name, blurb), members in by_family.items():
        out.append(f"\n## {name} ({members[0].code[:2]}xx)\n\n")
        if blurb:
            out.append(f"{blurb}\n")
        for c in members:
            out.append(f"\n<a id=\"{c.code.lower()}\"></a>\n\n### {title(c)}\n\n{_status(c)}\n\n")
            body = EXPLANATIONS.get(c.code, "*No explanation yet.*\n").rstrip()
            out.append(re.sub(r"^## ", "#### ", body, flags=re.M) + "\n")
    return "".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
