"""Diagnostics: the one model every stage reports user mistakes with, and its renderers."""

from commdsl.diagnostics.model import CommdslError, Diagnostic, Label, Note, Severity

__all__ = ["Diagnostic", "Label", "Note", "Severity", "CommdslError"]
