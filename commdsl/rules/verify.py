"""V8xx: what the simulator proves with data: every `expect` holds on every rank, and no rank divides an
integer by zero.

Raised from the simulation's verdicts (`from_simulation`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from commdsl.diagnostics import Diagnostic, Note
from commdsl.rules import Rule, rank_list


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
            ranks = np.unique(np.concatenate([g for g, _, _ in parts]))
            first = sorted((int(r), failed.detail(int(k))) for g, ks, failed in parts
                           for r, k in zip(g[:4].tolist(), ks[:4].tolist()))[:4]
            shown = ", ".join(map(str, ranks[:8].tolist())) + (" …" if ranks.size > 8 else "")
            yield cls.diagnostic(f"expectation fails on rank{'s' * (ranks.size > 1)} {shown}", span=span,
                                 label=f"rank {first[0][0]}: {first[0][1]}",
                                 notes=tuple(Note(message=f"rank {r}: {d}") for r, d in first[1:4]))


class IntegerDivisionByZero(Rule):
    """an integer `//` or `%` whose divisor, read from a tensor, is 0 at run time

    ## What it does

    Reports an integer floor division or modulo in an element expression whose divisor comes from a tensor
    and holds a 0 on some ranks when the simulation reaches it, naming the first rank and element. (A
    divisor that is a constant 0 is `N122`, before anything runs.)

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
                f"integer division by zero on rank{'s' * (unique.size > 1)} {rank_list(unique.tolist())}", span=span,
                label=f"the divisor is 0 at element {int(elements[first[0]])} on rank {int(unique[0])}",
                notes=(Note(message="torch stops the rank with `RuntimeError: ZeroDivisionError` on CPU tensors; "
                                    "on CUDA tensors the result is undefined"),),
                help="guard the divisor, e.g. `max(d, 1)`, or divide in floating point")
