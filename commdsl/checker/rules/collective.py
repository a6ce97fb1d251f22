"""C3xx: collectives whose members disagree, are missing, or interleave groups in different orders."""

from __future__ import annotations

from collections.abc import Iterator

from commdsl import collectives
from commdsl.checker.context import Context
from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.schedule import Collective


def check(ctx: Context) -> Iterator[Diagnostic]:
    yield from _bad_params(ctx)
    yield from _mismatches(ctx)
    yield from _missing(ctx)


def _bad_params(ctx: Context) -> Iterator[Diagnostic]:
    for b in ctx.zero.bad_params:
        op = b.op
        if type(op) is not Collective:
            continue
        members = list(op.group.ranks)
        if b.problem == "not-member":
            yield Diagnostic(code="C310", span=op.span,
                             message=f"rank {b.rank} calls `{op.kind}` on group `{op.group.name}`, which it is not in",
                             label=f"members are {members}",
                             notes=(Note(message="the members never see this call: it hangs or corrupts the group"),),
                             help="guard the call with `on` so only members issue it")
        elif b.problem == "root-not-in-group":
            yield Diagnostic(code="C311", span=op.span,
                             message=f"`{op.kind}` root {op.root} is not in group `{op.group.name}`",
                             label=f"members are {members}", help="the root is a global rank inside the group")
        elif b.problem == "peer-out-of-range":
            yield Diagnostic(code="P208", span=op.span,
                             message=f"`{op.kind}` root {op.root} is outside world {ctx.schedule.world}",
                             label=f"ranks are 0..{ctx.schedule.world - 1}")


_FIELDS = (
    ("C303", lambda o: o.root, "root", "uses root {v}"),
    ("C304", lambda o: (o.redop, o.scale), "reduce op", "reduces with `{v[0]}`"),
    ("C305", lambda o: o.dtype, "dtype", "passes {v}"),
    ("C309", lambda o: o.req is None, "blocking or async call", "{b}"),
)


def _mismatches(ctx: Context) -> Iterator[Diagnostic]:
    swapped_groups: set[int] = set()
    for inst in ctx.zero.instances:
        if not inst.done:
            continue
        calls = [inst.calls[r] for r in inst.group.ranks]
        first = calls[0]
        odd = next((c for c in calls if c.op.kind != first.op.kind), None)
        if odd is not None:
            if inst.group.id in swapped_groups:
                continue
            swap = _order_swap(ctx, inst, first.rank, odd.rank)
            if swap:
                swapped_groups.add(inst.group.id)
                yield _pair("C302", f"ranks {first.rank} and {odd.rank} call the same collectives on "
                            f"`{inst.group.name}` in a different order", first, odd,
                            f"rank {first.rank} calls `{first.op.kind}` first",
                            f"rank {odd.rank} calls `{odd.op.kind}` first",
                            "make every member issue the group's collectives in one order")
            else:
                yield _pair("C301", f"rank {first.rank} calls `{first.op.kind}` while rank {odd.rank} calls "
                            f"`{odd.op.kind}` on `{inst.group.name}`", first, odd,
                            f"rank {first.rank}: `{first.op.kind}`", f"rank {odd.rank}: `{odd.op.kind}`",
                            "every member of a group must call the same collective at the same step",
                            note="torch hangs here (or errors only under TORCH_DISTRIBUTED_DEBUG=DETAIL)")
            continue
        for code, get, what, text in _FIELDS:
            odd = next((c for c in calls if get(c.op) != get(first.op)), None)
            if odd is None:
                continue
            def say(c, _get=get, _text=text):
                v = _get(c.op)
                return f"rank {c.rank} " + _text.format(v=v, b="blocks" if v is True else "is async")
            note = {"C303": "a broadcast with different roots hangs; DETAIL mode does not catch it",
                    "C304": "Gloo gives every rank a silently wrong result; DETAIL mode does not catch it",
                    "C305": "Gloo reinterprets the bytes: silent garbage"}.get(code)
            d = _pair(code, f"`{first.op.kind}` on `{inst.group.name}`: members disagree on the {what}",
                      first, odd, say(first), say(odd), "pass the same value on every rank", note=note)
            if code == "C309":
                d = d.model_copy(update={"severity": "warning", "help": "call it the same way on every rank",
                                         "notes": (Note(message="torch matches the calls (async_op only decides "
                                                                "whether Python waits), but the code reads as if "
                                                                "the ranks disagreed"),)})
            yield d
            break
        else:
            yield from _sizes(ctx, inst, calls)


