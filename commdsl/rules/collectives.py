"""C3xx: members of a group that do not call the same collective, with the same arguments, in the same order.

Member disagreements are classified once per world size (`_classify`), each rule taking its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commdsl.checker.waits import Waiting
from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.engine import NOT_MEMBER, ROOT_NOT_IN_GROUP
from commdsl.rules import Rule, rank_list
from commdsl.rules.coalesced import place
from commdsl.schedule import BatchRec, CollectiveRec, NewGroupRec, P2PRec, WaitRec
from commdsl.values import distinct, item

if TYPE_CHECKING:
    from commdsl.checker.context import Context
    from commdsl.collectives import Kind
    from commdsl.source import Span


class CollectiveKindMismatch(Rule):
    """members of a group call different collectives at the same step

    ## What it does

    Reports members of a group that call different collectives at the same step: one rank in
    `all_reduce` while another is in `broadcast` on the same group.

    ## Why is this bad?

    A collective completes only when every member calls it. Different collectives at the same step never
    complete together: see the backend notes. It usually comes from a collective inside an `on` block
    that should be outside it.

    ## Example

    ```comm
    program mixed
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x
    else:
        broadcast x from 0
    ```

    ## Use instead

    ```comm
    program mixed
    world 2
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Backend notes

    Measured on Gloo: `all_reduce` against `broadcast` on two ranks hangs until the timeout. Only
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` turns it into an error (a fingerprint mismatch), and that mode makes
    a small `all_reduce` about 14 times slower. On NCCL the members' kernels never line up: a hang, or data
    mixed up silently where the sizes happen to agree (from the sources, not measured).
    """

    code = "C301"
    name = "collective-kind-mismatch"
    backend_doc = "collective-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class CollectiveOrderSwap(Rule):
    """members of a group call the same collectives in different orders

    ## What it does

    Reports members of a group that call the same collectives on it in a different order: rank 0 does
    `all_reduce` then `broadcast`, rank 1 does `broadcast` then `all_reduce`.

    ## Why is this bad?

    Collectives on a group match in call order. With the order swapped, each rank waits in a collective
    the other has not reached: the job hangs (see the backend notes). When the swapped collectives happen
    to share a kind, they match each other instead, and their buffers get mixed up silently.

    ## Example

    ```comm
    program swapped
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    on rank == 0:
        all_reduce x
        broadcast y from 0
    else:
        broadcast y from 0
        all_reduce x
    ```

    ## Use instead

    ```comm
    program swapped
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    all_reduce x
    broadcast y from 0
    ```

    ## Backend notes

    Measured on Gloo: collectives in swapped order hang until the timeout; with
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` torch reports an error instead.
    """

    code = "C302"
    name = "collective-order-swap"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class RootMismatch(Rule):
    """members disagree on the root (src/dst) of a rooted collective

    ## What it does

    Reports members of a group that disagree on the root (the `from` of `broadcast` and `scatter`, the
    `to` of `reduce` and `gather`).

    ## Why is this bad?

    Every member must agree on who the root is. `broadcast x from rank`, where each rank names itself, is
    the classic case: every rank believes it is the source. See the backend notes: even torch's debug
    mode does not catch it.

    ## Example

    ```comm
    program bcast
    world 2..4
    tensor x: float32[4] = rank
    broadcast x from rank
    ```

    ## Use instead

    ```comm
    program bcast
    world 2..4
    tensor x: float32[4] = rank
    broadcast x from 0
    ```

    ## Backend notes

    Measured on Gloo: a broadcast with a different `src` per rank hangs until the timeout, and
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` does **not** detect it: its fingerprint compares kinds, dtypes and
    shapes, not roots. Neither torch nor NCCL compares roots either; each member's kernel uses its own.
    """

    code = "C303"
    name = "root-mismatch"
    backend_doc = "collective-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class ReduceOpMismatch(Rule):
    """members reduce with different reduce ops

    ## What it does

    Reports members of a group that call a reducing collective (`all_reduce`, `reduce`, `reduce_scatter`)
    with different reduce ops, or `premul_sum` with different scales.

    ## Why is this bad?

    The reduce op is not exchanged between ranks, so nothing notices that they disagree: every rank gets
    a wrong result, silently. See the backend notes.

    ## Example

    ```comm
    program reduce_ops
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x op max
    else:
        all_reduce x op sum
    ```

    ## Use instead

    ```comm
    program reduce_ops
    world 2
    tensor x: float32[4] = rank
    all_reduce x op max
    ```

    ## Backend notes

    Measured on Gloo: `SUM` on one rank and `MAX` on the other completes with a **silently wrong result
    on every rank**, and `TORCH_DISTRIBUTED_DEBUG=DETAIL` does **not** detect it. Nothing compares reduce
    ops on NCCL either: each rank's kernel applies its own.
    """

    code = "C304"
    name = "reduce-op-mismatch"
    backend_doc = "collective-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class CollectiveDtypeMismatch(Rule):
    """members pass buffers of different dtypes

    ## What it does

    Reports members of a group that pass buffers of different dtypes to the same collective.

    ## Why is this bad?

    Collectives move bytes. A `float32` buffer on one rank and an `int32` buffer on another are combined
    as if both were one dtype: the bits are reinterpreted and the result is garbage, silently (see the
    backend notes).

    ## Example

    ```comm
    program dtypes
    world 2
    tensor a: float32[4] = rank
    tensor b: int32[4] = rank
    on rank == 0:
        all_reduce a
    else:
        all_reduce b
    ```

    ## Use instead

    ```comm
    program dtypes
    world 2
    tensor a: float32[4] = rank
    all_reduce a
    ```

    ## Backend notes

    Measured on Gloo: `float32` against `int32` in one `all_reduce` gives silent garbage; only
    `TORCH_DISTRIBUTED_DEBUG=DETAIL` reports it. On NCCL it has been reported to give garbage
    (pytorch#150248) or to hang (pytorch#150433).
    """

    code = "C305"
    name = "collective-dtype-mismatch"
    backend_doc = "collective-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class CollectiveSizeMismatch(Rule):
    """members contribute different numbers of elements

    ## What it does

    Reports members of a group that contribute different numbers of elements to the same collective, for
    instance tensors sized by `rank`.

    ## Why is this bad?

    Every member must contribute the same number of elements (per peer, for `all_gather`, `gather`,
    `scatter`, `reduce_scatter` and `all_to_all`). What happens otherwise depends on the world size, and
    includes a silently wrong result: see the backend notes. Use `all_to_all` with `splits` for uneven
    exchanges, or, on NCCL, the list form of `all_gather` or `reduce_scatter` with buffers of uneven sizes:
    there entry j of every member's list must hold member j's part, and the members are compared one by one.

    ## Example

    ```comm
    program sizes
    world 2..4
    tensor x: float32[rank + 1] = rank
    all_reduce x
    ```

    ## Use instead

    ```comm
    program sizes
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    ```

    ## Backend notes

    Measured on Gloo, `all_reduce` with shapes `[4]` and `[8]`: at world size 2 one rank aborts
    (`Received data size doesn't match expected size`); at world size 4 **rank 0 silently gets a wrong
    result** while the others die. Shapes `[2, 2]` and `[4]` (same element count) succeed silently, which
    is why commdsl compares element counts, not shapes. On NCCL, "it may hang as soon as the sizes differ
    ... some data will be incorrect" (NVIDIA/nccl#1417).
    """

    code = "C306"
    name = "collective-size-mismatch"
    backend_doc = "collective-matching"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class MissingParticipant(Rule):
    """a member of the group never calls the collective

    ## What it does

    Reports a collective that some member of its group never calls: the member finishes, or waits
    forever somewhere else, while the others wait in the collective.

    ## Why is this bad?

    A collective completes only when every member of the group calls it, so the ranks that did call it
    hang until the timeout (30 minutes by default). The usual cause is a collective inside an `on` block:
    every rank of the group must reach it.

    ## Example

    ```comm
    program missing
    world 2..4
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x
    ```

    ## Use instead

    ```comm
    program missing
    world 2..4
    tensor x: float32[4] = rank
    all_reduce x
    ```
    """

    code = "C307"
    name = "missing-participant"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()
        waiting = ctx.outcome.waiting
        for inst, member, _, reason in ctx.waits.missing:
            key = (inst.gid, inst.seq, member)
            if key in seen:
                continue
            seen.add(key)
            group = ctx.schedule.groups[inst.gid]
            present = sorted(int(waiting.rank[r]) for r in inst.rows)
            first = min(inst.rows, key=lambda r: int(waiting.rank[r]))
            call = ctx.op(waiting.rec[first], waiting.pos[first])
            fate = "finishes without calling it" if reason == "finished" else "never calls it"
            yield cls.diagnostic(
                f"`{call.kind}` on `{group.name}`: rank {member} {fate}",
                span=call.span,
                label=f"ranks {rank_list(present)} wait here for rank {member}",
                notes=(Note(message=f"group `{group.name}` has members {rank_list(group.ranks)}"),),
                help="every member of the group must issue the collective; check the `on` conditions around it",
            )


class CrossGroupOrder(Rule):
    """collectives on two groups issued in different orders: a cycle

    ## What it does

    Reports collectives on two (or more) groups issued in different orders on different ranks, so that
    each rank waits in a collective on one group for a rank that waits in a collective on the other: a
    cycle. The note lists each edge of the cycle with its line.

    ## Why is this bad?

    Each collective blocks until all its members arrive. Rank 0 waits in group `a` for rank 1, which
    waits in group `b` for rank 0: neither ever continues, and the job hangs until the timeout. Overlapping
    groups (data- and tensor-parallel groups of a mesh) must be used in one global order on every rank.

    ## Example

    ```comm
    program groups
    world 2
    group a = [0, 1]
    group b = [0, 1]
    tensor x: float32[4] = rank
    on rank == 0:
        all_reduce x in a
        all_reduce x in b
    else:
        all_reduce x in b
        all_reduce x in a
    ```

    ## Use instead

    ```comm
    program groups
    world 2
    group a = [0, 1]
    group b = [0, 1]
    tensor x: float32[4] = rank
    all_reduce x in a
    all_reduce x in b
    ```
    """

    code = "C308"
    name = "cross-group-order"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        from commdsl.rules.deadlock import cycle_parts

        for cycle in ctx.waits.cycles:
            groups = {e.thing.gid for e in cycle if isinstance(e.thing, Waiting)}
            if all(isinstance(e.thing, Waiting) for e in cycle) and len(groups) >= 2:
                span, label, labels, notes, ranks = cycle_parts(ctx, cycle)
                yield cls.diagnostic(
                    f"ranks {ranks} call collectives on different groups in different orders",
                    span=span,
                    label=label,
                    labels=labels,
                    notes=notes,
                    help="issue collectives on overlapping groups in one global order on every rank",
                )


class AsyncMismatch(Rule):
    """some members call a collective blocking, others async

    ## What it does

    Reports a collective that some members call blocking and others call async (bound to a handle and
    waited later).

    ## Why is this bad?

    Members then disagree on when the buffer holds the result: the async rank goes on to other
    operations before its `wait`, the blocking ranks do not, and a program whose ranks do different
    things around one collective is what the checker cannot vouch for. torch itself pairs a blocking call
    with an async one (the blocking form waits at once), so the mismatch does not hang by itself; it
    usually means one branch of an `on` block was changed and the other was not. Make the collective
    async on every member or on none.

    ## Example

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    on rank == 0:
        h = all_reduce x
        wait h
    else:
        all_reduce x
    ```

    ## Use instead

    ```comm
    program async
    world 2
    tensor x: float32[4] = rank
    h = all_reduce x
    wait h
    ```
    """

    code = "C309"
    name = "async-mismatch"
    severity = "warning"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        yield from _findings(ctx, cls)


class GroupNonmember(Rule):
    """a rank calls a collective on a group it is not in

    ## What it does

    Reports a rank that calls a collective on a group it is not a member of.

    ## Why is this bad?

    torch does not run a collective on a non-member: it warns (`Running all_reduce on global rank 2 which
    does not belong to the given group.`) and returns at once, leaving the buffer as it was. The program
    then reads that buffer as if it held the result. An async call returns None instead of a request there,
    so its `wait` raises (measured on Gloo, torch 2.13; the members complete the collective among themselves
    either way). Guard the call with `on` so that only members issue it.

    ## Example

    ```comm
    program subgroup
    world 4
    group g = [0, 1]
    tensor x: float32[4] = rank
    all_reduce x in g
    ```

    ## Use instead

    ```comm
    program subgroup
    world 4
    group g = [0, 1]
    tensor x: float32[4] = rank
    on rank < 2:
        all_reduce x in g
    barrier
    ```
    """

    code = "C310"
    name = "group-nonmember"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for rank, rid, pos, problem in ctx.outcome.bad:
            if problem != NOT_MEMBER or not isinstance(ctx.record(rid), CollectiveRec):
                continue
            op = ctx.op(rid, pos)
            skipped = (
                f"torch skips the call on rank {rank} (a UserWarning: `Running {op.kind} on global rank {rank} "
                "which does not belong to the given group`)"
            )
            if op.req is None:
                note = f"{skipped}; its buffers keep their values there"
            else:
                note = f"{skipped} and returns None for its request: the `wait` on it raises there"
            yield cls.diagnostic(
                f"rank {rank} calls `{op.kind}` on group `{op.group.name}`, which it is not in",
                span=op.span,
                label=f"members are {rank_list(op.group.ranks)}",
                notes=(Note(message=note),),
                help="guard the call with `on` so only members issue it",
            )


