"""torch flight-recorder dumps → the recorder's events, checked like a traced script (no torch imported).

A dump is what torch writes per rank when a collective times out (`TORCH_FR_BUFFER_SIZE`, formerly
`TORCH_NCCL_TRACE_BUFFER_SIZE`; `TORCH_FR_DUMP_TEMP_FILE` names the files, one per rank, the rank
last) or what `torch._C._distributed_c10d._dump_fr_trace()` returns: a pickled dict (version 2.x) with
`pg_config` (each process group's ranks) and `entries`, one per call, with its `profiling_name`
(`gloo:all_reduce`, `nccl:send 0->1`), `collective_seq_id`, `input_sizes`/`output_sizes`, dtypes and
the Python `frames` that issued it. The JSON form (`_dump_fr_trace_json`) is read too. The package never
unpickles (docs/security.md): `decode_pickle` reads the opcodes of plain data and refuses any other.

Each entry becomes a `Call` at its innermost frame in the user's code; `to_comm` and `check` then do
what they do for a traced script, so a mismatch is reported with both ranks' frames.

What a dump does not say, and how it is filled in: the root of a rooted collective (the group's first
rank, the same on every rank, so a wrong root is not detected); whether a send was blocking (checked
as blocking); coalesced calls (checked as one call of their kind, sizes summed). A ring buffer that
dropped early entries on some ranks is cut to the sequence number every rank still has.
"""

from __future__ import annotations

import json
import math
import os
import pickletools
import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from commdsl.diagnostics import Diagnostic, Note
from commdsl.resolve import MAX_WORLD
from commdsl.source import SourceFile
from commdsl.trace.events import Buffer, Call, RankTrace, Site

MAX_DUMP_BYTES = 256 << 20

DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}

KINDS = {
    "all_reduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "all_reduce_barrier": "barrier",
    "broadcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "reduce": "reduce",
    "_reduce_oop": "reduce",
    "all_gather": "all_gather",
    "all_gather_single": "all_gather",
    "_all_gather_base": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "ALLGATHER_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "REDUCE_SCATTER_coalesced": "reduce_scatter",
    "gather": "gather",
    "scatter": "scatter",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
}


class DumpError(Exception):
    """A dump directory that cannot be read: the message says which file and why."""


Count = Annotated[int, Field(ge=0, le=1 << 40)]
Rank = Annotated[int, Field(ge=0, lt=MAX_WORLD)]


class _Read(BaseModel):
    """The fields of a dump the checker reads, with the types torch writes (others are kept, unread): a dump
    whose `input_sizes` holds a string, or whose entries are not tables, is a DumpError naming the field, not
    an internal error in the code that reads it."""

    model_config = ConfigDict(extra="allow")


class _Frame(_Read):
    filename: str = ""
    line: Annotated[int, Field(ge=0, le=1 << 31)] = 1


class _Entry(_Read):
    profiling_name: str | None = ""
    process_group: tuple[str, ...] | None = ("", "")
    collective_seq_id: Count | None = None
    p2p_seq_id: Count | None = None
    record_id: Count = 0
    is_p2p: bool | None = False
    input_sizes: list[list[Count]] | None = None
    output_sizes: list[list[Count]] | None = None
    input_dtypes: list[str] | None = None
    output_dtypes: list[str] | None = None
    frames: list[_Frame] | None = None


