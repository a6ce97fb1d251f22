"""`commdsl graph FILE --world N`: a sequence diagram of the Schedule (Mermaid, DOT, SVG, PNG), and
`commdsl timeline TRACE.json --png OUT`: a per-rank Gantt chart of a Chrome trace.

Exit codes as everywhere: 0 drawn, 1 drawn but the checker found errors (they are in the picture) or
the program does not load, 2 nothing could be drawn (usage, I/O, Graphviz missing).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.markup import escape

from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    UsageError,
    add_program_flags,
    consoles,
    integer,
    load_one,
    parse_sets,
    print_diagnostics,
)
from commdsl.diagnostics import CommdslError
from commdsl.files import MAX_TRACE_BYTES, FileError, check_output, read_bytes, write_atomic

FORMATS = ("mermaid", "dot", "svg", "png")
_SUFFIXES = {".mmd": "mermaid", ".mermaid": "mermaid", ".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}


def add_parser(sub):
    p = sub.add_parser(
        "graph",
        help="draw the schedule as a sequence diagram (Mermaid, DOT, SVG, PNG)",
        description="Draw one expansion of the program as a sequence diagram: a lifeline per rank, "
        "an arrow per message, a band per collective, each row labelled with its source "
        "line; deadlock cycles in red, unmatched ops marked. Beyond --max-ranks lanes the middle ranks share "
        "one folded lane, and runs of alike loop iterations keep their first two; the picture says what it "
        "folded, and never folds a rank or iteration with a finding. SVG and PNG use Graphviz's `dot` where "
        "it is installed, else matplotlib.",
    )
    p.add_argument("file")
    p.add_argument(
        "--world", type=integer("--world", 1), help="number of ranks (default: the program's size, if it declares one)"
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="mermaid (paste into a ```mermaid block), dot, svg or png (default: from the -o suffix, else mermaid)",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    p.add_argument(
        "--max-ranks",
        type=integer("--max-ranks", 3),
        metavar="N",
        help="lanes to draw before folding the middle ranks into one (default: 8, `emit.graph.MAX_RANKS`)",
    )
    p.add_argument("--no-fold", action="store_true", help="draw every rank and every loop iteration")
    p.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="colour diagnostics (default: auto)"
    )
    add_program_flags(p)
    p.set_defaults(handler=run_graph)

    t = sub.add_parser(
        "timeline",
        help="draw a Chrome trace (e.g. from `run --trace`) as a per-rank Gantt chart",
        description="Read Chrome trace event JSON (complete `X` events and `B`/`E` pairs, one track "
        "per pid/tid, named by `process_name`/`thread_name` metadata) and draw a PNG "
        "with one row per track.",
    )
    t.add_argument("trace", metavar="TRACE.json")
    t.add_argument("--png", required=True, metavar="OUT.png", help="where to write the chart")
    t.add_argument(
        "--title", help="chart title (default: the program and world size the trace names, else its file name)"
    )
    t.set_defaults(handler=run_timeline, color="auto")


def _format(args) -> str:
    if args.format:
        return args.format
    if args.output:
        suffix = Path(args.output).suffix.lower()
        if suffix not in _SUFFIXES:
            raise UsageError(f"cannot tell the format from {args.output!r}: give --format ({', '.join(FORMATS)})")
        return _SUFFIXES[suffix]
    return "mermaid"


def run_graph(args) -> int:
    from commdsl.emit.graph import MAX_RANKS, DiagramTooLarge, build
    from commdsl.expand import expand

    out, err = consoles(args)
    fmt = _format(args)
    if args.output:
        try:
            check_output(args.output, [args.file], "-o")
        except FileError as e:
            raise UsageError(str(e)) from None
    if fmt == "png" and not args.output and sys.stdout.isatty():
        raise UsageError("PNG is binary: give -o FILE.png (or redirect stdout)")
    params = parse_sets(args.set)
    loaded = load_one(args.file, "text", out, err)
    if isinstance(loaded, int):
        return loaded
    program = loaded.programs[0]
    world = args.world
    if world is None:
        sizes = program.world_sizes()
        if len(sizes) != 1:
            raise UsageError(f"give --world: {args.file} declares world sizes {program.describe_world()}")
        world = sizes[0]
    try:
        diagram = build(program, expand(program, world, params), None if args.no_fold else args.max_ranks or MAX_RANKS)
    except CommdslError as e:
        print_diagnostics(e.diagnostics, loaded.sources, "text", out, err)
        return EXIT_FINDINGS
    except DiagramTooLarge as e:
        fold = "" if args.no_fold else ", a smaller --max-ranks"
        err.print(f"[bold red]error[/]: {e}; draw a smaller --world{fold} or --set smaller params", highlight=False)
        return EXIT_FAILURE
    data = _drawn(diagram, fmt, args, err)
    if data is None or _write(args.output, data, err, [args.file]) is None:
        return EXIT_FAILURE
    errors = [f for f in diagram.findings if f.severity == "error"]
    if errors:
        codes = ", ".join(sorted({f.code for f in errors}))
        err.print(
            f"the diagram shows {len(errors)} error{'s' * (len(errors) != 1)} ({codes}); "
            f"`commdsl check {escape(args.file)}` explains them",
            highlight=False,
        )
        return EXIT_FINDINGS
    return EXIT_OK


def _drawn(diagram, fmt: str, args, err) -> bytes | None:
    """The diagram in `fmt`, or None when Graphviz fails on it (reported). SVG and PNG are Graphviz's layout
    where its `dot` program is installed, else matplotlib's drawing of the same rows (`diagram_image`)."""
    from commdsl.emit.graph import GraphvizMissing, RenderError, diagram_image, render, to_dot, to_mermaid

    if fmt == "mermaid":
        return to_mermaid(diagram).encode()
    dot = to_dot(diagram)
    if fmt == "dot":
        return dot.encode()
    try:
        return render(dot, fmt)
    except GraphvizMissing as e:
        err.print(
            f"note: drawn with matplotlib, Graphviz's layout needs its `dot` program ({e})",
            highlight=False,
        )
        return diagram_image(diagram, fmt)
    except RenderError as e:
        err.print(f"[bold red]error[/]: {e}", highlight=False)
    return None


def _write(path: str | None, data: bytes, err, inputs) -> str | None:
    """Write to `path` (atomically, never over an input), or stdout when None; return where it went, None on
    failure (reported)."""
    if not path:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return "stdout"
    try:
        write_atomic(path, data, inputs=inputs)
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
        return None
    return path


def run_timeline(args) -> int:
    from commdsl.emit.graph import TraceError, load_trace, timeline_png

    _out, err = consoles(args)
    try:
        check_output(args.png, [args.trace], "--png")
        text = read_bytes(args.trace, MAX_TRACE_BYTES).decode("utf-8")
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
        return EXIT_FAILURE
    except UnicodeDecodeError as e:
        err.print(
            f"[bold red]error[/]: cannot read {escape(args.trace)}: not UTF-8 text (byte {e.start})", highlight=False
        )
        return EXIT_FAILURE
    try:
        trace = load_trace(text)
    except TraceError as e:
        err.print(f"[bold red]error[/]: {escape(args.trace)}: {escape(str(e))}", highlight=False)
        return EXIT_FAILURE
    if trace.skipped:
        err.print(
            f"warning: {trace.skipped} event(s) skipped: a `B` without its `E`, an `E` without its `B`, "
            "or an `X` without `dur`",
            highlight=False,
        )
    png = timeline_png(trace, args.title or trace.title or Path(args.trace).name)
    return EXIT_OK if _write(args.png, png, err, [args.trace]) else EXIT_FAILURE
