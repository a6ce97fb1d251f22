"""`commdsl predict`: a program's time at any world size on a described network, without running it.

One more interpreter of the one expansion (docs/architecture.md): `sweep` sizes the program exactly as
`commdsl bench FILE` does (the same variant: pragma, proved collective or largest tensor; the same size
param; the same rounding of a requested size to the param's value), expands it, and runs the engine
once with clocks (`cost.py`) on a topology (`topology.py`). It gives the bench's rows
(`bench.results.Row`), so the table, the JSON and the plot are the bench's own (`bench.output`).

Modules: `topology.py` (the TOML file, presets, N136), `cost.py` (the clocks over the engine),
`calibrate.py` (α and β fitted from a Gloo ping-pong, for `commdsl bench --calibrate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from commdsl.bench import busbw as bw
from commdsl.bench.identify import BenchError, Measure, pragma, prove
from commdsl.bench.plan import (
    Refused,
    Variant,
    check_sized,
    check_sweepable,
    largest,
    measured_dtype,
    sized_by,
    tensor_specs,
    with_dtype,
)
from commdsl.bench.results import Row, Summary
from commdsl.diagnostics import CommdslError
from commdsl.dtypes import DTYPES
from commdsl.expand import expand, resolve_params
from commdsl.predict.cost import PAGE, PROFILED_RANKS, Bytes, Timing, predict
from commdsl.predict.topology import Topology
from commdsl.resolve import Program
from commdsl.schedule import Schedule
from commdsl.source import statement_text

EXACT_OPS = 20_000_000
"""Above this many ops over all sizes together, only the largest size is expanded and the others' bytes
are scaled from it (exact when the shapes are linear in the size param; the row notes it)."""
PROOF_WORLD = 16
"""Above this world size the collective a program computes is proved at a smaller declared size (the
simulator holds every rank's tensors)."""
CHECK_WORLD = 64
"""Up to this world size the checker reads every size's expansion before it is timed; above it, the largest
size's at the largest declared world up to this one (the checker at world 4096 takes longer than the
prediction: the ring, 11 s against 6 s on 2 cores)."""


@dataclass
class Prediction:
    variant: Variant
    world: int
    topology: Topology
    rows: list[Row]
    summary: Summary
    timing: Timing
    values: list[int]
    notes: list[str] = field(default_factory=list)
    paths: dict[int, list[dict]] = field(default_factory=dict)  # size index → critical path


def variant_for(program: Program, world: int, param: str, params: dict, dtype: str | None) -> Variant:
    """What `commdsl bench FILE --nproc world` would measure, proving the collective at a small world when
    `world` is large; `dtype` (`--dtype`) retypes the measured tensor as the bench does (every tensor of its
    dtype). BenchError when the program cannot be swept at this world."""
    check_sweepable(program, world, param, params, "--world")
    measure, sized = _measure(program, world, param, params)
    if dtype is not None:
        program = with_dtype(program, measure.tensor, dtype)
        measure, sized = _measure(program, world, param, params)
    check_sized(program, measure, param, sized)
    return Variant(program.name, program, measure, param, params)


def _measure(program: Program, world: int, param: str, params: dict) -> tuple[Measure, set[str] | None]:
    """What the rows measure (the pragma, else the collective the program proves, else its largest tensor)
    and the tensors `param` sizes."""
    sized = sized_by(program, world, param, params)
    measure = pragma(program)
    if measure is None:
        # above PROOF_WORLD, the nearest size it declares: a program may compute a collective only at some sizes
        # (pairs swapping with `rank ^ 1` all-reduce at world 2 and nothing at 4; proved at the smallest, such a
        # program was labelled an all_reduce at world 64, busbw over NVLink's)
        proofs = [world] if world <= PROOF_WORLD else [w for w in range(PROOF_WORLD, 1, -1) if program.accepts(w)]
        for proof in proofs:
            try:
                measure = prove(program, proof, params, sized)
                break
            except CommdslError:  # not a size these params fit (`local` must divide it): the next one
                if proof == world:
                    raise
    if measure is None:
        measure = largest(program, world, params, sized)
    return measure, sized


def fit(v: Variant, world: int, requested: int) -> tuple[int, int]:
    """(value of the size param, bytes of the measured tensor there) nearest `requested` bytes: bench's rule
    (`bench.plan._fit`: scale the default, correct once), on the declarations only."""

    def size_at(value: int) -> int:
        try:
            numel, dtype = tensor_specs(v.program, world, {**v.params, v.param: value})[v.measure.tensor]
        except CommdslError as e:  # a size the declarations refuse (more elements than a tensor may have)
            raise Refused(v, value, e.diagnostics) from None
        return numel * DTYPES[dtype].itemsize

    base_value = resolve_params(v.program, v.params)[v.param]
    if isinstance(base_value, bool) or not isinstance(base_value, int):
        raise BenchError(f"{v.program.path}: param `{v.param}` = {base_value!r} is not an integer")
    base = size_at(base_value)
    if base == 0:
        raise BenchError(f"{v.program.path}: `{v.measure.tensor}` is empty at `{v.param} = {base_value}`")
    itemsize = DTYPES[measured_dtype(v)].itemsize
    value = max(1, round(requested / itemsize * base_value * itemsize / base))
    size = size_at(value)
    if size != requested and size > 0:
        better = max(1, round(value * requested / size))
        if better != value:
            size2 = size_at(better)
            if abs(size2 - requested) < abs(size - requested):
                value, size = better, size2
    return value, size


def sweep(v: Variant, world: int, sizes: list[int], topo: Topology, paths: bool = True, deadline=None) -> Prediction:
    """Predicted rows for `sizes` (requested bytes). BenchError when the program does not complete at this
    world (a deadlock or a mismatch: `commdsl check` says which). `paths`: every size's critical path and
    per-line profile (an engine run per size, for `--json`); else the largest size's only."""
    topo = topo.at_world(world)
    notes: list[str] = []
    cores = topo.cores_per_node
    if cores is not None and topo.crowded_alphas is None and topo.over_cores(world):
        notes.append(
            f"{min(world, topo.ranks_per_node)} ranks on a node of {cores} cores, but the topology gives no "
            f"`crowded_alpha_us`: messages are priced as on an idle host (`commdsl bench --calibrate --nproc "
            f"{cores + 1}` or more measures it)"
        )
    fitted: list[tuple[int, int, int]] = []  # (requested, value, bytes)
    seen: set[int] = set()
    for requested in sizes:
        value, size = fit(v, world, requested)
        if size == 0:
            notes.append(f"{requested} B leaves `{v.measure.tensor}` empty; size skipped")
            continue
        if value in seen:
            notes.append(f"{requested} B gives `{v.param} = {value}` again; size skipped")
            continue
        seen.add(value)
        fitted.append((requested, value, size))
    if not fitted:
        raise BenchError("no size left to predict: every requested size was skipped (" + "; ".join(notes) + ")")
    values = [f[1] for f in fitted]
    top = _expand_size(v, world, values[-1], deadline)
    S = len(values)
    exact = top.num_ops * S <= EXACT_OPS or S == 1
    schedules = [_expand_size(v, world, x, deadline) for x in values[:-1]] + [top] if exact else [top]
    _check(v, world, fitted, dict(zip(values, schedules)) if exact else {values[-1]: top}, topo, notes, deadline)
    if exact:
        try:
            nbytes = Bytes(schedules, np.eye(S))
        except ValueError:  # the statements differ between sizes (a loop over the size param): one run each
            return _one_by_one(v, world, topo, fitted, schedules, notes, deadline)
    else:
        nbytes = Bytes([top], np.array([[x / values[-1]] for x in values]))
        notes.append(
            f"{top.num_ops:,} ops × {S} sizes: only `{v.param} = {values[-1]}` was expanded; the other sizes' "
            f"bytes are scaled from it (exact when the shapes are linear in `{v.param}`)"
        )
    timing = predict(top, topo, nbytes, S, deadline=deadline)
    _completes(v, world, topo, timing)
    runs = {S - 1: timing}
    if paths and timing.path is not None and top.num_ops * S <= 2_000_000:
        for k in range(S - 1):
            runs[k] = predict(top, topo, nbytes, S, path_size=k, deadline=deadline)
    return _prediction(v, world, topo, fitted, timing, runs, notes)


def _expand_size(v: Variant, world: int, value: int, deadline) -> Schedule:
    """The expansion at `v.param = value`; Refused, as bench refuses it, where that size does not expand (a view
    out of bounds at a small size)."""
    try:
        return expand(v.program, world, {**v.params, v.param: value}, deadline)
    except CommdslError as e:
        raise Refused(v, value, e.diagnostics, world=world) from None


def _check(
    v: Variant,
    world: int,
    fitted: list[tuple[int, int, int]],
    expanded: dict[int, Schedule],
    topo: Topology,
    notes: list[str],
    deadline,
) -> None:
    """Refuse, as `bench` does, a program the checker finds errors in at any of the sizes on the topology's
    backend (a deadlock, a collective mismatch, a race, an op the backend refuses, a message size mismatch
    where only a smaller size splits unevenly): the truth is what torch would do, and torch would not run it
    in the predicted time. Sizes in bench's order, smallest first, so both name the same size. `fitted`:
    (requested bytes, value, bytes) per size; `expanded`: the expansions at `world` already made, by value.
    Above CHECK_WORLD the check stands in at the largest declared world up to it, for the largest size only,
    at the value that gives its bytes there."""
    from commdsl.checker import analyse_schedule

    unchecked = (
        f"not checked: no declared world size up to {CHECK_WORLD} takes this program at this size "
        f"(`commdsl check {v.program.path} --world {world}` checks it where it is predicted)"
    )
    where = world
    if world > CHECK_WORLD:
        smaller = [w for w in v.program.world_sizes(CHECK_WORLD) if 2 <= w <= CHECK_WORLD]
        if not smaller:
            notes.append(unchecked)
            return
        where = smaller[-1]
        fitted = fitted[-1:]  # a stand-in: a size that splits unevenly at one world may not at another
    for requested, value, _ in fitted:
        schedule = expanded.get(value) if where == world else None
        try:
            if where != world:
                value = fit(v, where, requested)[0]
            if schedule is None:
                schedule = _expand_size(v, where, value, deadline)
        except (Refused, BenchError):
            if where == world:
                raise
            notes.append(unchecked)
            return
        diags, _ = analyse_schedule(v.program, schedule, (topo.backend,), False, False, deadline)
        errors = [replace(d, worlds=(where,)) for d in diags if d.severity == "error"]
        if errors:
            raise Refused(v, value, errors, world=where)
    if where != world and v.measure.how != "built-in":  # a built-in's form is the same at every size
        notes.append(
            f"checked at world {where}, the largest declared size up to {CHECK_WORLD}: a check at {world} "
            f"takes longer than the prediction (`commdsl check {v.program.path} --world {world}`)"
        )


def _completes(v: Variant, world: int, topo: Topology, timing: Timing) -> None:
    """Refuse to time what would not finish on the topology's backend (the engine ran the checker's model of
    it: on NCCL, a rank's point-to-point ops in issue order)."""
    outcome = timing.outcome
    if not outcome.completed or len(outcome.unmatched) or outcome.bad:
        stuck = ", ".join(str(r) for r in outcome.stalled[:8].tolist())
        raise BenchError(
            f"{v.program.path}: does not complete at world {world} on {topo.backend}"
            + (f" (ranks {stuck} stop)" if stuck else "")
            + f"; `commdsl check {v.program.path} --world {world} --backend {topo.backend}` says why"
        )


def _one_by_one(v, world, topo, fitted, schedules, notes, deadline) -> Prediction:
    """Sizes whose statements differ (`micro` of a pipeline sets how many messages there are): the engine
    runs once per size, and the rows are put together as one run's would be."""
    runs = []
    for s in schedules:
        t = predict(s, topo, Bytes([s], np.ones((1, 1))), 1, deadline=deadline)
        _completes(v, world, topo, t)
        runs.append(t)
    last = runs[-1]
    timing = Timing(
        np.array([float(t.seconds[0]) for t in runs]),
        np.concatenate([t.rank_seconds for t in runs], axis=1),
        last.port_names,
        last.port_bytes,
        last.port_busy,
        last.path,
        len(runs) - 1,
        last.outcome,
        last.profiles,
        last.last_rank,
        None if last.fresh_bytes is None else np.concatenate([t.fresh_bytes for t in runs], axis=1),
    )
    notes.append(f"the statements differ from one size to another: one engine run per size ({len(runs)})")
    return _prediction(v, world, topo, fitted, timing, dict(enumerate(runs)), notes)


def _lines(text: str, profile: list[dict] | None) -> list[dict]:
    """A rank's profile (`Timing.profiles`) as the bench's `lines`."""
    return [{"line": e["line"], "text": statement_text(text, e["span"]), "us": e["us"]} for e in profile or []]


def _prediction(v, world, topo, fitted, timing, runs: dict[int, Timing], notes) -> Prediction:
    """The rows, each with its size's profile as the bench's `lines` (`runs`: the engine runs that tracked a
    size, by size index; a size without one has no lines)."""
    kind = v.measure.kind
    dtype = measured_dtype(v)
    item = DTYPES[dtype].itemsize
    rows = []
    text = v.program.source.text
    per_rank = world <= PROFILED_RANKS  # every rank's times, pages and lines, as the bench's rows hold them
    for k, (requested, value, size) in enumerate(fitted):
        sec = float(timing.seconds[k])
        run = runs.get(k)
        profiles = (run.profiles if run is not None else None) or {}
        rank_lines = [_lines(text, profiles.get(r)) for r in range(world)] if per_rank else []
        if run is None:
            lines = []
        else:  # the last rank's (`Timing.profile`)
            lines = rank_lines[run.last_rank] if rank_lines else _lines(text, run.profile)
        rows.append(
            Row(
                0,
                v.label,
                kind,
                requested,
                size,
                size // item,
                dtype,
                v.measure.redop,
                v.measure.root,
                v.param,
                value,
                sec * 1e6,
                bw.algbw(size, sec),
                bw.busbw(kind or "", world, size, sec),
                None,
                [float(x) * 1e6 for x in timing.rank_seconds[:, k]] if per_rank else [],
                lines,
                rank_faults=[]
                if timing.fresh_bytes is None or not per_rank
                else [float(x) / PAGE for x in timing.fresh_bytes[:, k]],
                rank_lines=rank_lines if any(rank_lines) else [],
            )
        )
    summary = Summary(
        v.label,
        v.program.path,
        kind,
        v.measure.how,
        bw.factor(kind or "", world),
        False,
        sum(r.busbw for r in rows) / len(rows),
    )
    paths = {k: run.path for k, run in runs.items() if run.path is not None}
    return Prediction(v, world, topo, rows, summary, timing, [f[1] for f in fitted], notes, paths)


UNEXPECTED_PAGES = 0.1
"""The share of a measured row's time from which the pages its ranks faulted in beyond the model's, at the
topology's `page_fault_gbps`, are named (`unexpected_pages`)."""

STRAY_PAGE_BYTES = 256 << 10
"""Fewer extra bytes than this are never named: the interpreter and Gloo fault in a few dozen pages an
iteration of their own (the 2-core machine)."""


def unexpected_pages(measured: dict, predicted: list[float], page_bps: float | None) -> tuple[float, int] | None:
    """(bytes, rank): the most a rank of a measured bench row faulted in beyond the pages the model charges it
    (its `rank_page_faults` against the predicted row's), where they cost a row's time (`UNEXPECTED_PAGES`,
    `STRAY_PAGE_BYTES`); None where they do not, or where either side did not count pages."""
    got = measured.get("rank_page_faults") or []
    if page_bps is None or not got or len(got) != len(predicted) or not measured.get("time_us"):
        return None
    rank = max(range(len(got)), key=lambda r: (got[r] or 0.0) - predicted[r])
    surplus = ((got[rank] or 0.0) - predicted[rank]) * PAGE
    if surplus >= STRAY_PAGE_BYTES and surplus / page_bps * 1e6 >= UNEXPECTED_PAGES * measured["time_us"]:
        return surplus, rank
    return None


BUSY_CORES = 0.1
"""The share of a measured row's time by which its ranks' CPU time over the host's cores must exceed the
prediction to be named (`busy_cores`)."""


def busy_cores(measured: dict, predicted_us: float, cores: int | None) -> tuple[float, int] | None:
    """(µs, rank): the least time a measured bench row's iteration could have taken for the CPU its ranks used
    (every rank's `rank_cpu_us`, all its threads', summed over the host's `cores`), and the rank that used the
    most, where that bound alone exceeds the prediction by a share of the row's time (`BUSY_CORES`); None where
    it does not, or where the bench did not count CPU or cores. Such a row's time was the cores' work, more
    than the model's prediction leaves room for: on a host with fewer cores than ranks Gloo's receivers burn
    several times a sender's CPU a message (docs/predict-accuracy.md, "A receiver's CPU, measured")."""
    got = measured.get("rank_cpu_us") or []
    if not cores or not got or any(c is None for c in got) or not measured.get("time_us"):
        return None
    least = sum(got) / cores
    if least - predicted_us >= BUSY_CORES * measured["time_us"]:
        return least, max(range(len(got)), key=got.__getitem__)
    return None


def link_table(timing: Timing, top: int = 8) -> list[dict]:
    """The busiest links at the path size: name, bytes, busy µs, utilisation (busy time / predicted time)."""
    total = float(timing.seconds[timing.path_size])
    busy = timing.port_busy
    order = np.argsort(-busy, kind="stable")
    out = []
    for p in order[: top if top > 0 else busy.size].tolist():
        if busy[p] <= 0:
            break
        out.append(
            {
                "link": timing.port_names[p],
                "bytes": float(timing.port_bytes[p]),
                "busy_us": float(busy[p]) * 1e6,
                "utilisation": float(busy[p]) / total if total > 0 else 0.0,
            }
        )
    return out


def ranks_text(ranks: list[int]) -> str:
    """`0-3, 7`: runs of consecutive ranks."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    if len(out) > 6:
        return ", ".join(out[:3]) + f", … ({len(ranks)} ranks)"
    return ", ".join(out)


__all__ = ["Prediction", "sweep", "variant_for", "fit", "link_table", "ranks_text", "unexpected_pages", "busy_cores"]
