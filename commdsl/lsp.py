"""`commdsl lsp`: a language server (LSP over stdio, pygls) so an editor checks `.comm` files as they are typed.

On open, change and save it checks the document as `commdsl lint` does (the project's settings apply,
`settings.py`) and publishes every finding with its code, its other party as related information and a
link to the code's documentation; hovering over a code (in a finding's range, or a `noqa` comment) shows
`commdsl explain`; formatting is `commdsl fmt`. A check runs a short moment after the last keystroke, off
the server's loop, and only the newest version of a document is published.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from commdsl import __version__
from commdsl.diagnostics import CommdslError, Diagnostic, Label, Note
from commdsl.source import SourceFile, Span

DEBOUNCE_S = 0.05
"""Seconds after the last change before a check starts (typing does not queue a check per keystroke)."""
MAX_WORLD = 16
"""The bound for open world ranges (`world 2..`) while typing, unless the project's settings give one."""
MAX_SECONDS = 5.0
"""A check while typing stops here (N134), unless the project's settings give a limit."""
DOCS = "https://github.com/commdsl/commdsl/blob/main/docs/diagnostics.md#"

server = LanguageServer("commdsl", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Full)
_pending: dict[str, asyncio.Task] = {}
_published: dict[str, tuple[int | None, list[Diagnostic]]] = {}  # uri → (version, its findings), for hover
_closing: list[bool] = []  # [True] once `shutdown` came: no check starts or publishes after it (loop thread only)


def _path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def position(source: SourceFile, line: int, column: int) -> lsp.Position:
    """An LSP position (0-based line, UTF-16 code units) from a span's line and column, which count a tab up to
    the next multiple of 8 (`SourceFile.text`)."""
    lines = source.original.split("\n")
    if not 1 <= line <= len(lines):
        return lsp.Position(line=max(line - 1, 0), character=0)
    text, col, units = lines[line - 1].rstrip("\r"), 1, 0
    for ch in text:
        if col >= column:
            break
        col = (col - 1) // 8 * 8 + 9 if ch == "\t" else col + 1
        units += 2 if ord(ch) > 0xFFFF else 1
    return lsp.Position(line=line - 1, character=units)


def _range(source: SourceFile, span: Span) -> lsp.Range:
    return lsp.Range(
        start=position(source, span.line, span.column), end=position(source, span.end_line, span.end_column)
    )


def to_lsp(d: Diagnostic, source: SourceFile, uri: str) -> lsp.Diagnostic:
    """One finding as the editor shows it: its range, code with a link, message, and its other party."""
    whole = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0))
    related = [
        lsp.DiagnosticRelatedInformation(
            location=lsp.Location(uri=uri, range=_range(source, p.span)), message=p.message
        )
        for p in _parties(d)
        if p.span is not None and p.span.path == source.path
    ]
    notes = [n.message for n in d.notes if n.span is None] + ([f"help: {d.help}"] if d.help else [])
    return lsp.Diagnostic(
        range=_range(source, d.span) if d.span is not None and d.span.path == source.path else whole,
        severity=lsp.DiagnosticSeverity.Error if d.severity == "error" else lsp.DiagnosticSeverity.Warning,
        code=d.code,
        code_description=lsp.CodeDescription(href=DOCS + d.code.lower()),
        source="commdsl",
        message=d.message + "".join(f"\n{n}" for n in notes),
        related_information=related or None,
    )


def _parties(d: Diagnostic) -> list[Label | Note]:
    """The labels and notes of a finding: those with a span are the other party, shown as related information."""
    return [*d.labels, *d.notes]


def check_text(path: str, text: str) -> list[Diagnostic]:
    """`commdsl lint` of one document's text, with the settings of the project it is in."""
    from commdsl.checker import CheckOptions, check_program
    from commdsl.resolve import load
    from commdsl.rules.registry import selected
    from commdsl.settings import Settings, find
    from commdsl.settings import load as load_settings

    settings = Settings()
    found = find(Path(path).resolve().parent) if not path.startswith(("untitled:", "<")) else None
    if found is not None:
        try:
            settings = load_settings(found)[0]
        except (CommdslError, OSError, UnicodeDecodeError):
            pass  # the settings file has its own diagnostics under `commdsl lint`; check with the defaults
    source = SourceFile(path, text)
    try:
        program = load(source)
        diags = check_program(
            program,
            CheckOptions(
                worlds=tuple(settings.world) or None,
                backends=tuple(settings.backend) or None,
                lints=True,
                bound=settings.max_world or MAX_WORLD,
                max_seconds=settings.max_time or MAX_SECONDS,
            ),
        )
    except CommdslError as e:
        diags = e.diagnostics
    return [d for d in diags if selected(d.code, tuple(settings.select), tuple(settings.ignore))]


