"""`commdsl trace SCRIPT --world N [--world M ...] [-- SCRIPT ARGS]`: check a real PyTorch script.

Each world size is recorded (one forked child per rank under torch's fake backend, `trace.record`),
written as a `.comm` program (`trace.to_comm`) and checked as `lint` checks one, with every
diagnostic on the script's own lines. `--emit comm -o FILE` writes that program. `--flight-recorder
DIR` reads torch flight-recorder dumps instead of running anything.

Exit codes as `lint`'s: 0 clean (warnings alone unless `--strict`), 1 errors found, 2 usage or I/O
error, a script that fails while it is recorded, or an unreadable dump.
"""

from __future__ import annotations

import os
from dataclasses import replace

from rich.markup import escape

from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    UsageError,
    add_output_flags,
    consoles,
    integer,
    print_diagnostics,
    seconds,
)
from commdsl.diagnostics import Diagnostic
from commdsl.trace.events import Read


def add_parser(sub):
    text = "record a PyTorch script's communication at each world size and check it"
    p = sub.add_parser("trace", help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("script", nargs="?", metavar="SCRIPT", help="the training script (run as __main__ per rank)")
    p.add_argument(
        "--world",
        type=integer("--world", 1, 4096),
        action="append",
        help="record the script at this world size (repeatable; required with SCRIPT)",
    )
    p.add_argument(
        "--backend", choices=("gloo", "nccl"), action="append", help="check against this backend (repeatable)"
    )
    p.add_argument("--emit", choices=("comm",), help="write the recorded communication as a `.comm` program")
    p.add_argument("-o", "--output", metavar="FILE", help="where --emit writes (default: stdout)")
    p.add_argument(
        "--timeout",
        type=seconds("--timeout"),
        default="120",
        metavar="S",
        help="seconds one rank's recording may take before it is stopped (default: 120)",
    )
    p.add_argument("--flight-recorder", metavar="DIR", help="check torch flight-recorder dumps in DIR instead")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors are found")
    p.add_argument("--strict", action="store_true", help="warnings count as findings (exit 1)")
    p.add_argument("script_args", nargs="*", metavar="-- ARGS", help="arguments for the script, after `--`")
    add_output_flags(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    out, err = consoles(args)
    if args.flight_recorder:
        return _flight(args, out, err)
    _usage(args)
    if not os.path.isfile(args.script):
        err.print(f"[bold red]error[/]: {escape(args.script)}: no such file", highlight=False)
        return EXIT_FAILURE

    from commdsl.trace.check import check_emitted
    from commdsl.trace.to_comm import emit

    try:
        from commdsl.trace.record import record, version_warning
    except ImportError as e:  # no torch, or one without the fake backend
        err.print(
            f"[bold red]error[/]: commdsl trace needs torch with its fake process group: {escape(str(e))}",
            highlight=False,
        )
        return EXIT_FAILURE
    warning = version_warning()
    if warning:
        err.print(f"[bold yellow]warning[/]: {escape(warning)}", highlight=False)

    stem = _program_name(args.script)
    sources: dict = {}
    said: set[str] = set()
    reads: dict[str, list[int]] = {}  # the first read of received data per rank, by where it was
    merged: dict[tuple, Diagnostic] = {}
    for world in args.world:
        recording = record(args.script, list(args.script_args or []), world, timeout=args.timeout)
        failed = [t for t in recording.traces if t.error]
        if failed:
            _script_failed(failed, world, err)
            return EXIT_FAILURE
        _say(recording.traces, err, said)
        emitted = emit(recording.traces, stem)
        for t in recording.traces:
            first = next((e for e in t.events if isinstance(e, Read)), None)
            if first is not None:
                where = f"{first.site} (`{first.what}`)".replace(os.getcwd() + os.sep, "")
                reads.setdefault(where, []).append(t.rank)
        if args.emit:
            if args.output:
                with open(args.output, "w", encoding="utf-8") as f:
                    f.write(emitted.text)
            else:
                out.print(emitted.text, end="", markup=False)
        comm_path = args.output if args.emit and args.output else f"{args.script}.traced.comm"
        backends = tuple(args.backend) if args.backend else None
        diags = check_emitted(emitted, comm_path, sources, backends, traces=recording.traces)
        _merge(merged, diags)
    diags = list(merged.values())
    # the program went to stdout: the findings go to stderr, so `> out.comm` keeps a clean program
    print_diagnostics(diags, sources, args.format, err if args.emit and not args.output else out, err)
    failing = [d for d in diags if d.severity == "error" or args.strict]
    if failing and not args.exit_zero:
        return EXIT_FINDINGS
    if not diags and args.format in ("text", "concise"):
        sizes = ", ".join(map(str, args.world))
        err.print(f"All checks passed ({args.script} at world {sizes}).")
        for where, ranks in reads.items():  # a clean verdict can rest on data as much as a finding
            who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, sorted(set(ranks))))}"
            err.print(
                f"[bold blue]note[/]: this verdict may depend on data: {who} read a value that came from "
                f"communication at {escape(where)}; the checked path is the one the fake backend's data took",
                highlight=False,
            )
    return EXIT_OK