class RootNotInGroup(Rule):
    """the root of a rooted collective is not a member of its group

    ## What it does

    Reports a rooted collective (`broadcast`, `scatter`, `reduce`, `gather`) on a group whose root is not
    a member of that group.

    ## Why is this bad?

    The root is a global rank that must belong to the group (as with point-to-point ops in a group, torch
    takes global rank numbers). A root outside the group cannot take part: torch raises an error on the
    members when it translates the root into a group rank. Writing the root as a position in the group
    (`from 0` meaning "the group's first member") is the usual mistake.

    ## Example

    ```comm
    program subgroup
    world 4
    group g = [2, 3]
    tensor x: float32[4] = rank
    on rank >= 2:
        broadcast x from 0 in g
    ```

    ## Use instead

    ```comm
    program subgroup
    world 4
    group g = [2, 3]
    tensor x: float32[4] = rank
    on rank >= 2:
        broadcast x from 2 in g
    barrier
    ```
    """

    code = "C311"
    name = "root-not-in-group"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        for _rank, rid, pos, problem in ctx.outcome.bad:
            if problem != ROOT_NOT_IN_GROUP:
                continue
            op = ctx.op(rid, pos)
            yield cls.diagnostic(
                f"`{op.kind}` root {op.root} is not in group `{op.group.name}`",
                span=op.span,
                label=f"members are {rank_list(op.group.ranks)}",
                help="the root is a global rank inside the group",
            )


