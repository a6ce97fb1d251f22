"""Static analysis: expand at every declared world size, run the engine, let the rules speak.

`check_program` is the whole of `commdsl check` / `commdsl lint` for one program. One expansion and one
engine run per world size feed every rule (`commdsl.rules`); repeats of one root cause across world
sizes and ranks merge into one diagnostic listing the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commdsl.checker.access import Access
from commdsl.checker.context import Context
from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.engine import GLOO, NCCL, Observer, run_engine
from commdsl.expand import expand
from commdsl.limits import TIME_LIMIT, Deadline, TimeLimitReached, memory_problem
from commdsl.resolve import OPEN_WORLD_BOUND, Program


@dataclass(frozen=True)
class CheckOptions:
    worlds: tuple[int, ...] | None = None  # None: every declared size (open ranges up to `bound`)
    backends: tuple[str, ...] | None = None  # None: the program's `backend` line
    params: dict = field(default_factory=dict)
    lints: bool = False
    simulate: bool = True
    bound: int = OPEN_WORLD_BOUND
    max_seconds: float | None = TIME_LIMIT  # the whole program's check (`--max-time`); None: no limit


class _Both(Observer):
    """Feeds one engine run to two observers (the simulator's data and the checker's accesses)."""

    def __init__(self, a: Observer, b: Observer):
        self.a, self.b = a, b

    def local(self, *args):
        self.a.local(*args)
        self.b.local(*args)

    def posted(self, rows):
        self.a.posted(rows)
        self.b.posted(rows)

    def matched(self, sends, recvs):
        self.a.matched(sends, recvs)
        self.b.matched(sends, recvs)

    def called(self, *args):
        self.a.called(*args)
        self.b.called(*args)

    def completed(self, *args):
        self.a.completed(*args)
        self.b.completed(*args)

    def waited(self, reqs):
        self.a.waited(reqs)
        self.b.waited(reqs)


def checker_rules(lints: bool):
    """The rules that read an engine outcome, in code order (idiom lints only for `lint`)."""
    from commdsl.rules.registry import RULES

    return [r for r in RULES if hasattr(r, "check") and not r.removed and (lints or r.code[0] != "L")]


def analyse_schedule(program: Program, schedule, backends: tuple[str, ...], lints: bool, with_data: bool,
                     deadline: Deadline | None = None):
    """All findings for one expansion; returns (diagnostics, simulation result or None)."""
    access = Access(schedule, lints)
    nccl_too = "nccl" in backends
    sim = None
    if with_data:
        from commdsl.simulate import Data, SimResult

        data = Data(schedule)
        outcome = run_engine(schedule, GLOO, _Both(data, access), record_matches=nccl_too, deadline=deadline)
        sim = SimResult(schedule, outcome, data)
    else:
        outcome = run_engine(schedule, GLOO, access, record_matches=nccl_too, deadline=deadline)
    nccl = run_engine(schedule, NCCL, record_matches=True, deadline=deadline) if nccl_too else None
    ctx = Context(program, schedule, outcome, nccl, access, backends, lints)
    diags: list[Diagnostic] = []
    for rule in checker_rules(lints):
        diags.extend(rule.check(ctx))
    if sim is not None and outcome.completed:
        from commdsl.rules.verify import ExpectFailed

        diags.extend(ExpectFailed.from_simulation(sim))
    return diags, sim


def check_program(program: Program, options: CheckOptions = CheckOptions()) -> list[Diagnostic]:
    worlds = options.worlds or tuple(program.world_sizes(options.bound))
    backends = options.backends or program.backends
    merged: dict[tuple, Diagnostic] = {}
    deadline = Deadline(options.max_seconds)
    for world in worlds:
        stopped = False
        try:
            found = _check_world(program, world, backends, options, deadline)
        except TimeLimitReached as stop:
            found, stopped = [stop.diagnostic.model_copy(update={"worlds": (world,)})], True
        for d in found:
            key = (d.code, d.span.start if d.span else None, tuple(lab.span.start for lab in d.labels))
            if key in merged:
                prev = merged[key]
                if world not in prev.worlds:
                    merged[key] = prev.model_copy(update={"worlds": prev.worlds + (world,)})
            else:
                merged[key] = d
        if stopped:  # nothing more is known: the sizes after this one go unchecked
            break
    return sorted(merged.values(), key=Diagnostic.sort_key)


def _check_world(program: Program, world: int, backends, options: CheckOptions, deadline: Deadline):
    try:
        schedule = expand(program, world, options.params, deadline)
    except CommdslError as e:
        return e.diagnostics
    too_big = memory_problem(schedule) if options.simulate else None
    if too_big is not None:
        found = [too_big]
    else:
        found, _ = analyse_schedule(program, schedule, backends, options.lints, options.simulate, deadline)
    return [d.model_copy(update={"worlds": (world,)}) for d in found]


def stall_diagnostics(program: Program, outcome) -> list[Diagnostic]:
    """What a stalled simulation means (used by `commdsl sim`): the checker's own verdict on it."""
    if outcome.completed:
        return []
    schedule = outcome.schedule
    diags, _ = analyse_schedule(program, schedule, schedule.backends, False, False)
    return [d.model_copy(update={"worlds": (schedule.world,)}) for d in diags]


def expect_diagnostics(program: Program, sim) -> list[Diagnostic]:
    if not sim.engine.completed:
        return []
    from commdsl.rules.verify import ExpectFailed

    return [d.model_copy(update={"worlds": (sim.schedule.world,)}) for d in ExpectFailed.from_simulation(sim)]
