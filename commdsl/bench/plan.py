"""From what the user asked to a Plan: the variants to time, and for each size one checked Schedule.

A variant is a program (the user's, or a generated built-in) plus what it measures. Its sweep sets
one integer param (`n` unless `--param` says otherwise) so that the measured tensor has the requested
number of bytes, as near as the program's shapes allow; the table shows the bytes actually moved.
Every size is expanded and checked like `commdsl run` checks a program, before anything is launched.
`expect` and `print` are left out of the timed ops: the bench times communication and compute, and
`--check` compares every rank's tensors with the simulator after each iteration instead.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, replace

import numpy as np

from commdsl.bench.builtin import Builtin
from commdsl.bench.identify import BenchError, Measure, pragma, prove
from commdsl.checker import analyse_schedule
from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.dtypes import DTYPES
from commdsl.expand import Expander, expand, resolve_params, set_up
from commdsl.resolve import Program, load
from commdsl.schedule import UNTIMED_RECORDS, CollectiveRec, ComputeRec, P2PRec, Schedule
from commdsl.source import SourceFile


@dataclass(frozen=True)
class Variant:
    label: str  # its column heading and plot legend
    program: Program
    measure: Measure
    param: str  # the integer param the sweep sets
    params: dict  # the other params (--set)
    baseline: bool = False  # a reference (--compare): shown, never gated by --min-busbw
    in_place: bool | None = None  # `in_place`: whether it communicates in place (None: it moves no data both ways)


@dataclass(frozen=True)
class Case:
    """One variant at one size: what the workers run and what the table says about it."""

    variant: int
    requested: int  # bytes asked for
    size: int  # bytes of the measured tensor at `value`
    count: int
    dtype: str
    value: int  # of the variant's size param
    schedule: Schedule  # the timed ops only (no expect, no print)
    bases: tuple[int, ...]  # per rank: index of its first op in the Plan's guard schedule


@dataclass(frozen=True)
class Plan:
    world: int
    backend: str
    iters: int
    warmup: int
    check: bool
    out_dir: str  # the workers' result files, and the simulator's tensors with --check
    variants: tuple[Variant, ...]
    cases: tuple[Case, ...]
    guard: OpTable  # every case's ops end to end, per rank: what the hang guard and the blame read
    rounds: tuple[tuple[int, ...], ...]  # cases set up together whose iterations alternate (--compare)

    def locate(self, rank: int, index: int) -> tuple[Case, int] | None:
        """The case and the op within it at `index` of `rank`'s ops in the guard schedule."""
        for case in self.cases:
            base = case.bases[rank]
            if base <= index < base + len(case.schedule.ops[rank]):
                return case, index - base
        return None


@dataclass(frozen=True)
class OpTable:
    """Every case's ops end to end, per rank: all the launcher's hang guard and blame read of a Schedule."""

    program: str
    path: str
    world: int
    ops: list[list]


class Refused(Exception):
    """The checks found errors in a variant at some size: nothing is launched."""

    def __init__(self, variant: Variant, value: int, diagnostics: list[Diagnostic], world: int | None = None):
        super().__init__(variant.label)
        self.variant, self.value, self.diagnostics = variant, value, diagnostics
        self.world = world  # where the checks ran, when not at the command's world (predict's CHECK_WORLD)

    def summary(self, verb: str, world: int) -> str:
        """The line after its diagnostics: `verb` (bench, predict) refused, at which world and param value."""
        at = f" with `{self.variant.param} = {self.value}`" if self.value >= 0 else ""
        where = world if self.world is None else self.world
        return f"refusing to {verb} {self.variant.label}: the checks found errors at world size {where}{at}"


def builtin_variant(b: Builtin, baseline: bool = False, label: str | None = None) -> Variant:
    program = load(SourceFile(b.path, b.text))
    measure = Measure(b.kind, b.tensor, b.redop, b.root, "built-in")
    # every built-in runs at world 2, and its form is the same at every world size
    return Variant(label or b.kind, program, measure, "n", {}, baseline, in_place(expand(program, 2, {})))


