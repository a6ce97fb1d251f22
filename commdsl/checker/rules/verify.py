"""V8xx: what the simulator proves with data: every `expect` holds on every rank."""

from __future__ import annotations

from collections.abc import Iterator

from commdsl.diagnostics import Diagnostic, Note


def check_expects(result) -> Iterator[Diagnostic]:
    by_op: dict = {}
    for e in result.expects:
        if not e.ok:
            by_op.setdefault(e.op.span, []).append(e)
    for span, fails in by_op.items():
        fails.sort(key=lambda e: e.rank)
        ranks = sorted({e.rank for e in fails})
        shown = ", ".join(map(str, ranks[:8])) + (" …" if len(ranks) > 8 else "")
        yield Diagnostic(code="V801", span=span,
                         message=f"expectation fails on rank{'s' * (len(ranks) > 1)} {shown}",
                         label=f"rank {fails[0].rank}: {fails[0].detail}",
                         notes=tuple(Note(message=f"rank {e.rank}: {e.detail}") for e in fails[1:4]))
