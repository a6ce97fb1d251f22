"""What every subcommand shares: reading files into Programs, printing diagnostics, exit codes."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.diagnostics.render import FORMATS, emit, use_color
from commdsl.expand import parse_param_value
from commdsl.files import FileError
from commdsl.limits import MAX_TIMEOUT_S, TIME_LIMIT
from commdsl.resolve import Program, load
from commdsl.source import SourceFile

if TYPE_CHECKING:
    from rich.console import Console

    from commdsl.settings import Settings

EXIT_OK, EXIT_FINDINGS, EXIT_FAILURE = 0, 1, 2


def escape(text: str) -> str:
    """rich's `escape`, for text put into a message with markup (imported only when one is written)."""
    from rich.markup import escape

    return escape(text)


class PlainConsole:
    """What `lint` and `check` print with where nothing is coloured: rich's Console `print` of text, but rich,
    about a twentieth of a small lint's start-up, is imported only to strip the markup of a message that
    has some. Diagnostics are written as they are (`diagnostics.render.emit`)."""

    color_system = None
    no_color = True

    def __init__(self, file):
        self.file = file

    @property
    def is_terminal(self) -> bool:
        return self.file.isatty()

    def print(self, *objects, markup: bool = True, end: str = "\n", **_) -> None:
        text = " ".join(str(o) for o in objects)
        if markup and "[" in text:
            from rich.markup import render

            text = render(text).plain
        self.file.write(text + end)


if TYPE_CHECKING:
    Out = Console | PlainConsole


class UsageError(Exception):
    """A command-line mistake: argparse-style message, exit 2."""


@dataclass
class Loaded:
    programs: list[Program] = field(default_factory=list)
    sources: dict[str, SourceFile] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    io_failed: bool = False


def not_utf8(path, e: UnicodeDecodeError) -> str:
    """What to say of a file that is not UTF-8 text: where its first bad byte is."""
    return f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start : e.start + 1]!r})"


def load_files(paths: list[str], err: Out) -> Loaded:
    out = Loaded()
    for path in paths:
        try:
            source = SourceFile.read(path)
        except UnicodeDecodeError as e:
            err.print(f"[bold red]error[/]: {escape(not_utf8(path, e))}", highlight=False)
            out.io_failed = True
            continue
        except FileError as e:
            err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
            out.io_failed = True
            continue
        out.sources[path] = source
        try:
            out.programs.append(load(source))
        except CommdslError as e:
            out.diagnostics.extend(e.diagnostics)
    return out


def add_settings_flags(p: argparse.ArgumentParser):
    p.add_argument(
        "--config",
        metavar="FILE",
        help="read settings from this commdsl.toml or pyproject.toml (default: the nearest one upwards)",
    )
    p.add_argument("--isolated", action="store_true", help="ignore every settings file")


def project_settings(args, err: Out) -> Settings | None:
    """The settings the flags ask for (`settings.py`), or None after printing why they cannot be read."""
    from commdsl.settings import defaults, find, load

    if args.isolated:
        return defaults()
    path = Path(args.config) if args.config else find(Path.cwd())
    if path is None:
        return defaults()
    try:
        return load(path)[0]
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
    except UnicodeDecodeError:
        err.print(f"[bold red]error[/]: {escape(str(path))}: not UTF-8 text", highlight=False)
    except CommdslError as e:
        source = SourceFile.read(path)
        print_diagnostics(e.diagnostics, {source.path: source}, "text", err, err)
    return None


