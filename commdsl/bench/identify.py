"""Which collective a program stands for, so its sweep gets that collective's size and bus-bandwidth factor.

Two ways, the first that answers wins:

* a pragma the author writes, in the statement's own words:
  `# bench: all_reduce x op sum`, `# bench: broadcast x from 0`, `# bench: all_gather out`, `# bench: sendrecv x`;
* a proof from the program's final `expect`s (those it ends with; where they prove nothing, every one on a
  tensor nothing writes after it): simulated at the bench's world size, a final `==` expect covers a whole
  tensor on every rank that a built-in would write, and the value it holds there is
  exactly what that built-in computes from the program's initial tensors (and not simply the initial
  value); simulated once more with scrambled integers in the built-in's input, the program still computes
  what the built-in would, so the program's own data cannot make the match a coincidence. The
  ring's `expect x == world * (world + 1) / 2` over `x = rank + 1` is all_reduce's sum, so the ring is
  an all_reduce.

The size the sweep sets is that of the tensor nccl-tests would size: the reduced buffer for
all_reduce and reduce, the whole gathered buffer for all_gather and gather, the whole input for
reduce_scatter and scatter.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from commdsl import collectives
from commdsl.bench.busbw import KINDS
from commdsl.dtypes import DTYPES
from commdsl.expand import expand
from commdsl.resolve import Program
from commdsl.schedule import Batch, Collective, Compute, Expect, Print, Recv, Schedule, Wait
from commdsl.simulate import close, initial_value, simulate

PRAGMA = re.compile(r"^\s*#\s*bench\s*:(.*)$")
_PRAGMA_BODY = re.compile(r"^\s*(\w+)\s+(\w+)(?:\s+op\s+(\w+))?(?:\s+(?:from|to)\s+(\d+))?\s*$")
_REDOPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")


class BenchError(Exception):
    """A problem with what the user asked to measure (exit 2), with a message that stands alone."""


@dataclass(frozen=True)
class Measure:
    """What a variant's sizes and bus bandwidth refer to."""

    kind: str | None  # a busbw.KINDS entry; None when nothing is known (busbw = algbw)
    tensor: str  # the tensor whose bytes are the size
    redop: str | None = None
    root: int | None = None
    how: str = ""  # for the table's header: "built-in", "declared at line 3", "proved by its expects"


def pragma(program: Program) -> Measure | None:
    """The `# bench:` line of the program, if it has one; BenchError when it does not parse."""
    found = None
    for number, text in enumerate(program.source.text.splitlines(), 1):
        m = PRAGMA.match(text)
        if not m:
            continue
        where = f"{program.path}:{number}"
        if found is not None:
            raise BenchError(f"{where}: a second `# bench:` line (the first is line {found[0]}); keep one")
        body = _PRAGMA_BODY.match(m.group(1))
        if not body:
            raise BenchError(
                f"{where}: `# bench:` expects KIND TENSOR [op OP] [from|to ROOT], "
                f"for example `# bench: all_reduce x op sum`"
            )
        kind, tensor, op, root = body.groups()
        if kind not in KINDS:
            raise BenchError(f"{where}: `# bench: {kind}`: not a collective the bench knows; one of {', '.join(KINDS)}")
        if tensor not in {t.name for t in program.tensors}:
            raise BenchError(f"{where}: `# bench:` names tensor `{tensor}`, which the program does not declare")
        if op is not None and op not in _REDOPS:
            raise BenchError(f"{where}: `# bench:` reduce op `{op}` is not one of {', '.join(_REDOPS)}")
        found = (
            number,
            Measure(
                kind,
                tensor,
                op or ("sum" if kind in ("all_reduce", "reduce", "reduce_scatter") else None),
                int(root) if root is not None else None,
                f"declared at line {number}",
            ),
        )
    return found[1] if found else None


def prove(program: Program, world: int, params: dict, sized: set[str] | None = None) -> Measure | None:
    """The built-in collective the program's final expects show it computes at `world`, or None. `sized`: the
    tensors a sweep can size (`plan.sized_by`), the only ones it may measure (None: any)."""
    schedule = expand(program, world, params)
    sim = simulate(schedule)
    if not sim.ok or world < 2:
        return None
    specs = schedule.tensors
    names = [
        name
        for name, spec in specs[0].items()
        if (sized is None or name in sized)
        and all(name in s and s[name].numel == spec.numel and s[name].dtype == spec.dtype for s in specs)
    ]

    def covered(trailing: bool) -> set[tuple[int, str]]:
        return {
            (r, op.view.tensor)
            for r, ops in enumerate(schedule.ops)
            for op in _final_checks(ops, trailing)
            if op.cmp == "==" and op.view.offset == 0 and op.view.numel == specs[r][op.view.tensor].numel
        }

    init = [{name: initial_value(s[name], r, world) for name in names} for r, s in enumerate(specs)]
    final = [{name: sim.tensors[r][name].reshape(-1) for name in names} for r in range(world)]
    at_end = covered(trailing=True)
    anywhere = covered(trailing=False)
    for promised in (at_end, anywhere) if anywhere != at_end else (at_end,):
        for kind, src, dst, redop, root, expected in _candidates(names, specs[0], world):
            ranks = (root,) if kind in ("reduce", "gather") else range(world)
            dtype = specs[0][dst].dtype
            if not all((r, dst) in promised and _close(final[r][dst], expected(init, r), dtype) for r in ranks):
                continue
            if all(_close(final[r][dst], init[r][dst], dtype) for r in ranks):
                continue  # the expected value is what the tensor held anyway: nothing is shown
            if not _holds_for_other_data(schedule, src, dst, ranks, expected):
                continue  # the program's data made it look so (`x = rank` is also a `reduce x op min` at rank 1)
            tensor = dst if kind in ("all_reduce", "reduce", "broadcast", "all_gather", "gather") else src
            return Measure(kind, tensor, redop, root, "proved by its expects")
    return None


