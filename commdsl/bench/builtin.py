"""The standard benchmarks as small `.comm` programs, so they go through the same checks, runtime and
timing as a user's program: `commdsl bench --collective all_reduce` measures exactly `all_reduce x`.

`n` is nccl-tests' *count*: the elements of the buffer its size column describes (the whole gathered
buffer for all_gather and gather, the whole input for reduce_scatter and scatter). Each collective's
program is its `Kind.bench`; where torch takes the same call with the input inside the output's buffer (or
one buffer for both), `Kind.bench_in_place` is that form, timed beside it as nccl-tests times out-of-place,
then in-place. The data are small integers that differ by rank and element, exact in every dtype, so
`--check` catches misplaced chunks.
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
    second: bool = False  # the in-place form of a collective that has both

    @property
    def path(self) -> str:
        """A name for messages and spans: no file exists behind it."""
        return f"<{self.kind}{' in-place' * self.second}>"


def has_in_place(kind: str) -> bool:
    """Whether the built-in has an in-place form besides its usual one."""
    return kind in collectives.KINDS and collectives.KINDS[kind].bench_in_place is not None


def builtin(kind: str, dtype: str, op: str, root: int, in_place: bool = False) -> Builtin:
    """The program of `kind`; `in_place`: its in-place form (only where `has_in_place`)."""
    kinds = collectives.KINDS
    form = (kinds[kind].bench_in_place if in_place else kinds[kind].bench) if kind in kinds else _SENDRECV
    if form is None:
        raise ValueError(f"`{kind}` has no {'in-place ' * in_place}form to bench")
    decls, stmt, tensor = form
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
    return Builtin(kind, text, tensor, redop, at, in_place)
