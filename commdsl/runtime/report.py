"""The two files a run can write: `--report` (JSON verdict and data) and `--trace` (Chrome trace events).

Both are built from the same per-rank records. The report's schema is documented in docs/runtime.md;
the trace has one process track per rank and one complete ("X") slice per op, named after its
source line, with times in microseconds from the earliest set-up start — Perfetto and
chrome://tracing open it as is.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from commdsl.dtypes import TOLERANCE
from commdsl.files import write_atomic
from commdsl.runtime.config import SUMMARY_ABOVE
from commdsl.runtime.outcome import Failure, Verdict, where
from commdsl.runtime.records import RankResult
from commdsl.schedule import Schedule

REPORT_VERSION = 1
EDGE = 8  # elements shown at each end of a summarised tensor


def tensor_summary(values: np.ndarray) -> dict:
    """What identifies a large tensor without listing it: its element count, a SHA-256 of its little-endian
    bytes in the simulator's representation (bfloat16 as float32), hashed a chunk at a time, and its ends."""
    flat = values.reshape(-1)
    digest = hashlib.sha256()
    for start in range(0, len(flat), 1 << 20):
        part = np.ascontiguousarray(flat[start : start + (1 << 20)])
        digest.update(part.astype(part.dtype.newbyteorder("<"), copy=False).tobytes())
    return {
        "numel": int(len(flat)),
        "sha256": digest.hexdigest(),
        "first": _json_values(np.asarray(flat[:EDGE])),
        "last": _json_values(np.asarray(flat[-EDGE:])),
    }


def _scalar(v):
    """A JSON value; non-finite floats become the strings "nan", "inf", "-inf" (JSON has no such numbers)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _json_values(a: np.ndarray):
    """Nested lists for JSON, with non-finite floats as strings."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        return np.array([_scalar(v) for v in a.reshape(-1).tolist()], dtype=object).reshape(a.shape).tolist()
    return a.tolist()


def _origin(results: dict[int, RankResult]) -> int:
    starts = [r.init[0] for r in results.values() if r.init[0]] + [
        t[0] for r in results.values() for t in r.times[:1] if t[0]
    ]
    return min(starts) if starts else 0


def timings(schedule: Schedule, source_text: str, results: dict[int, RankResult]) -> list[dict]:
    """Every op every rank ran: start (µs from the earliest set-up start) and duration (µs)."""
    origin = _origin(results)
    out = []
    for rank, r in sorted(results.items()):
        for index, (t0, t1) in enumerate(r.times):
            if not t0:
                continue
            at = where(schedule, source_text, rank, index)
            out.append(
                {
                    "rank": rank,
                    "index": index,
                    "line": at.line,
                    "op": at.text,
                    "start_us": round((t0 - origin) / 1e3, 3),
                    "duration_us": round((t1 - t0) / 1e3, 3),
                }
            )
    return out


def build_report(
    *,
    schedule: Schedule,
    source_text: str,
    backend: str,
    start_method: str | None,
    verdict: Verdict,
    results: dict[int, RankResult],
    failures: list[Failure],
    hang: list[dict] | None,
    timeout: float,
    wall_s: float,
    values: bool = False,
) -> dict:
    """The report; `values`: every element of every tensor, however large (else large ones are summarised)."""
    ranks = []
    for rank, r in sorted(results.items()):
        tensors = {}
        if r.finished:
            for name, spec in schedule.tensors[rank].items():
                data = r.tensors[name]
                tensors[name] = {"dtype": spec.dtype, "shape": list(spec.shape)}
                if values or data.size <= SUMMARY_ABOVE:
                    tensors[name]["values"] = _json_values(np.asarray(data).reshape(spec.shape))
                else:
                    tensors[name]["summary"] = tensor_summary(data)
        ranks.append(
            {
                "rank": rank,
                "pid": r.pid,
                "host": r.host,
                "finished": r.finished,
                "prints": [ln for p in r.prints for ln in p["lines"]],
                "tensors": tensors,
            }
        )
    return {
        "version": REPORT_VERSION,
        "ok": verdict.ok and not failures and not hang,
        "program": schedule.program,
        "path": schedule.path,
        "world": schedule.world,
        "backend": backend,
        "start_method": start_method,
        "params": schedule.params,
        "timeout_s": timeout,
        "wall_s": round(wall_s, 3),
        "compared_with_simulator": verdict.sim_complete,
        "ranks": ranks,
        "expects": verdict.expects,
        "mismatches": [
            {
                "rank": m.rank,
                "tensor": m.tensor,
                "count": m.count,
                "first_index": m.index,
                "actual": _scalar(m.actual),
                "expected": _scalar(m.expected),
            }
            for m in verdict.mismatches
        ],
        "disagreements": [
            {
                "tensor": d.tensor,
                "ranks": list(d.ranks),
                "count": d.count,
                "first_index": d.index,
                "values": [_scalar(x) for x in d.values],
                "more_ranks": d.more,
            }
            for d in verdict.disagreements
        ],
        "order_dependent_elements": verdict.order_dependent,
        "undefined_elements": verdict.undefined,
        "tolerance": {d: {"rtol": TOLERANCE[d][0], "atol": TOLERANCE[d][1]} for d in verdict.dtypes if d in TOLERANCE},
        "failures": [
            {
                "rank": f.rank,
                "kind": f.kind,
                "cause": f.cause,
                "line": f.at.line,
                "op": f.at.text,
                "pid": f.pid,
                "culprit": i == 0,
            }
            for i, f in enumerate(failures)
        ],
        "hang": hang,
        "timings": timings(schedule, source_text, results),
    }


def chrome_trace(schedule: Schedule, source_text: str, results: dict[int, RankResult]) -> dict:
    origin = _origin(results)
    events: list[dict] = []
    for rank, r in sorted(results.items()):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "ops"}})
        if r.init[0]:
            events.append(
                {
                    "name": "set-up (init_process_group, new_group, tensors)",
                    "cat": "setup",
                    "ph": "X",
                    "pid": rank,
                    "tid": 0,
                    "ts": (r.init[0] - origin) / 1e3,
                    "dur": (r.init[1] - r.init[0]) / 1e3,
                }
            )
        ops = schedule.ops[rank]
        for index, (t0, t1) in enumerate(r.times):
            if not t0:
                continue
            at = where(schedule, source_text, rank, index)
            events.append(
                {
                    "name": f"{at.line}: {at.text}",
                    "cat": type(ops[index]).__name__.lower(),
                    "ph": "X",
                    "pid": rank,
                    "tid": 0,
                    "ts": (t0 - origin) / 1e3,
                    "dur": (t1 - t0) / 1e3,
                    "args": {"index": index, "line": at.line, "bindings": dict(ops[index].bindings)},
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"program": schedule.program, "world": schedule.world},
    }


def write_json(path: str, data: dict, inputs=()) -> None:
    """Write atomically (`files.write_atomic`), never over one of `inputs`; raises FileError."""
    write_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n", inputs=inputs)
