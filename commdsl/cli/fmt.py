"""`commdsl fmt FILE… [--check] [--diff]`: rewrite programs in canonical form (as black does for Python).

Without flags, files that would change are rewritten in place. `--check` writes nothing and exits 1 if any
file would change; `--diff` writes nothing and prints a unified diff. A file that does not parse is left
alone and its syntax error reported (exit 1); an unreadable file exits 2.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from commdsl.cli.common import EXIT_FAILURE, EXIT_FINDINGS, EXIT_OK, consoles, print_diagnostics
from commdsl.diagnostics import CommdslError
from commdsl.source import SourceFile


def add_parser(sub):
    p = sub.add_parser("fmt", help="format programs canonically (in place, or --check / --diff)",
                       description="Rewrite .comm files in canonical form: 4-space indentation, one space round "
                                   "operators, comments kept. Formatting never changes what a program means.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would be reformatted")
    p.add_argument("--diff", action="store_true", help="write nothing; print a unified diff of the changes")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour diagnostics (default: auto)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from commdsl.emit.fmt import FormatError, format_source

    out, err = consoles(args)
    changed = unchanged = failed = 0
    io_failed = False
    write = not (args.check or args.diff)
    for path in args.files:
        try:
            raw = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            err.print(f"[bold red]error[/]: {path}: not UTF-8 text (byte {e.start})", highlight=False)
            io_failed = True
            continue
        except OSError as e:
            err.print(f"[bold red]error[/]: cannot read {path}: {e.strerror or e}", highlight=False)
            io_failed = True
            continue
        source = SourceFile(path, raw)
        try:
            text = format_source(source)
        except CommdslError as e:
            print_diagnostics(e.diagnostics, {path: source}, "text", err, err, summary=False)
            err.print(f"[bold red]error[/]: cannot format {path}: it does not parse", highlight=False)
            failed += 1
            continue
        except FormatError as e:
            err.print(f"[bold red]error[/]: {e}", highlight=False)
            io_failed = True
            continue
        if text == raw:
            unchanged += 1
            continue
        changed += 1
        if args.diff:
            out.file.write("".join(difflib.unified_diff(
                raw.splitlines(keepends=True), text.splitlines(keepends=True), f"{path}", f"{path} (formatted)")))
        if write:
            try:
                Path(path).write_text(text, encoding="utf-8")
            except OSError as e:
                err.print(f"[bold red]error[/]: cannot write {path}: {e.strerror or e}", highlight=False)
                io_failed = True
                continue
            err.print(f"reformatted {path}", highlight=False)
        elif args.check:
            err.print(f"would reformat {path}", highlight=False)
    if changed or unchanged or failed:
        err.print(_summary(changed, unchanged, failed, write), highlight=False)
    if io_failed:
        return EXIT_FAILURE
    if failed or (args.check and changed):
        return EXIT_FINDINGS
    return EXIT_OK


def _summary(changed: int, unchanged: int, failed: int, wrote: bool) -> str:
    def files(k: int) -> str:
        return f"{k} file{'s' * (k != 1)}"

    parts = []
    if changed:
        parts.append(f"{files(changed)} {'reformatted' if wrote else 'would be reformatted'}")
    if unchanged:
        parts.append(f"{files(unchanged)} {'left unchanged' if wrote else 'already formatted'}")
    if failed:
        parts.append(f"{files(failed)} could not be formatted")
    return ", ".join(parts) + "."