# ---- members that disagree: one pass over the engine's disagreeing instances, shared by C301–C309 and the
# kinds' own rules (C312)

_FIELDS = (
    ("C303", "root", "root", "uses root {v}"),
    ("C304", "redop", "reduce op", "reduces with `{v}`"),
    ("C305", "dtype", "dtype", "passes {v}"),
    ("C309", "blocking", "blocking or async call", "{v}"),
)
_NOTES = {  # what each backend does with the disagreement (docs/backend-support.md#collective-matching)
    "C301": {
        "gloo": "on Gloo this hangs until the timeout (only TORCH_DISTRIBUTED_DEBUG=DETAIL makes it an error)",
        "nccl": "on NCCL the kernels never line up: a hang, or data mixed up silently where the sizes agree",
    },
    "C304": {
        "gloo": "Gloo gives every rank a silently wrong result; DETAIL mode does not catch it",
        "nccl": "nothing compares reduce ops on NCCL: each rank's kernel applies its own, silently",
    },
    "C305": {
        "gloo": "Gloo reinterprets the bytes: silent garbage",
        "nccl": "on NCCL the result is garbage, or the call hangs",
    },
    "C306": {
        "gloo": "Gloo aborts one rank and may leave another with a silently wrong result",
        "nccl": "on NCCL the call may hang, or complete with some of the data wrong",
    },
}


def _root_words(kind) -> tuple[str, str]:
    """(the keyword, what the root is) of a rooted kind, as its form writes it: `from` the source, `to` the
    destination."""
    return ("from", "source") if kind.root_sends else ("to", "destination")


def _root_note(kind, backend: str) -> str:
    """Why members of one `kind` call with different roots cannot meet, on `backend`."""
    _, role = _root_words(kind)
    if backend == "nccl":
        return (
            f"neither torch nor NCCL compares roots: each member's `{kind.name}` kernel uses its own {role}, so "
            f"they disagree on who sends (a hang or wrong data)"
        )
    return (
        "on Gloo the members wait for messages that never come, until the timeout; TORCH_DISTRIBUTED_DEBUG="
        "DETAIL does not compare roots"
    )


def _findings(ctx: Context, rule: type[Rule]) -> Iterator[Diagnostic]:
    for code, make in ctx.shared("collective-disagreements", _classify):
        if code == rule.code:
            yield make(rule)


class _Member:
    """One member's call, as the messages word it."""

    def __init__(self, ctx: Context, calls, k: int):
        self.rank = int(calls.rank[k])
        self.op = ctx.op(calls.rec[k], calls.pos[k])
        self.blocking = bool(calls.req[k] < 0)

    def value(self, what: str):
        if what == "blocking":
            return "blocks" if self.blocking else "is async"
        if what == "redop":
            return self.op.redop
        return getattr(self.op, what)


def _classify(ctx: Context) -> list:
    """(code, make(rule) -> Diagnostic) for each disagreeing instance, in the order the checker reports."""
    out, swapped, unaligned = [], set(), set()
    swaps = _buffer_index(ctx.outcome.disagreements)
    for inst in sorted(ctx.outcome.disagreements, key=lambda i: (i.gid, i.seq)):
        c = inst.calls
        group = ctx.schedule.groups[inst.gid]
        if inst.gid in unaligned:  # the group's calls no longer line up: what follows is its consequence
            continue
        odd = _first_differing(c.block)
        if odd is not None:
            unaligned.add(inst.gid)
            first, other = _Member(ctx, c, 0), _Member(ctx, c, odd)
            out.append(
                (
                    "C316",
                    _pair(
                        f"ranks {first.rank} and {other.rank} coalesce different collectives on `{group.name}`",
                        first,
                        other,
                        f"rank {first.rank}: `{first.op.kind}` {place(first.op.block)}",
                        f"rank {other.rank}: `{other.op.kind}` {place(other.op.block)}",
                        "coalesce the same collectives, in the same order, on every member",
                        note="a coalesced block is one backend call over all its tensors: calls that group "
                        "collectives differently hang, abort, or add data into the wrong tensors silently",
                    ),
                )
            )
            continue
        odd = _first_differing(c.kind)
        if odd is not None:
            if inst.gid in swapped:
                continue
            first, other = _Member(ctx, c, 0), _Member(ctx, c, odd)
            if _order_swap(ctx, inst.gid, first.rank, other.rank):
                swapped.add(inst.gid)
                out.append(
                    (
                        "C302",
                        _pair(
                            f"ranks {first.rank} and {other.rank} call the same collectives on `{group.name}` "
                            "in a different order",
                            first,
                            other,
                            f"rank {first.rank} calls `{first.op.kind}` first",
                            f"rank {other.rank} calls `{other.op.kind}` first",
                            "make every member issue the group's collectives in one order",
                        ),
                    )
                )
            else:
                out.append(
                    (
                        "C301",
                        _pair(
                            f"rank {first.rank} calls `{first.op.kind}` while rank {other.rank} calls "
                            f"`{other.op.kind}` on "
                            f"`{group.name}`",
                            first,
                            other,
                            f"rank {first.rank}: `{first.op.kind}`",
                            f"rank {other.rank}: `{other.op.kind}`",
                            "every member of a group must call the same collective at the same step",
                            note=_NOTES["C301"][ctx.backend],
                        ),
                    )
                )
            continue
        odd = _first_differing(c.buffers)
        if odd is not None and _buffers_swapped(swaps, inst, 0, odd):
            if inst.gid not in swapped:
                swapped.add(inst.gid)
                first, other = _Member(ctx, c, 0), _Member(ctx, c, odd)
                out.append(
                    (
                        "C302",
                        _pair(
                            f"ranks {first.rank} and {other.rank} call the same collectives on `{group.name}` "
                            "in a different order",
                            first,
                            other,
                            f"rank {first.rank} calls `{first.op.kind}` on {_names(first.op)} first",
                            f"rank {other.rank} calls `{other.op.kind}` on {_names(other.op)} first",
                            "make every member issue the group's collectives in one order",
                            note=f"the two `{first.op.kind}`s match each other instead: rank {first.rank}'s "
                            f"{_names(first.op)} meets rank {other.rank}'s {_names(other.op)}, so the data is mixed up "
                            "silently, or, where sizes or dtypes differ, the job hangs or aborts",
                        ),
                    )
                )
            continue
        blocking = (c.req < 0).astype(np.int64)
        columns = {
            "root": c.root,
            "redop": np.stack([c.redop, c.scale], axis=1),
            "dtype": c.dtype,
            "blocking": blocking,
        }
        for code, column, what, text in _FIELDS:
            odd = _first_differing(columns[column])
            if odd is None:
                continue
            first, other = _Member(ctx, c, 0), _Member(ctx, c, odd)
            say = [f"rank {m.rank} " + text.format(v=m.value(column)) for m in (first, other)]
            kind = ctx.record(c.rec[0]).kind
            if code == "C303":
                keyword, role = _root_words(kind)
                say = [f"rank {m.rank} names `{keyword} {m.op.root}`" for m in (first, other)]
                out.append(
                    (
                        code,
                        _pair(
                            f"`{kind.name}` on `{group.name}`: members disagree on the {role} rank",
                            first,
                            other,
                            say[0],
                            say[1],
                            "pass the same root on every rank",
                            note=_root_note(kind, ctx.backend),
                        ),
                    )
                )
                break
            if code == "C309":
                make = _pair(
                    f"`{first.op.kind}` on `{group.name}`: members disagree on the {what}",
                    first,
                    other,
                    say[0],
                    say[1],
                    "call it the same way on every rank",
                    note="torch matches the calls (async_op only decides whether Python waits), but the "
                    "code reads as if the ranks disagreed",
                )
            else:
                make = _pair(
                    f"`{first.op.kind}` on `{group.name}`: members disagree on the {what}",
                    first,
                    other,
                    say[0],
                    say[1],
                    "pass the same value on every rank",
                    note=_NOTES[code][ctx.backend],
                )
            out.append((code, make))
            break
        else:
            found = _sizes(ctx, c, group)
            if found is not None:
                out.append(found)
    return out


