"""What the recorder writes for each rank and the bridge reads: plain data, no torch.

A `Call` is one communication call as the script made it (global ranks everywhere, a group as its
tuple of global ranks); a `Read` is a value the script read back into Python (`.item()`, `bool(t)`,
`.tolist()`) from a tensor that communication wrote, directly or through local compute. `RankTrace`
is everything one rank's recording produced; it is pickled from the forked child to the parent.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Site:
    """Where in the user's script a call was made: 1-based line and column, end exclusive."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True, slots=True)
class Buffer:
    """One tensor argument: `id` tells this rank's distinct buffers apart (same storage and dtype, same id)."""

    id: int
    numel: int
    dtype: str


@dataclass(slots=True)
class Call:
    """One communication call. `op` is the `.comm` word (`send`, `irecv`, `all_reduce`, `batch`, `wait`, ...)."""

    op: str
    site: Site
    group: tuple[int, ...] | None = None  # global ranks; None: the world
    inputs: tuple[Buffer, ...] = ()
    outputs: tuple[Buffer, ...] = ()
    inputs_listed: bool = False
    outputs_listed: bool = False
    peer: int | None = None  # global rank; None on a recv: from any source
    root: int | None = None  # global rank
    tag: int = 0
    redop: str | None = None
    req: int | None = None  # request number of an async call
    reqs: tuple[int, ...] = ()  # a wait's requests
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    ops: tuple[Call, ...] = ()  # a batch's sends and receives
    origin: str = ""  # "" (the torch.distributed API), "c10d" (issued below it: DDP, FSDP, DTensor), "object"


@dataclass(frozen=True, slots=True)
class Read:
    """The script read a value derived from received data into Python control flow."""

    site: Site
    what: str  # "item()", "bool()", "tolist()", ...


@dataclass
class RankTrace:
    rank: int
    world: int
    events: list = field(default_factory=list)  # Call | Read, in program order
    backend: str | None = None  # what the script asked init_process_group for
    error: str | None = None  # the script failed: its traceback, the script's own frames only
    notes: list[str] = field(default_factory=list)  # things done to make the script traceable (shims)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the user's source files the sites point into