def discover(paths: list[str], err: Out, exclude: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The files a verb that takes FILE|DIR… works on (`discover.comm_files`); a directory without any
    `.comm` file is a warning, as ruff's, not an error."""
    from commdsl.discover import comm_files

    files, empty = comm_files(paths, exclude)
    for directory in empty:
        err.print(f"[bold yellow]warning[/]: no .comm files under {escape(directory)}", highlight=False)
    return files


def load_one(path: str, fmt: str, out: Out, err: Out, report: bool = True) -> Loaded | int:
    """The program of a verb that takes one FILE, or the exit code when there is none to work on:
    2 when the file cannot be read, 1 after printing its diagnostics (unless `report` is false)."""
    loaded = load_files([path], err)
    if loaded.io_failed:
        return EXIT_FAILURE
    if loaded.diagnostics:
        if report:
            print_diagnostics(loaded.diagnostics, loaded.sources, fmt, out, err)
        return EXIT_FINDINGS
    return loaded


# what a `--set` value may look like: the language's own literals (ASCII digits; Python's int() and float()
# would also take `١٢`, `1_000`, `nan` and `inf`), with a sign
_SET_VALUE = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false")
MAX_INT = (1 << 63) - 1


def parse_sets(values: list[str] | None) -> dict[str, str]:
    """`--set k=v` (repeatable) → {k: "v"}; values are checked against the program by `expand`."""
    out = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        value = value.strip()
        parsed = parse_param_value(value) if _SET_VALUE.fullmatch(value) else None
        if parsed is None:
            raise UsageError(f"--set {item}: the value is not an integer, number or true/false")
        if type(parsed) is int and abs(parsed) > MAX_INT:
            raise UsageError(f"--set {item}: the value does not fit in 64 bits")
        out[key.strip()] = value
    return out


def refuse_unused_variant_flags(args, built_in: bool, program: bool) -> None:
    """`bench` and `predict`: --op and --root shape a built-in collective, --param and --set a program; given
    where the command measures no such variant, they would be silently ignored, so each is a usage error.
    Their defaults (sum, 0, n) are applied after this check: `args.op` etc. are None when not given."""
    if not built_in:
        if args.op is not None:
            raise UsageError("--op sets the reduce op of --collective; a program states its own in its statements")
        if args.root is not None:
            raise UsageError("--root sets the root of --collective; a program's root is its own param (--set root=R)")
    if not program:
        for flag, given in (("--param", args.param is not None), ("--set", bool(args.set))):
            if given:
                raise UsageError(f"{flag} sets a program's param; a --collective built-in has none (give a FILE)")


def _from_env(flag: str, text: str) -> str:
    env = "COMMDSL_" + flag.lstrip("-").upper().replace("-", "_")
    return f" (from {env})" if os.environ.get(env) == text else ""


def integer(flag: str, low: int = 0, high: int = MAX_INT):
    """An argparse `type` for an integer flag: ASCII digits only, within [low, high]; a bad value (also one
    from the flag's COMMDSL_<FLAG> variable) is a usage error naming the flag and the variable."""

    def convert(text: str) -> int:
        s = text.strip()
        if not re.fullmatch(r"[+-]?[0-9]{1,19}", s) or not low <= int(s) <= high:
            limit = f"at least {low}" if high == MAX_INT else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"expected an integer {limit}, got {text!r}{_from_env(flag, text)}")
        return int(s)

    convert.__name__ = "integer"
    return convert


