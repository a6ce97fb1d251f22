"""The bounds on one check: ops, memory and time. Whatever the input, a check ends, and a bound it reaches
is a diagnostic that names it.

* ops: the expansion stops at `MAX_OPS` loop steps and ops, or `MAX_RECORDS` statement instances, over all
  ranks of one world size (N133, raised by `expand`); both also bound the engine's work, which is linear
  in them;
* memory: the simulator holds every rank's tensors in one process and `commdsl run` starts every local rank
  on this node, so both need the sum over ranks; a program that asks for more than `MEMORY_SHARE` of this
  machine is refused before anything is allocated (N132);
* time: `Deadline`, checked as the expansion adds records and at every engine round (N134).
"""

from __future__ import annotations

import os
import time

from commdsl.diagnostics import Diagnostic, Note
from commdsl.dtypes import DTYPES
from commdsl.rules.sizes import TensorsExceedMemory, TimeLimitExceeded
from commdsl.schedule import Schedule

MEMORY_SHARE = 0.5
"""Of the machine's physical memory, the share one run may use for program tensors."""
MAX_OPS = 200_000_000
"""Loop steps plus ops over all ranks of one expansion (a ring all-reduce at world 4096 is 84 M)."""
MAX_RECORDS = 2_000_000
"""Statement instances of one expansion: each is a record, with Python work and memory of its own."""
TIME_LIMIT = 600.0
"""Seconds one `check`/`lint` of one program may take, by default (`--max-time`)."""


class Deadline:
    """The moment a check must have ended by; `None` seconds is no limit."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() > self.at


class TimeLimitReached(Exception):
    """The deadline passed; carries the diagnostic that says where the check had got to."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def time_limit(deadline: Deadline, span, where: str) -> TimeLimitReached:
    return TimeLimitReached(TimeLimitExceeded.diagnostic(
        f"the check reached its time limit of {deadline.seconds:g} s while {where}", span=span,
        label="it had got this far",
        help="raise the limit with `--max-time`, or check a smaller world size with `--world`"))


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: no limit we can know
        return 1 << 62


def tensor_bytes(schedule: Schedule, ranks=None) -> int:
    ranks = range(schedule.world) if ranks is None else ranks
    return sum(spec.numel * DTYPES[spec.dtype].itemsize for r in ranks for spec in schedule.tensors[r].values())


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def memory_problem(schedule: Schedule, ranks=None, what: str = "the simulator") -> Diagnostic | None:
    """N132 when the tensors of `ranks` (default: all) exceed the share of this machine's memory."""
    need = tensor_bytes(schedule, ranks)
    limit = int(physical_memory() * MEMORY_SHARE)
    if need <= limit:
        return None
    biggest = max(((spec.numel * DTYPES[spec.dtype].itemsize, spec) for r in (ranks or range(schedule.world))
                   for spec in schedule.tensors[r].values()), key=lambda x: x[0])[1]
    return TensorsExceedMemory.diagnostic(
        f"the tensors need {_gib(need)} over {schedule.world} ranks, more than the {_gib(limit)} {what} may use",
        span=biggest.span, label=f"`{biggest.name}`: {list(biggest.shape)} {biggest.dtype} per rank",
        notes=(Note(message=f"this machine has {_gib(physical_memory())}; the limit is {int(MEMORY_SHARE * 100)}% of it"),),
        help="lower the size params with `--set`, or run on more machines")