def _buffer_index(instances) -> dict[tuple[int, int, int], set[int]]:
    """(group, rank, buffers) → the instances (seq) where that member called with those buffers."""
    index: dict[tuple[int, int, int], set[int]] = {}
    for inst in instances:
        for rank, buffers in zip(inst.calls.rank.tolist(), inst.calls.buffers.tolist()):
            index.setdefault((inst.gid, rank, buffers), set()).add(inst.seq)
    return index


def _buffers_swapped(index, inst, a: int, b: int) -> bool:
    """Do members a and b of `inst` call with each other's buffers at another instance of the group (rank 0
    `broadcast params` then `broadcast buffers`, rank 1 the other way round)?"""
    c = inst.calls
    ra, rb, xa, xb = int(c.rank[a]), int(c.rank[b]), int(c.buffers[a]), int(c.buffers[b])
    return bool((index.get((inst.gid, ra, xb), set()) & index.get((inst.gid, rb, xa), set())) - {inst.seq})


def _names(op) -> str:
    names = list(dict.fromkeys(v.tensor for v in (*op.inputs, *op.outputs)))
    return ", ".join(f"`{n}`" for n in names)


def _first_differing(column: np.ndarray) -> int | None:
    differ = (column != column[0]) if column.ndim == 1 else (column != column[0]).any(axis=1)
    where = np.flatnonzero(differ)
    return int(where[0]) if where.size else None


def _sizes(ctx: Context, c, group):
    first = _Member(ctx, c, 0)
    kind = ctx.record(c.rec[0]).kind
    if (c.contribution < 0).any():  # sizes that differ per peer: the members are compared one by one
        pair = kind.members_disagree_ops([ctx.op(c.rec[k], c.pos[k]) for k in range(len(c))])
        if pair is None:
            return None
        a, b = _Member(ctx, c, pair[0]), _Member(ctx, c, pair[1])
        message, label_a, label_b, help = kind.disagreement(a.rank, a.op, b.rank, b.op, pair)
        return (kind.rule.code if kind.rule else "C306", _pair(message, a, b, label_a, label_b, help))
    odd = _first_differing(c.contribution)
    if odd is None:
        return None
    other = _Member(ctx, c, odd)
    s0, s1 = int(c.contribution[0]), int(c.contribution[odd])
    return (
        "C306",
        _pair(
            f"`{first.op.kind}` on `{group.name}`: rank {first.rank} contributes {_count(s0)}, "
            f"rank {other.rank} {_count(s1)}",
            first,
            other,
            _count(s0),
            _count(s1),
            "size every member's buffers alike",
            note=_NOTES["C306"][ctx.backend],
        ),
    )


def _count(n: int) -> str:
    return f"{n} element{'s' * (n != 1)}"


def _order_swap(ctx: Context, gid: int, a: int, b: int) -> bool:
    """Do ranks a and b call the same multiset of collectives on this group, in a different order?"""

    def seq(rank):
        return [
            op.kind
            for op in ctx.schedule.ops[rank]
            if getattr(op, "group", None) is not None and hasattr(op, "kind") and op.group.id == gid
        ]

    sa, sb = seq(a), seq(b)
    return sa != sb and sorted(sa) == sorted(sb)


def _pair(message, primary: _Member, secondary: _Member, label1, label2, help, note=None):
    labels = ()
    if secondary.op.span != primary.op.span:
        labels = (Label(span=secondary.op.span, message=label2),)
    else:
        label1 = f"{label1}; {label2}"
    notes = (Note(message=note),) if note else ()
    return lambda rule: rule.diagnostic(
        message, span=primary.op.span, label=label1, labels=labels, notes=notes, help=help
    )


