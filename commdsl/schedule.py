"""The Schedule: for each rank, the ordered list of concrete ops — the single source of truth.

Checker, simulator and runtime all walk these lists; none of them looks at the AST again. Ops are
slotted dataclasses (cheap at millions of ops); every op keeps its source span and loop bindings.
Element expressions (`Elem`) are small tuples evaluated by `commdsl.elementwise`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from commdsl.source import Span

# Elem: ("c", value) | ("v", View) | ("i",) | ("u", op, Elem) | ("b", op, Elem, Elem)
#       | ("f", fname, (Elem, ...)) | ("rand", seed, normal)
Elem = tuple


@dataclass(frozen=True, slots=True)
class View:
    """A contiguous region of a tensor: a flat element range [offset, offset + numel) with a shape."""

    tensor: str
    offset: int
    shape: tuple[int, ...]
    numel: int

    @property
    def stop(self) -> int:
        return self.offset + self.numel

    def overlaps(self, other: "View") -> bool:
        return (self.tensor == other.tensor and self.offset < other.stop and other.offset < self.stop
                and self.numel > 0 and other.numel > 0)

    def covers(self, other: "View") -> bool:
        return self.tensor == other.tensor and self.offset <= other.offset and other.stop <= self.stop


@dataclass(frozen=True, slots=True)
class Group:
    """A process group: global ranks in group-rank order. Group 0 is the world."""

    id: int
    name: str
    ranks: tuple[int, ...]

    def index(self, rank: int) -> int:
        return self.ranks.index(rank)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    init: Elem | None
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    span: Span
    bindings: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute(Op):
    target: View
    op: str  # "=", "+=", "-=", "*=", "/="
    value: Elem
    reads: tuple[View, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Expect(Op):
    view: View
    cmp: str
    value: Elem
    reads: tuple[View, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Print(Op):
    views: tuple[View, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Send(Op):
    view: View
    dtype: str
    peer: int
    tag: int
    group: Group | None
    blocking: bool
    req: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recv(Op):
    view: View
    dtype: str
    peer: int
    tag: int
    group: Group | None
    blocking: bool
    req: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch(Op):
    """P2P ops posted together (batch_isend_irecv); the rank waits for all of them at the end."""

    ops: tuple[Union[Send, Recv], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait(Op):
    reqs: tuple[int, ...]
    all: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective(Op):
    kind: str
    group: Group
    dtype: str
    inputs: tuple[View, ...] = ()
    outputs: tuple[View, ...] = ()
    inputs_listed: bool = False
    outputs_listed: bool = False
    root: int | None = None
    redop: str | None = None
    scale: float | None = None
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    req: int | None = None

    @property
    def blocking(self) -> bool:
        return self.req is None


AnyOp = Union[Compute, Expect, Print, Send, Recv, Batch, Wait, Collective]


@dataclass(slots=True)
class Schedule:
    """Everything a run at one world size needs, with all integers resolved."""

    program: str
    path: str
    world: int
    params: dict[str, object]
    backends: tuple[str, ...]
    groups: list[Group]
    tensors: list[dict[str, TensorSpec]]
    ops: list[list[AnyOp]]

    @property
    def num_ops(self) -> int:
        return sum(len(r) for r in self.ops)
