"""`commdsl sim FILE --world N`: simulate with data, print each rank's final tensors and every `expect`."""

from __future__ import annotations

from rich.markup import escape

from commdsl.cli.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    add_output_flags,
    add_program_flags,
    consoles,
    integer,
    load_one,
    parse_sets,
    print_diagnostics,
)
from commdsl.diagnostics import CommdslError


def add_parser(sub):
    p = sub.add_parser(
        "sim",
        help="simulate a program with data and print every rank's tensors",
        description="Run the program in the simulator (Gloo semantics) at one world size: print "
        "each rank's prints and final tensors, and the result of every `expect`.",
    )
    p.add_argument("file")
    p.add_argument("--world", type=integer("--world", 1), required=True, help="number of ranks")
    add_program_flags(p)
    add_output_flags(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from commdsl.checker import data_diagnostics, stall_diagnostics
    from commdsl.expand import expand
    from commdsl.limits import memory_problem
    from commdsl.simulate import format_tensor, simulate

    out, err = consoles(args)
    loaded = load_one(args.file, args.format, out, err)
    if isinstance(loaded, int):
        return loaded
    program = loaded.programs[0]
    try:
        schedule = expand(program, args.world, parse_sets(args.set))
    except CommdslError as e:
        print_diagnostics(e.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    too_big = memory_problem(schedule)
    if too_big is not None:
        print_diagnostics([too_big], loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    result = simulate(schedule)
    for rank in range(schedule.world):
        for op, values in result.prints[rank]:
            for text, v, arr in zip(op.texts, op.views, values):
                tensor = format_tensor(arr, schedule.tensors[rank][v.tensor].dtype)
                out.print(f"rank {rank}: {escape(text)} = {escape(tensor)}")
    for rank in range(schedule.world):
        out.print(f"[bold]rank {rank}[/]")
        for name, arr in result.tensors[rank].items():
            dtype = schedule.tensors[rank][name].dtype
            text = format_tensor(arr, dtype)
            undefined = result.undefined[rank][name]
            note = (
                f"  [dim](undefined after reduce: {int(undefined.sum())} of {undefined.size} elements)[/]"
                if undefined.any()
                else ""
            )
            out.print(f"  {name} = {escape(text)}{note}")
    diags = stall_diagnostics(program, result.engine) + data_diagnostics(result)
    passed = sum(e.ok for e in result.expects)
    for line, oks in _expects_by_line(result.expects):
        status = "[green]passed[/]" if all(oks) else "[red]FAILED[/]"
        out.print(f"expect at line {line}: {status} on {sum(oks)} of {len(oks)} rank(s)")
    if diags:
        print_diagnostics(diags, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    if result.expects:
        err.print(f"{passed} of {len(result.expects)} expectations passed at world size {schedule.world}.")
    return EXIT_OK


def _expects_by_line(expects):
    by_line: dict[int, list[bool]] = {}
    for e in expects:
        by_line.setdefault(e.op.span.line, []).append(e.ok)
    return sorted(by_line.items())
