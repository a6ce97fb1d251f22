"""`commdsl compile FILE --world N --emit python [-o out.py]`: the torch.distributed script a program stands for.

The program is checked at that world size first, as `run` does, so the script is not a hang waiting
to happen (`--no-check` compiles anyway, to read what a bad program would do). No torch is imported.
"""

from __future__ import annotations

import os

from rich.markup import escape

from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    UsageError,
    add_output_flags,
    add_program_flags,
    consoles,
    integer,
    load_one,
    parse_sets,
    print_diagnostics,
)
from commdsl.diagnostics import CommdslError
from commdsl.files import FileError, check_output, write_atomic


def add_parser(sub):
    p = sub.add_parser(
        "compile",
        help="write the standalone torch.distributed script a program stands for",
        description="Expand the program at one world size and write it as a standalone, readable "
        "torch.distributed script that torchrun runs and that checks the expects itself.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--world", type=integer("--world", 1), required=True, help="number of ranks the script is for")
    p.add_argument("--emit", choices=("python",), default="python", help="what to write (default: python)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="backend of the script (default: the program's first `backend`, else gloo)",
    )
    p.add_argument("--no-check", dest="check", action="store_false", help="compile even when the checks find errors")
    add_program_flags(p)
    add_output_flags(p)
    p.set_defaults(handler=run)


def run(args) -> int:
    from commdsl.emit.python import ScriptTooLarge, check_script_size, emit_python
    from commdsl.expand import expand
    from commdsl.runtime.prepare import prepare

    if args.world < 1:
        raise UsageError(f"--world must be at least 1, got {args.world}")
    out, err = consoles(args)
    if args.output:
        try:
            check_output(args.output, [args.file], "-o")
        except FileError as e:
            raise UsageError(str(e)) from None
    loaded = load_one(args.file, args.format, out, err)
    if isinstance(loaded, int):
        return loaded
    program, source = loaded.programs[0], loaded.sources[args.file]
    backend = args.backend or program.backends[0]
    params = parse_sets(args.set)
    try:
        schedule = expand(program, args.world, params)
        check_script_size(schedule)  # before the check: a script too large to use is not worth checking
        prepared = prepare(program, args.world, params, backend, schedule=schedule)
    except CommdslError as e:
        print_diagnostics(e.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    except ScriptTooLarge as e:
        err.print(
            f"[bold red]error[/]: {escape(str(e))}; compile a smaller --world or --set smaller params", highlight=False
        )
        return EXIT_FAILURE
    if prepared.errors and args.check:
        print_diagnostics(prepared.diagnostics, loaded.sources, args.format, out, err)
        err.print(f"not compiled: the checks found errors at world size {args.world} (--no-check compiles anyway)")
        return EXIT_FINDINGS
    script = os.path.basename(args.output) if args.output else "out.py"
    text = emit_python(prepared.schedule, source, backend, script)
    if not args.output:
        out.file.write(text)
        return EXIT_OK
    try:
        write_atomic(args.output, text, inputs=[args.file], flag="-o")
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    err.print(
        f"wrote {escape(args.output)}: run it with `torchrun --nproc-per-node {args.world} {escape(args.output)}`"
    )
    return EXIT_OK
