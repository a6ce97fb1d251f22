"""The two files a run can write: `--report` (JSON verdict and data) and `--trace` (Chrome trace events).

Both are built from the same per-rank records. The report's schema is documented in docs/runtime.md;
the trace has one process track per rank and one complete ("X") slice per op, named after its
source line, with times in microseconds from the earliest set-up start, and flow arrows from sends to
their receives — Perfetto and chrome://tracing open it as is.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from commdsl.dtypes import TOLERANCE
from commdsl.files import write_atomic
from commdsl.p2p import ANY_SOURCE
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


def chrome_trace(
    schedule: Schedule, source_text: str, results: dict[int, RankResult], hang: list[dict] | None = None, tags=True
) -> dict:
    """One track per rank, one slice per op it did, named after its source line, with what it moved (bytes,
    dtype, peer, group, seq); flow arrows from each send to the receive that took it (FIFO per channel; `tags`:
    whether tags tell channels apart, as on Gloo, not NCCL). A run that hung or failed still gets the ops each
    rank did (`records.TimesLog`), a slice "stuck" for the op each rank was in when the hang guard stopped it
    (`hang`: outcome.hang_rows), and a marker where a rank failed."""
    origin = _origin(results)
    events: list[dict] = []
    ends: dict[tuple, list] = {}  # (channel, k) → [send (rank, ts), receive (rank, ts)] for the flow arrows
    for rank, r in sorted(results.items()):
        events += _track(rank, r, origin)
        ops = schedule.ops[rank]
        described = _op_args(schedule, rank, tags)
        for index, (t0, t1) in enumerate(r.times):
            if not t0:
                continue
            at = where(schedule, source_text, rank, index)
            args, messages = described[index]
            ts, dur = (t0 - origin) / 1e3, (t1 - t0) / 1e3
            events.append(
                {
                    "name": f"{at.line}: {at.text}",
                    "cat": type(ops[index]).__name__.lower(),
                    "ph": "X",
                    "pid": rank,
                    "tid": 0,
                    "ts": ts,
                    "dur": dur,
                    "args": {"index": index, "line": at.line, "bindings": dict(ops[index].bindings), **args},
                }
            )
            for channel, k, is_send in messages:
                ends.setdefault((channel, k), [None, None])[0 if is_send else 1] = (rank, ts if is_send else ts + dur)
        if r.error is not None and r.error.get("time_ns"):
            events.append(
                {
                    "name": f"failed: {r.error['type']}",
                    "ph": "i",
                    "s": "p",
                    "pid": rank,
                    "tid": 0,
                    "ts": (r.error["time_ns"] - origin) / 1e3,
                    "args": {"message": r.error["message"], "index": r.error["index"]},
                }
            )
    events += _stuck(schedule, source_text, hang or [], origin)
    events += _flows(ends)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"program": schedule.program, "world": schedule.world, "complete": not hang},
    }


def _track(rank: int, r: RankResult, origin: int) -> list[dict]:
    """A rank's track names and its set-up slice."""
    out: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
        {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "ops"}},
    ]
    if r.init[0] and r.init[1]:
        out.append(
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
    return out


def _op_args(schedule: Schedule, rank: int, tags: bool) -> list[tuple[dict, list[tuple]]]:
    """Per op of `rank`: (what the trace shows of it, the messages it posts as (channel, k, is_send)). `seq` is
    the op's number among the calls on its group (a collective) or the messages on its channel (send, recv)."""
    from commdsl.dtypes import DTYPES
    from commdsl.schedule import Batch, Collective, Recv, Send

    calls: dict[int, int] = {}
    messages: dict[tuple, int] = {}
    out: list[tuple[dict, list[tuple]]] = []

    def message(op) -> tuple[dict, tuple]:
        src, dst = (rank, op.peer) if isinstance(op, Send) else (op.peer, rank)
        group = op.group.id if op.group is not None else 0
        channel = (group, src, dst, op.tag if tags else 0)
        k = messages.get((channel, isinstance(op, Send)), 0)
        messages[(channel, isinstance(op, Send))] = k + 1
        size = op.view.numel * DTYPES[op.dtype].itemsize
        peer = "any" if op.peer == ANY_SOURCE else op.peer
        args = {"bytes": size, "dtype": op.dtype, "peer": peer, "group": op.group.name if op.group else "world"}
        return {**args, "tag": op.tag, "seq": k}, (channel, k, isinstance(op, Send))

    for op in schedule.ops[rank]:
        if isinstance(op, (Send, Recv)):
            args, posted = message(op)
            out.append((args, [posted]))
        elif isinstance(op, Batch):
            parts = [message(o) for o in op.ops]
            out.append(({"messages": [a for a, _ in parts]}, [m for _, m in parts]))
        elif isinstance(op, Collective):
            k = calls.get(op.group.id, 0)
            calls[op.group.id] = k + 1
            size = sum(v.numel for v in op.inputs) * DTYPES[op.dtype].itemsize
            args = {"bytes": size, "dtype": op.dtype, "group": op.group.name, "seq": k}
            if op.root is not None:
                args["root"] = op.root
            out.append((args, []))
        else:
            out.append(({}, []))
    return out


def _stuck(schedule: Schedule, source_text: str, hang: list[dict], origin: int) -> list[dict]:
    """A slice per rank the hang guard found inside an op, from when it began to when the guard stopped it."""
    out = []
    for row in hang:
        if row.get("rank") is None or row.get("index", -1) < 0 or not row.get("since_ns"):
            continue
        rank, index = row["rank"], row["index"]
        at = where(schedule, source_text, rank, index)
        out.append(
            {
                "name": f"{at.line}: {at.text} ({row['state']})",
                "cat": "stuck",
                "ph": "X",
                "pid": rank,
                "tid": 0,
                "ts": (row["since_ns"] - origin) / 1e3,
                "dur": row["seconds"] * 1e6,
                "args": {"index": index, "line": at.line, "state": row["state"], "unfinished": True},
            }
        )
    return out


def _flows(ends: dict[tuple, list]) -> list[dict]:
    """Chrome trace flow events: an arrow from each send's slice to the receive's, where both ran."""
    out = []
    for n, (send, recv) in enumerate(v for v in ends.values() if v[0] and v[1]):
        out.append({"name": "message", "cat": "p2p", "ph": "s", "id": n, "pid": send[0], "tid": 0, "ts": send[1]})
        out.append(
            {"name": "message", "cat": "p2p", "ph": "f", "bp": "e", "id": n, "pid": recv[0], "tid": 0, "ts": recv[1]}
        )
    return out


def write_json(path: str, data: dict, inputs=()) -> None:
    """Write atomically (`files.write_atomic`), never over one of `inputs`; raises FileError."""
    write_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n", inputs=inputs)
