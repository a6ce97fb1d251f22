"""D4xx: a wait-for cycle. Definite when it hangs under infinite buffering too; a buffering hazard when
only rendezvous sends (zero buffering — what Gloo does at every size) make it hang."""

from __future__ import annotations

from collections.abc import Iterator

from commdsl.checker.context import Context
from commdsl.diagnostics import Diagnostic, Label, Note
from commdsl.engine import Instance


def _what(ctx: Context, e) -> str:
    return f"rank {e.rank} at line {e.op.span.line} `{ctx.text(e.op)}`"


def check(ctx: Context) -> Iterator[Diagnostic]:
    for cycle in ctx.extra["waits"].cycles:
        groups = {e.thing.group.id for e in cycle if isinstance(e.thing, Instance)}
        all_collective = all(isinstance(e.thing, Instance) for e in cycle)
        ranks = [e.rank for e in cycle]
        steps = [f"{_what(ctx, e)} waits for rank {e.target}" for e in cycle]
        chain = "; ".join(steps)
        first = cycle[0]
        labels = []
        seen = {first.op.span}
        for e in cycle[1:]:
            if e.op.span not in seen:
                seen.add(e.op.span)
                labels.append(Label(span=e.op.span, message=f"rank {e.rank} waits here for rank {e.target}"))
        label = f"rank {first.rank} waits here for rank {first.target}"
        notes = [Note(message=f"cycle: {chain}")]
        if all_collective and len(groups) >= 2:
            yield Diagnostic(code="C308", span=first.op.span, label=label, labels=tuple(labels),
                             message=f"ranks {ranks} call collectives on different groups in different orders",
                             notes=tuple(notes),
                             help="issue collectives on overlapping groups in one global order on every rank")
            continue
        definite = not ctx.infinite.completed
        if definite:
            yield Diagnostic(code="D401", span=first.op.span, label=label, labels=tuple(labels),
                             message=f"deadlock: ranks {ranks} wait for each other", notes=tuple(notes),
                             help="reorder the ops so one side of each pair goes first, or use isend/irecv or `batch`")
        else:
            notes.append(Note(message="on Gloo a blocking `send` returns only once the receiver posts its `recv`, "
                                      "at every message size: this always hangs there"))
            yield Diagnostic(code="D402", span=first.op.span, label=label, labels=tuple(labels),
                             message=f"deadlock: ranks {ranks} all block in `send` waiting for each other",
                             notes=tuple(notes),
                             help="post the exchange in a `batch:` block, use `isend`, or alternate send/recv order by rank parity")
