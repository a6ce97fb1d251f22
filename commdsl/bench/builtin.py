"""The standard benchmarks as small `.comm` programs, so they go through the same checks, runtime and
timing as a user's program: `commdsl bench --collective all_reduce` measures exactly `all_reduce x`.

`n` is nccl-tests' *count*: the elements of the buffer its size column describes (the whole gathered
buffer for all_gather and gather, the whole input for reduce_scatter and scatter). Each collective's
program is its `Kind.bench`; data are small integers that differ by rank and element, exact in every
dtype, so `--check` catches misplaced chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

from commdsl import collectives

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "sendrecv",
)

# nccl-tests' sendrecv is a ring; here a one-way ping from rank 0 to rank 1, as the issue asks
_SENDRECV = (
    "tensor x: {t}[n] = " + collectives.DATA,
    "on rank == 0:\n    send x to 1\non rank == 1:\n    recv x from 0",
    "x",
)


@dataclass(frozen=True)
class Builtin:
    """One generated program and what it measures."""

    kind: str
    text: str
    tensor: str
    redop: str | None
    root: int | None

    @property
    def path(self) -> str:
        """A name for messages and spans: no file exists behind it."""
        return f"<{self.kind}>"


def builtin(kind: str, dtype: str, op: str, root: int) -> Builtin:
    decls, stmt, tensor = collectives.KINDS[kind].bench if kind in collectives.KINDS else _SENDRECV
    redop = op if kind in collectives.REDUCING else None
    at = root if kind in collectives.ROOTED else None
    world = "2.." if kind == "sendrecv" else "1.."
    text = (
        f"program {kind}\nworld {world}\nparam n = 1024\n"
        + decls.format(t=dtype)
        + "\n"
        + stmt.format(op=op, root=root)
        + "\n"
    )
    return Builtin(kind, text, tensor, redop, at)
