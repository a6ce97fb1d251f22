"""`commdsl explain CODE`, `commdsl explain --list` and `commdsl explain --all`: the diagnostics reference.

CODE is a code in any case (`P201`, `p201`) or its kebab-case name (`unmatched-send`). The explanation
is markdown: rendered on a terminal, printed as is otherwise (so it pipes into a pager or a file).
`--all` prints the whole reference, which is how docs/diagnostics.md is generated.
"""

from __future__ import annotations

import difflib
import json

from commdsl.cli.common import EXIT_OK, UsageError, consoles


def add_parser(sub):
    text = "explain a diagnostic code: what it finds, why it matters, a bad and a fixed example"
    p = sub.add_parser("explain", help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("code", nargs="?", metavar="CODE", help="a code (P201) or its name (unmatched-send)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="list every code with its name, severity and summary")
    what.add_argument(
        "--all",
        action="store_true",
        help="print the whole reference in markdown (docs/diagnostics.md is generated this way)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="render the markdown on a terminal (default: auto — on a TTY, unless NO_COLOR is set)",
    )
    p.set_defaults(handler=run)


def _entry(rule) -> dict:
    from commdsl.rules.docs import explanation

    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity,
        "summary": rule.summary(),
        "explanation": explanation(rule),
    }


def run(args) -> int:
    from commdsl.rules.docs import explanation, render_docs
    from commdsl.rules.registry import CODES, RULES, lookup

    out, _ = consoles(args)
    if args.code is not None and (args.list or args.all):
        raise UsageError("give either CODE or --list/--all, not both")
    if args.list or args.all:
        if args.format == "json":
            out.file.write(json.dumps([_entry(r) for r in RULES], indent=2) + "\n")
        elif args.all:
            out.file.write(render_docs())
        else:
            wide = max(len(r.name) for r in RULES)
            for r in RULES:
                out.file.write(f"{r.code}  {r.name:<{wide}}  {r.severity:<7}  {r.summary()}\n")
        return EXIT_OK
    if args.code is None:
        raise UsageError("give a code to explain (e.g. `commdsl explain P201`), or --list")
    rule = lookup(args.code)
    if rule is None:
        raise UsageError(f"unknown code `{args.code}`{_closest(args.code, CODES)}; `commdsl explain --list` lists them")
    if args.format == "json":
        out.file.write(json.dumps(_entry(rule), indent=2) + "\n")
    elif out.is_terminal and not out.no_color:
        from rich.markdown import Markdown

        out.print(Markdown(explanation(rule)))
    else:
        out.file.write(explanation(rule))
    return EXIT_OK


def _closest(text: str, codes) -> str:
    names = list(codes) + [c.name for c in codes.values()]
    close = difflib.get_close_matches(
        text.upper() if text[:1].isalpha() and text[1:].isdigit() else text.lower(), names, n=1
    )
    return f" (the closest is `{close[0]}`)" if close else ""
