"""V8xx: what the simulator proves with data: every `expect` holds on every rank.

Raised from the simulation's verdicts (`ExpectFailed.from_simulation`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from commdsl.diagnostics import Diagnostic, Note
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
