"""Check recorded calls with the ordinary checker and point its diagnostics back at the script.

The emitted `.comm` program (`to_comm.emit`) is parsed and checked as `commdsl lint` would check it;
every span of a diagnostic (primary, labels, notes) on a line of that program moves to the call site
the line stands for, in the script or in a module it imported. Where a rank read received data into
Python before the call, the diagnostic gains a note naming that read: the trace followed the fake
backend's data, and a real run may take another branch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from commdsl.checker import CheckOptions, check_program, on_backends
from commdsl.collectives import KINDS
from commdsl.diagnostics import CommdslError, Diagnostic, Label, Note
from commdsl.resolve import load
from commdsl.rules.collectives import CollectiveOrderSwap, FlatShapeMismatch, ListShapeMismatch
from commdsl.rules.idioms import CollectiveResultUnused
from commdsl.source import SourceFile, Span
from commdsl.trace.events import Call, RankTrace, Site
from commdsl.trace.to_comm import Emitted, LineInfo


@dataclass
class Checked:
    diagnostics: list[Diagnostic]
    sources: dict[str, SourceFile]  # the script's files, by path, for rendering


class Mapper:
    """Moves spans of the emitted program onto the script's files."""

    def __init__(self, emitted: Emitted, comm_path: str, sources: dict[str, SourceFile]):
        self.emitted, self.comm_path, self.sources = emitted, comm_path, sources

    def source(self, path: str) -> SourceFile | None:
        if path not in self.sources:
            try:
                self.sources[path] = SourceFile.read(path)
            except Exception:  # noqa: BLE001 - a file gone or unreadable: the span keeps its line, unquoted
                return None
        return self.sources[path]

    def site_span(self, site: Site) -> Span:
        path = _shown(site.path)
        src = self.source(path)
        if src is None:
            return Span(
                path=path,
                start=0,
                end=0,
                line=site.line,
                column=site.column,
                end_line=site.line,
                end_column=site.column,
            )
        starts = src._line_starts

        def offset(line: int, col: int) -> int:
            line = max(1, min(line, len(starts)))
            return starts[line - 1] + col - 1

        if site.column == 0:  # a whole line (a flight-recorder frame has no columns): its code
            text = src.line_text(site.line)
            indent = len(text) - len(text.lstrip())
            start = offset(site.line, indent + 1)
            return src.span(start, start + max(1, len(text.rstrip()) - indent))
        start = offset(site.line, site.column)
        end = (
            offset(site.end_line, site.end_column)
            if site.end_line == site.line
            else start + len(src.line_text(site.line)) - site.column + 1
        )
        return src.span(start, max(start, end))

    def info(self, span: Span | None) -> LineInfo | None:
        if span is None or span.path != self.comm_path:
            return None
        return self.emitted.lines.get(span.line)

    def span(self, span: Span | None) -> Span | None:
        info = self.info(span)
        if info is None:
            return span if span is None or span.path != self.comm_path else None
        return self.site_span(info.site)

    def text(self, message: str) -> str:
        """A message with the emitted program's `line N` turned into the script's file:line."""

        def repl(m: re.Match) -> str:
            info = self.emitted.lines.get(int(m.group(1)))
            return f"{os.path.basename(info.site.path)}:{info.site.line}" if info else m.group(0)

        return _LINE.sub(repl, message)

    def diagnostic(self, d: Diagnostic) -> Diagnostic:
        spans = [d.span, *(lab.span for lab in d.labels), *(n.span for n in d.notes)]
        infos = [i for i in (self.info(s) for s in spans) if i is not None]
        labels = []
        for lab in d.labels:
            mapped = self.span(lab.span)
            if mapped is not None:
                labels.append(Label(span=mapped, message=self.text(lab.message)))
        notes = [Note(message=self.text(n.message), span=self.span(n.span)) for n in d.notes]
        notes.extend(self.data_notes(infos))
        if any(i.origin == "c10d" for i in infos):
            notes.append(Note(message=_BELOW_API))
        for detail in dict.fromkeys(i.origin[len("flight:") :] for i in infos if i.origin.startswith("flight:")):
            notes.append(Note(message=f"flight recorder: {detail}"))
        if any(i.origin == "object" for i in infos):
            notes.append(Note(message=_OBJECT))
        primary = self.span(d.span)
        if primary is None and labels:
            primary, labels = labels[0].span, labels[1:]
        return replace(d, span=primary, labels=tuple(labels), notes=tuple(notes), message=self.text(d.message))

    def data_notes(self, infos: list[LineInfo]) -> list[Note]:
        reads: dict[Site, list[int]] = {}
        whats: dict[Site, str] = {}
        for info in infos:
            for rank, read in info.after.items():
                reads.setdefault(read.site, [])
                if rank not in reads[read.site]:
                    reads[read.site].append(rank)
                whats[read.site] = read.what
        notes = []
        for site, ranks in reads.items():
            who = _ranks(sorted(ranks))
            notes.append(
                Note(
                    message=f"this verdict may depend on data: {who} read a value that came from communication "
                    f"(`{whats[site]}`) before this call, and the trace followed the fake backend's data",
                    span=self.site_span(site),
                )
            )
        return notes