def program_variant(
    program: Program, world: int, param: str, params: dict, dtype: str | None, baseline: bool = False
) -> Variant:
    """The user's program as a variant: what it measures from its pragma, else its expects, else its
    largest tensor with busbw = algbw. BenchError when it cannot be swept at this world size."""
    check_sweepable(program, world, param, params, "--nproc")
    try:
        sized = sized_by(program, world, param, params)
        measure = pragma(program) or prove(program, world, params, sized) or largest(program, world, params, sized)
        if dtype is not None:
            program = with_dtype(program, measure.tensor, dtype)
            measure = pragma(program) or prove(program, world, params, sized) or measure
    except CommdslError as e:
        raise Refused(Variant(program.name, program, Measure(None, ""), param, params), -1, e.diagnostics) from None
    check_sized(program, measure, param, sized)
    return Variant(program.name, program, measure, param, params, baseline, in_place(expand(program, world, params)))


def in_place(schedule: Schedule) -> bool | None:
    """nccl-tests' in-place, said of a whole program: the result is left in the buffers it was sent from. True
    when, on every rank that both sends and receives, each tensor it sends from (sends, collective inputs) is
    one it also writes (receives, collective outputs, assignments): `all_reduce x`, the ring and recursive
    doubling (`x += tmp`) are in place, `all_gather x into y` is not, `all_gather y.chunk(rank, world) into y`
    is. None when no rank both sends and receives (a one-way ping)."""
    world = schedule.world
    sent: list[set[str]] = [set() for _ in range(world)]
    received: list[set[str]] = [set() for _ in range(world)]
    written: list[set[str]] = [set() for _ in range(world)]
    for rec in schedule.records:
        if isinstance(rec, P2PRec):
            moved = [(sent, rec.view.tensor)] if rec.is_send else [(received, rec.view.tensor)]
        elif isinstance(rec, CollectiveRec):
            moved = [(sent, v.tensor) for v in rec.inputs] + [(received, v.tensor) for v in rec.outputs]
        elif isinstance(rec, ComputeRec):
            moved = [(written, rec.target.tensor)]
        else:
            continue
        for sets, tensor in moved:
            for r in rec.ranks:
                sets[int(r)].add(tensor)
    both = [r for r in range(world) if sent[r] and received[r]]
    return all(sent[r] <= received[r] | written[r] for r in both) if both else None


def check_sweepable(program: Program, world: int, param: str, params: dict, world_flag: str) -> None:
    """BenchError unless `program` runs at `world` (given by `world_flag`) and has `param` to sweep, which
    `--set` leaves alone (`commdsl bench` and `commdsl predict` alike)."""
    if not program.accepts(world):
        raise BenchError(
            f"{program.path}: runs at world sizes {program.describe_world()}; {world_flag} {world} is not one of them"
        )
    declared = {p.name for p in program.params}
    if param not in declared:
        raise BenchError(
            f"{program.path}: no param `{param}` to sweep (its params: "
            f"{', '.join(sorted(declared)) or 'none'}); --param NAME picks another"
        )
    if param in params:
        raise BenchError(f"--set {param}=…: `{param}` is the param the sweep sets; leave it out")


def tensor_specs(program: Program, world: int, params: dict) -> dict[str, tuple[int, str]]:
    """Rank 0's tensors (elements, dtype) at `world`, from the declarations alone (no statement expanded);
    CommdslError when a declaration fails there (a negative shape, more elements than a tensor may have)."""
    ex = Expander(program, world, resolve_params(program, params))
    set_up(ex)
    if ex.errors:
        raise CommdslError([d for d, _ in ex.errors.values()])
    return {name: (info.spec(0).numel, info.spec(0).dtype) for name, info in ex.infos.items()}


def sized_by(program: Program, world: int, param: str, params: dict) -> set[str] | None:
    """Rank 0's tensors whose number of elements changes with `param` (at its value and at twice it): the only
    ones a sweep of `param` can size (`steps: int64[1]` beside `bucket: float32[n]` is not one). None when
    that cannot be told (the param is not a positive integer, or twice it does not declare)."""
    value = resolve_params(program, params)[param]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    at = tensor_specs(program, world, {**params, param: value})
    try:
        twice = tensor_specs(program, world, {**params, param: 2 * value})
    except CommdslError:
        return None
    return {name for name, (numel, _) in at.items() if name in twice and twice[name][0] != numel}


