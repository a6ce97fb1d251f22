"""What a worker tells the launcher: JSON records, one per event, and the rank's result assembled from them.

A worker emits a record as soon as something happens (a `print`, an `expect` verdict, an error) and
the final tensors and op timings at the end. Local runs append the records to one file per rank, so
whatever a rank printed before a hang or a crash still reaches the user; under an external launcher
they travel to rank 0 through the c10d store. JSON only: nothing a worker sends is ever unpickled.
Tensors travel as raw little-endian bytes in the simulator's representation (bfloat16 as float32), so
comparing with the simulator needs no torch: in a local run as a file of their own in the run's private
directory, which the launcher maps (`{"file": ...}`, no copy in either process); through the store as base64.
"""

from __future__ import annotations

import base64
import json
import mmap
import os
from dataclasses import dataclass, field

import numpy as np


def encode_array(values: np.ndarray) -> dict:
    a = np.ascontiguousarray(values)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(d: dict, base_dir: str | None = None) -> np.ndarray:
    """The array a record names: base64 `data`, or a `file` (in `base_dir`) mapped read-only."""
    dtype = np.dtype(d["dtype"])
    if "file" not in d:
        return np.frombuffer(base64.b64decode(d["data"]), dtype=dtype).reshape(d["shape"])
    path = os.path.join(base_dir or ".", os.path.basename(d["file"]))
    count = int(np.prod(d["shape"], dtype=np.int64))
    if os.path.getsize(path) != count * dtype.itemsize:
        raise ValueError(f"{path}: {os.path.getsize(path)} bytes, not {count} x {dtype.itemsize}")
    if count == 0:
        return np.empty(d["shape"], dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=tuple(d["shape"]))


class TimesLog:
    """A rank's (start, end) time of each op, in a file it maps shared: every op's pair is in the page cache
    the moment it ends, so a rank that hangs and is killed, or crashes, still leaves the times of the ops it
    did (for `--trace` and the report). Slot `n` holds the set-up's pair. Indexed as a list of pairs is indexed."""

    def __init__(self, path: str, n: int):
        with open(path, "w+b") as f:
            f.truncate(16 * (n + 1) or 16)
            self._map = mmap.mmap(f.fileno(), 16 * (n + 1) or 16)
        self._q = memoryview(self._map).cast("q")

    def __setitem__(self, index: int, pair: tuple[int, int]) -> None:
        q = self._q
        q[2 * index], q[2 * index + 1] = pair

    def __getitem__(self, index: int) -> tuple[int, int]:
        return self._q[2 * index], self._q[2 * index + 1]


def read_times(path: str) -> tuple[list[tuple[int, int]], tuple[int, int]] | None:
    """(each op's pair, the set-up's pair) from a `TimesLog` file; None when there is none."""
    try:
        data = np.fromfile(path, dtype=np.int64)
    except OSError:
        return None
    if data.size < 2 or data.size % 2:
        return None
    pairs = [(int(a), int(b)) for a, b in data.reshape(-1, 2).tolist()]
    return pairs[:-1], pairs[-1]


def line(kind: str, payload: dict) -> str:
    return json.dumps({"kind": kind, **payload}, separators=(",", ":")) + "\n"


@dataclass
class RankResult:
    """Everything one rank reported, assembled from its records."""

    rank: int
    pid: int = 0
    host: str = ""
    prints: list[dict] = field(default_factory=list)  # {"index", "lines"}
    expects: list[dict] = field(default_factory=list)  # {"index", "ok", "detail"}
    error: dict | None = None  # {"index", "type", "message", "time_ns"}
    finished: bool = False
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    times: list[tuple[int, int]] = field(default_factory=list)  # (start_ns, end_ns) per op index
    init: tuple[int, int] = (0, 0)  # process group and groups set up: (start_ns, end_ns)


def assemble(rank: int, lines: list[str], base_dir: str | None = None) -> RankResult:
    """A rank's result from its records; a torn last line (the rank was killed mid-write) is dropped.
    `base_dir`: where the tensor files a local run's records name are."""
    out = RankResult(rank)
    for text in lines:
        try:
            rec = json.loads(text)
        except ValueError:
            continue
        kind = rec.pop("kind", None)
        if kind == "start":
            out.pid, out.host = rec["pid"], rec["host"]
        elif kind == "print":
            out.prints.append(rec)
        elif kind == "expect":
            out.expects.append(rec)
        elif kind == "error":
            out.error = rec
        elif kind == "final":
            try:
                out.tensors = {name: decode_array(d, base_dir) for name, d in rec["tensors"].items()}
            except (OSError, ValueError):  # the rank died while writing them: it did not finish
                continue
            out.finished = True
            out.times = [tuple(t) for t in rec["times"]]
            out.init = tuple(rec["init"])
    return out
