"""P2xx: point-to-point messages that never match, or match with the wrong size or dtype."""

from __future__ import annotations

import re
from collections.abc import Iterator

from commdsl.checker.context import Context
from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.schedule import Recv, Send


_KEYWORD = re.compile(r"^(?:\w+\s*=\s*)?(i?send|i?recv)\b")


def _word(ctx: Context, op) -> str:
    """The keyword the user wrote (a `send` in a `batch:` is posted like an isend but reads `send`)."""
    return _KEYWORD.match(ctx.text(op)).group(1)


def check(ctx: Context) -> Iterator[Diagnostic]:
    yield from _bad_params(ctx)
    yield from _mismatched_pairs(ctx)
    yield from _unmatched(ctx)
    if ctx.nccl is not None:
        yield from _nccl_reorder(ctx)


def _bad_params(ctx: Context) -> Iterator[Diagnostic]:
    W = ctx.schedule.world
    for b in ctx.zero.bad_params:
        op = b.op
        if type(op) not in (Send, Recv):
            continue
        word = _word(ctx, op)
        if b.problem == "peer-out-of-range":
            yield Diagnostic(code="P208", message=f"`{word}` on rank {b.rank} names rank {op.peer}, outside world {W}",
                             span=op.span, label=f"ranks are 0..{W - 1}",
                             help="wrap the peer with `% world`, or guard the op with `on`")
        elif b.problem == "self":
            direction = "to" if type(op) is Send else "from"
            yield Diagnostic(code="P209", message=f"rank {b.rank} `{word}`s {direction} itself", span=op.span,
                             label=f"peer is rank {op.peer}, the rank itself",
                             notes=(Note(message="Gloo raises `Invalid destination rank` or `Pair is not connected`"),),
                             help="copy locally with `=`, or fix the peer expression")
        elif b.problem in ("peer-not-in-group", "not-member"):
            who = f"rank {op.peer}" if b.problem == "peer-not-in-group" else f"rank {b.rank} itself"
            yield Diagnostic(code="P210", message=f"`{word}` in group `{op.group.name}`: {who} is not a member",
                             span=op.span, label=f"members are {list(op.group.ranks)}")


def _mismatched_pairs(ctx: Context) -> Iterator[Diagnostic]:
    for s, r in ctx.zero.matches:
        sv, rv = s.op.view, r.op.view
        if s.op.dtype != r.op.dtype:
            yield Diagnostic(
                code="P206", span=s.op.span,
                message=f"rank {s.rank} sends {s.op.dtype} but rank {r.rank} receives {r.op.dtype}",
                label=f"sends {s.op.dtype}", labels=(Label(span=r.op.span, message=f"receives {r.op.dtype}"),),
                notes=(Note(message="Gloo reinterprets the bytes: the receiver gets garbage, silently"),),
                help="give both buffers the same dtype")
        elif sv.numel != rv.numel:
            what = ("the last elements stay untouched, silently" if rv.numel > sv.numel
                    else "the receiver aborts (`Received data size doesn't match`)")
            yield Diagnostic(
                code="P205", span=s.op.span,
                message=f"rank {s.rank} sends {sv.numel} elements but rank {r.rank} receives {rv.numel}",
                label=f"sends {sv.numel} elements", labels=(Label(span=r.op.span, message=f"receives {rv.numel}"),),
                notes=(Note(message=f"on Gloo {what}"),), help="size both views alike")


def _unmatched(ctx: Context) -> Iterator[Diagnostic]:
    analysis = ctx.extra["waits"]
    for p, near, peer in analysis.tag_mismatches:
        send_op, recv_op = (p.op, near) if type(p.op) is Send else (near, p.op)
        s_rank, r_rank = (p.rank, peer) if type(p.op) is Send else (peer, p.rank)
        yield Diagnostic(
            code="P204", span=send_op.span,
            message=f"rank {s_rank} sends with tag {send_op.tag} but rank {r_rank} receives with tag {recv_op.tag}",
            label=f"tag {send_op.tag}", labels=(Label(span=recv_op.span, message=f"tag {recv_op.tag}"),),
            notes=(Note(message="messages match by (peer, tag): neither side ever completes"),),
            help="use the same tag on both sides")
    for p, reason in analysis.unmatched:
        op, peer = p.op, p.op.peer
        is_send = type(op) is Send
        other = "recv" if is_send else "send"
        fate = "finishes without posting one" if reason == "finished" else "never posts one"
        tag = f" with tag {op.tag}" if op.tag else ""
        yield Diagnostic(
            code="P201" if is_send else "P202", span=op.span,
            message=f"`{_word(ctx, op)}` on rank {p.rank} {'to' if is_send else 'from'} rank {peer} has no matching `{other}`",
            label=f"rank {peer} {fate}",
            notes=(Note(message=f"a matching `{other}` on rank {peer} would name rank {p.rank}{tag}"),),
            help=_peer_hint(ctx, p))


def _peer_hint(ctx: Context, p) -> str | None:
    """Point at a receive (or send) on another rank that expected this message, if there is one."""
    want = Recv if type(p.op) is Send else Send
    for q, _ in ctx.extra["waits"].unmatched:
        if type(q.op) is want and q.op.peer == p.rank and q.rank != p.op.peer:
            verb = "receives from" if want is Recv else "sends to"
            return f"rank {q.rank} {verb} rank {p.rank} at line {q.op.span.line}: check the peer expression"
    return None


def _nccl_reorder(ctx: Context) -> Iterator[Diagnostic]:
    by_key = {}
    for s, r in ctx.zero.matches:
        by_key[(s.rank, s.index, s.op.span.start, r.rank)] = r
    seen = set()
    for s, r in ctx.nccl.matches:
        key = (s.rank, s.index, s.op.span.start, r.rank)
        if key in seen:
            continue
        gloo_r = by_key.get(key)
        if gloo_r is None or gloo_r.op.span.start == r.op.span.start and gloo_r.index == r.index:
            continue
        seen.add(key)
        yield Diagnostic(
            code="P207", span=s.op.span,
            message=f"on NCCL, this send from rank {s.rank} matches a different receive than on Gloo",
            label=f"tag {s.op.tag}", labels=(
                Label(span=gloo_r.op.span, message=f"Gloo matches it here, by tag {gloo_r.op.tag}"),
                Label(span=r.op.span, message="NCCL matches it here, in posting order")),
            notes=(Note(message="NCCL ignores tags: messages between two ranks match in the order they are posted"),),
            help="post sends and receives in the same order on both ranks instead of relying on tags")
