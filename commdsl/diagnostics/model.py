"""The `Diagnostic` model: a code, a message, a primary span, labels on the other party, notes and help."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from commdsl.source import Span

Severity = Literal["error", "warning"]


class Label(BaseModel):
    """A secondary span with a short text: the other party of a two-party bug, an edge of a cycle."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    span: Span
    message: str


class Note(BaseModel):
    """A fact about the finding (`= note:`), optionally pointing at a line."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    message: str
    span: Span | None = None


class Diagnostic(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    code: str
    severity: Severity = "error"
    message: str
    span: Span | None = None
    label: str = ""
    labels: tuple[Label, ...] = ()
    notes: tuple[Note, ...] = ()
    help: str | None = None
    worlds: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        from commdsl.rules.registry import CODES  # here, not at the top: the rules import this module

        return CODES[self.code].name if self.code in CODES else ""

    def sort_key(self) -> tuple:
        s = self.span
        return (s.path if s else "", s.start if s else -1, self.code, self.message)


class CommdslError(Exception):
    """Raised by a pipeline stage that cannot go on; carries the diagnostics that stopped it."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__("; ".join(d.message for d in diagnostics))
        self.diagnostics = diagnostics