def _holds_for_other_data(schedule: Schedule, src: str, dst: str, ranks, expected) -> bool:
    """The same equality, simulated again with scrambled integers in `src` on every rank."""
    world = schedule.world

    # ((i * 7919 + c) % 61) - 30, c different on every rank: exact in every dtype
    c = np.arange(world, dtype=np.int64) * 104729 + 13
    scrambled = (
        "b",
        "-",
        ("b", "%", ("b", "+", ("b", "*", ("i",), ("c", 7919), None), ("c", c), None), ("c", 61), None),
        ("c", 30),
        None,
    )
    infos = {**schedule.infos, src: dataclasses.replace(schedule.infos[src], init=scrambled)}
    other = dataclasses.replace(schedule, infos=infos)
    sim = simulate(other)
    if not sim.engine.completed:
        return False
    tensors = other.tensors
    init = [{name: initial_value(spec, r, world) for name, spec in tensors[r].items()} for r in range(world)]
    dtype = tensors[0][dst].dtype
    return all(_close(sim.tensors[r][dst].reshape(-1), expected(init, r), dtype) for r in ranks)


def _final_checks(ops, trailing: bool) -> list[Expect]:
    """The `expect`s of a rank that the program ends with (`trailing`), or else every one whose tensor nothing
    writes after it (before a `barrier`, or before the `wait` of an async op on other tensors): what the
    program promises its tensors hold at the end. An async op writes until its `wait`; one never waited for,
    until the end."""
    if trailing:
        end = len(ops)
        while end and type(ops[end - 1]) in (Expect, Print):
            end -= 1
        return [op for op in ops[end:] if type(op) is Expect]
    last: dict[str, int] = {}  # tensor → where it is last written
    pending: dict[int, list[str]] = {}  # async request → the tensors it writes
    for pos, op in enumerate(ops):
        written = _writes(op)
        req = getattr(op, "req", None)
        if req is not None:
            pending.setdefault(req, []).extend(written)
        else:
            last.update((t, pos) for t in written)
        if type(op) is Wait:
            for q in list(pending) if op.all else op.reqs:
                last.update((t, pos) for t in pending.pop(q, ()))
    last.update((t, len(ops)) for tensors in pending.values() for t in tensors)
    return [op for pos, op in enumerate(ops) if type(op) is Expect and last.get(op.view.tensor, -1) < pos]


def _writes(op) -> list[str]:
    """The tensors an op writes."""
    match op:
        case Compute():
            return [op.target.tensor]
        case Recv():
            return [op.view.tensor]
        case Batch():
            return [p.view.tensor for p in op.ops if type(p) is Recv]
        case Collective():
            return [v.tensor for v in op.outputs]
    return []


def _close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> bool:
    return actual.shape == expected.shape and bool(close(actual, expected, dtype).all())


def _computed(kind: str, src: str, world: int, redop: str | None = None, root: int | None = None):
    """expected(init, rank): what `kind` leaves in a rank's output from every rank's `src`, computed by the
    collective's own `apply` (the simulator's semantics), once per set of initial values."""
    memo: dict[int, list] = {}

    def expected(init, r):
        if id(init) not in memo:
            inputs = [[init[j][src]] for j in range(world)]
            memo[id(init)] = collectives.KINDS[kind].apply(
                collectives.Instance(
                    size=world,
                    root=root,
                    redop=redop,
                    scale=None,
                    inputs=inputs,
                    input_shapes=[[x.shape] for (x,) in inputs],
                    output_numel=[[x.size] for (x,) in inputs],
                    inputs_listed=[False] * world,
                    outputs_listed=[False] * world,
                    in_splits=[()] * world,
                    out_splits=[()] * world,
                )
            )
        return memo[id(init)][r][0]

    return expected


def _candidates(names, spec, world):
    """(kind, src, dst, redop, root, expected(init, rank)) for every built-in that could produce `dst`, in
    the order ties are settled: the collectives that involve every rank's data first."""

    def ops_for(name):
        d = DTYPES[spec[name].dtype]
        return (
            ("sum", "avg", "max", "min", "product")
            if d.is_float
            else ("sum", "max", "min", "product", "bor", "band", "bxor")
        )

    pairs = [(a, b) for a in names for b in names if spec[a].dtype == spec[b].dtype]
    for t in names:
        for op in ops_for(t):
            yield "all_reduce", t, t, op, None, _computed("all_reduce", t, world, op)
    for a, b in pairs:
        na, nb = spec[a].numel, spec[b].numel
        if na == world * nb and nb > 0:
            for op in ops_for(a):
                yield "reduce_scatter", a, b, op, None, _computed("reduce_scatter", a, world, op)
        if nb == world * na and na > 0:
            yield "all_gather", a, b, None, None, _computed("all_gather", a, world)
        if na == nb and na % world == 0 and na > 0:
            yield "all_to_all", a, b, None, None, _computed("all_to_all", a, world)
    for root in range(world):
        for t in names:
            yield "broadcast", t, t, None, root, _computed("broadcast", t, world, root=root)
            for op in ops_for(t):
                yield "reduce", t, t, op, root, _computed("reduce", t, world, op, root)
        for a, b in pairs:
            na, nb = spec[a].numel, spec[b].numel
            if nb == world * na and na > 0:
                yield "gather", a, b, None, root, _computed("gather", a, world, root=root)
            if na == world * nb and nb > 0:
                yield "scatter", a, b, None, root, _computed("scatter", a, world, root=root)