def largest(program: Program, world: int, params: dict, sized: set[str] | None) -> Measure:
    """Rank 0's largest tensor among those the sweep can size: what a program that proves no collective is
    measured by (busbw = algbw)."""
    specs = tensor_specs(program, world, params)
    specs = {name: spec for name, spec in specs.items() if sized is None or name in sized}
    if not specs:
        return Measure(None, "")  # check_sized says why
    return Measure(None, max(specs, key=lambda t: specs[t][0] * DTYPES[specs[t][1]].itemsize))


def check_sized(program: Program, measure: Measure, param: str, sized: set[str] | None) -> None:
    """BenchError unless sweeping `param` changes the size of the tensor the rows are measured by."""
    if not measure.tensor:
        if sized == set():
            raise BenchError(
                f"{program.path}: no tensor changes size with `{param}`, so sweeping it sizes nothing; "
                "--param NAME picks the param that sets the size"
            )
        raise BenchError(f"{program.path}: rank 0 has no tensor to size the sweep by")
    if sized is not None and measure.tensor not in sized:
        raise BenchError(
            f"{program.path}: the rows would be sized by `{measure.tensor}` ({measure.how}), which does not "
            f"change size with `{param}`; --param NAME picks the param that sets its size"
        )


def with_dtype(program: Program, tensor: str, dtype: str) -> Program:
    """`--dtype` for a program: every tensor declared with the measured tensor's dtype takes the new one."""
    old = next(t.dtype.name for t in program.tensors if t.name == tensor)
    tensors = tuple(
        replace(t, dtype=replace(t.dtype, name=dtype)) if t.dtype.name == old else t for t in program.tensors
    )
    return replace(program, tensors=tensors)


def build(
    variants: list[Variant],
    sizes: list[int],
    world: int,
    backend: str,
    iters: int,
    warmup: int,
    check: bool,
    out_dir: str,
    notes: list[str],
    interleave: bool = False,
) -> Plan:
    """Expand and check every variant at every size; Refused on the first size the checks reject.

    `interleave` (for --compare) makes the variants of each size one round: their iterations
    alternate, so a ratio is taken under the same load. Otherwise each case runs alone (several
    collectives at 64 MiB would not fit in memory together).

    With `check`, the simulator's tensors of every case are written to `out_dir` (one file per rank),
    so the parent never holds a whole sweep's expectations in memory. Sizes a variant cannot reach
    (its shapes round two requests to the same value, or make the measured tensor empty) are dropped,
    with a line in `notes`.
    """
    cases: list[Case] = []
    tops = [0] * world
    references = [_reference(v, world) for v in variants]
    seen: list[set] = [set() for _ in variants]
    for requested in sizes:  # size by size, the variants one after the other: a --compare sees the same load
        for vi, v in enumerate(variants):
            base_value, base_numel = references[vi]
            value, schedule = _fit(v, world, requested, base_value, base_numel)
            spec = schedule.tensors[_holder(schedule, v.measure.tensor)][v.measure.tensor]
            if spec.numel == 0:
                notes.append(f"{v.label}: {requested} B leaves `{v.measure.tensor}` empty; size skipped")
                continue
            if value in seen[vi]:
                notes.append(f"{v.label}: {requested} B gives `{v.param} = {value}` again; size skipped")
                continue
            seen[vi].add(value)
            diags, sim = analyse_schedule(v.program, schedule, (backend,), False, check)
            errors = [replace(d, worlds=(world,)) for d in diags if d.severity == "error"]
            if errors:
                raise Refused(v, value, errors)
            if check and not sim.engine.completed:
                raise BenchError(
                    f"{v.label}: --check needs the simulation to complete, and at `{v.param} = {value}` "
                    f"it does not (`commdsl check` says why)"
                )
            timed = dataclasses.replace(
                schedule,
                top=[rid for rid in schedule.top if not isinstance(schedule.records[rid], UNTIMED_RECORDS)],
            )
            itemsize = DTYPES[spec.dtype].itemsize
            cases.append(Case(vi, requested, spec.numel * itemsize, spec.numel, spec.dtype, value, timed, tuple(tops)))
            tops = [t + len(ops) for t, ops in zip(tops, timed.ops)]
            if check:
                _write_expected(out_dir, len(cases) - 1, sim)
            del sim
    if not cases:
        raise BenchError("no size left to measure: every requested size was skipped (see the notes above)")
    guard = OpTable("bench", "bench", world, [[op for c in cases for op in c.schedule.ops[r]] for r in range(world)])
    if interleave:
        rounds = [tuple(i for i, c in enumerate(cases) if c.requested == size) for size in sizes]
    else:
        rounds = [(i,) for i in range(len(cases))]
    return Plan(
        world,
        backend,
        iters,
        warmup,
        check,
        out_dir,
        tuple(variants),
        tuple(cases),
        guard,
        tuple(r for r in rounds if r),
    )


