"""`commdsl check FILE…` and `commdsl lint FILE…`: every static analysis at every declared world size.

`check` is what must hold before a launch (errors only); `lint` adds the idiom warnings and the
ruff-style selection flags. Exit 0 clean, 1 errors found (warnings alone: 0 unless `--strict`),
2 usage or I/O error; `--exit-zero` turns 1 into 0.
"""

from __future__ import annotations

from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    UsageError,
    add_max_time_flag,
    add_output_flags,
    add_program_flags,
    add_settings_flags,
    discover,
    env_default,
    integer,
    load_files,
    parse_sets,
    print_diagnostics,
    project_settings,
    text_consoles,
)
from commdsl.diagnostics import CommdslError
from commdsl.limits import TIME_LIMIT
from commdsl.resolve import MAX_WORLD, OPEN_WORLD_BOUND


def add_parser(sub):
    for verb, lints, text in (
        ("check", False, "parse, validate, expand and simulate at every declared world size"),
        ("lint", True, "everything `check` does, plus idiom lints, with rule selection"),
    ):
        p = sub.add_parser(verb, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument(
            "files",
            nargs="+",
            metavar="PATH",
            help="a .comm file, or a directory to search for them (honouring .gitignore)",
        )
        p.add_argument(
            "--world",
            type=integer("--world", 1),
            action="append",
            help="check only this world size (repeatable; default: every declared size)",
        )
        p.add_argument(
            "--backend",
            choices=("gloo", "nccl"),
            action="append",
            help="check against this backend (repeatable; default: the program's `backend` line, else gloo)",
        )
        p.add_argument(
            "--max-world",
            type=integer("--max-world", 1, MAX_WORLD),
            default=env_default("max_world", None),
            help=f"bound for open ranges such as `world 2..` (default: {OPEN_WORLD_BOUND})",
        )
        add_max_time_flag(p, "checking a program")
        p.add_argument("--select", help="comma-separated codes or prefixes to report (e.g. P,D401)")
        p.add_argument("--ignore", help="comma-separated codes or prefixes to drop")
        p.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors are found")
        p.add_argument("--strict", action="store_true", help="warnings count as findings (exit 1)")
        p.add_argument("--statistics", action="store_true", help="print a count per code instead of each finding")
        add_program_flags(p)
        add_settings_flags(p)
        add_output_flags(p, default=None)
        p.set_defaults(handler=run, lints=lints)


def _codes(text: str | None) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in text.split(",") if c.strip()) if text else ()


def run(args) -> int:
    from commdsl.checker import CheckOptions, check_program
    from commdsl.rules.registry import CODES, selected

    out, err = text_consoles(args)
    settings = project_settings(args, err)
    if settings is None:
        return EXIT_FAILURE
    args.format = args.format or settings.output_format or "text"
    select = _codes(args.select) if args.select is not None else tuple(settings.select)
    ignore = _codes(args.ignore) if args.ignore is not None else tuple(settings.ignore)
    for c in select + ignore:
        if not any(code.startswith(c) for code in CODES):
            raise UsageError(f"unknown code or prefix {c!r} (see `commdsl explain --list`)")
    params = parse_sets(args.set)
    loaded = load_files(discover(args.files, err, settings.exclude), err)
    diags = list(loaded.diagnostics)
    worlds = args.world or settings.world
    backends = args.backend or settings.backend
    strict = args.strict or settings.strict
    for program in loaded.programs:
        options = CheckOptions(
            worlds=tuple(worlds) if worlds else None,
            backends=tuple(backends) if backends else None,
            params=params,
            lints=args.lints,
            bound=args.max_world or settings.max_world or OPEN_WORLD_BOUND,
            max_seconds=args.max_time or settings.max_time or TIME_LIMIT,
        )
        try:
            diags.extend(check_program(program, options))
        except CommdslError as e:
            diags.extend(e.diagnostics)
    diags = [d for d in diags if selected(d.code, select, ignore)]
    if args.statistics:
        counts: dict[str, int] = {}
        for d in diags:
            counts[d.code] = counts.get(d.code, 0) + 1
        for code, count in sorted(counts.items()):
            out.print(f"{count:>5}  {code}  {CODES[code].name if code in CODES else ''}")
    else:
        print_diagnostics(diags, loaded.sources, args.format, out, err)
    if loaded.io_failed:
        return EXIT_FAILURE
    failing = [d for d in diags if d.severity == "error" or strict]
    if failing and not args.exit_zero:
        return EXIT_FINDINGS
    if not diags and args.format in ("text", "concise") and not args.statistics and loaded.sources:
        err.print(f"All checks passed ({len(loaded.programs)} program{'s' * (len(loaded.programs) != 1)}).")
    return EXIT_OK