UNSOUND_ON_TRACES = {
    CollectiveOrderSwap.code: "tells two same-kind calls apart by their buffers' names, which a trace makes up "
    "per rank (a swap of calls with different sizes is still a size mismatch, of different kinds a kind mismatch)",
    CollectiveResultUnused.code: "needs the local reads of a result, which a trace does not record "
    "(it records communication only)",
}
"""Codes not reported on traces, and why: each rests on something the recording does not know."""

_BELOW_API = (
    "a call issued below torch.distributed's API (DDP, FSDP, DTensor): the line is where the script made it happen"
)
_OBJECT = "an object collective, recorded as the collective it is built on (objects are not sent)"
_LINE = re.compile(r"\bline (\d+)\b")


def _shown(path: str) -> str:
    """A path as the user would write it: relative to the working directory when under it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 6:
        return f"ranks {', '.join(map(str, ranks[:5]))}, … ({len(ranks)} ranks)"
    return "ranks " + ", ".join(map(str, ranks))


def check_emitted(
    emitted: Emitted,
    comm_path: str,
    sources: dict[str, SourceFile],
    backends: tuple[str, ...] | None = None,
    lints: bool = True,
    max_seconds: float | None = None,
    traces: Sequence[RankTrace] = (),
) -> list[Diagnostic]:
    """The checker's findings on the emitted program, on the script's lines, and those on the shapes of the
    tensors the recorded `traces` passed (`shape_findings`)."""
    mapper = Mapper(emitted, comm_path, sources)
    try:
        program = load(SourceFile(comm_path, emitted.text))
        diags = check_program(
            program,
            CheckOptions(worlds=(emitted.world,), backends=backends, lints=lints, max_seconds=max_seconds),
        )
    except CommdslError as e:
        diags = e.diagnostics
    found = [mapper.diagnostic(d) for d in diags if d.code not in UNSOUND_ON_TRACES]
    found += shape_findings(traces, backends or (emitted.backend,), mapper)
    return _once_per_place(found)


def shape_findings(traces: Sequence[RankTrace], backends: tuple[str, ...], mapper: Mapper) -> list[Diagnostic]:
    """`C320` and `C321` on the shapes the script passed to torch. The emitted program's buffers are flat views
    of each storage, so the checker sees their element counts only: a list entry or a whole buffer with the
    elements but a shape the backend refuses would pass it. One finding per call site, on its first rank."""
    found: dict[tuple, tuple[Diagnostic, list[str]]] = {}
    for t in traces:
        for c in t.events:
            kind = KINDS.get(c.op) if isinstance(c, Call) else None
            if kind is None:
                continue
            group = c.group or tuple(range(t.world))
            me = group.index(t.rank) if t.rank in group else -1
            for backend in backends:
                d = ListShapeMismatch.on_call(kind, c, t.rank, me, c.root == t.rank, backend)
                d = d or FlatShapeMismatch.on_call(kind, c, t.rank, len(group), backend)
                if d is None:
                    continue
                key = (d.code, c.site)
                if key not in found:
                    span = mapper.site_span(c.site)
                    found[key] = (replace(d, span=span, worlds=(t.world,)), [])
                found[key][1].append(backend)
    return [on_backends(d, seen, backends) for d, seen in found.values()]


def _once_per_place(diags: list[Diagnostic]) -> list[Diagnostic]:
    """The first of the findings of one code at the same script lines. A script whose ranks call with different
    sizes is emitted one statement per rank, so a finding the checker makes once per statement came once per
    rank on the one line of the script."""

    def at(span: Span | None):
        return None if span is None else (span.path, span.start, span.end)

    seen: set[tuple] = set()
    kept = []
    for d in diags:
        key = (d.code, at(d.span), tuple(at(lab.span) for lab in d.labels))
        if key not in seen:
            seen.add(key)
            kept.append(d)
    return kept
