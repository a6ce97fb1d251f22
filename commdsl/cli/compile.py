"""`commdsl compile FILE [--world N] --emit python [-o out.py]`: the torch.distributed script a program stands for.

One script per program, the same text whatever the world size: it reads `rank`, `world` and the params at
run time. The program is checked first, as `check` does, at every size it declares (or at `--world`, the
one size you mean to run), so the script is not a hang waiting to happen (`--no-check` compiles anyway, to
read what a bad program would do). No torch is imported.
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
        description="Write the program as one standalone, readable torch.distributed script that runs at every "
        "world size the program declares, reads its params from the command line, and checks the expects itself.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--world", type=integer("--world", 1), help="check at this world size only (default: every declared size)"
    )
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
    from commdsl.checker import CheckOptions, check_program
    from commdsl.emit.python import emit_python

    out, err = consoles(args)
    if args.output:
        try:
            check_output(args.output, [args.file], "-o")
        except FileError as e:
            raise UsageError(str(e)) from None
    loaded = load_one(args.file, args.format, out, err)
    if isinstance(loaded, int):
        return loaded
    program = loaded.programs[0]
    backend = args.backend or program.backends[0]
    params = parse_sets(args.set)
    worlds = (args.world,) if args.world else tuple(program.world_sizes())
    checked = _sizes(worlds)
    script = os.path.basename(args.output) if args.output else "out.py"
    try:
        if args.check:
            diags = check_program(program, CheckOptions(worlds=worlds, backends=(backend,), params=params))
            if any(d.severity == "error" for d in diags):
                print_diagnostics(diags, loaded.sources, args.format, out, err)
                err.print(f"not compiled: the checks found errors (world sizes {checked}; --no-check compiles anyway)")
                return EXIT_FINDINGS
        text = emit_python(program, backend, script, args.check, params)
    except CommdslError as e:
        print_diagnostics(e.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    if not args.output:
        out.file.write(text)
        return EXIT_OK
    try:
        write_atomic(args.output, text, inputs=[args.file], flag="-o")
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    nproc = next((w for w in worlds if w > 1), worlds[0])
    note = f"checked at world sizes {checked}" if args.check else "not checked"
    err.print(
        f"wrote {escape(args.output)} ({note}): run it with `torchrun --nproc-per-node {nproc} {escape(args.output)}`"
    )
    return EXIT_OK


def _sizes(worlds: tuple[int, ...]) -> str:
    """`2`, `1..16`, or `2, 4, 8`: the sizes as the program's `world` line would write them."""
    if len(worlds) > 2 and list(worlds) == list(range(worlds[0], worlds[-1] + 1)):
        return f"{worlds[0]}..{worlds[-1]}"
    return ", ".join(map(str, worlds))
