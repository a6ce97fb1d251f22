"""Every diagnostic code is a `Rule` class whose docstring is its documentation, as ruff's rules are.

Why classes: a code's name, severity, one-line summary and long explanation then sit together, one module
per family, instead of in a code table here and a dict of markdown elsewhere; and a raise site names the class
(`UnmatchedSend.diagnostic(...)`), so a typo in a code is an import error, not a silent unknown code. Why
docstrings: `commdsl explain` and docs/diagnostics.md are generated from them (`rules/docs.py`), and the tests
run every `## Example`, so the documentation cannot drift from what the checker says.

Defining a class registers nothing: `registry.py` is the one table of codes, and a test fails on a class it
does not list. For now the classes are documentation only; the checks that raise them are elsewhere.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from typing import ClassVar, NamedTuple

from commdsl.diagnostics.model import Diagnostic, Label, Note, Severity
from commdsl.source import Span

REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead")
OPTIONAL_SECTIONS = ("Backend notes", "References")
BACKEND_DOC = "docs/backend-support.md"
"""The backend model, one section per concept under a stable anchor, which rules cite (`Rule.backend_doc`)."""


class Family(NamedTuple):
    letter: str
    title: str
    blurb: str


# In pipeline order, which is the order of `commdsl explain --list` and docs/diagnostics.md.
FAMILIES = (
    Family("S", "Syntax", "The file does not parse. Nothing else is checked until it does."),
    Family(
        "N",
        "Names, types and shapes",
        "The program parses but does not mean anything yet: a name, a kind, a dtype or a size is wrong. "
        "Names and kinds are checked once; sizes at every declared world size.",
    ),
    Family("P", "Point-to-point", "A `send` and a `recv` that never meet, or meet with the wrong size, dtype or peer."),
    Family(
        "C",
        "Collectives",
        "Members of a group that do not call the same collective, with the same arguments, in the same order.",
    ),
    Family("D", "Deadlock and buffering", "Ranks that wait for each other in a cycle."),
    Family(
        "R",
        "Requests and local races",
        "Async requests never or twice waited, and buffers touched while an async op may still be using them.",
    ),
    Family("B", "Backend support", "Operations the chosen backend cannot run."),
    Family(
        "L",
        "Idiom lints (warnings)",
        "Hand-written patterns a built-in collective does better, and wasted results. Reported by `commdsl lint` only.",
    ),
    Family("V", "Verification", "What the simulator proves with data: every `expect` holds on every rank."),
)


class Rule:
    """One diagnostic code. The docstring is the summary line, a blank line, then the markdown sections.

    The summary follows the message style (lowercase, no final period) because `--list`, SARIF and the
    docs table print it as is. The sections are `REQUIRED_SECTIONS` then any of `OPTIONAL_SECTIONS`;
    an example that needs flags shows them in a `console` block (`$ commdsl check example.comm --world 3`).

    Everything is a class attribute or classmethod: a rule has no state until it gets a `check(ctx)`.
    """

    code: ClassVar[str]
    """Family letter + three digits ("P201"); never reused, even after the rule is retired."""
    name: ClassVar[str]
    """Kebab-case, naming the bad thing ("unmatched-send"), so "allow `unmatched-send`" reads right."""
    severity: ClassVar[Severity] = "error"
    """Error for anything that hangs, crashes or gives wrong data; warning for idiom lints and the like."""
    removed: ClassVar[bool] = False
    """A retired rule stays in the registry with this set, so its code keeps its meaning (see registry.py)."""
    about_backends: ClassVar[bool] = False
    """The rule itself compares backends (its message names them), so no note says on which it was found."""
    example_too_large: ClassVar[bool] = False
    """The Example is a shell session that writes the program (20,001 lines do not fit a docstring): the
    docs tests skip it, and the rule's own test builds the input."""
    every_world_from: ClassVar[int | None] = None
    """For a lint about the program's shape (a hand-written collective), the smallest world size the shape can
    show at: the checker reports such a finding only when it shows at every size checked from this one on. A
    program that has the shape at some sizes only is something else that coincides with it there (a binomial
    tree is a star at 3 ranks)."""
    quiet_beside_errors: ClassVar[bool] = False
    """A warning that an error at the same world size usually explains (a rank left idle because it skips the
    collective an error names): the checker drops it where that size has an error, so the error stands alone."""
    backend_doc: ClassVar[str | None] = None
    """The anchor of the section of docs/backend-support.md that holds the backend facts this rule's messages
    state: the checker ends each finding with a note citing it (`cite`), and the rule's Backend notes link it.
    One section per concept, so a fact is sourced once however many rules state it."""

    @classmethod
    def _text(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def summary(cls) -> str:
        return cls._text().partition("\n")[0]

    @classmethod
    def docs(cls) -> str:
        """The markdown sections, without the summary line; Backend notes end with the link to the model."""
        text = cls._text().partition("\n\n")[2]
        if cls.backend_doc is None:
            return text
        where = f"{BACKEND_DOC}#{cls.backend_doc}"
        link = f"The model the checker applies: [{where}](backend-support.md#{cls.backend_doc})."
        head, found, rest = text.partition("## Backend notes\n")
        body, nxt, tail = rest.partition("\n## ")
        return f"{head}{found}{body.rstrip()}\n\n{link}\n" + (f"\n## {tail}" if nxt else "")

    @classmethod
    def cite(cls) -> Note | None:
        """The note that points a finding at the backend model's section, if the rule has one."""
        return Note(message=f"see {BACKEND_DOC}#{cls.backend_doc}") if cls.backend_doc else None

    @classmethod
    def sections(cls) -> dict[str, str]:
        return sections(cls.docs())

    @classmethod
    def diagnostic(
        cls,
        message: str,
        *,
        span: Span | None = None,
        label: str = "",
        labels: Iterable[Label] = (),
        notes: Iterable[Note] = (),
        help: str | None = None,
    ) -> Diagnostic:
        """A finding of this rule: the code and severity come from the class, so a raise site cannot misspell them."""
        return Diagnostic(
            code=cls.code,
            severity=cls.severity,
            message=message,
            span=span,
            label=label,
            labels=tuple(labels),
            notes=tuple(notes),
            help=help,
        )


def sections(markdown: str) -> dict[str, str]:
    """`## Title` → body (stripped), in order."""
    out: dict[str, str] = {}
    title = None
    for line in markdown.splitlines(keepends=True):
        m = re.match(r"## (.+?)\s*$", line)
        if m:
            title = m.group(1)
            out[title] = ""
        elif title is not None:
            out[title] += line
    return {k: v.strip() for k, v in out.items()}


LISTED = 8
"""The most ranks, loop iterations or races one finding lists one by one; the others are counted. A bug on every
rank of a loop at world 4096 is one finding that stays readable, and the checker keeps no more of it than that
(`checker.access.Access.keep`)."""


def rank_list(ranks, limit: int = LISTED) -> str:
    """Ranks for a message: `[0, 2, 3]`, or runs with a count when there are many (`[0..1022, 1024..4095]
    (4095 ranks)`), so a finding at world 65536 stays one readable line."""
    ranks = sorted(int(r) for r in ranks)
    if len(ranks) <= limit:
        return "[" + ", ".join(map(str, ranks)) + "]"
    runs, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}..{prev}")
        if r is not None:
            start = prev = r
    shown = runs if len(runs) <= limit else runs[: limit - 1] + ["…", runs[-1]]
    return "[" + ", ".join(shown) + f"] ({len(ranks)} ranks)"
