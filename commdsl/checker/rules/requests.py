"""R5xx: async requests never or twice waited, buffers touched while in flight, undefined reads."""

from __future__ import annotations

from collections.abc import Iterator

from commdsl.checker.context import Context
from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.schedule import Collective, Send


def _word(op) -> str:
    if type(op) is Collective:
        return op.kind
    return "isend" if type(op) is Send else "irecv"


def check(ctx: Context) -> Iterator[Diagnostic]:
    for q in ctx.zero.never_waited:
        yield Diagnostic(code="R501", span=q.op.span, message=f"the request of `{_word(q.op)}` on rank {q.rank} is never waited",
                         label="never waited",
                         notes=(Note(message="the rank may exit (or reuse the buffer) before the op completes; "
                                             "on Gloo the message is lost and the peer sees `Connection closed by peer`"),),
                         help="`wait` its handle (or `wait all`) before the buffer is reused or the program ends")
    for q, op, index in ctx.zero.double_waits:
        yield Diagnostic(code="R502", span=op.span, message=f"request of `{_word(q.op)}` on rank {q.rank} is waited twice",
                         label="second wait", labels=(Label(span=q.waited_at.span, message="first waited here"),),
                         help="wait each request once")
    seen = set()
    for race in ctx.access.races:
        w = race.window
        key = (race.op.span, w.op.span)
        if key in seen:
            continue
        seen.add(key)
        kind = "writes" if race.writes else "reads"
        flight = "receives into" if w.writes else "sends from"
        yield Diagnostic(code="R503", span=race.op.span,
                         message=f"rank {race.rank} {kind} a buffer while `{_word(w.op)}` {flight} it",
                         label=f"{kind} `{w.view.tensor}` here",
                         labels=(Label(span=w.op.span, message="still in flight (not yet waited)"),),
                         notes=(Note(message="the result depends on timing: a data race"),),
                         help="`wait` the request before touching the buffer")
    for u in ctx.access.undefined_reads:
        key = (u.op.span, u.reduce.span)
        if key in seen:
            continue
        seen.add(key)
        yield Diagnostic(code="R504", span=u.op.span,
                         message=f"rank {u.rank} reads `{u.reduce.inputs[0].tensor}` after `reduce` to rank {u.reduce.root} "
                                 "left it undefined",
                         label="reads an undefined buffer",
                         labels=(Label(span=u.reduce.span, message=f"only rank {u.reduce.root} gets the result"),),
                         notes=(Note(message="Gloo leaves partial sums in non-root buffers"),),
                         help="read it only on the root, or use `all_reduce`")
