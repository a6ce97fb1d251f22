"""docs/diagnostics.md and `commdsl explain CODE`, generated from the rules' docstrings in the registry.

Kept apart from the `Rule` base so that a rule module never imports the page that lists every rule, and
so that the tests (tests/test_explain.py) read the same functions the command prints with.
"""

from __future__ import annotations

import re

from commdsl.rules import FAMILIES, Family, Rule, sections
from commdsl.rules.registry import RULES

EXAMPLE_FILE = "example.comm"
REGENERATE = "commdsl explain --all > docs/diagnostics.md"

__all__ = ["EXAMPLE_FILE", "REGENERATE", "explanation", "program_and_args", "render_docs", "sections", "title"]


def program_and_args(section: str) -> tuple[str, list[str]]:
    """The `.comm` program of an Example / Use instead section and the flags its console line adds."""
    programs = re.findall(r"^```comm\n(.*?)^```$", section, flags=re.M | re.S)
    if len(programs) != 1:
        raise ValueError(f"expected one ```comm block, found {len(programs)}")
    args: list[str] = []
    for line in re.findall(r"^\$ commdsl \w+ (.*)$", section, flags=re.M):
        words = line.split()
        args = words[words.index(EXAMPLE_FILE) + 1 :] if EXAMPLE_FILE in words else words
    return programs[0], args


def title(rule: type[Rule]) -> str:
    return f"{rule.code} `{rule.name}`"


def explanation(rule: type[Rule]) -> str:
    """The whole explanation of one rule, as `commdsl explain CODE` prints it."""
    return f"# {title(rule)}\n\n{_status(rule)}\n\n{rule.docs().rstrip()}\n"


def _severity(rule: type[Rule]) -> str:
    return f"removed (was {rule.severity})" if rule.removed else rule.severity


def _status(rule: type[Rule]) -> str:
    return f"**{_severity(rule)}** · {rule.summary()}"


# ---- docs/diagnostics.md -------------------------------------------------------------------------

_INTRO = """\
# Diagnostics reference

<!-- Generated from the rule classes in commdsl/rules/ (listed in registry.py): do not edit by hand.
     Regenerate with `{regenerate}`. -->

Every mistake commdsl can find has a stable code: a family letter and three digits. A code is never
reused; a retired rule keeps its code. `commdsl explain CODE` prints the entry for one code (the code or
its name: `commdsl explain P201`, `commdsl explain unmatched-send`), and `commdsl explain --list`
prints the table below.

Each entry has a program that produces the diagnostic and a fixed program that does not; a test runs
both through the checker, so they stay true. Backend notes say what Gloo was measured to do and what
NCCL's sources say it does, and link the section of [the backend model](backend-support.md) the
checker applies; a finding whose notes state a backend fact cites that section too.

## Reading a diagnostic

```text
error[P201]: `send` on rank 0 to rank 1 has no matching `recv`
 --> example.comm:5:5
  |
5 |     send x to 1
  |     ^^^^^^^^^^^ rank 1 finishes without posting one
  |
  = note: a matching `recv` on rank 1 would name rank 0
  = note: on Gloo this `send` blocks until the process group's timeout (30 minutes by default), then raises
  = note: see docs/backend-support.md#p2p-completion
  = note: at world size 2
```

The header gives the severity, the code and a message that makes sense alone. `-->` points at the
culprit (`path:line:column`, 1-based); `^^^` marks it and `---` marks the other party (the matching
send, the other rank's collective, each edge of a deadlock cycle). `= note:` lines give facts (world
sizes, ranks, what each checked backend does, and where that is sourced), `= help:` suggests a fix that
works on every checked backend. A finding that repeats across world sizes and ranks is reported once,
with the sizes listed; one found under some of the checked backends only says on which.

Severity: **error** for anything that hangs, crashes or gives wrong data; **warning** for idiom lints
(L7xx), which only `commdsl lint` reports.

## Output formats

`commdsl check` and `commdsl lint` take `--format text|concise|json|sarif` (default `text`):

| format | what it prints |
|---|---|
| `text` | the layout above; coloured on a terminal (`--color auto\\|always\\|never`; `NO_COLOR` turns colour off) |
| `concise` | one line per finding: `path:line:col: CODE message` |
| `json` | one array of objects: `code`, `name`, `severity`, `message`, the span, `notes`, `help`, `rendered` |
| `sarif` | SARIF 2.1.0 for code scanning; each rule's `helpUri` links to its entry on this page (`#p201`) |

A JSON item's span is `path`, `line`, `column`, `end_line` and `end_column` (1-based); it also has the
primary `label`, the `worlds` it holds at, and `rendered`, the text form, as rustc's JSON does.
Diagnostics go to stdout. The `Found N errors.` summary (text and concise only) and log lines go to
stderr. `--statistics` prints one count per code instead.

## Selecting codes

`--select` and `--ignore` take comma-separated codes or prefixes: `--select P,D401` reports the P2xx
family and D401 only; `--ignore L705` drops one lint.

## Exit codes

| code | meaning |
|---|---|
| 0 | nothing to report: no error-level diagnostic (warnings alone exit 0 unless `--strict`) |
| 1 | findings: at least one error (or, with `--strict`, a warning); `--exit-zero` turns this into 0 |
| 2 | the job could not be done: a usage error, an unreadable file, an internal error |

The same rules hold for every command; `commdsl explain` exits 2 for an unknown code.
"""


def render_docs() -> str:
    """docs/diagnostics.md: the intro, an index table, then every code grouped by family."""
    out = [_INTRO.replace("{regenerate}", REGENERATE)]
    out.append("\n## All codes\n\n| code | name | severity | summary |\n|---|---|---|---|\n")
    for r in RULES:
        out.append(f"| [{r.code}](#{r.code.lower()}) | `{r.name}` | {_severity(r)} | {_cell(r.summary())} |\n")
    by_family: dict[Family, list[type[Rule]]] = {}
    for r in RULES:
        by_family.setdefault(next(f for f in FAMILIES if f.letter == r.code[0]), []).append(r)
    for (_, name, blurb), members in by_family.items():
        out.append(f"\n## {name} ({members[0].code[:2]}xx)\n\n{blurb}\n")
        for r in members:
            out.append(f'\n<a id="{r.code.lower()}"></a>\n\n### {title(r)}\n\n{_status(r)}\n\n')
            out.append(re.sub(r"^## ", "#### ", r.docs().rstrip(), flags=re.M) + "\n")
    return "".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