class NewGroupMismatch(Rule):
    """ranks make process groups in a different order, with different ranks, or not at all

    ## What it does

    Compares every rank's `new_group` steps: the k-th `g = new_group [...]` a rank runs must name the same
    ranks as the k-th of every other rank of the world, members or not. Reports the first step where two
    ranks differ, with both lines, or where one rank makes a group that another never makes.

    ## Why is this bad?

    `torch.distributed.new_group` is collective over the whole world: every rank must call it, in the same
    order, with the same ranks, even the ranks that will not be members. Each call takes the next name from
    a counter every rank keeps, and the members meet under that name in the store. When ranks disagree, the
    members of a group wait for peers that are making another group (a hang until the store's timeout), or
    two groups meet under one name and their collectives run with the wrong partners — silently. The classic
    mistake is calling `new_group` only for the group a rank belongs to (pytorch/pytorch#130102).

    ## Example

    ```comm
    program subgroups
    world 4
    tensor x: float32[2] = rank
    on rank < 2:
        g = new_group [0, 1]
    else:
        g = new_group [2, 3]
    all_reduce x in g
    ```

    ## Use instead

    ```comm
    program subgroups
    world 4
    tensor x: float32[2] = rank
    low = new_group [0, 1]
    high = new_group [2, 3]
    on rank < 2:
        all_reduce x in low
    else:
        all_reduce x in high
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13): ranks 0, 1 making `[0, 1]` then `[1, 2]` against rank 2 making `[1, 2]`
    first: two groups met under one name, rank 0's `all_reduce` ran with rank 2 and rank 1 hung. The pattern
    of pytorch/pytorch#130102 at world 4 gave, in three runs, the right sums, two wrong pairs summed together
    with a third rank hung, and another wrong pair. A member that skips `new_group` leaves the others hanging
    in it.

    ## References

    - https://github.com/pytorch/pytorch/issues/130102
    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.new_group
    """

    code = "C313"
    name = "new-group-mismatch"
    backend_doc = "groups-made-at-run-time"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        s = ctx.schedule
        if not s.made:
            return
        made = _groups_made(s)

        def members(rank: int, k: int) -> tuple[int, ...] | None:
            return s.groups[made[rank][k][1]].ranks if k < len(made[rank]) else None

        for k in range(max(len(m) for m in made)):
            ref = members(0, k)
            odd = next((r for r in range(s.world) if members(r, k) != ref), None)
            if odd is None:
                continue
            a, b = (0, odd) if ref is not None else (odd, 0)
            rid, gid = made[a][k]
            other = made[b][k] if k < len(made[b]) else None
            first = s.groups[gid]
            nth = _ordinal(k + 1)
            if other is None:
                yield cls.diagnostic(
                    f"rank {a} makes group `{first.name}` {rank_list(first.ranks)} as its {nth} `new_group`, "
                    f"rank {b} makes no {nth} group",
                    span=s.records[rid].span,
                    label=f"rank {a}'s {nth} `new_group`",
                    notes=(Note(message=f"rank {b} makes {len(made[b])} group{'s' * (len(made[b]) != 1)} in all"),),
                    help="call `new_group` on every rank, members or not, for every group, in one order",
                )
            else:
                orid, ogid = other
                second = s.groups[ogid]
                labels = ()
                label = f"rank {a} makes {rank_list(first.ranks)}"
                if s.records[orid].span != s.records[rid].span:
                    labels = (Label(span=s.records[orid].span, message=f"rank {b} makes {rank_list(second.ranks)}"),)
                else:
                    label += f"; rank {b} {rank_list(second.ranks)}"
                yield cls.diagnostic(
                    f"rank {a} makes group `{first.name}` {rank_list(first.ranks)} as its {nth} `new_group`, "
                    f"rank {b} makes `{second.name}` {rank_list(second.ranks)}",
                    span=s.records[rid].span,
                    label=label,
                    labels=labels,
                    help="call `new_group` on every rank, members or not, for every group, in one order",
                )
            return


def _groups_made(s) -> list[list[tuple[int, int]]]:
    """Per rank, (record id, group id) of each `new_group` it runs, in order."""
    out = []
    for rank in range(s.world):
        mine = []
        for rid in s.sequence(rank).tolist():
            rec = s.records[rid]
            if type(rec) is NewGroupRec:
                mine.append((rid, int(item(rec.made, int(np.searchsorted(rec.ranks, rank))))))
        out.append(mine)
    return out


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class OverlappingBuffers(Rule):
    """a collective whose input and output overlap where torch does not run it in place

    ## What it does

    Reports a collective whose input and output share elements on a rank, unless they are the form torch and
    the backends run in place: one buffer (`all_reduce x`, `broadcast x`, `reduce x`), the input as the
    member's own block of the output (`all_gather x.chunk(rank, world) into x`, `gather` at the root), or the
    output as its own block of the input (`reduce_scatter x into x.chunk(rank, world)`, `scatter` at the
    root). `all_to_all` has no in-place form. Names the first rank where the buffers overlap.

    ## Why is this bad?

    The backend reads the input while it writes the output, so what lands depends on the order of its
    copies and messages, not on the program: an `all_to_all x into x` leaves wrong blocks that differ from
    run to run. Give the output a buffer of its own, or use the in-place form.

    ## Example

    ```comm
    program shuffle
    world 4
    tensor x: float32[8] = rank * 8 + i
    all_to_all x into x
    ```

    ## Use instead

    ```comm
    program shuffle
    world 4
    tensor x: float32[8] = rank * 8 + i
    tensor y: float32[8]
    all_to_all x into y
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 4): `all_to_all x into x`, and an `all_to_all` whose input and
    output halves overlap, leave wrong blocks that differ from run to run; a `scatter` whose root output
    overlaps a block it sends hands the receiver what the block held before the root's copy, which the
    simulator does not model. torch's Gloo runs `all_gather`, `gather` and `reduce_scatter` through a
    temporary, so any overlap comes out right there (measured); NCCL runs them in place only at the
    member's own block (NCCL's documentation, *In-place operations*), so for these three the finding is
    made under `nccl` only, and not for the list forms of `all_gather` and `reduce_scatter`, which torch
    runs through a flat temporary on NCCL too (`newLikeFlat` in PGNCCL).
    """

    code = "C318"
    name = "overlapping-buffers"
    backend_doc = "in-place"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()
        for rec in ctx.schedule.records:
            if not isinstance(rec, CollectiveRec) or rec.span in seen:
                continue
            if rec.kind.gloo_copies and ctx.backend == "gloo":
                continue
            found = _overlap(ctx, rec)
            if found is None:
                continue
            seen.add(rec.span)
            rank, tensor = found
            when = {
                "same": "on one buffer",
                "input-block": "when the input is the member's own block of the output (`y.chunk(rank, world)`)",
                "output-block": "when the output is the member's own block of the input (`x.chunk(rank, world)`)",
            }.get(rec.kind.in_place or "")
            order = "what lands depends on the order of the backend's copies and messages"
            why = (
                f"`{rec.kind.name}` has no in-place form: {order}"
                if when is None
                else (f"torch runs `{rec.kind.name}` in place only {when}; otherwise {order}")
            )
            yield cls.diagnostic(
                f"`{rec.kind.name}` on rank {rank} reads and writes overlapping elements of `{tensor}`",
                span=rec.span,
                label="input and output overlap",
                notes=(Note(message=why),),
                help="give the output a buffer of its own"
                if rec.kind.in_place is None
                else "use the in-place form or separate buffers",
            )