def seconds(flag: str):
    """An argparse `type` for a duration in seconds: a finite number above 0, at most MAX_TIMEOUT_S."""

    def convert(text: str) -> float:
        s = text.strip()
        ok = re.fullmatch(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", s) is not None
        value = float(s) if ok else math.nan
        if not 0 < value <= MAX_TIMEOUT_S:
            raise argparse.ArgumentTypeError(
                f"expected seconds above 0 and at most {MAX_TIMEOUT_S} (a week), got {text!r}{_from_env(flag, text)}"
            )
        return value

    convert.__name__ = "seconds"
    return convert


def text_consoles(args) -> tuple[Out, Out]:
    """`consoles` for a verb that prints only text and diagnostics (`lint`, `check`): where neither stream is
    coloured, PlainConsoles, so the verb starts without rich."""
    color = getattr(args, "color", "auto")
    if use_color(color, sys.stdout) or use_color(color, sys.stderr):
        return consoles(args)
    return PlainConsole(sys.stdout), PlainConsole(sys.stderr)


def consoles(args) -> tuple[Console, Console]:
    from rich.console import Console

    color = getattr(args, "color", "auto")
    # soft_wrap: output is line-oriented (grepped, parsed): never break a long line, let a terminal wrap it
    out = Console(
        file=sys.stdout,
        force_terminal=use_color(color, sys.stdout),
        no_color=not use_color(color, sys.stdout),
        highlight=False,
        soft_wrap=True,
    )
    err = Console(
        file=sys.stderr,
        force_terminal=use_color(color, sys.stderr),
        no_color=not use_color(color, sys.stderr),
        highlight=False,
        soft_wrap=True,
    )
    return out, err


def add_output_flags(p: argparse.ArgumentParser, formats=FORMATS, default: str | None = "text"):
    """`--format` (default `default`; None where the settings file may give it) and `--color`."""
    p.add_argument(
        "--format",
        "--output-format",
        dest="format",
        choices=formats,
        default=default,
        help="diagnostic output format (default: text; github: annotations in GitHub Actions, junit: XML for CI)",
    )
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the text output (default: auto — on a TTY, unless NO_COLOR is set)",
    )


def add_launch_flags(p: argparse.ArgumentParser, nproc_help: str):
    """The flags `run` and `bench` share, meaning the same on both (COMMDSL_<FLAG> as defaults)."""
    p.add_argument(
        "--nproc",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=integer("--nproc", 1, 1 << 16),
        default=env_default("nproc", None, torchrun="nproc_per_node"),
        help=nproc_help,
    )
    p.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default=env_default("backend", "auto"),
        help="auto (default): nccl when every local rank gets a GPU, else gloo",
    )
    p.add_argument(
        "--timeout",
        type=seconds("--timeout"),
        default=env_default("timeout", "60"),
        metavar="S",
        help="hang guard: seconds any rank may wait in one op before the run is stopped (default: 60)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show each rank's pid and torch's launcher logs")


def add_program_flags(p: argparse.ArgumentParser):
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a param (repeatable)")


def print_diagnostics(diags: list[Diagnostic], sources, fmt: str, out: Out, err: Out, summary: bool = True):
    diags = sorted(diags, key=Diagnostic.sort_key)
    emit(diags, sources, fmt, out)
    if summary and fmt in ("text", "concise"):
        errors = sum(d.severity == "error" for d in diags)
        warnings = len(diags) - errors
        if diags:
            parts = [f"{errors} error{'s' * (errors != 1)}"] if errors else []
            parts += [f"{warnings} warning{'s' * (warnings != 1)}"] if warnings else []
            err.print(f"Found {' and '.join(parts)}.")


def add_max_time_flag(p: argparse.ArgumentParser, stops: str) -> None:
    """`--max-time S`: the time limit of `check` and `predict`, after which they stop with N134."""
    p.add_argument(
        "--max-time",
        type=seconds("--max-time"),
        default=env_default("max_time", None),
        metavar="S",
        help=f"stop {stops} after S seconds, with N134 (default: {TIME_LIMIT:g})",
    )


def env_default(flag: str, default, torchrun: str | None = None):
    """`COMMDSL_<FLAG>` as the default of a flag (flag > environment > built-in default), and for a flag
    torchrun has too (`torchrun`: its name there) torchrun's `PET_<FLAG>` after it. Defaults stay strings:
    argparse converts them with the flag's type and reports a bad value as a usage error.

    PET_ variables are read only in a process no launcher started: a worker of torchrun inherits the
    PET_NPROC_PER_NODE its user exported for torchrun, and must not launch ranks of its own."""
    value = os.environ.get("COMMDSL_" + flag.upper().replace("-", "_"))
    if value is None and torchrun is not None and not _launched():
        value = os.environ.get("PET_" + torchrun.upper().replace("-", "_"))
    return default if value is None else value


def _launched() -> bool:
    """Whether a launcher (torchrun, mpirun, srun) started this process as one rank of a job."""
    from commdsl.runtime.envinfo import launched_as_rank

    return launched_as_rank(os.environ)
