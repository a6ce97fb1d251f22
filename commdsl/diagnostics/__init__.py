"""Diagnostics: the one model every stage reports user mistakes with, and its renderers."""

from commdsl.diagnostics.model import Diagnostic, Label, Note, Severity, CommdslError

__all__ = ["Diagnostic", "Label", "Note", "Severity", "CommdslError"]