class _Group(_Read):
    ranks: list[Rank] | None = None

    @field_validator("ranks", mode="before")
    @classmethod
    def _json_text(cls, value):
        """torch writes a group's ranks as the JSON text of the list (`"[0, 1]"`)."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("not the JSON text of a list of ranks") from None
        return value


class _Dump(_Read):
    entries: list[_Entry]
    pg_config: dict[str, _Group] | None = None
    rank: Rank | None = None


_VALUE_OPS = {
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "BININT", "BININT1", "BININT2", "INT", "LONG",
    "LONG1", "LONG4", "BINFLOAT", "FLOAT", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "SHORT_BINSTRING",
    "BINSTRING", "STRING",
}  # fmt: skip
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_EMPTY = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple, "EMPTY_SET": set}


class _Decoder:
    """A stack machine for the opcodes of plain data; one method per opcode family."""

    def __init__(self):
        self.stack: list = []
        self.marks: list[int] = []
        self.memo: dict = {}

    def since_mark(self) -> list:
        k = self.marks.pop()
        items = self.stack[k:]
        del self.stack[k:]
        return items

    def value(self, name, arg):
        self.stack.append(arg if name in _VALUE_OPS else _CONSTANTS[name] if name in _CONSTANTS else _EMPTY[name]())

    def mark(self, name, arg):
        self.marks.append(len(self.stack))

    def put(self, name, arg):
        self.memo[len(self.memo) if name == "MEMOIZE" else arg] = self.stack[-1]

    def get(self, name, arg):
        self.stack.append(self.memo[arg])

    def add(self, name, arg):
        """APPEND, APPENDS, SETITEM, SETITEMS, ADDITEMS: into the container below."""
        if name == "APPEND":
            value = self.stack.pop()
            self.stack[-1].append(value)
        elif name == "SETITEM":
            value, key = self.stack.pop(), self.stack.pop()
            self.stack[-1][key] = value
        else:
            items = self.since_mark()
            target = self.stack[-1]
            if name == "SETITEMS":
                target.update(zip(items[::2], items[1::2]))
            elif name == "APPENDS":
                target.extend(items)
            else:
                target.update(items)

    def build(self, name, arg):
        """TUPLE, LIST, DICT, FROZENSET from the mark; TUPLE1..3 from the top."""
        if name.startswith("TUPLE") and name != "TUPLE":
            n = int(name[-1])
            items = self.stack[-n:]
            del self.stack[-n:]
            self.stack.append(tuple(items))
            return
        items = self.since_mark()
        if name == "DICT":
            self.stack.append(dict(zip(items[::2], items[1::2])))
        else:
            self.stack.append({"TUPLE": tuple, "LIST": list, "FROZENSET": frozenset}[name](items))


_OPS = {
    **{n: _Decoder.value for n in (*_VALUE_OPS, *_CONSTANTS, *_EMPTY)},
    "MARK": _Decoder.mark,
    **{n: _Decoder.put for n in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT")},
    **{n: _Decoder.get for n in ("BINGET", "LONG_BINGET", "GET")},
    **{n: _Decoder.add for n in ("APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS")},
    **{n: _Decoder.build for n in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "LIST", "DICT", "FROZENSET")},
}


def decode_pickle(data: bytes):
    """The value a pickle of plain data (dicts, lists, tuples, sets, strings, bytes, numbers, None, booleans)
    describes, read opcode by opcode with `pickletools.genops` and never executed: any opcode that would
    look up a class or call one (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, ...) is refused."""
    d = _Decoder()
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("PROTO", "FRAME"):
            continue
        if op.name == "STOP":
            break
        handler = _OPS.get(op.name)
        if handler is None:
            raise DumpError(f"pickle opcode {op.name} (it names or calls a class): not a flight-recorder dump")
        handler(d, op.name, arg)
    if len(d.stack) != 1:
        raise DumpError("a pickle that leaves no single value: not a flight-recorder dump")
    return d.stack[0]


def read_dump(path: Path) -> dict:
    data = path.read_bytes()
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"{path}: over {MAX_DUMP_BYTES >> 20} MiB")
    if data[:1] in (b"{", b"["):
        try:
            value = json.loads(data)
        except ValueError as e:
            raise DumpError(f"{path}: not JSON ({e})") from None
    else:
        try:
            value = decode_pickle(data)
        except DumpError as e:
            raise DumpError(f"{path}: {e}") from None
        except Exception as e:  # noqa: BLE001 - a truncated or malformed pickle means the same to the user
            raise DumpError(f"{path}: not a pickled flight-recorder dump ({type(e).__name__})") from None
    if not isinstance(value, dict) or "entries" not in value:
        raise DumpError(f"{path}: no `entries`: not a flight-recorder dump")
    try:
        return _Dump.model_validate(value).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in first["loc"]).lstrip(".")
        raise DumpError(f"{path}: `{where}`: {first['msg'][0].lower()}{first['msg'][1:]}") from None


def _rank_of(path: Path, dump: dict) -> int:
    if dump.get("rank") is not None:
        return dump["rank"]
    m = re.search(r"(\d+)$", path.name)
    if m is None:
        raise DumpError(f"{path}: the file name does not end with its rank (torch writes <prefix><rank>)")
    if int(m.group(1)) >= MAX_WORLD:
        raise DumpError(f"{path}: the file name ends with rank {m.group(1)}, beyond the largest world ({MAX_WORLD})")
    return int(m.group(1))


def _is_library(filename: str) -> bool:
    return (
        not filename
        or filename.startswith("<")
        or any(part in filename for part in ("/site-packages/", "/dist-packages/", "/lib/python3"))
    )


def _site(entry: dict) -> Site:
    """The innermost frame in the user's code (frames are innermost first); its whole line."""
    frames = entry.get("frames") or []
    for f in frames:
        filename = str(f.get("filename", ""))
        if not _is_library(filename):
            return Site(filename, int(f.get("line", 1)), 0, int(f.get("line", 1)), 0)
    if frames:
        f = frames[0]
        return Site(str(f.get("filename", "<unknown>")), int(f.get("line", 1)), 0, int(f.get("line", 1)), 0)
    return Site("<no frames recorded>", 1, 0, 1, 0)


def _numel(sizes) -> int:
    return sum(math.prod(s) for s in sizes or [])


def _dtype(dtypes) -> str:
    return DTYPES.get(dtypes[0], str(dtypes[0]).lower()) if dtypes else "float32"


def _groups(dump: dict) -> dict[str, tuple[int, ...]]:
    return {name: tuple(cfg["ranks"]) for name, cfg in (dump.get("pg_config") or {}).items() if cfg["ranks"]}