def _overlap(ctx: Context, rec: CollectiveRec) -> tuple[int, str] | None:
    """(the first rank, the tensor) where the input `rec` reads overlaps the output it writes other than in
    its kind's in-place form; None where nowhere."""
    if rec.kind.listed_copies and (rec.inputs_listed or rec.outputs_listed):
        return None
    ranks = rec.ranks
    n = ranks.size
    roots = _roots(rec)
    for is_root in (True, False):
        reads, writes, _ = rec.kind.roles(is_root)
        mine = roots == is_root
        if not (reads and writes and mine.any()):
            continue
        for iv in rec.inputs:
            for ov in rec.outputs:
                if iv.tensor != ov.tensor:
                    continue
                io, inn, oo, on = (
                    np.broadcast_to(np.asarray(a, dtype=np.int64), (n,))
                    for a in (iv.offset, iv.numel, ov.offset, ov.numel)
                )
                hit = mine & (io < oo + on) & (oo < io + inn) & (inn > 0) & (on > 0)
                hit &= ~_in_place(ctx, rec, io, inn, oo, on)
                if hit.any():
                    return int(ranks[np.argmax(hit)]), iv.tensor
    return None


def _roots(rec: CollectiveRec) -> np.ndarray:
    """Per rank of `rec`, whether it is the call's root (none for a kind without one)."""
    n = rec.ranks.size
    return np.zeros(n, dtype=bool) if rec.root is None else np.broadcast_to(np.asarray(rec.root), (n,)) == rec.ranks


def _in_place(ctx: Context, rec: CollectiveRec, io, inn, oo, on) -> np.ndarray:
    """Per rank of `rec`, whether its input (offsets, elements) and output are its kind's in-place form."""
    form = rec.kind.in_place
    if form == "same":
        return (io == oo) & (inn == on)
    if form is None:
        return np.zeros(io.size, dtype=bool)
    me, size = _group_index(ctx, rec)
    if form == "input-block":
        return (io == oo + me * inn) & (on == size * inn)
    return (oo == io + me * on) & (inn == size * on)


def _group_index(ctx: Context, rec: CollectiveRec) -> tuple[np.ndarray, np.ndarray]:
    """(each rank's index in its group of `rec`, that group's size), by rank of `rec`."""
    ranks = rec.ranks
    gids = np.broadcast_to(np.asarray(rec.gid, dtype=np.int64), ranks.shape)
    me, size = np.empty(ranks.size, dtype=np.int64), np.empty(ranks.size, dtype=np.int64)
    for g in distinct(gids).tolist():
        sel = gids == g
        members = np.asarray(ctx.schedule.groups[g].ranks)  # ascending
        me[sel], size[sel] = np.searchsorted(members, ranks[sel]), members.size
    return me, size


class AsyncAcrossGroups(Rule):
    """on NCCL, an op on one group while an async op on another is still in flight

    ## What it does

    Checked when the program's backends include `nccl`. Reports a rank that issues an op on a group (a
    collective, a `batch`, a send or receive) while an async collective or `batch` it issued on another
    group is not yet waited, naming both lines.

    ## Why is this bad?

    Each process group is its own NCCL communicator, with its own CUDA stream: the two ops run on the GPU
    at once, and NCCL does not promise progress for communicators used concurrently. Where two ranks issue
    the ops in different orders, each GPU can sit in one kernel waiting for the other rank's, which is
    stuck behind the other kernel: a hang that depends on how many thread blocks the GPU can hold.
    torch's `new_group` documentation: "Once one or more async ops have been issued on one process group,
    they must be synchronized with other cuda streams by calling `work.wait()` before using another
    process group." `wait` first, or issue both ops on one group.

    ## Example

    ```comm
    program overlap
    world 4
    backend nccl
    group pair = split by rank // 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    h = all_reduce x in pair
    all_reduce y
    wait h
    ```

    ## Use instead

    ```comm
    program overlap
    world 4
    backend nccl
    group pair = split by rank // 2
    tensor x: float32[4] = rank
    tensor y: float32[4] = rank
    h = all_reduce x in pair
    wait h
    all_reduce y
    ```

    ## Backend notes

    From torch's documentation (`new_group`, "Safe concurrent usage", torch 2.13) and NCCL's (*Using
    multiple NCCL communicators concurrently*); not measured here (no GPU). Gloo runs each group's
    collectives on threads of its own, so the pattern is safe there and not reported. Unbatched sends and
    receives are counted as ops on their group but not as in flight: torch runs them on communicators of
    their own per pair of ranks.
    """

    code = "C319"
    name = "async-across-groups"
    severity = "warning"
    backend_doc = "nccl-streams"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        if ctx.backend != "nccl":
            return
        s = ctx.schedule
        for rank, earlier, later in _across_groups(s):
            first, then = s.records[earlier], s.records[later]
            yield cls.diagnostic(
                f"rank {rank} uses group `{_group_name(s, then, rank)}` while its async "
                f"`{_op_word(first)}` on group `{_group_name(s, first, rank)}` is still in flight",
                span=then.span,
                label=f"on `{_group_name(s, then, rank)}`",
                labels=(Label(span=first.span, message="not yet waited"),),
                help="`wait` the request first, or issue both ops on one group",
            )


def _across_groups(s) -> Iterator[tuple[int, int, int]]:
    """(rank, record of the async op in flight, record of the op on another group), once per pair of statements;
    nothing when no async collective or batch exists or every op uses one group."""
    grouped = [r for r in s.records if isinstance(r, (CollectiveRec, BatchRec, P2PRec))]
    if not any(r.req is not None and not isinstance(r, P2PRec) for r in grouped):
        return
    if len(set().union(*(_groups_of(r) for r in grouped))) < 2:
        return
    seen: set[tuple] = set()
    for rank in range(s.world):
        pending: dict[int, tuple[int, int]] = {}  # request → (group, record) of async ops in flight
        for rid in s.sequence(rank).tolist():
            rec = s.records[rid]
            k = int(np.searchsorted(rec.ranks, rank))
            if isinstance(rec, WaitRec):
                if rec.all:
                    pending.clear()
                for q in rec.reqs[rec.starts[k] : rec.starts[k + 1]].tolist():
                    pending.pop(q, None)
                continue
            if not isinstance(rec, (CollectiveRec, BatchRec, P2PRec)):
                continue
            g = _gid(rec, k)
            for other, earlier in pending.values():
                key = (s.records[earlier].span, rec.span)
                if other != g and key not in seen:
                    seen.add(key)
                    yield rank, earlier, rid
                    break
            if rec.req is not None and not isinstance(rec, P2PRec):
                pending[int(item(rec.req, k))] = (g, rid)


def _gid_of(rec: CollectiveRec | BatchRec | P2PRec):
    """The group ids of `rec`'s op, a number or one per rank (a batch: its first op's; the world is 0)."""
    g = rec.ops[0].gid if isinstance(rec, BatchRec) else rec.gid
    return 0 if g is None else g


def _gid(rec: CollectiveRec | BatchRec | P2PRec, k: int) -> int:
    """The group of the op `rec` runs on rank `rec.ranks[k]`."""
    return int(item(_gid_of(rec), k))


def _groups_of(rec: CollectiveRec | BatchRec | P2PRec) -> set[int]:
    """Every group `rec`'s op runs on, over its ranks."""
    return set(distinct(np.atleast_1d(np.asarray(_gid_of(rec), dtype=np.int64))).tolist())


def _group_name(s, rec, rank: int) -> str:
    return s.groups[_gid(rec, int(np.searchsorted(rec.ranks, rank)))].name


