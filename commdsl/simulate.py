"""Executes a Schedule with data (NumPy), on the engine the checker uses: expected tensors per rank.

A reduce leaves non-root buffers undefined (Gloo writes partial sums there); the simulator tracks
that with a per-element mask, so undefined elements are never compared or trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commdsl import collectives
from commdsl.dtypes import DTYPES, TOLERANCE
from commdsl.elementwise import NUMPY, bfloat16_round, evaluate, random_init
from commdsl.engine import EngineResult, Instance, Observer, Posted, run_engine
from commdsl.schedule import Compute, Expect, Print, Schedule, TensorSpec, View


@dataclass
class ExpectResult:
    rank: int
    op: Expect
    ok: bool
    detail: str = ""


@dataclass
class SimResult:
    schedule: Schedule
    engine: EngineResult
    tensors: list[dict[str, np.ndarray]]
    undefined: list[dict[str, np.ndarray]]
    expects: list[ExpectResult] = field(default_factory=list)
    prints: list[list[tuple[Print, list[np.ndarray]]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.engine.completed and all(e.ok for e in self.expects)


def initial_value(spec: TensorSpec, rank: int, world: int) -> np.ndarray:
    """A tensor's initial contents (flat), the same in the simulator and the runtime."""
    np_dtype = DTYPES[spec.dtype].numpy
    if spec.init is None:
        return np.zeros(spec.numel, dtype=np_dtype)
    if spec.init[0] == "rand":
        values = random_init(spec.init[1], rank, spec.numel, spec.init[2])
    else:
        values = _evaluate(spec.init, _no_views, spec.shape)
        values = np.broadcast_to(np.asarray(values), spec.shape).reshape(-1)
    return _cast(np.asarray(values), spec.dtype)


def _evaluate(e, read, shape):
    """NumPy evaluation with torch's quiet semantics: x / 0 is inf or nan, not a warning on stderr."""
    with np.errstate(all="ignore"):
        return evaluate(e, read, shape, NUMPY)


def _no_views(view: View):  # pragma: no cover - `resolve` forbids tensors in initialisers
    raise ValueError("an initialiser cannot read a tensor")


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    d = DTYPES[dtype]
    if d.is_bool:
        return values.astype(bool)
    if d.is_int and values.dtype.kind == "f":
        values = np.trunc(values)
        values = np.where(np.isfinite(values), values, 0)
        return values.astype(np.int64).astype(d.numpy) if values.size else values.astype(d.numpy)
    out = values.astype(d.numpy)
    return bfloat16_round(out) if dtype == "bfloat16" else out


def close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """Elementwise equality: exact for integers and bool, torch.testing's tolerance for floats."""
    if dtype in TOLERANCE:
        rtol, atol = TOLERANCE[dtype]
        return np.isclose(actual.astype(np.float64), np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol,
                          equal_nan=True)
    return actual == expected


def judge(actual: np.ndarray, expected, cmp: str, dtype: str) -> tuple[bool, str]:
    """Whether `actual CMP expected` holds at every element, and the first failing one if not.

    Shared with the runtime, which judges each `expect` on the real tensors the same way.
    """
    match cmp:
        case "==":
            good = close(actual, expected, dtype)
        case "!=":
            good = ~close(actual, expected, dtype)
        case "<":
            good = actual < expected
        case "<=":
            good = actual <= expected
        case ">":
            good = actual > expected
        case _:
            good = actual >= expected
    good = np.asarray(good)
    if good.all():
        return True, ""
    bad = int(np.argmin(good.reshape(-1)))
    return False, (f"element {bad}: got {actual.reshape(-1)[bad].item()!r}, expected {cmp} "
                   f"{np.broadcast_to(np.asarray(expected), actual.shape).reshape(-1)[bad].item()!r}")


