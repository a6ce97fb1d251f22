"""What the recorder writes for each rank and the bridge reads: plain data, no torch.

A `Call` is one communication call as the script made it (global ranks everywhere, a group as its
tuple of global ranks), or the script's read or write of a buffer such a call still moves; a `Read` is
a value the script read back into Python (`.item()`, `bool(t)`, `.tolist()`) from a tensor that
communication wrote, directly or through local compute. `RankTrace` is everything one rank's recording
produced; the forked child sends it to the parent as JSON.
"""

from __future__ import annotations

import json
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
    """One tensor argument: `id` tells this rank's distinct buffers apart (one per storage and dtype);
    the tensor is elements [offset, offset + numel) of it."""

    id: int
    numel: int
    dtype: str
    offset: int = 0
    label: str = ""  # the expression the script passed (`grad`, `buf[0:8]`), where it called the API itself
    shape: tuple[int, ...] | None = None  # the tensor's shape as passed (None: not known, a flight record's)


@dataclass(slots=True)
class Call:
    """One communication call. `op` is the `.comm` word (`send`, `irecv`, `all_reduce`, `batch`, `wait`, ...),
    or `read` / `write`: the script's own op on a buffer an async call of it still moves (its one input)."""

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


# ---- the child's trace to the parent, as JSON (the package never unpickles) ----------------------------


def _call_json(c: Call) -> dict:
    return {
        "op": c.op,
        "site": list(astuple_site(c.site)),
        "group": list(c.group) if c.group is not None else None,
        "inputs": [_buffer_json(b) for b in c.inputs],
        "outputs": [_buffer_json(b) for b in c.outputs],
        "inputs_listed": c.inputs_listed,
        "outputs_listed": c.outputs_listed,
        "peer": c.peer,
        "root": c.root,
        "tag": c.tag,
        "redop": c.redop,
        "req": c.req,
        "reqs": list(c.reqs),
        "in_splits": list(c.in_splits),
        "out_splits": list(c.out_splits),
        "ops": [_call_json(o) for o in c.ops],
        "origin": c.origin,
    }


def _buffer_json(b: Buffer) -> list:
    return [b.id, b.numel, b.dtype, b.offset, b.label, None if b.shape is None else list(b.shape)]


def _buffer_from(b: list) -> Buffer:
    bid, numel, dtype, offset, label, shape = b
    return Buffer(bid, numel, dtype, offset, label, None if shape is None else tuple(shape))


def astuple_site(s: Site) -> tuple:
    return (s.path, s.line, s.column, s.end_line, s.end_column)


def _call_from(d: dict) -> Call:
    return Call(
        op=d["op"],
        site=Site(*d["site"]),
        group=tuple(d["group"]) if d["group"] is not None else None,
        inputs=tuple(map(_buffer_from, d["inputs"])),
        outputs=tuple(map(_buffer_from, d["outputs"])),
        inputs_listed=d["inputs_listed"],
        outputs_listed=d["outputs_listed"],
        peer=d["peer"],
        root=d["root"],
        tag=d["tag"],
        redop=d["redop"],
        req=d["req"],
        reqs=tuple(d["reqs"]),
        in_splits=tuple(d["in_splits"]),
        out_splits=tuple(d["out_splits"]),
        ops=tuple(_call_from(o) for o in d["ops"]),
        origin=d["origin"],
    )


def trace_to_json(t: RankTrace) -> str:
    events = [
        {"read": [list(astuple_site(e.site)), e.what]} if isinstance(e, Read) else {"call": _call_json(e)}
        for e in t.events
    ]
    return json.dumps(
        {
            "rank": t.rank,
            "world": t.world,
            "events": events,
            "backend": t.backend,
            "error": t.error,
            "notes": t.notes,
            "warnings": t.warnings,
            "files": t.files,
        }
    )


def trace_from_json(text: str) -> RankTrace:
    d = json.loads(text)
    events: list = [
        Read(Site(*e["read"][0]), e["read"][1]) if "read" in e else _call_from(e["call"]) for e in d["events"]
    ]
    return RankTrace(d["rank"], d["world"], events, d["backend"], d["error"], d["notes"], d["warnings"], d["files"])
