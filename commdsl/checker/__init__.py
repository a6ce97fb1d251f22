"""Static analysis: expand at every declared world size, run the engine, let the rules speak.

`check_program` is the whole of `commdsl check` / `commdsl lint` for one program. One expansion and one
engine run per world size feed every rule (`commdsl.rules`); repeats of one root cause across world
sizes and ranks merge into one diagnostic listing the sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from commdsl.checker import noqa
from commdsl.checker.access import Access
from commdsl.checker.context import Context
from commdsl.diagnostics import CommdslError, Diagnostic, Note
from commdsl.engine import GLOO, NCCL, Both, run_engine
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


def checker_rules(lints: bool):
    """The rules that read an engine outcome, in code order (idiom lints only for `lint`)."""
    from commdsl.rules.registry import RULES

    return [r for r in RULES if hasattr(r, "check") and not r.removed and (lints or r.code[0] != "L")]


MODELS = {"gloo": GLOO, "nccl": NCCL}
_RANK = re.compile(r"\brank (\d+)")


def analyse_schedule(
    program: Program,
    schedule,
    backends: tuple[str, ...],
    lints: bool,
    with_data: bool,
    deadline: Deadline | None = None,
):
    """All findings for one expansion, the run under each backend's model read by every rule; returns
    (diagnostics, the simulation under the first backend or None)."""
    access = Access(schedule, lints)
    tagged_too = "nccl" in backends and _uses_tags(schedule)
    sim, outcomes = None, {}
    for b in backends:
        observer = access if not outcomes else None
        if with_data and not outcomes:
            from commdsl.simulate import Data, SimResult

            data = Data(schedule, backend=b)
            observer = Both(data, access)
        outcomes[b] = run_engine(schedule, MODELS[b], observer, record_matches=tagged_too, deadline=deadline)
        if with_data and sim is None:
            sim = SimResult(schedule, outcomes[b], data)
    tagged = None
    if tagged_too:
        tagged = outcomes.get("gloo") or run_engine(schedule, GLOO, record_matches=True, deadline=deadline)
    found: dict[tuple, tuple[Diagnostic, list[str]]] = {}
    for b, outcome in outcomes.items():
        ctx = Context(program, schedule, outcome, tagged if b == "nccl" else None, access, backends, lints, b)
        for rule in checker_rules(lints):
            for d in rule.check(ctx):
                key = (d.code, d.span.start if d.span else None, tuple(lab.span.start for lab in d.labels))
                if key in found:  # the same finding under another backend: keep what that backend adds
                    first, seen = found[key]
                    extra = tuple(n for n in d.notes if n not in first.notes)
                    if extra:
                        found[key] = (replace(first, notes=first.notes + extra), seen)
                else:
                    found[key] = (d, [])
                found[key][1].append(b if not rule.about_backends else "*")
    diags = [on_backends(d, seen, backends) for d, seen in found.values()]
    if sim is not None:
        diags.extend(data_findings(sim))
    if any(d.severity == "error" for d in diags):
        from commdsl.rules.registry import CODES

        diags = [d for d in diags if not CODES[d.code].quiet_beside_errors]
    return [_with_calls(d, program, schedule) for d in with_values_read(schedule, diags)], sim


def _with_calls(d: Diagnostic, program: Program, schedule) -> Diagnostic:
    """A finding on a line of a function's body names the calls that inlined that body in this expansion,
    one note per chain of calls, as an expansion error does."""
    from commdsl.resolve import call_note

    inside = [f for f in program.functions if d.span is not None and f.span.start <= d.span.start < f.span.end]
    if not inside:
        return d
    notes = tuple(call_note(chain) for chain in schedule.reached.get(inside[0].name.name, ()))
    extra = tuple(x for x in notes if x not in d.notes)
    return replace(d, notes=d.notes + extra) if extra else d


def data_findings(sim) -> list[Diagnostic]:
    """What the simulation's data shows: integer divisions by zero, sums that depend on the order of addition,
    floats stored into integers that cannot hold them, and (once every rank finished) the `expect`s that fail."""
    from commdsl.rules.verify import ExpectFailed, FloatOutOfIntegerRange, IntegerDivisionByZero, OrderDependentSum

    found = list(IntegerDivisionByZero.from_simulation(sim)) + list(OrderDependentSum.from_simulation(sim))
    found += FloatOutOfIntegerRange.from_simulation(sim)
    if sim.engine.completed:
        found.extend(ExpectFailed.from_simulation(sim))
    return [_cited(d) for d in found]


def _cited(d: Diagnostic) -> Diagnostic:
    """`d` ending with the note that cites its rule's section of the backend model, if the rule has one."""
    from commdsl.rules.registry import CODES

    cite = CODES[d.code].cite()
    return d if cite is None else replace(d, notes=d.notes + (cite,))


