"""The standard benchmarks as small `.comm` programs, so they go through the same checks, runtime and
timing as a user's program: `commdsl bench --collective all_reduce` measures exactly `all_reduce x`.

`n` is nccl-tests' *count*: the elements of the buffer its size column describes (the whole gathered
buffer for all_gather and gather, the whole input for reduce_scatter and scatter). Data are small
integers that differ by rank and element, exact in every dtype, so `--check` catches misplaced chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather",
               "scatter", "sendrecv")
REDUCING = ("all_reduce", "reduce", "reduce_scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")

_DATA = "(rank + i) % 5 + 1"

# kind → (tensor declarations, the statement, the tensor whose bytes are the size); {t} dtype, {op}, {root}
_BODIES = {
    "all_reduce": ("tensor x: {t}[n] = " + _DATA, "all_reduce x op {op}", "x"),
    "broadcast": ("tensor x: {t}[n] = " + _DATA, "broadcast x from {root}", "x"),
    "reduce": ("tensor x: {t}[n] = " + _DATA, "reduce x to {root} op {op}", "x"),
    "all_gather": ("tensor x: {t}[n // world] = " + _DATA + "\ntensor y: {t}[n // world * world]",
                   "all_gather x into y", "y"),
    "gather": ("tensor x: {t}[n // world] = " + _DATA + "\ntensor y: {t}[n // world * world]",
               "gather x into y to {root}", "y"),
    "reduce_scatter": ("tensor x: {t}[n // world * world] = " + _DATA + "\ntensor y: {t}[n // world]",
                       "reduce_scatter x into y op {op}", "x"),
    "scatter": ("tensor x: {t}[n // world * world] = " + _DATA + "\ntensor y: {t}[n // world]",
                "scatter x into y from {root}", "x"),
    "all_to_all": ("tensor x: {t}[n // world * world] = " + _DATA + "\ntensor y: {t}[n // world * world]",
                   "all_to_all x into y", "x"),
    # nccl-tests' sendrecv is a ring; here a one-way ping from rank 0 to rank 1, as the issue asks
    "sendrecv": ("tensor x: {t}[n] = " + _DATA, "on rank == 0:\n    send x to 1\non rank == 1:\n    recv x from 0", "x"),
}


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
    decls, stmt, tensor = _BODIES[kind]
    redop = op if kind in REDUCING else None
    at = root if kind in ROOTED else None
    world = "2.." if kind == "sendrecv" else "1.."
    text = (f"program {kind}\nworld {world}\nparam n = 1024\n"
            + decls.format(t=dtype) + "\n" + stmt.format(op=op, root=root) + "\n")
    return Builtin(kind, text, tensor, redop, at)
