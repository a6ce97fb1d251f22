"""Before any process starts: expand the program at the run's world size, check it, simulate it.

One engine pass gives both the checker's findings and the simulator's expected tensors (the runtime
compares against them afterwards). Only the run's own world size is checked — that is the one that
is about to run — with the backend the run will use, so NCCL-only problems are caught for NCCL.
No torch here: a refused program costs no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commdsl.diagnostics import Diagnostic
from commdsl.resolve import Program
from commdsl.schedule import Schedule
from commdsl.simulate import SimResult


@dataclass
class Prepared:
    schedule: Schedule
    sim: SimResult | None  # None when the checks were skipped and the simulation did not finish
    diagnostics: list[Diagnostic]

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def prepare(
    program: Program, world: int, params: dict, backend: str, local_ranks: int = 0, schedule: Schedule | None = None
) -> Prepared:
    """Raises CommdslError when the program does not expand at this size, or its tensors cannot fit in
    this machine's memory with `local_ranks` ranks running here beside the simulator (both stop a run even
    under --no-check: there is nothing that could run). `schedule`: the expansion at `world`, when the
    caller has made it already (to bound its own work before the check)."""
    from commdsl.checker import analyse_schedule
    from commdsl.diagnostics import CommdslError
    from commdsl.expand import expand
    from commdsl.limits import memory_problem

    if schedule is None:
        schedule = expand(program, world, params)
    too_big = memory_problem(
        schedule, what="a run (simulator and ranks)" if local_ranks else "the simulator", local_ranks=local_ranks
    )
    if too_big is not None:
        raise CommdslError([replace(too_big, worlds=(world,))])
    diags, sim = analyse_schedule(program, schedule, (backend,), False, True)
    diags = [replace(d, worlds=(world,)) for d in diags]
    return Prepared(schedule, sim, diags)