def _usage(args) -> None:
    if not args.script:
        raise UsageError("give a SCRIPT to trace, or --flight-recorder DIR")
    if not args.world:
        raise UsageError("give the world size to record with --world N (repeatable)")
    if args.emit and len(args.world) > 1:
        raise UsageError("--emit writes one program: give one --world")


def _program_name(script: str) -> str:
    """The script's file name as a `.comm` program name (ASCII letters, digits and `_`)."""
    base = os.path.splitext(os.path.basename(script))[0]
    stem = "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else "_" for ch in base)
    return stem if stem and (stem[0].isalpha() or stem[0] == "_") else "traced_" + stem


def _merge(merged: dict[tuple, Diagnostic], diags: list[Diagnostic]) -> None:
    """One finding per code and place over the world sizes, listing the sizes."""
    for d in diags:
        key = (d.code, d.span.path if d.span else "", d.span.start if d.span else None, d.message.split(":")[0])
        if key in merged:
            prev = merged[key]
            merged[key] = replace(prev, worlds=tuple(sorted(set(prev.worlds) | set(d.worlds))))
        else:
            merged[key] = d


def _say(traces, err, seen: set[str]) -> None:
    """The recorder's notes and warnings, each once (paths shown relative to the working directory)."""
    for t in traces:
        for kind, items in (("warning", t.warnings), ("note", t.notes)):
            for text in items:
                text = text.replace(os.getcwd() + os.sep, "")
                if text not in seen:
                    seen.add(text)
                    style = "bold yellow" if kind == "warning" else "bold blue"
                    err.print(f"[{style}]{kind}[/]: {escape(text)}", highlight=False)


def _script_failed(failed, world: int, err) -> None:
    """The script's own error, once per distinct traceback, with the ranks that hit it."""
    by_text: dict[str, list[int]] = {}
    for t in failed:
        by_text.setdefault(t.error, []).append(t.rank)
    for text, ranks in by_text.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        if text.startswith("commdsl trace could not record"):  # ours, not the script's (record.RecorderBug)
            head = f"recording failed on {who} of {world}"
        else:
            head = f"the script failed while traced as {who} of {world}"
        err.print(f"[bold red]error[/]: {head}:\n{escape(text.rstrip())}", highlight=False)


def _flight(args, out, err) -> int:
    from commdsl.trace.flight import DumpError, check_dumps

    try:
        diags, sources = check_dumps(args.flight_recorder)
    except DumpError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
        return EXIT_FAILURE
    print_diagnostics(diags, sources, args.format, out, err)
    if any(d.severity == "error" for d in diags) and not args.exit_zero:
        return EXIT_FINDINGS
    if not diags and args.format in ("text", "concise"):
        err.print(f"All checks passed ({args.flight_recorder}: the ranks' recorded collectives agree).")
    return EXIT_OK
