"""Renders diagnostics: `text` (rustc style, coloured on a TTY), `concise`, `json`, `sarif`, and for CI
`github` (workflow commands: annotations on the pull request) and `junit` (one test case per finding,
grouped by file, as ruff writes it). rich is imported only to colour: uncoloured text is written as is,
so `commdsl lint` starts without it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol

from commdsl import __version__
from commdsl.diagnostics.model import Diagnostic
from commdsl.rules.registry import CODES
from commdsl.source import SourceFile, Span, code_of

if TYPE_CHECKING:
    from rich.text import Text


class Writer(Protocol):
    """Where `emit` writes: a rich Console, or the CLI's PlainConsole when nothing is coloured."""

    @property
    def file(self) -> IO[str]: ...

    @property
    def color_system(self) -> str | None: ...

    @property
    def no_color(self) -> bool: ...

    def print(self, *objects: Any, soft_wrap: bool | None = None, end: str = "\n") -> None: ...


FORMATS = ("text", "concise", "json", "sarif", "github", "junit")
_STYLE = {"error": "bold red", "warning": "bold yellow"}


def use_color(choice: str, stream) -> bool:
    """`--color auto|always|never`; auto means a TTY and no NO_COLOR in the environment."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def render_text(d: Diagnostic, sources: Mapping[str, SourceFile], highlight: bool = False) -> Text:
    """rustc-style text, styled; `highlight` colours the quoted source lines by token (only worth it in colour)."""
    from rich.text import Text

    out = Text()
    for piece, style in _pieces(d, sources, highlight):
        out.append(piece, style=style)
    return out


def render_plain(d: Diagnostic, sources: Mapping[str, SourceFile]) -> str:
    """The same text without styles (what `render_text(...).plain` holds), without rich."""
    return "".join(str(piece) for piece, _ in _pieces(d, sources, False))


def _pieces(d: Diagnostic, sources: Mapping[str, SourceFile], highlight: bool) -> list[tuple[object, str | None]]:
    """The rustc-style text as (piece, style) in order; a piece is a string, or with `highlight` a source
    line as a styled rich Text."""
    sev = d.severity
    out: list[tuple[object, str | None]] = []

    def append(piece, style: str | None = None) -> None:
        out.append((piece, style))

    append(f"{sev}[{d.code}]", style=_STYLE[sev])
    append(f": {d.message}\n", style="bold")
    marks: list[tuple[Span, str, bool]] = []
    if d.span is not None:
        marks.append((d.span, d.label, True))
    marks.extend((lab.span, lab.message, False) for lab in d.labels)
    if d.span is not None:
        width = len(str(max(m[0].line for m in marks)))
        pad = " " * width
        append(f"{pad}--> ", style="bold blue")
        append(f"{d.span.path}:{d.span.line}:{d.span.column}\n")
        append(f"{pad} |\n", style="bold blue")
        last_line = None
        for span, label, primary in sorted(marks, key=lambda m: (m[0].path != d.span.path, m[0].start)):
            if span.path != d.span.path:
                append(f"{pad}::: ", style="bold blue")
                append(f"{span.path}:{span.line}:{span.column}\n")
            src_here = sources.get(span.path)
            line_text = src_here.line_text(span.line) if src_here else ""
            if last_line is not None and span.line > last_line + 1:
                append("...\n", style="bold blue")
            if span.line != last_line:
                append(f"{span.line:>{width}} | ", style="bold blue")
                if highlight:
                    from commdsl.highlight import highlight_line

                    append(highlight_line(line_text))
                    append("\n")
                else:
                    append(line_text + "\n")
            last_line = span.line
            start = span.column - 1
            # a block's span runs past its first line: mark that line's code, not the comment after it
            end = span.end_column - 1 if span.end_line == span.line else len(code_of(line_text))
            length = max(1, end - start)
            append(f"{pad} | ", style="bold blue")
            append(" " * start)
            append(
                ("^" if primary else "-") * length + (f" {label}" if label else ""),
                style=_STYLE[sev] if primary else "bold blue",
            )
            append("\n")
        append(f"{pad} |\n", style="bold blue")
    else:
        pad = " "
    for note in d.notes:
        where = f" ({note.span.path}:{note.span.line}:{note.span.column})" if note.span else ""
        append(f"{pad} = ", style="bold blue")
        append("note", style="bold")
        append(f": {note.message}{where}\n")
    if d.worlds:
        append(f"{pad} = ", style="bold blue")
        append("note", style="bold")
        append(f": at world size{'s' if len(d.worlds) > 1 else ''} {_sizes(d.worlds)}\n")
    if d.help:
        append(f"{pad} = ", style="bold blue")
        append("help", style="bold")
        append(f": {d.help}\n")
    return out


def _sizes(worlds: Iterable[int]) -> str:
    ws = list(worlds)
    if len(ws) <= 6:
        return ", ".join(map(str, ws[:-1])) + (" and " if len(ws) > 1 else "") + str(ws[-1])
    return ", ".join(map(str, ws[:5])) + f" and {len(ws) - 5} more"


def render_concise(d: Diagnostic) -> str:
    where = f"{d.span.path}:{d.span.line}:{d.span.column}: " if d.span else ""
    return f"{where}{d.code} {d.message}"


def _span_json(s: Span | None):
    if s is None:
        return None
    return {"path": s.path, "line": s.line, "column": s.column, "end_line": s.end_line, "end_column": s.end_column}


def to_json(d: Diagnostic, sources: Mapping[str, SourceFile]) -> dict:
    s = d.span
    notes = [dict(_span_json(lab.span), message=lab.message) for lab in d.labels]
    notes += [
        dict(_span_json(nt.span) or {"path": None, "line": None, "column": None}, message=nt.message) for nt in d.notes
    ]
    return {
        "code": d.code,
        "name": d.name,
        "severity": d.severity,
        "message": d.message,
        "path": s.path if s else None,
        "line": s.line if s else None,
        "column": s.column if s else None,
        "end_line": s.end_line if s else None,
        "end_column": s.end_column if s else None,
        "label": d.label,
        "world": d.worlds[0] if d.worlds else None,
        "worlds": list(d.worlds),
        "notes": notes,
        "help": d.help,
        "rendered": render_plain(d, sources),
    }


def to_sarif(diags: list[Diagnostic]) -> dict:
    used = sorted({d.code for d in diags})
    rules = [
        {
            "id": c,
            "name": CODES[c].name if c in CODES else c,
            "shortDescription": {"text": CODES[c].summary() if c in CODES else c},
            "helpUri": f"https://github.com/commdsl/commdsl/blob/main/docs/diagnostics.md#{c.lower()}",
        }
        for c in used
    ]
    results = []
    for d in diags:
        r = {
            "ruleId": d.code,
            "ruleIndex": used.index(d.code),
            "level": "error" if d.severity == "error" else "warning",
            "message": {"text": d.message},
        }
        if d.span is not None:
            r["locations"] = [_sarif_location(d.span, d.label)]
        related = [_sarif_location(lab.span, lab.message, i) for i, lab in enumerate(d.labels)]
        if related:
            r["relatedLocations"] = related
        if d.worlds:
            r["properties"] = {"worlds": list(d.worlds)}
        results.append(r)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "commdsl",
                        "version": __version__,
                        "informationUri": "https://github.com/commdsl/commdsl",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }


def _sarif_location(s: Span, message: str, ident: int | None = None) -> dict:
    loc = {
        "physicalLocation": {
            "artifactLocation": {"uri": s.path},
            "region": {
                "startLine": s.line,
                "startColumn": s.column,
                "endLine": s.end_line,
                "endColumn": max(s.end_column, s.column),
            },
        }
    }
    if message:
        loc["message"] = {"text": message}
    if ident is not None:
        loc["id"] = ident
    return loc


def _workflow_value(text: str, in_property: bool) -> str:
    """GitHub's escaping for a workflow command's message (and, more strictly, a property value)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if in_property else text


