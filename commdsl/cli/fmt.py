"""`commdsl fmt FILE… [--check] [--diff]`: rewrite programs in canonical form (as black does for Python).

Without flags, files that would change are rewritten in place. `--check` writes nothing and exits 1 if any
file would change; `--diff` writes nothing and prints a unified diff. A file that does not parse is left
alone and its syntax error reported (exit 1); an unreadable file exits 2.

What formatting does not touch stays as the file had it: a UTF-8 byte-order mark, CRLF line endings
(when the first line ends so), and the tabs inside comments. A rewrite replaces the file in one step
(`files.write_atomic`), keeping its permissions: a kill or a full disk leaves the old program whole.
"""

from __future__ import annotations

import codecs
import difflib

from rich.markup import escape

from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    add_settings_flags,
    consoles,
    discover,
    print_diagnostics,
    project_settings,
)
from commdsl.diagnostics import CommdslError
from commdsl.files import FileError, read_bytes, write_atomic
from commdsl.source import SourceFile


def add_parser(sub):
    p = sub.add_parser(
        "fmt",
        help="format programs canonically (in place, or --check / --diff)",
        description="Rewrite .comm files in canonical form: 4-space indentation, one space round "
        "operators, comments kept. Formatting never changes what a program means.",
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="PATH",
        help="a .comm file, or a directory to search for them (honouring .gitignore)",
    )
    add_settings_flags(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would be reformatted")
    p.add_argument("--diff", action="store_true", help="write nothing; print a unified diff of the changes")
    p.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="colour diagnostics (default: auto)"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    from commdsl.emit.fmt import FormatError, format_source

    out, err = consoles(args)
    changed = unchanged = failed = 0
    io_failed = False
    write = not (args.check or args.diff)
    settings = project_settings(args, err)
    if settings is None:
        return EXIT_FAILURE
    for path in discover(args.files, err, settings.exclude):
        try:
            data = read_bytes(path)
            bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
            raw = data[len(bom) :].decode("utf-8")
        except UnicodeDecodeError as e:
            err.print(
                f"[bold red]error[/]: {escape(path)}: not UTF-8 text (byte {e.start + len(bom)})", highlight=False
            )
            io_failed = True
            continue
        except FileError as e:
            err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
            io_failed = True
            continue
        source = SourceFile(path, raw)
        try:
            text = _line_endings(format_source(source), raw)
        except CommdslError as e:
            print_diagnostics(e.diagnostics, {path: source}, "text", err, err, summary=False)
            err.print(f"[bold red]error[/]: cannot format {escape(path)}: it does not parse", highlight=False)
            failed += 1
            continue
        except FormatError as e:
            err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
            io_failed = True
            continue
        if text == raw:
            unchanged += 1
            continue
        changed += 1
        if args.diff:
            out.file.write(
                "".join(
                    difflib.unified_diff(
                        raw.splitlines(keepends=True), text.splitlines(keepends=True), f"{path}", f"{path} (formatted)"
                    )
                )
            )
        if write:
            try:
                write_atomic(path, bom + text.encode("utf-8"))
            except FileError as e:
                err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
                io_failed = True
                continue
            err.print(f"reformatted {escape(path)}", highlight=False)
        elif args.check:
            err.print(f"would reformat {escape(path)}", highlight=False)
    if changed or unchanged or failed:
        err.print(_summary(changed, unchanged, failed, write), highlight=False)
    if io_failed:
        return EXIT_FAILURE
    if failed or (args.check and changed):
        return EXIT_FINDINGS
    return EXIT_OK


def _line_endings(text: str, raw: str) -> str:
    """The formatted text (LF) with the file's line ending: CRLF when its first line ends with one."""
    first = raw.find("\n")
    return text.replace("\n", "\r\n") if first > 0 and raw[first - 1] == "\r" else text


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
