"""The `Diagnostic` model: a code, a message, a primary span, labels on the other party, notes and help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from commdsl.source import Span
from commdsl.validation import FORBID_EXTRA

Severity = Literal["error", "warning"]


@dataclass(frozen=True, kw_only=True)
class Label:
    """A secondary span with a short text: the other party of a two-party bug, an edge of a cycle."""

    __pydantic_config__ = FORBID_EXTRA
    span: Span
    message: str


@dataclass(frozen=True, kw_only=True)
class Note:
    """A fact about the finding (`= note:`), optionally pointing at a line."""

    __pydantic_config__ = FORBID_EXTRA
    message: str
    span: Span | None = None


@dataclass(frozen=True, kw_only=True)
class Diagnostic:
    __pydantic_config__ = FORBID_EXTRA

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
