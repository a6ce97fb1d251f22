"""What a Schedule needs from this machine, checked before anything allocates it.

The simulator holds every rank's tensors in one process and `commdsl run` starts every local rank on
this node, so both need the sum over ranks; a program that asks for more is refused with the size and
the limit named, instead of being killed by the OOM killer halfway through.
"""

from __future__ import annotations

import os

from commdsl.diagnostics import Diagnostic, Note
from commdsl.dtypes import DTYPES
from commdsl.rules.sizes import TensorsExceedMemory
from commdsl.schedule import Schedule

MEMORY_SHARE = 0.5
"""Of the machine's physical memory, the share one run may use for program tensors."""


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