def _op_word(rec: CollectiveRec | BatchRec) -> str:
    return "batch" if isinstance(rec, BatchRec) else rec.kind.name


class ListShapeMismatch(Rule):
    """a buffer of a collective's list whose shape the backend refuses

    ## What it does

    Reports a list form (`all_gather x into [a, b]`, `gather … into [a, b]`, `scatter [a, b] into …`,
    `reduce_scatter [a, b] into …`) with a buffer whose shape is not the one tensor's on the other side (the
    input of a gather, the output of a scatter), under a backend whose torch call compares them: Gloo for all
    four (for `reduce_scatter`, the member's own entry only), NCCL for `gather` and `scatter`. Names the
    first rank and the buffer. In a traced script, `dist.all_to_all(outputs, inputs)` too (a `.comm` program
    writes it with splits): Gloo wants every buffer of both lists in the first input's shape.

    ## Why is this bad?

    The elements fit, so the program reads as right, but torch's backend compares each buffer's shape with
    the tensor's and raises before anything moves: a `[2, 2]` buffer for a `[4]` input is refused. On Gloo
    this includes the `all_gather` lists of uneven sizes that NCCL runs (an all-gather-v: one broadcast per
    member).

    ## Example

    ```comm
    program shapes
    world 2
    tensor x: float32[4] = rank
    tensor a: float32[2, 2]
    tensor b: float32[2, 2]
    all_gather x into [a, b]
    ```

    ## Use instead

    ```comm
    program shapes
    world 2
    tensor x: float32[2, 2] = rank
    tensor a: float32[2, 2]
    tensor b: float32[2, 2]
    all_gather x into [a, b]
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 2): `all_gather`, `gather` and `scatter` raise `RuntimeError:
    ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (4), got (2, 2))` (`::gather`,
    `::scatter`) on the ranks that hold the list, and `reduce_scatter` raises `RuntimeError: … Check failed:
    outputs[0].sizes().vec() == inputs[0][i].sizes().vec()` where the member's own entry differs (its other
    entries may have any shape and size: a reduce-scatter-v runs, with the right sums); an `all_gather` into
    buffers of uneven sizes raises on every rank. NCCL (torch 2.11, NCCL 2.28.9, measured at world 1):
    `gather` and `scatter` raise `ValueError: ProcessGroupNCCL::gather: invalid tensor size at index 0`
    (`assertTypeAndSizesMatch`); `all_gather` and `reduce_scatter` compare element counts only, and (from the
    sources) run a list of uneven sizes as one broadcast (reduce) per member. `all_to_all`'s lists on Gloo
    (torch 2.13, world 2): `ProcessGroupGloo::alltoall: invalid tensor size at index 1 (expected (2), got (1,
    2))`, or `input and output tensors must have the same size`; NCCL (from the sources) sends each buffer on
    its own.
    """

    code = "C320"
    name = "list-shape-mismatch"
    backend_doc = "list-forms"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()  # once per statement (a loop's, or a traced script's per-rank records, share it)
        for rec in ctx.schedule.records:
            if not isinstance(rec, CollectiveRec) or ctx.backend not in rec.kind.listed_shapes or rec.span in seen:
                continue
            listed = rec.kind.listed(rec)
            if listed is None:
                continue
            found = _shape_mismatch(ctx, rec, *listed)
            if found is None:
                continue
            seen.add(rec.span)
            k, j = found
            one, bufs, output = listed
            mine, want = bufs[j].at(k), one.at(k)
            uneven = any(b.at(k).numel != want.numel for b in bufs)
            yield cls.finding(
                rec.kind,
                ctx.backend,
                int(rec.ranks[k]),
                j,
                (mine.tensor, mine.shape),
                (want.tensor, want.shape),
                output,
                uneven,
                rec.span,
            )

    @classmethod
    def on_call(cls, kind: Kind, call, rank: int, me: int, is_root: bool, backend: str) -> Diagnostic | None:
        """The finding for one traced call (`trace.events.Call`) on `rank`, from the shapes the script passed
        (the emitted program's buffers are flat views: the checker sees their element counts only)."""
        if kind.listed_one_shape:
            return cls._one_shape(kind, call, rank, backend)
        listed = kind.listed(call) if backend in kind.listed_shapes else None
        if listed is None or not kind.roles(is_root)[1 if listed[2] else 0]:
            return None
        one, bufs, output = listed
        if one.shape is None or any(b.shape is None for b in bufs):
            return None
        entries = [me] if kind.listed_shape_own_only else range(len(bufs))
        j = next((j for j in entries if 0 <= j < len(bufs) and bufs[j].shape != one.shape), None)
        if j is None:
            return None
        uneven = any(b.numel != one.numel for b in bufs)
        return cls.finding(
            kind, backend, rank, j, (bufs[j].label, bufs[j].shape), (one.label, one.shape), output, uneven
        )

    @classmethod
    def _one_shape(cls, kind: Kind, call, rank: int, backend: str) -> Diagnostic | None:
        """A traced list form whose every buffer, of both lists, the backend wants in the first input's shape
        (`Kind.listed_one_shape`: `all_to_all`)."""
        if backend not in kind.listed_shapes or not call.inputs_listed or not call.inputs:
            return None
        first = call.inputs[0]
        for side, bufs in (("input", call.inputs), ("output", call.outputs)):
            for j, b in enumerate(bufs):
                if first.shape is None or b.shape is None or b.shape == first.shape:
                    continue
                return cls.diagnostic(
                    f"`{kind.name}` on rank {rank}: buffer {j} of the {side} list, {_named(b.label)}, has shape "
                    f"{list(b.shape)}, the first input {_named(first.label)} {list(first.shape)}",
                    label=f"{_BACKEND_NAMES[backend]} requires the first input's shape for every buffer of both lists",
                    help="call `all_to_all_single` with split sizes (Gloo runs those uneven), or give every buffer "
                    "one shape",
                )
        return None

    @classmethod
    def finding(
        cls,
        kind: Kind,
        backend: str,
        rank: int,
        j: int,
        mine: tuple,
        want: tuple,
        output: bool,
        uneven: bool,
        span: Span | None = None,
    ) -> Diagnostic:
        """Buffer `j` of the list, (name, shape) `mine`, is not of the one tensor's (name, shape) `want`."""
        side, other = ("output", "input") if output else ("input", "output")
        own = kind.listed_shape_own_only
        which = "the member's own buffer" if own else "every buffer"
        return cls.diagnostic(
            f"`{kind.name}` on rank {rank}: buffer {j} of the {side} list, {_named(mine[0])}, has shape "
            f"{list(mine[1])}, the {other} {_named(want[0])} {list(want[1])}",
            span=span,
            label=f"{_BACKEND_NAMES[backend]} requires the {other}'s shape for {which}",
            help="pad every member's part to one size (NCCL runs uneven lists)"
            if uneven and not own
            else f"give {which} of the list the {other}'s shape, or the {other} the buffers' shape",
        )


