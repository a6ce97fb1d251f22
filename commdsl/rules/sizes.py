"""N120–N135: bounds, shapes, sizes and element operations, which depend on the world size and params.

Raised by `expand.py` at each declared world size, by `limits.py` (N132, before anything allocates)
and by `syntax/transform.py` (N121 for an integer literal too long to convert).
"""

from typing import ClassVar

from commdsl.diagnostics import Diagnostic
from commdsl.rules import Rule
from commdsl.source import Span


class ViewOutOfBounds(Rule):
    """a slice, index or chunk outside its tensor

    ## What it does

    Reports a slice, index or chunk outside its tensor at some world size and rank: `x[0:8]` of a
    4-element tensor, `x[k]` with `k` past the last row, a chunk index not below the number of parts; also
    `t[k]` of a `table` with `k` outside `0 .. len - 1` (Python's `t[-1]` would quietly read the last entry).

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
    """

    code = "N120"
    name = "view-out-of-bounds"


class NotAnInteger(Rule):
    """a non-integer value where a rank, size or index is needed

    ## What it does

    Reports a value that must be an integer (a tensor dimension, a rank, a tag, a loop bound, a slice
    bound, a split size, an operand of `^ & | << >>`) but is not at some world size: `n / world` with
    `n = 10` and 4 ranks is 2.5, or a condition used as a number. It also reports the integer values an
    integer operation cannot take: a negative shift count (`1 << (rank - 3)` on rank 0), `log2` of a value
    that is not a positive power of two (`log2(world)` at world 6), and a value too large to compute. An
    integer read from tensor data (`T[k]`, `sum(E)`) must come from integers or booleans: a float tensor,
    a float literal or `/` in it is reported too.

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
    """

    code = "N121"
    name = "not-an-integer"


class DivisionByZero(Rule):
    """a division or modulo by zero

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
    """

    code = "N122"
    name = "division-by-zero"


class ShapeMismatch(Rule):
    """element-expression operands whose shape differs from the target's

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
    """

    code = "N123"
    name = "shape-mismatch"


class WorldSizeNotDeclared(Rule):
    """a world size outside the program's `world` line

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
    """

    code = "N124"
    name = "world-size-not-declared"


class BadParamValue(Rule):
    """`--set` of an unknown param or with a value that is not a number

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
    """

    code = "N125"
    name = "bad-param-value"


class MeshDoesNotTileWorld(Rule):
    """a mesh whose dimensions do not multiply to the world size

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
    """

    code = "N126"
    name = "mesh-does-not-tile-world"


class InvalidGroup(Rule):
    """a group naming a rank outside the world or twice

    ## What it does

    Reports a group that names a rank outside the world (at some declared size) or a rank twice,
    `GROUP.rank` or `GROUP.peer(k)` evaluated on a rank that is not a member of the group, and
    `GROUP.peer(k)` with `k` outside `0 .. GROUP.size - 1`.

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
    barrier
    ```
    """

    code = "N127"
    name = "invalid-group"


class InvalidTensorSize(Rule):
    """a tensor with a negative shape or too many elements

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
    """

    code = "N128"
    name = "invalid-tensor-size"


class HandleNotAssigned(Rule):
    """`wait` on a handle this rank never assigned

    ## What it does

    Reports a `wait h` on a rank that never assigned `h` before that point, typically because the async
    op is inside `on rank == 0:` while the `wait` is outside it; likewise `wait h[k]` for a slot of an
    array of handles the rank never assigned, and `wait b` on a rank that has no op in the batch `b`.

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
    """

    code = "N129"
    name = "handle-not-assigned"


class MixedDtypes(Rule):
    """one collective's buffers with different dtypes

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
    """

    code = "N130"
    name = "mixed-dtypes"


class BufferDoesNotFit(Rule):
    """a collective's buffers sized wrongly for its group

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
    """

    code = "N131"
    name = "buffer-does-not-fit"


