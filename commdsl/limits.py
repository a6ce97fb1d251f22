"""The bounds on one check: ops, memory and time. Whatever the input, a check ends, and a bound it reaches
is a diagnostic that names it.

* ops: the expansion stops at `MAX_OPS` loop steps and ops, `MAX_RECORDS` statement instances, or
  `MAX_COLLECTIVE_CALLS` calls of collectives that move data, over all ranks of one world size, and at
  `MAX_WHILE_ITERATIONS` iterations of one `while` loop (N133, raised by `expand`); they also bound the
  engine's work, which is linear in them;
* memory: the simulator holds every rank's tensors in one process, with temporaries up to SIM_FACTOR times
  them in all. `commdsl run` does that in its launcher and also starts this node's ranks, each holding its
  own tensors plus temporaries up to RANK_FACTOR times them (the runtime works a chunk at a time: measured
  about 1.25x, docs/reliability.md). So a run needs SIM_FACTOR times the world's tensor bytes plus
  RANK_FACTOR times every local rank's; a program that asks for more than
  MEMORY_SHARE of this machine's memory (the smaller of physical memory and a cgroup limit) is refused with
  the sizes and the limit named (N132), instead of being killed by the OOM killer halfway through;
* time: `Deadline`, checked as the expansion adds records and at every engine round (N134).
"""

from __future__ import annotations

import os
import time

import numpy as np

from commdsl.diagnostics import Diagnostic, Note
from commdsl.dtypes import DTYPES
from commdsl.rules.sizes import TensorsExceedMemory, TimeLimitExceeded
from commdsl.schedule import Schedule

MEMORY_SHARE = 0.5
"""Of the machine's memory, the share one run may use for program tensors (the rest: temporaries, torch)."""
RANK_FACTOR = 3
"""The most a rank of `commdsl run` holds, in multiples of its own tensors' bytes."""
SIM_FACTOR = 8
"""The most the simulator holds, in multiples of all ranks' tensor bytes: the tensors, a collective's
per-member inputs and outputs, and, for a floating-point sum over three or more members, the float64
copies its order check computes with (measured with `benchmarks/run_memory.py` and `commdsl sim`: 2.7x
for an all_reduce on two ranks, 7.5x on four and on eight; initialisers and expects go a piece at a time,
`simulate.SIM_CHUNK`). It once counted 1x, while an expect over 200 MiB a rank took the simulator 7.4 GiB."""
MAX_OPS = 200_000_000
"""Loop steps plus ops over all ranks of one expansion (a ring all-reduce at world 4096 is 84 M)."""
MAX_RECORDS = 2_000_000
"""Statement instances of one expansion: each is a record, with Python work and memory of its own."""
MAX_COLLECTIVE_CALLS = 1_000_000
"""Calls of collectives that move data, summed over ranks, in one expansion. The simulator computes each
member's part of a collective on its own (about 20-40 us each, where an op elsewhere costs well under
1 us): `world 65536` with 65 `all_reduce`s, a 100-byte program, took minutes before this bound."""
MAX_WHILE_ITERATIONS = 65_536
"""Iterations of one `while` loop (N133), enough to step through every rank of the largest world one at a time.
A body of `let`s alone adds no op that MAX_OPS would count, so without this bound a condition that never turns
false would hang the check (an iteration costs about 40 us: the bound is reached in seconds)."""
MAX_READ_PASSES = 256
"""Runs of a partial schedule one expansion may take to learn the integers it reads from tensor data (N133):
each run reaches at least one more read on some rank, so a loop that reads each iteration's received counts
takes one run per iteration."""
MAX_TABLE = 65_536
"""Entries of one `table` (N133): one per rank of the largest world. Each is computed in Python, about 10 us."""
MAX_TIMEOUT_S = 7 * 24 * 3600
"""The longest duration a flag or setting may give (`--timeout`, `--max-time`): a week (a finite value keeps
every deadline computable)."""
TIME_LIMIT = 600.0
"""Seconds one `check`/`lint` or `predict` of one program may take, by default (`--max-time`)."""


class Deadline:
    """The moment a check (or a prediction: `work`) must have ended by; `None` seconds is no limit.
    `smaller`: what the user can make smaller instead of raising the limit."""

    def __init__(
        self, seconds: float | None, work: str = "check", smaller: str = "check a smaller world size with `--world`"
    ):
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds
        self.work, self.smaller = work, smaller

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() > self.at


class TimeLimitReached(Exception):
    """The deadline passed; carries the diagnostic that says where the check had got to."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def time_limit(deadline: Deadline, span, where: str) -> TimeLimitReached:
    return TimeLimitReached(
        TimeLimitExceeded.diagnostic(
            f"the {deadline.work} reached its time limit of {deadline.seconds:g} s while {where}",
            span=span,
            label="it had got this far",
            help=f"raise the limit with `--max-time`, or {deadline.smaller}",
        )
    )


def physical_memory() -> int:
    """This machine's memory, or the cgroup's limit on this process when that is lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: no limit we can know
        return 1 << 62
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def tensor_bytes(schedule: Schedule) -> dict[str, np.ndarray]:
    """Each declared tensor's bytes on every rank (an array over ranks), from the declarations' per-rank shapes:
    no tensor spec is built per rank (a program checked at every size of `world 1..2048` spent half its time
    there). Floats: a sum past 2**63 bytes is still "too big"."""
    return {
        name: info.numel_array(schedule.world) * float(DTYPES[info.dtype].itemsize)
        for name, info in schedule.infos.items()
    }


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def memory_problem(schedule: Schedule, what: str = "the simulator", local_ranks: int = 0) -> Diagnostic | None:
    """N132 when SIM_FACTOR times every rank's tensors, plus RANK_FACTOR times those of the `local_ranks`
    largest ranks (the ranks a run starts on this node), exceed the share of this machine's memory."""
    sizes = tensor_bytes(schedule)
    per_rank = sum(sizes.values(), np.zeros(schedule.world))
    sim = SIM_FACTOR * float(per_rank.sum())
    here = RANK_FACTOR * float(np.sort(per_rank)[::-1][:local_ranks].sum())
    need, limit = sim + here, int(physical_memory() * MEMORY_SHARE)
    if need <= limit:
        return None
    name = max(sizes, key=lambda n: sizes[n].max())  # the largest tensor on any rank, as declared there
    biggest = schedule.infos[name].spec(int(sizes[name].argmax()))
    notes = [Note(message=f"this machine has {_gib(physical_memory())}; the limit is {int(MEMORY_SHARE * 100)}% of it")]
    held = (
        f"the simulator holds all {schedule.world} ranks' tensors and its temporaries, up to {SIM_FACTOR}x "
        f"the tensors ({_gib(sim)})"
    )
    if local_ranks:
        held += (
            f", and each of the {local_ranks} ranks on this node up to {RANK_FACTOR}x its own ({_gib(here)} together)"
        )
    notes.insert(0, Note(message=held))
    return TensorsExceedMemory.diagnostic(
        f"the tensors and their temporaries need {_gib(need)} over {schedule.world} ranks, "
        f"more than the {_gib(limit)} {what} may use",
        span=biggest.span,
        label=f"`{biggest.name}`: {list(biggest.shape)} {biggest.dtype} per rank",
        notes=tuple(notes),
        help="lower the size params (`--set`; `--sizes` for the one `bench` or `predict` sweeps), or use more machines",
    )
