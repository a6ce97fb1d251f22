"""`# commdsl: noqa` comments: findings a user has looked at and chosen to keep, as ruff's `# noqa`.

A directive on a line suppresses the findings whose primary span covers that line: every finding with a
bare `# commdsl: noqa`, the listed codes with `# commdsl: noqa: D401, P201`. Only the checker's findings
(P to V codes) can be suppressed: a program that does not parse or resolve (S and N codes) cannot be
checked at all. Under `lint`, a directive that suppressed nothing, or names a code that does not exist, is
itself a finding (L706), so stale suppressions do not pile up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from commdsl.diagnostics import Diagnostic
from commdsl.source import SourceFile, Span

DIRECTIVE = re.compile(r"commdsl:\s*noqa\b(?P<listed>:(?P<codes>(?:[\s,]*[A-Za-z]+\d+\b)*))?", re.I)
"""The directive inside a comment: bare, or with codes after a colon, separated by commas or blanks; the list
ends at the first word that is not shaped like a code, so a reason may follow (`# commdsl: noqa: D401 why`)."""


@dataclass
class Directive:
    span: Span  # the directive's text, for L706
    codes: tuple[str, ...] | None  # None: every code
    used: set[str] = field(default_factory=set)  # the codes it suppressed ("*" for a bare directive)


def directives(source: SourceFile) -> dict[int, Directive]:
    """Line → the directive in that line's comment (the language has no strings: `#` always starts one)."""
    out = {}
    offset = 0
    for line, text in enumerate(source.text.split("\n"), 1):
        hash_at = text.find("#")
        m = DIRECTIVE.search(text, hash_at) if hash_at >= 0 else None
        if m is not None:
            codes = tuple(c.upper() for c in re.split(r"[\s,]+", m["codes"]) if c) if m["listed"] else None
            end = offset + m.start() + len(m.group(0).rstrip())
            out[line] = Directive(source.span(offset + m.start(), end), codes)
        offset += len(text) + 1
    return out


def apply(diags: list[Diagnostic], source: SourceFile, lints: bool) -> list[Diagnostic]:
    """`diags` without the findings a directive in `source` suppresses; with `lints`, plus an L706 for every
    directive (or listed code) that suppressed nothing or is not a code."""
    found = directives(source)
    if not found:
        return diags
    kept = []
    for d in diags:
        directive = _covering(d, found, source.path)
        if directive is None:
            kept.append(d)
        else:
            directive.used.add(d.code if directive.codes is not None else "*")
    if lints:
        kept += list(_unused(found.values()))
    return kept


def _covering(d: Diagnostic, found: dict[int, Directive], path: str) -> Directive | None:
    """The directive that suppresses `d`: on a line of its primary span, listing its code or none."""
    s = d.span
    if s is None or s.path != path or d.code[0] not in "PCDRBLV":
        return None
    for line in range(s.line, s.end_line + 1):
        directive = found.get(line)
        if directive is not None and (directive.codes is None or d.code in directive.codes):
            return directive
    return None


def _unused(found) -> list[Diagnostic]:
    from commdsl.rules.registry import CODES
    from commdsl.rules.suppression import UnusedNoqa

    out = []
    for directive in found:
        if directive.codes is None:
            if not directive.used:
                out.append(
                    UnusedNoqa.diagnostic(
                        "unused `noqa` directive: no finding on this line",
                        span=directive.span,
                        label="suppresses nothing",
                        help="remove it",
                    )
                )
            continue
        if not directive.codes:
            out.append(
                UnusedNoqa.diagnostic(
                    "`noqa:` lists no codes, so it suppresses nothing",
                    span=directive.span,
                    label="no codes after the colon",
                    help="name the codes (`# commdsl: noqa: D401`), or drop the colon to suppress every code",
                )
            )
            continue
        unknown = [c for c in directive.codes if c not in CODES]
        unused = [c for c in directive.codes if c in CODES and c not in directive.used]
        if unknown:
            out.append(
                UnusedNoqa.diagnostic(
                    f"`noqa` names {_listed(unknown)} that {'is' if len(unknown) == 1 else 'are'} not a commdsl code",
                    span=directive.span,
                    label="no such code",
                    help="see `commdsl explain --list` for the codes",
                )
            )
        if unused:
            out.append(
                UnusedNoqa.diagnostic(
                    f"unused `noqa` directive: no {_listed(unused)} finding on this line",
                    span=directive.span,
                    label="suppresses nothing" if len(unused) == len(directive.codes) else f"{_listed(unused)} unused",
                    help="remove the codes that no longer fire",
                )
            )
    return out


def _listed(codes: list[str]) -> str:
    return ", ".join(f"`{c}`" for c in codes)