def on_backends(d: Diagnostic, seen: list[str], backends: tuple[str, ...]) -> Diagnostic:
    """A finding cites the backend model's section its notes come from, and one found under some of the checked
    backends only says on which ("*": the rule compares backends)."""
    d = _cited(d)
    seen = sorted(set(seen))
    if "*" in seen or len(seen) == len(set(backends)):
        return d
    note = Note(message=f"only on {' and '.join(seen)} (checked for {', '.join(backends)})")
    return replace(d, notes=d.notes + (note,))


def _uses_tags(schedule) -> bool:
    from commdsl.schedule import P2PRec
    from commdsl.values import is_vec

    return any(isinstance(r, P2PRec) and (is_vec(r.tag) or r.tag != 0) for r in schedule.records)


def check_program(program: Program, options: CheckOptions = CheckOptions()) -> list[Diagnostic]:
    worlds = options.worlds or tuple(program.world_sizes(options.bound))
    backends = options.backends or program.backends
    merged: dict[tuple, Diagnostic] = {}
    analysed: list[int] = []  # the sizes whose schedule every rule read
    deadline = Deadline(options.max_seconds)
    for world in worlds:
        stopped = False
        try:
            found, ran = _check_world(program, world, backends, options, deadline)
        except TimeLimitReached as stop:
            found, stopped, ran = [replace(stop.diagnostic, worlds=(world,))], True, False
        if ran:
            analysed.append(world)
        for d in found:
            key = (d.code, d.span.start if d.span else None, tuple(lab.span.start for lab in d.labels))
            if key in merged:
                prev = merged[key]
                if world not in prev.worlds:
                    merged[key] = replace(prev, worlds=prev.worlds + (world,))
            else:
                merged[key] = d
        if stopped:  # nothing more is known: the sizes after this one go unchecked
            break
    kept = [d for d in merged.values() if _at_every_size(d, analysed)]
    return sorted(noqa.apply(kept, program.source, options.lints), key=Diagnostic.sort_key)


def _at_every_size(d: Diagnostic, analysed: list[int]) -> bool:
    """A shape lint (`Rule.every_world_from`) stands only where it shows at every analysed size it can show at."""
    from commdsl.rules.registry import CODES

    rule = CODES.get(d.code)
    start = getattr(rule, "every_world_from", None)
    return start is None or {w for w in analysed if w >= start} <= set(d.worlds)


def _check_world(program: Program, world: int, backends, options: CheckOptions, deadline: Deadline):
    """(findings, whether the rules read an expansion at this size)."""
    try:
        schedule = expand(program, world, options.params, deadline)
    except CommdslError as e:
        return e.diagnostics, False
    too_big = memory_problem(schedule) if options.simulate else None
    if too_big is not None:
        return [replace(too_big, worlds=(world,))], False
    found, _ = analyse_schedule(program, schedule, backends, options.lints, options.simulate, deadline)
    return [replace(d, worlds=(world,)) for d in found], True


def with_values_read(schedule, found: list[Diagnostic]) -> list[Diagnostic]:
    """Each finding at a statement whose operands came from tensor data, with a note naming the values the ranks
    it names read (`schedule.values_read`); where some ranks stopped at a read no run reached, every finding
    says so, since the ops after that read were not checked."""
    from commdsl.schedule import values_read

    if not schedule.unread and not any(r.data for r in schedule.records):
        return found
    at: dict[int, list] = {}
    for rec in schedule.records:
        if rec.data:
            at.setdefault(rec.span.start, []).append(rec)
    stopped = [
        Note(
            message=f"rank {r} stopped at `{rec.text}` (line {rec.span.line}): no run of the schedule reached "
            "that read, so its ops after it are not checked"
        )
        for r, rec in sorted(schedule.unread.items())[:4]
    ]
    out = []
    for d in found:
        spans = [d.span] + [lab.span for lab in d.labels]
        recs = [rec for sp in spans if sp is not None for rec in at.get(sp.start, ())]
        reads = list(dict.fromkeys(r for rec in recs for r in rec.data))
        texts = " ".join([d.message, d.label] + [lab.message for lab in d.labels])
        named = list(dict.fromkeys(int(x) for x in _RANK.findall(texts)))[:2]
        ranks = named or ([int(recs[0].ranks[0])] if recs else [])
        notes = [Note(message=m) for m in values_read(reads, ranks)] + stopped
        out.append(replace(d, notes=d.notes + tuple(notes)) if notes else d)
    return out


def stall_diagnostics(program: Program, outcome) -> list[Diagnostic]:
    """What a stalled simulation means (used by `commdsl sim`): the checker's own verdict on it."""
    if outcome.completed:
        return []
    schedule = outcome.schedule
    diags, _ = analyse_schedule(program, schedule, schedule.backends, False, False)
    return [replace(d, worlds=(schedule.world,)) for d in diags]


def data_diagnostics(sim) -> list[Diagnostic]:
    """`data_findings` of one simulation (used by `commdsl sim`), at its world size, after its message races:
    where a receive from any source races, the data shown is one of the possible outcomes."""
    from commdsl.rules.p2p import MessageRace

    found = [_cited(d) for d in MessageRace.from_outcome(sim.engine)] + data_findings(sim)
    return [replace(d, worlds=(sim.schedule.world,)) for d in found]