def _call(entry: dict, groups: dict[str, tuple[int, ...]], world: int, rank: int, bid: int) -> Call | None:
    backend, _, name = str(entry.get("profiling_name", "")).partition(":")
    word, _, meta = name.partition(" ")
    kind = KINDS.get(word)
    if kind is None:
        return None
    pg = entry.get("process_group") or ("", "")
    ranks = groups.get(str(pg[0]), tuple(range(world)))
    group = None if ranks == tuple(range(world)) else ranks
    site = _site(entry)
    dtype = _dtype(entry.get("input_dtypes") or entry.get("output_dtypes"))
    n_in, n_out = _numel(entry.get("input_sizes")), _numel(entry.get("output_sizes"))
    seq = entry.get("collective_seq_id") if kind not in ("send", "recv") else entry.get("p2p_seq_id")
    c = Call(kind, site, group=group, origin=f"flight:{backend} call #{seq} on process group {pg[0]!r}")
    if kind in ("send", "recv"):
        arrow = "->" if kind == "send" else "<-"  # torch's `send 0->1`, `recv 1<-0`: the peer is the second
        ends = re.fullmatch(rf"(\d+){arrow}(\d+)", meta or f"0{arrow}0")
        if ends is None:
            return None
        peer_local = int(ends.group(2))
        c.peer = ranks[peer_local] if peer_local < len(ranks) else peer_local
        c.inputs = (Buffer(bid, max(n_in, n_out), dtype),)
        return c
    if kind == "barrier":
        return c
    if kind in ("broadcast", "reduce", "gather", "scatter"):
        c.root = ranks[0]
    if kind in ("all_reduce", "broadcast", "reduce"):
        c.inputs = (Buffer(bid, n_in, dtype),)
    elif kind == "gather":
        c.inputs = (Buffer(bid, n_in, dtype),)
        if rank == c.root and n_out:
            c.outputs = (Buffer(bid + 1, n_out, dtype),)
    elif kind == "scatter":
        c.outputs = (Buffer(bid + 1, n_out, dtype),)
        if rank == c.root and n_in:
            c.inputs = (Buffer(bid, n_in, dtype),)
    else:
        c.inputs, c.outputs = (Buffer(bid, n_in, dtype),), (Buffer(bid + 1, n_out, dtype),)
    if kind in ("all_reduce", "reduce", "reduce_scatter"):
        c.redop = "sum"
    return c


def load(directory: str) -> tuple[list[RankTrace], list[str]]:
    """Every rank's calls from the dumps in `directory`, and notes on what was filled in."""
    root = Path(directory)
    if not root.is_dir():
        raise DumpError(f"{directory}: not a directory")
    files = sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise DumpError(f"{directory}: no dump files")
    dumps: dict[int, dict] = {}
    for p in files:
        dump = read_dump(p)
        rank = _rank_of(p, dump)
        if rank in dumps:
            raise DumpError(f"{p}: a second dump of rank {rank}")
        dumps[rank] = dump
    world = max(dumps) + 1
    notes: list[str] = []
    missing = [r for r in range(world) if r not in dumps]
    if missing:
        notes.append(
            f"no dump of rank{'s' * (len(missing) > 1)} {', '.join(map(str, missing))}: checked as calling nothing"
        )
    # entries each rank still holds: per process group, from the first sequence number every rank has
    first: dict[str, int] = {}
    for d in dumps.values():
        seen: dict[str, int] = {}
        for e in d["entries"]:
            pg = str((e.get("process_group") or ("",))[0])
            seq = int(e.get("collective_seq_id") or 0)
            seen[pg] = min(seen.get(pg, seq), seq)
        for pg, s in seen.items():
            first[pg] = max(first.get(pg, s), s)
    traces = []
    for rank in range(world):
        trace = RankTrace(rank, world)
        dump = dumps.get(rank, {"entries": []})
        groups = _groups(dump)
        entries = sorted(dump["entries"], key=lambda e: int(e.get("record_id", 0)))
        for i, e in enumerate(entries):
            pg = str((e.get("process_group") or ("",))[0])
            if not e.get("is_p2p") and int(e.get("collective_seq_id") or 0) < first.get(pg, 0):
                continue
            c = _call(e, groups, world, rank, 2 * i)
            if c is None:
                notes.append(f"rank {rank}: `{e.get('profiling_name')}` is not checked (no form for it)")
                continue
            trace.events.append(c)
        traces.append(trace)
    if any(v > 1 for v in first.values()):
        notes.append(
            "the ring buffer had dropped early calls on some rank: compared from the first call all ranks hold"
        )
    return traces, notes


def check_dumps(directory: str) -> tuple[list[Diagnostic], dict[str, SourceFile]]:
    """The checker's findings on the dumps, at the frames they recorded."""
    from commdsl.trace.check import check_emitted
    from commdsl.trace.to_comm import emit

    traces, notes = load(directory)
    emitted = emit(traces, "flight_recorder")
    backend = "nccl" if any("flight:nccl" in c.origin for t in traces for c in t.events) else "gloo"
    sources: dict[str, SourceFile] = {}
    comm_path = os.path.join(directory, "flight_recorder.comm")
    diags = check_emitted(emitted, comm_path, sources, backends=(backend,))
    extra = tuple(Note(message=n) for n in notes)
    return [replace(d, notes=d.notes + extra) for d in diags], sources