class FlatShapeMismatch(Rule):
    """a collective's whole buffer whose shape the backend refuses

    ## What it does

    Reports `all_gather x into y` whose output `y`, or `reduce_scatter x into y` whose input `x`, is not
    shaped as the members' parts concatenated along dimension 0 — `[size × a, b]` for parts `[a, b]` — under
    a backend whose torch call (`all_gather_into_tensor`, `reduce_scatter_tensor`) requires that: Gloo. Names
    the first rank, both buffers' shapes and the shape the backend needs.

    ## Why is this bad?

    The elements fit, so the program checks and reads as right, and on NCCL it runs: torch's documentation
    even offers the stacked form (`[size, a]` for parts `[a]`) for `all_gather_into_tensor`. Gloo chunks the
    whole buffer along dimension 0 and compares each chunk's shape with the part's, and raises before
    anything moves: a test suite on CPU fails where the GPU job passed.

    ## Example

    ```comm
    program stacked
    world 2
    tensor x: float32[4] = rank
    tensor y: float32[world, 4]
    all_gather x into y
    ```

    ## Use instead

    ```comm
    program stacked
    world 2
    tensor x: float32[1, 4] = rank
    tensor y: float32[world, 4]
    all_gather x into y
    ```

    ## Backend notes

    Measured on Gloo (torch 2.13, world 1 and 2): `all_gather_into_tensor` of a `[4]` input into a `[2, 4]`
    output raises `RuntimeError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (4),
    got (1, 4))` (into `[8]` it runs, and `[4, 2]` from `[2, 2]` too); `reduce_scatter_tensor` of a `[1, 4]`
    input into a `[4]` output raises `Check failed: outputShape[0] * worldSize == inputShape[0]`, and one whose
    later dimensions differ `Check failed: outputShape[i] == inputShape[i]`. NCCL (torch 2.11, NCCL 2.28.9,
    measured at world 1) runs each of them: it compares element counts only.
    """

    code = "C321"
    name = "flat-shape-mismatch"
    backend_doc = "list-forms"

    @classmethod
    def check(cls, ctx: Context) -> Iterator[Diagnostic]:
        seen = set()  # once per statement, as C320
        for rec in ctx.schedule.records:
            if not isinstance(rec, CollectiveRec) or ctx.backend not in rec.kind.flat_shapes or rec.span in seen:
                continue
            flat = rec.kind.flat(rec)
            if flat is None:
                continue
            part, whole, output = flat
            size = _group_index(ctx, rec)[1]
            bad = np.flatnonzero(~_concatenated(part.shape, whole.shape, size, rec.ranks.size))
            if not bad.size:
                continue
            seen.add(rec.span)
            k = int(bad[0])
            mine, each = whole.at(k), part.at(k)
            yield cls.finding(
                rec.kind,
                ctx.backend,
                int(rec.ranks[k]),
                (mine.tensor, mine.shape),
                (each.tensor, each.shape),
                output,
                int(size[k]),
                rec.span,
            )

    @classmethod
    def on_call(cls, kind: Kind, call, rank: int, size: int, backend: str) -> Diagnostic | None:
        """The finding for one traced call (`trace.events.Call`) on `rank` in a group of `size`, from the shapes
        the script passed (the emitted program's buffers are flat views), as `ListShapeMismatch.on_call`."""
        flat = kind.flat(call) if backend in kind.flat_shapes else None
        if flat is None:
            return None
        part, whole, output = flat
        if part.shape is None or whole.shape is None or _concatenated(part.shape, whole.shape, np.array([size]), 1)[0]:
            return None
        return cls.finding(kind, backend, rank, (whole.label, whole.shape), (part.label, part.shape), output, size)

    @classmethod
    def finding(
        cls,
        kind: Kind,
        backend: str,
        rank: int,
        whole: tuple,
        part: tuple,
        output: bool,
        size: int,
        span: Span | None = None,
    ) -> Diagnostic:
        """The (name, shape) `whole` is not `size` of the (name, shape) `part` side by side along dimension 0."""
        (whole_name, shape), (part_name, each) = whole, part
        want = [size * each[0], *each[1:]]
        side, other = ("output", "input") if output else ("input", "output")
        stacked = list(shape) == [size, *each]
        name = _BACKEND_NAMES[backend]
        return cls.diagnostic(
            f"`{kind.name}` on rank {rank}: the {side} {_named(whole_name)} has shape {list(shape)}, the {other} "
            f"{_named(part_name)} {list(each)}; {name} needs {want}",
            span=span,
            label=f"{name} requires the {side} to be the {other}s of the group side by side along dimension 0",
            help=f"the stacked form runs on NCCL only: give the {other} a leading 1 ({[1, *each]}), "
            f"or the {side} the shape {want}"
            if stacked
            else f"give the {side} the shape {want} (NCCL takes any shape with the elements)",
        )


def _concatenated(part: tuple, whole: tuple, size: np.ndarray, n: int) -> np.ndarray:
    """Per rank, whether the shape `whole` is `size` of the shape `part` side by side along dimension 0 (a
    dimension may differ per rank: an array). A 0-d part (a traced scalar) passes: not measured."""
    if not part or len(whole) != len(part):
        return np.full(n, not part)
    ok = np.broadcast_to(np.asarray(whole[0]) == size * np.asarray(part[0]), (n,))
    for d, e in zip(whole[1:], part[1:]):
        ok = ok & (np.asarray(d) == np.asarray(e))
    return np.broadcast_to(ok, (n,))


def _named(name: str) -> str:
    """A buffer in a message: its name quoted, or (a traced tensor passed without one) plainly."""
    return f"`{name}`" if name else "a tensor"


_BACKEND_NAMES = {"gloo": "Gloo", "nccl": "NCCL"}


def _shape_mismatch(ctx: Context, rec: CollectiveRec, one, bufs, output: bool) -> tuple[int, int] | None:
    """(the first index into `rec.ranks`, the buffer) where a buffer of the list has another shape than `one`,
    among the ranks whose call holds the list (a gather's or scatter's root), and only the rank's own entry of
    it where the backend compares that alone (`Kind.listed_shape_own_only`); None where none does."""
    n = rec.ranks.size
    roots = _roots(rec)
    holds = np.array([rec.kind.roles(bool(r))[1 if output else 0] for r in (False, True)])[roots.astype(np.int64)]
    bad = np.zeros((len(bufs), n), dtype=bool)
    for j, b in enumerate(bufs):
        if len(b.shape) != len(one.shape):
            bad[j] = True
            continue
        for d, e in zip(b.shape, one.shape):
            bad[j] |= np.broadcast_to(np.asarray(d) != np.asarray(e), (n,))
    bad &= holds
    if rec.kind.listed_shape_own_only:
        bad &= np.arange(len(bufs))[:, None] == _group_index(ctx, rec)[0][None, :]
    ranks = np.flatnonzero(bad.any(axis=0))
    if not ranks.size:
        return None
    k = int(ranks[0])
    return k, int(np.argmax(bad[:, k]))
