"""Static analysis: expand at every declared world size, run the engine, let the rules speak.

`check_program` is the whole of `commdsl check` / `commdsl lint` for one program. Repeats of one root
cause across world sizes and ranks merge into one diagnostic listing the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commdsl.checker.context import AccessTracker, Context
from commdsl.checker.registry import FAMILIES, LINTS, verify
from commdsl.checker.waits import analyse
from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.engine import EngineResult, Observer, run_engine
from commdsl.expand import expand
from commdsl.fast import proves_clean
from commdsl.limits import memory_problem
from commdsl.resolve import OPEN_WORLD_BOUND, Program


@dataclass(frozen=True)
class CheckOptions:
    worlds: tuple[int, ...] | None = None  # None: every declared size (open ranges up to `bound`)
    backends: tuple[str, ...] | None = None  # None: the program's `backend` line
    params: dict = field(default_factory=dict)
    lints: bool = False
    simulate: bool = True
    bound: int = OPEN_WORLD_BOUND


class _Both(Observer):
    """Feeds one engine run to two observers (the simulator's data and the checker's accesses)."""

    def __init__(self, a: Observer, b: Observer):
        self.a, self.b = a, b

    def local(self, *args):
        self.a.local(*args)
        self.b.local(*args)

    def posted(self, p):
        self.a.posted(p)
        self.b.posted(p)

    def matched(self, s, r):
        self.a.matched(s, r)
        self.b.matched(s, r)

    def called(self, c):
        self.a.called(c)
        self.b.called(c)

    def completed(self, inst):
        self.a.completed(inst)
        self.b.completed(inst)

    def waited(self, *args):
        self.a.waited(*args)
        self.b.waited(*args)


def analyse_schedule(program: Program, schedule, backends: tuple[str, ...], lints: bool, with_data: bool):
    """All findings for one expansion; returns (diagnostics, simulation result or None)."""
    access = AccessTracker(schedule.world)
    sim = None
    if with_data:
        from commdsl.simulate import DataObserver, finish

        data = DataObserver(schedule)
        zero = run_engine(schedule, "zero", False, _Both(data, access))
        sim = finish(schedule, data, zero)
    else:
        zero = run_engine(schedule, "zero", False, access)
    infinite = run_engine(schedule, "infinite") if zero.stalled else zero
    nccl = run_engine(schedule, "zero", True) if "nccl" in backends else None
    ctx = Context(program, schedule, zero, infinite, nccl, access, backends)
    ctx.extra["waits"] = analyse(ctx)
    diags: list[Diagnostic] = []
    for family in FAMILIES + (LINTS if lints else ()):
        diags.extend(family.check(ctx))
    if sim is not None and zero.completed:
        diags.extend(verify.check_expects(sim))
    return diags, sim


def check_program(program: Program, options: CheckOptions = CheckOptions()) -> list[Diagnostic]:
    worlds = options.worlds or tuple(program.world_sizes(options.bound))
    backends = options.backends or program.backends
    merged: dict[tuple, Diagnostic] = {}
    for world in worlds:
        if proves_clean(program, world, options.params, backends, options.lints, options.simulate):
            continue  # the vectorised fast path proved it: nothing to report at this size
        try:
            schedule = expand(program, world, options.params)
        except CommdslError as e:
            found = e.diagnostics
        else:
            too_big = memory_problem(schedule) if options.simulate else None
            if too_big is not None:
                found = [too_big]
            else:
                found, _ = analyse_schedule(program, schedule, backends, options.lints, options.simulate)
            found = [d.model_copy(update={"worlds": (world,)}) for d in found]
        for d in found:
            key = (d.code, d.span.start if d.span else None, tuple(lab.span.start for lab in d.labels))
            if key in merged:
                prev = merged[key]
                if world not in prev.worlds:
                    merged[key] = prev.model_copy(update={"worlds": prev.worlds + (world,)})
            else:
                merged[key] = d
    return sorted(merged.values(), key=Diagnostic.sort_key)


def stall_diagnostics(program: Program, result: EngineResult) -> list[Diagnostic]:
    """What a stalled simulation means (used by `commdsl sim`): the checker's own verdict on it."""
    if result.completed:
        return []
    schedule = result.schedule
    diags, _ = analyse_schedule(program, schedule, schedule.backends, False, False)
    return [d.model_copy(update={"worlds": (schedule.world,)}) for d in diags]


def expect_diagnostics(program: Program, sim) -> list[Diagnostic]:
    if not sim.engine.completed:
        return []
    return [d.model_copy(update={"worlds": (sim.schedule.world,)}) for d in verify.check_expects(sim)]
