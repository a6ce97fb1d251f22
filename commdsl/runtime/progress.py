"""Where every local rank is, right now: a few integers per rank in a file-backed shared mapping.

Each worker writes its slot before every op (the op index and the time it started); the launcher
reads all slots without asking anyone, so it can name the op every rank is blocked in even when a
worker is stuck inside Gloo or NCCL, has been killed, or holds the GIL. Two stores per op cost well
under a microsecond, which is what lets the hang guard stay on during benchmarks.

A plain file mapped with MAP_SHARED works under fork and spawn alike (a spawned worker opens it by
path) and needs no resource tracker. Writers store `since`, then `op`, then `state`; the reader loads
them in the reverse order, so a new op is never paired with the previous op's start time.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from dataclasses import dataclass

FIELDS = ("pid", "rank", "state", "op", "since")
PID, RANK, STATE, OP, SINCE = range(len(FIELDS))

# states, in the order a worker goes through them
NOT_STARTED, INIT, RUNNING, FINISHING, DONE, FAILED = range(6)
STATE_NAMES = ("not started", "initialising", "running", "finishing", "done", "failed")

# the steps of set-up, which a rank in INIT shows in its `op` field (Slot.setup): a rank stuck in set-up
# is then named with the torch call it is stuck in, not only "setting up"
SETUP_STEPS = (
    "connecting to the rendezvous store",
    "init_process_group, connecting to every other rank",
    "new_group, creating the program's groups",
    "allocating tensors",
)
SETUP_STORE, SETUP_PROCESS_GROUP, SETUP_GROUPS, SETUP_TENSORS = range(len(SETUP_STEPS))

_SLOT = ctypes.c_int64 * len(FIELDS)


@dataclass(frozen=True)
class Snapshot:
    """One rank's slot as read by the launcher."""

    local_rank: int
    pid: int
    rank: int
    state: int
    op: int
    since_ns: int

    def seconds_in_state(self, now_ns: int | None = None) -> float:
        return ((now_ns or time.time_ns()) - self.since_ns) / 1e9 if self.since_ns else 0.0


class Board:
    """The shared slots of every local rank; the launcher creates it, each worker opens its own slot."""

    def __init__(self, path: str, nslots: int, create: bool):
        size = nslots * ctypes.sizeof(_SLOT)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.path = path
        self.slots = [_SLOT.from_buffer(self._map, i * ctypes.sizeof(_SLOT)) for i in range(nslots)]
        if create:
            for s in self.slots:
                s[RANK] = -1  # not known until the worker starts

    def snapshot(self) -> list[Snapshot]:
        out = []
        for i, s in enumerate(self.slots):
            state, op = s[STATE], s[OP]  # read in the reverse order of the writes, `since` last
            out.append(Snapshot(i, s[PID], s[RANK], state, op, s[SINCE]))
        return out


class Slot:
    """One worker's view of its slot (or a private one when no launcher is watching)."""

    def __init__(self, slot=None):
        self.s = slot if slot is not None else _SLOT()

    def start(self, rank: int):
        s = self.s
        s[PID], s[RANK], s[SINCE], s[OP] = os.getpid(), rank, time.time_ns(), -1
        s[STATE] = INIT

    def setup(self, step: int):
        """The set-up step this rank has reached (a SETUP_* number); the time in set-up keeps counting from
        its start, so the hang guard's deadline covers set-up as a whole."""
        self.s[OP] = step

    def state(self, state: int, op: int = -1):
        s = self.s
        s[SINCE] = time.time_ns()
        s[OP] = op
        s[STATE] = state

    @property
    def op(self) -> int:
        return self.s[OP]
