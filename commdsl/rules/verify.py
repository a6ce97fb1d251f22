"""V8xx: what the simulator proves with data: every `expect` holds on every rank, no rank divides an integer
by zero, no sum depends on the order of addition, no float is stored into an integer that cannot hold it.

Raised from the simulation's verdicts (`from_simulation`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from commdsl.diagnostics import Diagnostic, Note
from commdsl.rules import Rule, rank_list
from commdsl.values import distinct


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

    @classmethod
    def from_simulation(cls, sim) -> Iterator[Diagnostic]:
        """One finding per failing `expect` statement, naming its first failing ranks."""
        by_span: dict = {}
        for rec, G, ok, failed in sim.data.expect_recs:
            bad = np.flatnonzero(~ok)
            if bad.size:
                by_span.setdefault(rec.span, []).append((G[bad], bad, failed))
        for span, parts in by_span.items():
            ranks = distinct(np.concatenate([g for g, _, _ in parts]))
            first = sorted(
                (int(r), failed.detail(int(k)))
                for g, ks, failed in parts
                for r, k in zip(g[:4].tolist(), ks[:4].tolist())
            )[:4]
            shown = ", ".join(map(str, ranks[:8].tolist())) + (" …" if ranks.size > 8 else "")
            yield cls.diagnostic(
                f"expectation fails on rank{'s' * (ranks.size > 1)} {shown}",
                span=span,
                label=f"rank {first[0][0]}: {first[0][1]}",
                notes=tuple(Note(message=f"rank {r}: {d}") for r, d in first[1:4]),
            )


class IntegerDivisionByZero(Rule):
    """an integer `//` or `%` whose divisor, read from a tensor, is 0 at run time

    ## What it does

    Reports an integer floor division or modulo in an element expression whose divisor comes from a tensor
    and holds a 0 on some ranks when the simulation reaches it, or is a number that wraps to 0 in the
    tensor's dtype (`d // 256` of a `uint8` tensor: torch converts the number into it), naming the first
    rank and element. (A divisor that is the number 0 is `N122`, before anything runs.)

    ## Why is this bad?

    torch refuses integer division by zero: on CPU tensors (Gloo) the line raises `RuntimeError:
    ZeroDivisionError` and the rank stops, leaving the others waiting in their next collective. On CUDA
    tensors (NCCL) the division is not checked and the result is undefined. Floats divide to `inf` or
    `nan` instead, as IEEE 754 says.

    ## Example

    ```comm
    program buckets
    world 2
    tensor count: int64[4] = i
    tensor per: int64[4] = 0
    per = 64 // count
    ```

    ## Use instead

    ```comm
    program buckets
    world 2
    tensor count: int64[4] = i
    tensor per: int64[4] = 0
    per = 64 // max(count, 1)
    ```
    """

    code = "V802"
    name = "integer-division-by-zero"

    @classmethod
    def from_simulation(cls, sim) -> Iterator[Diagnostic]:
        """One finding per `//` or `%` that met a zero divisor, naming its first ranks and elements."""
        by_span: dict = {}
        for span, ranks, elements in sim.data.faults:
            by_span.setdefault(span, []).append((ranks, elements))
        for span, parts in by_span.items():
            ranks = np.concatenate([r for r, _ in parts])
            elements = np.concatenate([e for _, e in parts])
            order = np.argsort(ranks, kind="stable")
            ranks, elements = ranks[order], elements[order]
            unique, first = np.unique(ranks, return_index=True)
            yield cls.diagnostic(
                f"integer division by zero on rank{'s' * (unique.size > 1)} {rank_list(unique.tolist())}",
                span=span,
                label=f"the divisor is 0 at element {int(elements[first[0]])} on rank {int(unique[0])}",
                notes=(
                    Note(
                        message="torch stops the rank with `RuntimeError: ZeroDivisionError` on CPU tensors; "
                        "on CUDA tensors the result is undefined"
                    ),
                ),
                help="guard the divisor, e.g. `max(d, 1)`, or divide in floating point",
            )


class OrderDependentSum(Rule):
    """a floating-point sum (or product) whose result depends on the order the ranks are combined in

    ## What it does

    Reports a `sum`, `avg`, `premul_sum` or `product` over three or more ranks in a floating-point dtype
    whose result, combined in rank order as the simulator does, differs from the exactly rounded one by more
    than the dtype's comparison tolerance: the terms cancel (`1e8 + 1 - 1e8`), or are too many for the
    dtype's precision (a float16 product of four factors rounds three times). Names the first element, both
    values, and the `expect`s that read the result. (The rule keeps its name from when it covered sums only.)

    ## Why is this bad?

    No backend combines in rank order, and none promises an order: Gloo's ring adds each chunk of the tensor
    starting from a different rank, and which chunk an element falls in depends on the tensor's size and
    the world size; NCCL's order depends on its algorithm (ring or tree), protocol and topology. So the
    value changes with the world size, the tensor size and the backend, and an `expect` that holds in the
    simulator can fail on a real run. Every rank still gets the same value from one `all_reduce`.
    `commdsl run` compares these elements across ranks, not with the simulator.

    ## Example

    ```comm
    program cancel
    world 3
    tensor x: float32[4] = 0
    on rank == 0:
        x = 100000000.0
    else on rank == 1:
        x = 1.0
    else:
        x = -100000000.0
    all_reduce x
    ```

    ## Use instead

    ```comm
    program cancel
    world 3
    tensor x: float64[4] = 0
    on rank == 0:
        x = 100000000.0
    else on rank == 1:
        x = 1.0
    else:
        x = -100000000.0
    all_reduce x
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, CPU): an `all_reduce` of the example gives 0 at some elements and 1 at
    others, the same on every rank; fp16 sums of random data at world 3 match a ring order that starts
    each chunk at the next rank, and at world 4 match neither rank order nor that ring; an fp16 `product`
    of 4096 random factors in [0.5, 1.5) at world 4 differed from the rank-order product beyond fp16's
    tolerance at 114 elements (lint was clean and `commdsl run` failed before products were covered).
    """

    code = "V803"
    name = "order-dependent-sum"
    severity = "warning"
    backend_doc = "summation-order"

    @classmethod
    def from_simulation(cls, sim) -> Iterator[Diagnostic]:
        """One finding per collective statement, with its first order-dependent element."""
        found: dict = {}
        for rec, _p, r, flags, values, exact in sim.data.order_found:
            found.setdefault(rec.span, (rec, r, flags, values, exact))
        reads = sorted({e.span.line for e in sim.data.order_read})
        for span, (rec, r, flags, values, exact) in found.items():
            k = int(np.argmax(flags))
            got, want = np.asarray(values).reshape(-1)[k].item(), exact[k].item()
            product = rec.applied_redop == "product"
            what, done = ("product", "multiplied") if product else ("sum", "added")
            notes = [
                Note(
                    message=f"{done} in rank order element {k} is {got!r}; the exact {what} rounds to {want!r} "
                    f"({rec.dtype}): a backend's order may give either, or another value"
                )
            ]
            if reads:
                lines = ", ".join(map(str, reads))
                notes.append(
                    Note(
                        message=f"the `expect` at line{'s' * (len(reads) > 1)} {lines} reads these values: "
                        "it may hold in the simulator and fail on a real run"
                    )
                )
            yield cls.diagnostic(
                f"the result of this {what} depends on the order the ranks are {done} in",
                span=span,
                label=f"rank {r}, element {k}",
                notes=tuple(notes),
                help="multiply in a wider dtype (float64)"
                if product
                else "sum in a wider dtype (float64), or keep the terms from cancelling",
            )


class FloatOutOfIntegerRange(Rule):
    """a float stored into an integer tensor that cannot hold it

    ## What it does

    Reports an assignment (or a tensor's initialiser) that stores a floating-point value into an integer
    tensor where the value is NaN, infinite, or beyond the dtype's range after truncation on some rank, naming
    the first rank, element and value: `count = x / 0` into `int64`, `q = y * 1e10` into `int32`, `b = 300.5`
    computed into `int8`.

    ## Why is this bad?

    Converting such a float to an integer is undefined in C++, and torch leaves it to the machine. On an x86
    CPU (Gloo) torch converts through int32 (through int64 for `int64`, and from float64 into `uint8`) and the
    processor gives the lowest integer of that type for anything it cannot hold: NaN becomes -2**63 in
    `int64`, 3e9 becomes -2**31 in `int32` and 0 in `int8`, 300.7 becomes 44 in `int8`. The simulator stores
    exactly that, so `commdsl run` agrees with it there; CUDA tensors (NCCL) and ARM CPUs may store another
    value, and the run then differs from the simulation at these elements. A number written as such (`x =
    1e10`) is refused before anything runs (`N138`).

    ## Example

    ```comm
    program scale
    world 2
    tensor x: float32[4] = (i + 1) * 1000000000.0
    tensor q: int32[4] = 0
    q = x * 2
    ```

    ## Use instead

    ```comm
    program scale
    world 2
    tensor x: float32[4] = (i + 1) * 1000000000.0
    tensor q: int64[4] = 0
    q = x * 2
    ```
    """

    code = "V804"
    name = "float-out-of-integer-range"
    severity = "warning"

    @classmethod
    def from_simulation(cls, sim) -> Iterator[Diagnostic]:
        """One finding per statement, naming its first rank, element and value."""
        by_span: dict = {}
        for span, name, ranks, elements, values in sim.data.unheld:
            by_span.setdefault(span, []).append((name, ranks, elements, values))
        for span, parts in by_span.items():
            name = parts[0][0]
            ranks = np.concatenate([r for _, r, _, _ in parts])
            first = min(
                ((int(r), int(e), float(v)) for _, rs, es, vs in parts for r, e, v in zip(rs, es, vs)),
                key=lambda x: x[0],
            )
            dtype = sim.data.dtype[name]
            unique = np.unique(ranks)
            yield cls.diagnostic(
                f"a float that `{name}` ({dtype}) cannot hold is stored on rank{'s' * (unique.size > 1)} "
                f"{rank_list(unique.tolist())}",
                span=span,
                label=f"element {first[1]} is {first[2]!r} on rank {first[0]}",
                notes=(
                    Note(
                        message="converting it is undefined in C++: torch on an x86 CPU stores what the simulator "
                        "stores, CUDA tensors (NCCL) and ARM CPUs may store another value"
                    ),
                ),
                help=f"store it in a float tensor, or bring it into {dtype}'s range first (`min`/`max`)",
            )