def to_github(d: Diagnostic) -> str:
    """A GitHub Actions workflow command: the finding as an annotation on its line of the pull request."""
    level = "error" if d.severity == "error" else "warning"
    props = [f"title={_workflow_value(f'commdsl {d.code} ({d.name})' if d.name else f'commdsl {d.code}', True)}"]
    if d.span is not None:
        s = d.span
        props = [
            f"file={_workflow_value(s.path, True)}",
            f"line={s.line}",
            f"col={s.column}",
            f"endLine={s.end_line}",
            f"endColumn={max(s.end_column, s.column)}",
            *props,
        ]
    where = f"{d.span.path}:{d.span.line}:{d.span.column}: " if d.span else ""
    return f"::{level} {','.join(props)}::{_workflow_value(f'{where}{d.code} {d.message}', False)}"


def to_junit(diags: list[Diagnostic], sources: Mapping[str, SourceFile]) -> str:
    """JUnit XML: a test suite per file, a failed test case per finding (the rendered finding as its text)."""
    from xml.etree import ElementTree as ET

    root = ET.Element("testsuites", name="commdsl", tests=str(len(diags)), failures=str(len(diags)), errors="0")
    by_file: dict[str, list[Diagnostic]] = {}
    for d in diags:
        by_file.setdefault(d.span.path if d.span else "", []).append(d)
    for path, found in by_file.items():
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)))
        suite.set("errors", "0")
        for d in found:
            where = f"line {d.span.line}, column {d.span.column}" if d.span else "no location"
            case = ET.SubElement(suite, "testcase", name=f"org.commdsl.{d.code}", classname=path or "commdsl")
            case.set("line", str(d.span.line) if d.span else "0")
            failure = ET.SubElement(case, "failure", message=f"{d.code} {d.message}", type=d.severity)
            failure.text = f"{where}: {render_plain(d, sources)}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def emit(diags: list[Diagnostic], sources: Mapping[str, SourceFile], fmt: str, console: Writer) -> None:
    """Write diagnostics to the console in one format; the summary line only for human formats."""
    if fmt == "json":
        console.file.write(json.dumps([to_json(d, sources) for d in diags], indent=2) + "\n")
        return
    if fmt == "sarif":
        console.file.write(json.dumps(to_sarif(diags), indent=2) + "\n")
        return
    if fmt == "junit":
        console.file.write(to_junit(diags, sources))
        return
    if fmt == "github":
        console.file.write("".join(to_github(d) + "\n" for d in diags))
        return
    colour = console.color_system is not None and not console.no_color
    for d in diags:
        if not colour:  # as rich prints it uncoloured: tabs expanded to its 8 columns
            text = render_concise(d) if fmt == "concise" else render_plain(d, sources)
            console.file.write(text.expandtabs(8) + "\n")
        elif fmt == "concise":
            from rich.text import Text

            console.print(Text(render_concise(d)), soft_wrap=True)
        else:
            console.print(render_text(d, sources, highlight=True), soft_wrap=True, end="")
            console.print()
