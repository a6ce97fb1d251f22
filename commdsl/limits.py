"""What a Schedule needs from this machine, checked before anything allocates it.

The simulator holds every rank's tensors in one process. `commdsl run` does that in its launcher and
also starts this node's ranks, each holding its own tensors plus temporaries up to RANK_FACTOR times
them (the runtime works a chunk at a time: measured about 1.2x, docs/reliability.md). So a run needs
the world's tensor bytes once plus RANK_FACTOR times every local rank's; a program that asks for more
than MEMORY_SHARE of this machine's memory (the smaller of physical memory and a cgroup limit) is
refused with the sizes and the limit named, instead of being killed by the OOM killer halfway through.
"""

from __future__ import annotations

import os

from commdsl.diagnostics import Diagnostic, Note
from commdsl.dtypes import DTYPES
from commdsl.schedule import Schedule

MEMORY_SHARE = 0.5
"""Of the machine's memory, the share one run may use for program tensors (the rest: temporaries, torch)."""
RANK_FACTOR = 3
"""The most a rank of `commdsl run` holds, in multiples of its own tensors' bytes."""


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


def tensor_bytes(schedule: Schedule, ranks=None) -> int:
    ranks = range(schedule.world) if ranks is None else ranks
    return sum(spec.numel * DTYPES[spec.dtype].itemsize for r in ranks for spec in schedule.tensors[r].values())


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def memory_problem(schedule: Schedule, ranks=None, what: str = "the simulator",
                   local_ranks: int = 0) -> Diagnostic | None:
    """N132 when the tensors of `ranks` (default: all), plus RANK_FACTOR times those of the `local_ranks`
    largest ranks (the ranks a run starts on this node), exceed the share of this machine's memory."""
    ranks = range(schedule.world) if ranks is None else ranks
    sim = tensor_bytes(schedule, ranks)
    per_rank = sorted((tensor_bytes(schedule, [r]) for r in range(schedule.world)), reverse=True)
    here = RANK_FACTOR * sum(per_rank[:local_ranks])
    need, limit = sim + here, int(physical_memory() * MEMORY_SHARE)
    if need <= limit:
        return None
    biggest = max(((spec.numel * DTYPES[spec.dtype].itemsize, spec) for r in ranks
                   for spec in schedule.tensors[r].values()), key=lambda x: x[0])[1]
    notes = [Note(message=f"this machine has {_gib(physical_memory())}; the limit is {int(MEMORY_SHARE * 100)}% of it")]
    if local_ranks:
        notes.insert(0, Note(message=f"the simulator holds all {schedule.world} ranks' tensors ({_gib(sim)}) and each "
                                     f"of the {local_ranks} ranks on this node up to {RANK_FACTOR}x its own "
                                     f"({_gib(here)} together)"))
    return Diagnostic(
        code="N132", span=biggest.span, label=f"`{biggest.name}`: {list(biggest.shape)} {biggest.dtype} per rank",
        message=f"the tensors need {_gib(need)} over {schedule.world} ranks, more than the {_gib(limit)} {what} may use",
        notes=tuple(notes), help="lower the size params with `--set`, or run on more machines")
