"""Rows of the table from what the ranks measured: the slowest rank's time per iteration, algbw, busbw."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from commdsl.bench import busbw as bw
from commdsl.bench.plan import Plan
from commdsl.source import statement_text


@dataclass
class Row:
    variant: int
    label: str
    kind: str | None  # the collective whose busbw factor applies; None: busbw = algbw
    requested: int  # bytes asked for with --sizes
    size: int  # bytes of the measured tensor
    count: int
    dtype: str
    redop: str | None
    root: int | None
    param: str
    value: int
    time_us: float  # mean time per timed iteration of the slowest rank
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # elements differing from the simulator, all ranks and iterations; None without --check
    rank_us: list[float] = field(default_factory=list)  # every rank's mean time per iteration
    lines: list[dict] = field(default_factory=list)  # the slowest rank's time per source line: line, text, us
    spread: dict[str, float] = field(default_factory=dict)  # min, max, stdev over iterations (`iteration_spread`)
    in_place: bool | None = None  # the variant's form (`plan.in_place`)
    rank_faults: list[float | None] = field(default_factory=list)  # every rank's minor page faults per iteration
    rank_lines: list[list[dict]] = field(default_factory=list)  # every rank's `lines`: set one rank's prediction
    # beside the same rank's measurement, whichever rank either side found slowest
    rank_cpu_us: list[float | None] = field(default_factory=list)  # every rank's CPU time (all its threads') an
    # iteration: their sum over the host's cores bounds the row's time from below (`predict.busy_cores`)


@dataclass
class Summary:
    label: str
    program: str
    kind: str | None
    how: str
    factor: float
    baseline: bool
    avg_busbw: float  # mean over the sizes, as nccl-tests' "Avg bus bandwidth"
    in_place: bool | None = None  # the variant's form (`plan.in_place`)


def rows(plan: Plan, results: dict[int, dict[int, dict]]) -> list[Row]:
    """One row per case every rank reported on."""
    out = []
    for number, case in enumerate(plan.cases):
        per_rank = results.get(number, {})
        if len(per_rank) < plan.world:
            continue
        v = plan.variants[case.variant]
        means = [_mean(per_rank[r]["durations_ns"]) / 1e3 for r in range(plan.world)]
        slowest = max(range(plan.world), key=lambda r: means[r])
        seconds = means[slowest] / 1e6
        wrong = None if not plan.check else sum(per_rank[r]["wrong"] for r in range(plan.world))
        lines = [_by_line(plan, case, r, per_rank[r]["op_ns"]) for r in range(plan.world)]
        out.append(
            Row(
                case.variant,
                v.label,
                v.measure.kind,
                case.requested,
                case.size,
                case.count,
                case.dtype,
                v.measure.redop,
                v.measure.root,
                v.param,
                case.value,
                means[slowest],
                bw.algbw(case.size, seconds),
                bw.busbw(v.measure.kind or "", plan.world, case.size, seconds),
                wrong,
                means,
                lines[slowest],
                iteration_spread([per_rank[r]["durations_ns"] for r in range(plan.world)]),
                v.in_place,
                [_per_iteration(per_rank[r], "page_faults") for r in range(plan.world)],
                lines,
                [_per_iteration(per_rank[r], "cpu_ns", 1e-3) for r in range(plan.world)],
            )
        )
    return out


def iteration_spread(durations_ns: list[list[int]]) -> dict[str, float]:
    """min, median, max and (population) stdev in µs of an iteration's time, the slowest rank's in each
    iteration: what the mean hides (a warm-up that was too short, a noisy neighbour, a few iterations that
    waited for a core)."""
    per_iteration = [max(ns) / 1e3 for ns in zip(*durations_ns)] if durations_ns else []
    if not per_iteration:
        return {}
    return {
        "min_us": min(per_iteration),
        "median_us": statistics.median(per_iteration),
        "max_us": max(per_iteration),
        "stdev_us": statistics.pstdev(per_iteration),
    }


def summaries(plan: Plan, table: list[Row]) -> list[Summary]:
    out = []
    for i, v in enumerate(plan.variants):
        mine = [r.busbw for r in table if r.variant == i]
        out.append(
            Summary(
                v.label,
                v.program.path,
                v.measure.kind,
                v.measure.how,
                bw.factor(v.measure.kind or "", plan.world),
                v.baseline,
                sum(mine) / len(mine) if mine else 0.0,
                v.in_place,
            )
        )
    return out


def _per_iteration(reported: dict, key: str, scale: float = 1.0) -> float | None:
    """A rank's count under `key` (its page faults, its CPU ns) per timed iteration, times `scale` (None where
    it did not count it)."""
    total, iterations = reported.get(key), len(reported["durations_ns"])
    return None if total is None or not iterations else total * scale / iterations


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _by_line(plan: Plan, case, rank: int, op_ns: list[int]) -> list[dict]:
    """Where a rank's iteration goes, per source line (mean µs per iteration), each line named by
    its widest op's span: the statement, not a value it reads from tensor data (`splits [counts[j] ...]`)."""
    text = plan.variants[case.variant].program.source.text
    totals: dict[int, list] = {}
    for op, ns in zip(case.schedule.ops[rank], op_ns):
        span = op.span
        entry = totals.setdefault(span.line, [span, 0])
        if span.end - span.start > entry[0].end - entry[0].start:
            entry[0] = span
        entry[1] += ns
    return [
        {"line": line, "text": statement_text(text, span), "us": ns / 1e3 / max(plan.iters, 1)}
        for line, (span, ns) in sorted(totals.items())
    ]