def _sizes(ctx: Context, inst, calls) -> Iterator[Diagnostic]:
    first = calls[0]
    bad = collectives.split_disagreement([c.op for c in calls]) if first.op.kind == "all_to_all" else None
    if bad is not None:
        a, b = calls[bad[0]], calls[bad[1]]
        sent = a.op.in_splits[bad[1]] if a.op.in_splits else "an even share of"
        expected = b.op.out_splits[bad[0]] if b.op.out_splits else "an even share"
        yield _pair("C312", f"`all_to_all`: rank {a.rank} sends {_rows(sent)} to rank {b.rank}, which expects {_rows(expected)}",
                    a, b, f"rank {a.rank}'s in_splits", f"rank {b.rank}'s out_splits",
                    "rank a's in_splits[b] must equal rank b's out_splits[a]")
        return
    sizes = [collectives.contribution(c.op) for c in calls]
    odd = next((c for c, s in zip(calls, sizes) if s != sizes[0]), None)
    if odd is not None:
        s0, s1 = sizes[0], collectives.contribution(odd.op)
        yield _pair("C306", f"`{first.op.kind}` on `{inst.group.name}`: rank {first.rank} contributes {_count(s0)}, "
                    f"rank {odd.rank} {_count(s1)}", first, odd, _count(s0), _count(s1),
                    "size every member's buffers alike",
                    note="Gloo aborts one rank and may leave another with a silently wrong result")


def _count(n: int) -> str:
    return f"{n} element{'s' * (n != 1)}"


def _rows(n) -> str:
    return f"{n} row{'s' * (n != 1)}" if isinstance(n, int) else str(n)


def _order_swap(ctx: Context, inst, a: int, b: int) -> bool:
    """Do ranks a and b call the same multiset of collectives on this group, in a different order?"""
    def seq(rank):
        return [op.kind for op in ctx.schedule.ops[rank] if type(op) is Collective and op.group.id == inst.group.id]
    sa, sb = seq(a), seq(b)
    return sa != sb and sorted(sa) == sorted(sb)


def _pair(code, message, primary, secondary, label1, label2, help, note=None) -> Diagnostic:
    labels = ()
    if secondary.op.span != primary.op.span:
        labels = (Label(span=secondary.op.span, message=label2),)
    else:
        label1 = f"{label1}; {label2}"
    notes = (Note(message=note),) if note else ()
    return Diagnostic(code=code, message=message, span=primary.op.span, label=label1, labels=labels,
                      notes=notes, help=help)


def _missing(ctx: Context) -> Iterator[Diagnostic]:
    seen = set()
    for inst, member, waiting_op, reason in ctx.extra["waits"].missing:
        key = (inst.group.id, inst.seq, member)
        if key in seen:
            continue
        seen.add(key)
        present = sorted(inst.calls)
        call = inst.calls[present[0]]
        fate = "finishes without calling it" if reason == "finished" else "never calls it"
        yield Diagnostic(
            code="C307", span=call.op.span,
            message=f"`{call.op.kind}` on `{inst.group.name}`: rank {member} {fate}",
            label=f"ranks {present} wait here for rank {member}",
            notes=(Note(message=f"group `{inst.group.name}` has members {list(inst.group.ranks)}"),),
            help="every member of the group must issue the collective; check the `on` conditions around it")