class TensorsExceedMemory(Rule):
    """the tensors of all ranks need more memory than this machine has

    ## What it does

    Reports a program whose tensors, summed over every rank, need more memory than commdsl may use on
    this machine (half of its physical memory, or of its cgroup limit). The simulator holds all ranks'
    tensors in one process, with temporaries up to 8 times them in all (a collective's per-member results,
    the float64 copies that check whether a sum depends on its order); `commdsl run` also starts every
    local rank on this node, each holding up to 3 times its own tensors. The check counts both.

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
    """

    code = "N132"
    name = "tensors-exceed-memory"


class ExpansionTooLarge(Rule):
    """a program that expands to more loop steps and ops than commdsl holds

    ## What it does

    Reports a program that expands to more than 200,000,000 loop steps and ops over all ranks at one world
    size, to more than 2,000,000 statement instances, or to more than 1,000,000 calls of collectives that
    move data (every rank's call counts), usually because a loop bound or a param is far larger than meant.
    (A ring all-reduce at world 4096 is 84,000,000 ops and 25,000 instances; 65 `all_reduce`s at world
    65536 are 4,259,840 collective calls.) It also reports a `while` loop that runs more than 65,536
    iterations, whose condition most likely never turns false, and, after its first such iteration, one
    whose iteration left every `let` its condition reads unchanged, which certainly never ends; a
    `table` of more than 65,536 entries; and a program whose integers read from tensor data take more than
    256 runs of its schedule to learn (each run takes some rank past one more read).

    ## Why is this bad?

    commdsl expands every rank's ops before checking, simulating or running them; a runaway loop would
    take minutes and gigabytes before anything useful happens. The simulator computes each rank's part of
    a collective on its own, so collective calls cost far more than other ops. The expansion stops at the
    limit and points at the loop or collective that crossed it.

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
    """

    code = "N133"
    name = "expansion-too-large"


class TimeLimitExceeded(Rule):
    """the check of a program reached its time limit

    ## What it does

    Reports that checking a program at one world size took longer than the time limit (600 s by default,
    `--max-time` to change it), and where the check had got to: the statement being expanded, or the op
    the first unfinished rank was at. The world sizes checked before it keep their findings. `commdsl
    predict` stops the same way, with the same limit and flag: a sweep of a param that sets loop counts
    as well as sizes can expand millions of ops per size.

    ## Why is this bad?

    Nothing is known about the program at that size: it may be correct or not. A check ends whatever the
    input, so an enormous program gets this answer rather than an unbounded wait.

    ## Example

    ```console
    $ commdsl lint example.comm --max-time 0.000001
    ```

    ```comm
    program long
    world 8
    tensor x: float32[64] = rank
    for s in 0 .. 1000:
        all_reduce x
    ```

    ## Use instead

    ```console
    $ commdsl lint example.comm
    ```

    ```comm
    program long
    world 8
    tensor x: float32[64] = rank
    for s in 0 .. 1000:
        all_reduce x
    ```
    """

    code = "N134"
    name = "time-limit-exceeded"


class UnsupportedElementOp(Rule):
    """an element operation torch refuses for its operands' dtypes

    ## What it does

    Reports an element expression that torch refuses at run time for the dtypes it meets: subtraction or
    negation with a bool operand (a bool tensor, or a condition such as `rank == 0` used as a number),
    `//` or `%` of two bools, `abs` of a bool tensor.

    ## Why is this bad?

    The same line in a torch script stops the rank with `RuntimeError: Subtraction, the - operator, with a
    bool tensor is not supported` (or `NotImplementedError` for `//`, `%` and `abs`), while the other ranks
    wait for it in their next collective. Compute in an integer tensor, or invert a mask with `== false`.

    ## Example

    ```comm
    program flip
    world 2
    tensor mask: bool[4] = i == rank
    tensor keep: int64[4] = 0
    keep = 1 - mask
    ```

    ## Use instead

    ```comm
    program flip
    world 2
    tensor mask: bool[4] = i == rank
    tensor keep: int64[4] = 0
    keep = mask == false
    ```

    ## Backend notes

    Measured on torch 2.13 (CPU): `b - 1`, `1 - b`, `i - True`, `-b` raise RuntimeError; `b // True`,
    `b % b` and `abs(b)` raise NotImplementedError; `b + b`, `b * 3`, `b / b` and `b // 2` compute.
    """

    code = "N135"
    name = "unsupported-element-op"

    HELP: ClassVar[dict[str, str]] = {
        "-": "multiply the bool side by 1 first (`m * 1 - 1`), or invert a mask with `== false`",
        "//": "assign one side to an integer tensor first",
        "%": "assign one side to an integer tensor first",
        "abs": "a bool is its own absolute value: drop `abs`",
    }

    @classmethod
    def refused(cls, why: str, op: str, span: Span, text: str, bools: list[str]) -> Diagnostic:
        label = ", ".join(f"`{b}`" for b in bools) + (" is a bool" if len(bools) == 1 else " are bools")
        return cls.diagnostic(f"{why}: `{text}`", span=span, label=label, help=cls.HELP[op])


