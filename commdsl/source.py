"""Source text and spans: every diagnostic and every Schedule op points back here."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from commdsl.validation import FORBID_EXTRA


@dataclass(frozen=True, kw_only=True)
class Span:
    """A half-open region of one source file, 1-based lines and columns, end exclusive (as Lark's meta)."""

    __pydantic_config__ = FORBID_EXTRA

    path: str
    start: int
    end: int
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


def code_of(line: str) -> str:
    """A line without its comment and trailing blanks (the language has no strings: `#` always starts one)."""
    return line.split("#", 1)[0].rstrip()


def logical_lines(raw_lines: Iterable[str]) -> Iterator[str]:
    """The code of each logical line of `raw_lines`: a line ending in `\\` joined with the next, comments
    removed, blanks collapsed ("" for a blank or comment line)."""
    joined = ""
    for raw in raw_lines:
        continued = raw.endswith("\\")
        code = code_of(raw[:-1] if continued else raw)
        joined = f"{joined} {code}" if joined else code
        if not continued:
            yield " ".join(joined.split())
            joined = ""
    if joined.strip():
        yield " ".join(joined.split())


def statement_text(text: str, span: Span) -> str:
    """The source text of a statement on one line, without comments, blank lines or continuation
    backslashes: a block's lines joined by `; ` after its head (`batch: send x to 1; recv y from 1`).
    Messages quote statements this way, so a comment inside a `batch:` is never quoted as code."""
    lines = [line for line in logical_lines(text[span.start : span.end].splitlines()) if line]
    if len(lines) > 1 and lines[0].endswith(":"):
        return lines[0] + " " + "; ".join(lines[1:])
    return "; ".join(lines)


class SourceFile:
    """One program's text with a line index, so offsets become line:col and lines can be quoted."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.original = text  # as written: `fmt` keeps the tabs inside comments
        self.text = text.expandtabs(8)  # spans and carets count a tab as up to 8 columns

    @classmethod
    def read(cls, path: str | Path) -> SourceFile:
        """Read a file as UTF-8 (a leading byte-order mark is dropped, as editors write one); raises
        FileError (not a regular file, over `files.MAX_PROGRAM_BYTES`, unreadable) or UnicodeDecodeError
        for the CLI to report."""
        from commdsl.files import read_bytes

        return cls(str(path), read_bytes(path).decode("utf-8-sig"))

    @cached_property
    def _line_starts(self) -> list[int]:
        starts = [0]
        starts.extend(i + 1 for i, ch in enumerate(self.text) if ch == "\n")
        return starts

    def location(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        index = bisect.bisect_right(self._line_starts, offset) - 1
        return index + 1, offset - self._line_starts[index] + 1

    def line_text(self, line: int) -> str:
        starts = self._line_starts
        if not 1 <= line <= len(starts):
            return ""
        end = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[starts[line - 1] : end].rstrip("\r")

    def span(self, start: int, end: int) -> Span:
        line, column = self.location(start)
        end_line, end_column = self.location(end)
        return Span(
            path=self.path, start=start, end=end, line=line, column=column, end_line=end_line, end_column=end_column
        )