def _holder(schedule: Schedule, tensor: str) -> int:
    """A rank that has the tensor (a tensor may be declared on some ranks only)."""
    return next((r for r, specs in enumerate(schedule.tensors) if tensor in specs), 0)


def _reference(v: Variant, world: int) -> tuple[int, int]:
    """The size param's value at the program's defaults and the measured tensor's elements there."""
    try:
        value = resolve_params(v.program, v.params)[v.param]
        schedule = expand(v.program, world, v.params)
    except CommdslError as e:
        raise Refused(v, -1, e.diagnostics) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BenchError(
            f"{v.program.path}: param `{v.param}` = {value!r} is not an integer; the sweep sets an "
            f"integer param (--param NAME picks another)"
        )
    numel = schedule.tensors[_holder(schedule, v.measure.tensor)][v.measure.tensor].numel
    if numel == 0:
        raise BenchError(
            f"{v.program.path}: `{v.measure.tensor}` is empty at `{v.param} = {value}`, so the sweep "
            f"cannot tell how its size follows `{v.param}`"
        )
    return value, numel


def _fit(v: Variant, world: int, requested: int, base_value: int, base_numel: int) -> tuple[int, Schedule]:
    """The size param's value whose measured tensor is nearest `requested` bytes, and its Schedule.

    Shapes are usually linear in the param (`n`, `n // world * world`): scale the reference, then
    correct once with the size that value really gives."""

    def at(value: int) -> tuple[int, Schedule]:
        try:
            s = expand(v.program, world, {**v.params, v.param: value})
        except CommdslError as e:
            raise Refused(v, value, e.diagnostics) from None
        spec = s.tensors[_holder(s, v.measure.tensor)][v.measure.tensor]
        return spec.numel * DTYPES[spec.dtype].itemsize, s

    itemsize = DTYPES[measured_dtype(v)].itemsize
    value = max(1, round(requested / itemsize * base_value / base_numel))
    size, schedule = at(value)
    if size != requested and size > 0:
        better = max(1, round(value * requested / size))
        if better != value:
            size2, schedule2 = at(better)
            if abs(size2 - requested) < abs(size - requested):
                value, schedule = better, schedule2
    return value, schedule


def measured_dtype(v: Variant) -> str:
    """The declared dtype of the tensor a variant's sizes refer to."""
    return next(t.dtype.name for t in v.program.tensors if t.name == v.measure.tensor)


def expected_path(out_dir: str, case: int, rank: int) -> str:
    """The simulator's tensors of one rank in one case: `t_NAME` values and `u_NAME` undefined masks."""
    return os.path.join(out_dir, f"expect-{case}-{rank}.npz")


def _write_expected(out_dir: str, case: int, sim) -> None:
    for rank in range(sim.schedule.world):
        arrays = {}
        for name, values in sim.tensors[rank].items():
            arrays["t_" + name] = values.reshape(-1)
            arrays["u_" + name] = sim.undefined[rank][name].reshape(-1)
        np.savez(expected_path(out_dir, case, rank), **arrays)