class ConstantOutOfRange(Rule):
    """a number assigned to a tensor whose dtype cannot hold it

    ## What it does

    Reports `VIEW = NUMBER` and a tensor's initialiser of one number (`tensor x: uint8[4] = 300`) where the
    number is outside the dtype's range on some rank: above 255 or a float below 0 for `uint8` (an integer
    down to -255 wraps), outside -128..127 for `int8`, ±2**31 for `int32`, a NaN or infinity for any
    integer dtype, a finite float beyond 65504 for `float16` (beyond 3.39e38 for `bfloat16`, 3.40e38 for
    `float32`). A `bool` takes any number.

    ## Why is this bad?

    torch fills a tensor with a number through a checked conversion: `x.fill_(300)` on a `uint8` tensor and
    `torch.full((4,), 300, dtype=torch.uint8)` stop the rank with `RuntimeError: value cannot be converted to
    type uint8_t without overflow`, while the other ranks wait for it in their next collective. Arithmetic
    is not checked: `x += 300` wraps, as an element expression that computes the same number does.

    ## Example

    ```comm
    program counts
    world 2
    tensor seen: uint8[4] = 0
    seen = 256
    all_reduce seen op max
    ```

    ## Use instead

    ```comm
    program counts
    world 2
    tensor seen: int32[4] = 0
    seen = 256
    all_reduce seen op max
    ```

    ## Backend notes

    Measured on torch 2.13 (CPU): `fill_`, `torch.full` and `t[0:1] = v` refuse the same numbers for the
    integer dtypes; for the floats `t[0:1] = 70000.0` on a `float16` tensor is accepted where `fill_`
    refuses it, and commdsl, whose assignment is `fill_` in the runtime and in a compiled script, refuses it.
    """

    code = "N138"
    name = "constant-out-of-range"


class InvalidTopology(Rule):
    """a topology file that is not TOML or not a topology

    ## What it does

    Reports a `--topology` file (of `commdsl predict`) that does not parse as TOML, lacks a required
    key (`ranks_per_node`, `[intra]`'s `alpha_us` and `bandwidth_gbps`), has a key commdsl does not know,
    or gives a value of the wrong type or range (a bandwidth of 0, a negative latency), at the key in the
    file (docs/predict.md, Topology files).

    ## Why is this bad?

    Every predicted time is computed from these numbers: a misspelt key silently left at a default would
    give a confident wrong answer. So an unknown key is an error, as a missing one is.

    ## Example

    ```console
    $ printf 'ranks_per_node = 8\\n[intra]\\nalpha_us = 1\\nbandwith_gbps = 100\\n' > topo.toml
    $ commdsl predict programs/ring_allreduce.comm --world 4 --topology topo.toml
    ```

    ## Use instead

    ```comm
    # topo.toml:
    #   ranks_per_node = 8
    #   [intra]
    #   alpha_us = 1
    #   bandwidth_gbps = 100
    program ring
    world 4
    tensor x: float32[4] = 1
    all_reduce x
    expect x == 4
    ```
    """

    code = "N136"
    name = "invalid-topology"
    example_too_large = True