async def _check_later(ls: LanguageServer, uri: str, delay: float) -> None:
    """Check the document after `delay` (off the server's loop) and publish, on the loop, what was found, unless
    a newer text arrived meanwhile (its own check publishes) or the editor is shutting the server down."""
    await asyncio.sleep(delay)
    doc = ls.workspace.get_text_document(uri)
    path, text, version = _path(uri), doc.source, doc.version
    diags = await asyncio.get_running_loop().run_in_executor(None, check_text, path, text)
    if _closing or ls.workspace.get_text_document(uri).version != version:
        return
    _published[uri] = (version, diags)
    source = SourceFile(path, text)
    ls.text_document_publish_diagnostics(
        lsp.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=[to_lsp(d, source, uri) for d in diags])
    )


def schedule_check(ls: LanguageServer, uri: str, delay: float = DEBOUNCE_S) -> None:
    """Check `uri` after `delay`, replacing a check of it that has not started yet."""
    if _closing:
        return
    waiting = _pending.get(uri)
    if waiting is not None and not waiting.done():
        waiting.cancel()
    _pending[uri] = asyncio.ensure_future(_check_later(ls, uri, delay))


@server.feature(lsp.SHUTDOWN)
def shutdown(ls: LanguageServer, params: None) -> None:
    _closing.append(True)
    for task in _pending.values():
        task.cancel()


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: LanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
    schedule_check(ls, params.text_document.uri, 0)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: LanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
    schedule_check(ls, params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: LanguageServer, params: lsp.DidSaveTextDocumentParams) -> None:
    schedule_check(ls, params.text_document.uri, 0)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: LanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
    _published.pop(params.text_document.uri, None)
    ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))


CODE = re.compile(r"\b[SNPCDRBLV]\d{3}\b")


def explain_at(text: str, line: int, character: int, codes_here: list[str]) -> str | None:
    """The explanation to show at a position: of the code under the cursor (`D401` in a noqa comment), else
    of the first finding whose range holds the position (`codes_here`)."""
    from commdsl.rules.registry import CODES

    lines = text.split("\n")
    if 0 <= line < len(lines):
        for m in CODE.finditer(lines[line]):
            if m.start() <= character <= m.end() and m.group(0) in CODES:
                return _explanation(m.group(0))
    for code in codes_here:
        if code in CODES:
            return _explanation(code)
    return None


def _explanation(code: str) -> str:
    from commdsl.rules.registry import CODES

    rule = CODES[code]
    return f"**{code} {rule.name}**: {rule.summary()}\n\n{rule.docs()}"


@server.feature(lsp.TEXT_DOCUMENT_HOVER)
def hover(ls: LanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    pos = params.position
    source = SourceFile(_path(params.text_document.uri), doc.source)
    published = _published.get(params.text_document.uri)
    if published is not None and published[0] == doc.version:
        found = published[1]
    else:  # hovered before this text's check was published
        found = check_text(source.path, doc.source)
    here = []
    for d in found:
        if d.span is None:
            continue
        r = _range(source, d.span)
        if (r.start.line, r.start.character) <= (pos.line, pos.character) <= (r.end.line, r.end.character):
            here.append(d.code)
    text = explain_at(doc.source, pos.line, pos.character, here)
    if text is None:
        return None
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text))


@server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
def formatting(ls: LanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit] | None:
    from commdsl.emit.fmt import FormatError, format_source

    doc = ls.workspace.get_text_document(params.text_document.uri)
    try:
        formatted = format_source(SourceFile(_path(params.text_document.uri), doc.source))
    except (CommdslError, FormatError):
        return None  # a program that does not parse is not formatted: its diagnostics say why
    if formatted == doc.source:
        return []
    lines = doc.source.split("\n")
    end = lsp.Position(line=len(lines), character=0)
    return [lsp.TextEdit(range=lsp.Range(start=lsp.Position(line=0, character=0), end=end), new_text=formatted)]


def serve() -> None:
    server.start_io()