class DataObserver(Observer):
    def __init__(self, schedule: Schedule):
        self.s = schedule
        self.buf = [{name: initial_value(spec, r, schedule.world) for name, spec in schedule.tensors[r].items()}
                    for r in range(schedule.world)]
        self.undef = [{name: np.zeros(spec.numel, dtype=bool) for name, spec in schedule.tensors[r].items()}
                      for r in range(schedule.world)]
        self.expects: list[ExpectResult] = []
        self.prints: list[list] = [[] for _ in range(schedule.world)]

    def read(self, rank: int, v: View) -> np.ndarray:
        return self.buf[rank][v.tensor][v.offset : v.offset + v.numel].reshape(v.shape)

    def write(self, rank: int, v: View, values, defined: bool = True):
        dtype = self.s.tensors[rank][v.tensor].dtype
        values = np.asarray(values)
        flat = values.reshape(-1) if values.size == v.numel else np.broadcast_to(values, v.shape).reshape(-1)
        self.buf[rank][v.tensor][v.offset : v.offset + v.numel] = _cast(flat, dtype)
        self.undef[rank][v.tensor][v.offset : v.offset + v.numel] = not defined

    def local(self, rank, op, index):
        read = lambda v: self.read(rank, v)  # noqa: E731
        if type(op) is Compute:
            value = _evaluate(op.value, read, op.target.shape)
            if op.op != "=":
                current = self.read(rank, op.target)
                value = {"+=": np.add, "-=": np.subtract, "*=": np.multiply, "/=": np.true_divide}[op.op](current, value)
                defined = not self.undef[rank][op.target.tensor][op.target.offset : op.target.stop].any()
            else:
                defined = not any(self.undef[rank][v.tensor][v.offset : v.stop].any() for v in op.reads)
            self.write(rank, op.target, value, defined)
        elif type(op) is Expect:
            self.expects.append(self.check_expect(rank, op))
        elif type(op) is Print:
            self.prints[rank].append((op, [self.read(rank, v).copy() for v in op.views]))

    def check_expect(self, rank: int, op: Expect) -> ExpectResult:
        actual = self.read(rank, op.view)
        dtype = self.s.tensors[rank][op.view.tensor].dtype
        expected = np.broadcast_to(np.asarray(_evaluate(op.value, lambda v: self.read(rank, v), op.view.shape)),
                                   op.view.shape)
        if self.undef[rank][op.view.tensor][op.view.offset : op.view.stop].any():
            return ExpectResult(rank, op, False, "reads elements left undefined by `reduce` on a non-root rank")
        ok, detail = judge(actual, expected, op.cmp, dtype)
        return ExpectResult(rank, op, ok, detail)

    def posted(self, p: Posted):
        if p.is_send:
            p.payload = self.read(p.rank, p.op.view).copy()

    def matched(self, send: Posted, recv: Posted):
        sv, rv = send.op.view, recv.op.view
        if send.op.dtype != recv.op.dtype:
            return  # the checker reports it; Gloo reinterprets the bytes
        count = min(sv.numel, rv.numel)
        target = View(rv.tensor, rv.offset, (count,), count)
        self.write(recv.rank, target, send.payload.reshape(-1)[:count])

    def completed(self, inst: Instance):
        calls = [inst.calls[r] for r in inst.group.ranks]
        ops = [c.op for c in calls]
        sig = collectives.signature(ops[0])
        if (any(collectives.signature(o) != sig or collectives.contribution(o) != collectives.contribution(ops[0])
                for o in ops) or collectives.split_disagreement(ops)):
            return  # mismatched: the checker reports it; the data would be garbage
        try:
            inputs = [[self.read(c.rank, v).reshape(-1) for v in c.op.inputs] for c in calls]
            outputs = collectives.apply(ops[0].kind, ops, inputs)
        except (ValueError, TypeError):
            # sizes that disagree across ranks, or a reduce op the dtype lacks (bitwise on floats):
            # the checker reports it; the outputs hold no defined value
            for c in calls:
                for v in c.op.outputs:
                    self.undef[c.rank][v.tensor][v.offset : v.stop] = True
            return
        for c, outs in zip(calls, outputs):
            for v, values in zip(c.op.outputs, outs):
                if values is None:
                    self.undef[c.rank][v.tensor][v.offset : v.stop] = True
                else:
                    self.write(c.rank, v, values)


def simulate(schedule: Schedule) -> SimResult:
    """Run the Schedule with data under Gloo's semantics (zero buffering)."""
    data = DataObserver(schedule)
    return finish(schedule, data, run_engine(schedule, "zero", False, data))


def finish(schedule: Schedule, data: DataObserver, result: EngineResult) -> SimResult:
    tensors = [{name: arr.reshape(schedule.tensors[r][name].shape) for name, arr in data.buf[r].items()}
               for r in range(schedule.world)]
    undefined = [{name: m.reshape(schedule.tensors[r][name].shape) for name, m in data.undef[r].items()}
                 for r in range(schedule.world)]
    return SimResult(schedule, result, tensors, undefined, data.expects, data.prints)


def format_tensor(values: np.ndarray, dtype: str) -> str:
    """`tensor([1., 2.])` exactly as torch prints it (torch is imported only when printing)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(values))
    return repr(t.to(getattr(torch, dtype)))
