"""`commdsl bench`: nccl-tests-style sweeps of a program, or of the built-in collectives, on real ranks.

    commdsl bench --collective all_reduce --nproc 4 --sizes 1K:16M
    commdsl bench programs/ring_allreduce.comm --nproc 4 --compare builtin --plot ring.png

The table goes to stdout, `#` lines included, as nccl-tests prints it; the progress bar and errors
go to stderr. Exit 0 when everything ran, 1 for findings (the checks refuse a size, a rank failed or
hung, `--check` found wrong elements, the average busbw is below `--min-busbw`), 2 when the sweep
could not be run at all.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile

from rich.markup import escape

from commdsl import __version__
from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    UsageError,
    add_launch_flags,
    add_output_flags,
    add_program_flags,
    consoles,
    env_default,
    integer,
    load_files,
    parse_sets,
    print_diagnostics,
    refuse_unused_variant_flags,
)
from commdsl.files import FileError, check_output, write_atomic

_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")


def add_parser(sub):
    from commdsl.bench.builtin import COLLECTIVES

    p = sub.add_parser(
        "bench",
        help="time a program or the built-in collectives across sizes, nccl-tests style",
        description="Sweep a program's size param (or a built-in collective) over message sizes on real "
        "torch.distributed ranks and print nccl-tests' table: size, count, type, redop, root, time, "
        "algbw, busbw, #wrong.",
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="the program to sweep (or give --collective)")
    p.add_argument(
        "--collective",
        action="append",
        metavar="NAME",
        help=f"sweep a built-in instead of a program: {', '.join(COLLECTIVES)} or all (repeatable, or comma-separated)",
    )
    add_launch_flags(p, "ranks to start on this node (required)")
    p.add_argument(
        "--sizes",
        default=env_default("sizes", "1K:16M"),
        metavar="MIN:MAX[:FACTOR]",
        help="bytes of the measured buffer, MIN, MIN·FACTOR, … up to MAX; K, M, G are powers of 1024 "
        "(default: 1K:16M, FACTOR 2)",
    )
    # nccl-tests' short flags, with its meanings: -b/-e/-f make --sizes, -n -w -c -d -r as below
    p.add_argument("-b", "--minbytes", metavar="SIZE", help="nccl-tests' -b: the smallest size (with -e, -f)")
    p.add_argument("-e", "--maxbytes", metavar="SIZE", help="nccl-tests' -e: the largest size")
    p.add_argument("-f", "--stepfactor", metavar="F", help="nccl-tests' -f: the factor between sizes (default: 2)")
    p.add_argument(
        "-n",
        "--iters",
        type=integer("--iters", 1),
        default=env_default("iters", 20),
        help="timed iterations per size (default: 20)",
    )
    p.add_argument(
        "-w",
        "--warmup",
        "--warmup_iters",
        dest="warmup",
        type=integer("--warmup", 0),
        default=env_default("warmup", 5),
        help="untimed iterations before them (default: 5)",
    )
    p.add_argument(
        "-d",
        "--dtype",
        "--datatype",
        dest="dtype",
        type=_dtype,
        help="element type, also by nccl-tests' names (float, half, double, int, bfloat16, ...); built-ins: default "
        "float32; a program: replaces the dtype of every tensor declared like the measured one",
    )
    p.add_argument("--op", choices=_OPS, help="reduce op of the built-ins that reduce (default: sum)")
    p.add_argument(
        "-r",
        "--root",
        type=integer("--root", 0),
        help="root of broadcast, reduce, gather, scatter (default: 0)",
    )
    p.add_argument("--param", metavar="NAME", help="the program's integer param that sets the size (default: n)")
    p.add_argument(
        "-c",
        "--check",
        nargs="?",
        const=True,
        default=False,
        type=_flag("--check"),
        help="compare every rank's tensors with the simulator after every iteration (#wrong); "
        "the initial tensors are restored before each one",
    )
    p.add_argument(
        "--compare",
        metavar="builtin|FILE",
        help="time a second variant at the same sizes and show both with their busbw ratio: "
        "`builtin` (the collective the program declares or its expects prove) or another program",
    )
    p.add_argument("--json", metavar="FILE", help="write the rows and averages as JSON")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this machine's α and β (a send/recv ping-pong between ranks 0 and 1 over --sizes, fitted) "
        "and write a topology file for `commdsl predict --topology` (-o FILE)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="with --calibrate: the topology file to write")
    p.add_argument(
        "--runs",
        type=integer("--runs", 1),
        metavar="K",
        help="with --calibrate: measure everything K times and keep each number's median (default: 3; "
        "one run's numbers move more than a program's times do)",
    )
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    p.add_argument("--plot", metavar="FILE", help="plot busbw against size, a line per variant (PNG)")
    p.add_argument(
        "--min-busbw",
        type=float,
        metavar="GBPS",
        help="exit 1 when a measured variant's average busbw is below GBPS GB/s (a CI gate)",
    )
    add_program_flags(p)
    add_output_flags(p)
    p.set_defaults(handler=run)


def _collectives(args) -> list[str]:
    """The built-ins `--collective` names (repeated or comma-separated, `all` for every one), in order, once each.
    `all` on one rank leaves out `sendrecv`, which needs two (`--nproc 1 --backend nccl` is one GPU's whole bench)."""
    from commdsl.bench.builtin import COLLECTIVES

    one_rank = args.nproc is not None and int(args.nproc) < 2
    kinds: list[str] = []
    for item in args.collective or []:
        for name in filter(None, (s.strip() for s in item.split(","))):
            if name == "all":
                kinds.extend(k for k in COLLECTIVES if k not in kinds and not (one_rank and k == "sendrecv"))
            elif name not in COLLECTIVES:
                raise UsageError(f"--collective {name}: not one of {', '.join(COLLECTIVES)}, all")
            elif name not in kinds:
                kinds.append(name)
    return kinds


def _check_outputs(args) -> None:
    """`--json`, `--csv` and `--plot`: each a writable target that is not an input, no two the same file."""
    outputs = [
        (flag, path) for flag, path in (("--json", args.json), ("--csv", args.csv), ("--plot", args.plot)) if path
    ]
    for flag, path in outputs:
        try:
            check_output(path, [p for p in (args.file, args.compare) if p and p != "builtin"], flag)
        except FileError as e:
            raise UsageError(str(e)) from None
    if len({os.path.abspath(p) for _, p in outputs}) < len(outputs):
        raise UsageError("--json, --csv and --plot must name different files")
    if args.plot and os.path.splitext(args.plot)[1].lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"--plot {args.plot}: name a .png, .svg or .pdf file (the format follows the name)")


NCCL_TESTS_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "char": "int8"}
"""nccl-tests' names (`-d float`) for the dtypes whose name differs from commdsl's."""


def _dtype(text: str) -> str:
    return NCCL_TESTS_DTYPES.get(text, text)


def _flag(flag: str):
    """`-c` alone, or with nccl-tests' 0/1 (`-c 1`)."""

    def convert(text: str) -> bool:
        if text not in ("0", "1"):
            raise argparse.ArgumentTypeError(f"{flag} takes 0 or 1 (or nothing), got {text!r}")
        return text == "1"

    convert.__name__ = "0 or 1"
    return convert


def _sweep_text(args) -> str:
    """--sizes, or the sweep nccl-tests' -b/-e/-f describe, which replace it (a missing -b is --sizes' MIN, a
    missing -e is -b: one size)."""
    if args.minbytes is None and args.maxbytes is None and args.stepfactor is None:
        return str(args.sizes)
    lo = args.minbytes or str(args.sizes).split(":")[0]
    return f"{lo}:{args.maxbytes or lo}:{args.stepfactor or 2}"


def _check_measure_flags(args, kinds: list[str]) -> None:
    """The flags that shape the measurement: counts, dtype, op, comparison, timeout, floor."""
    from commdsl.dtypes import DTYPES

    if args.iters < 1:
        raise UsageError(f"--iters must be at least 1, got {args.iters}")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {args.warmup}")
    if args.dtype is not None and args.dtype not in DTYPES and args.dtype != "all":
        raise UsageError(f"--dtype {args.dtype}: not one of {', '.join(DTYPES)}, or all")
    if args.dtype == "all" and args.compare is not None:
        raise UsageError("--dtype all sweeps every dtype side by side already: drop --compare")
    if args.compare == "builtin" and args.file is None:
        raise UsageError("--compare builtin compares a program with the built-in it stands for: give a FILE")
    if args.compare not in (None, "builtin") and len(kinds) > 1:
        raise UsageError("--compare FILE compares with one variant: give one --collective, or a FILE")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout:g}")
    if args.min_busbw is not None and args.min_busbw < 0:
        raise UsageError(f"--min-busbw must be 0 or more, got {args.min_busbw:g}")


def config_from_args(args):
    from commdsl.bench.config import BenchConfig
    from commdsl.bench.sizes import SizeError, parse_sweep

    kinds = _collectives(args)
    if (args.file is None) == (not kinds):
        raise UsageError(
            "give either a program FILE or --collective NAME, not both"
            if kinds
            else "give a program FILE, or --collective NAME for a built-in"
        )
    if args.nproc is None:
        raise UsageError("--nproc N is required: the ranks to start on this node")
    nproc = int(args.nproc)
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    if "sendrecv" in kinds and nproc < 2:
        raise UsageError("--collective sendrecv pings rank 0 to rank 1: it needs --nproc 2 or more")
    program = args.file is not None or args.compare not in (None, "builtin")  # a FILE, or --compare FILE
    refuse_unused_variant_flags(args, built_in=bool(kinds), program=program)
    if args.root is not None and not args.root < nproc:
        raise UsageError(f"--root {args.root} is not a rank of --nproc {nproc}")
    try:
        sizes = parse_sweep(_sweep_text(args))
    except SizeError as e:
        raise UsageError(str(e)) from None
    _check_measure_flags(args, kinds)
    _check_outputs(args)
    return BenchConfig(
        path=args.file,
        collectives=tuple(kinds),
        nproc=nproc,
        sizes=tuple(sizes),
        iters=args.iters,
        warmup=args.warmup,
        dtype=args.dtype,
        op=args.op or "sum",
        root=args.root or 0,
        param=args.param or "n",
        params=parse_sets(args.set),
        check=args.check,
        compare=args.compare,
        backend=args.backend,
        timeout=args.timeout,
        json=args.json,
        csv=args.csv,
        plot=args.plot,
        min_busbw=args.min_busbw,
        verbose=args.verbose,
    )


def run(args) -> int:
    if args.calibrate:
        return calibrate(args)
    if args.output:
        raise UsageError("-o FILE goes with --calibrate (the topology file); the rows go to --json, --csv")
    if args.runs is not None:
        raise UsageError("--runs goes with --calibrate (how many times it measures); a bench repeats by --iters")
    cfg = config_from_args(args)
    out, err = consoles(args)
    paths = [p for p in (cfg.path, None if cfg.compare in (None, "builtin") else cfg.compare) if p]
    loaded = load_files(paths, err)
    if loaded.io_failed:
        return EXIT_FAILURE
    if loaded.diagnostics:
        print_diagnostics(loaded.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    from commdsl.bench.identify import BenchError
    from commdsl.bench.plan import Refused
    from commdsl.runtime.envinfo import EnvError, choose_backend

    try:
        backend = choose_backend(cfg.backend, cfg.nproc)
    except EnvError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    with tempfile.TemporaryDirectory(prefix="commdsl-bench-") as out_dir:
        try:
            plan, notes, groups = _plan(cfg, loaded.programs, backend, out_dir)
        except BenchError as e:
            err.print(f"[bold red]error[/]: {escape(str(e))}")
            return EXIT_FAILURE
        except Refused as e:
            sources = {**loaded.sources, e.variant.program.path: e.variant.program.source}
            print_diagnostics(e.diagnostics, sources, args.format, out, err)
            err.print(escape(e.summary("bench", cfg.nproc)))
            return EXIT_FINDINGS
        for note in notes:
            err.print(f"note: {escape(note)}")
        return _measure_and_show(cfg, plan, groups, out, err)


def _plan(cfg, programs, backend: str, out_dir: str):
    """The Plan, the notes on skipped sizes, and the tables: the variants printed side by side (a collective's
    out-of-place and in-place forms, or a variant and its --compare reference), as indices into the Plan's."""
    from commdsl.bench.builtin import builtin, has_in_place
    from commdsl.bench.identify import BenchError
    from commdsl.bench.plan import build, builtin_variant, measured_dtype, program_variant

    notes: list[str] = []
    if cfg.dtype == "all":
        tables = _every_dtype(cfg, programs, backend, notes)
    elif cfg.path is not None:
        tables = [[program_variant(programs[0], cfg.nproc, cfg.param, cfg.params, cfg.dtype)]]
    elif cfg.compare is None:
        tables = [_forms(k, cfg.dtype or "float32", cfg, k) for k in cfg.collectives]
    if cfg.compare == "builtin":
        mine = tables[0][0]
        m = mine.measure
        if m.kind is None:
            raise BenchError(
                f"--compare builtin: {cfg.path} declares no collective (a `# bench: KIND TENSOR` line) "
                "and the expects it ends with prove none"
            )
        # the built-in in the program's form where it has both
        twin = builtin(
            m.kind, measured_dtype(mine), m.redop or "sum", m.root or 0, bool(mine.in_place and has_in_place(m.kind))
        )
        tables[0].append(builtin_variant(twin, baseline=True, label=f"{m.kind} (built-in)"))
    elif cfg.compare is not None:
        other = program_variant(programs[-1], cfg.nproc, cfg.param, cfg.params, cfg.dtype, baseline=True)
        if cfg.path is None:  # one built-in, in the other program's form where it has both
            kind = cfg.collectives[0]
            twin = builtin(kind, cfg.dtype or "float32", cfg.op, cfg.root, bool(other.in_place and has_in_place(kind)))
            tables = [[builtin_variant(twin, label=kind)]]
        if other.label == tables[0][0].label:
            other = dataclasses.replace(other, label=f"{other.label} ({cfg.compare})")
        tables[0].append(other)
    variants = [v for t in tables for v in t]
    starts = [sum(len(t) for t in tables[:i]) for i in range(len(tables))]
    groups = [list(range(start, start + len(t))) for start, t in zip(starts, tables)]
    plan = build(
        variants,
        list(cfg.sizes),
        cfg.nproc,
        backend,
        cfg.iters,
        cfg.warmup,
        cfg.check,
        out_dir,
        notes,
        interleave=cfg.compare is not None,
    )
    return plan, notes, groups


def _forms(kind: str, dtype: str, cfg, label: str) -> list:
    """A built-in's variants: its usual form, then its in-place form where torch takes both (nccl-tests times
    out-of-place, then in-place)."""
    from commdsl.bench.builtin import builtin, has_in_place
    from commdsl.bench.plan import builtin_variant

    variants = [builtin_variant(builtin(kind, dtype, cfg.op, cfg.root), label=label)]
    if has_in_place(kind):
        variants.append(builtin_variant(builtin(kind, dtype, cfg.op, cfg.root, True), label=f"{label} in-place"))
    return variants


def _write_outputs(cfg, plan, table, sums) -> None:
    """`--json`, `--csv` and `--plot`, each written whole or not at all (FileError says why)."""
    from commdsl.bench import output
    from commdsl.predict.calibrate import host_cores

    meta = {
        "world": plan.world,
        "backend": plan.backend,
        "iters": plan.iters,
        "warmup": plan.warmup,
        "check": plan.check,
        "complete": len(table) == len(plan.cases),
        "host_cores": host_cores(),
    }
    inputs = [p for p in (cfg.path, cfg.compare) if p and p != "builtin"]
    if cfg.json:
        output.write_json(cfg.json, output.as_dict(meta, table, sums), inputs)
    if cfg.csv:
        output.write_csv(cfg.csv, table, inputs)
    if cfg.plot and table:
        output.plot(cfg.plot, table, sums, f"bus bandwidth, {plan.world} ranks, {plan.backend}", inputs)


def _every_dtype(cfg, programs, backend: str, notes: list[str]) -> list[list]:
    """`--dtype all`: a table per dtype (and per collective, with its forms), those the backend refuses for the
    reduce op left out with a note, as nccl-tests' `-d all` runs every type the library has."""
    from commdsl.bench.plan import program_variant
    from commdsl.collectives import REDUCING
    from commdsl.dtypes import DTYPES
    from commdsl.rules.backend import reduction

    tables = []
    for dtype in DTYPES:
        if cfg.path is not None:
            v = program_variant(programs[0], cfg.nproc, cfg.param, cfg.params, dtype)
            tables.append([dataclasses.replace(v, label=f"{v.label} {dtype}")])
            continue
        for kind in cfg.collectives:
            if kind in REDUCING and reduction(backend, cfg.op, dtype).refused:
                notes.append(f"--dtype all: {kind} op {cfg.op} on {dtype} left out ({backend} refuses it)")
                continue
            tables.append(_forms(kind, dtype, cfg, f"{kind} {dtype}"))
    return tables


def _measure_and_show(cfg, plan, groups: list[list[int]], out, err) -> int:
    from commdsl.bench.launch import run_plan
    from commdsl.bench.results import rows, summaries
    from commdsl.runtime.launch import LaunchError, fork_is_safe

    for line in _preamble(cfg, plan, "fork" if fork_is_safe() else "spawn", summaries(plan, [])):
        out.print(line, markup=False)
    stream = _Stream(plan, groups, out, err)
    try:
        measured = run_plan(plan, cfg.timeout, cfg.verbose, stream.update)
    except LaunchError as e:
        stream.stop()
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    stream.stop()
    table = rows(plan, measured.results)
    sums = summaries(plan, table)
    stream.finish(table, sums)
    code = EXIT_OK
    if measured.hang:
        _show_hang(out, measured.hang, cfg.timeout)
        code = EXIT_FINDINGS
    elif measured.failures:
        _show_failures(out, measured.failures, measured.stderr)
        code = EXIT_FINDINGS
    elif measured.interrupted:
        err.print("interrupted: every worker was stopped")
        return 130
    wrong = sum(r.wrong or 0 for r in table)
    if wrong:
        out.print(
            f"[bold red]error[/]: {wrong} element{'s' * (wrong != 1)} differed from the simulator "
            "(#wrong counts them over every rank and iteration)"
        )
        code = EXIT_FINDINGS
    try:
        _write_outputs(cfg, plan, table, sums)
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    if cfg.min_busbw is not None and code == EXIT_OK:
        low = [s for s in sums if not s.baseline and s.avg_busbw < cfg.min_busbw]
        for s in low:
            out.print(
                f"[bold red]error[/]: {escape(s.label)}: average bus bandwidth {s.avg_busbw:.3f} GB/s is below "
                f"--min-busbw {cfg.min_busbw:g}"
            )
        if low:
            code = EXIT_FINDINGS
    err.print(
        f"bench: {len(table)} of {len(plan.cases)} cases (variant × size) measured on {plan.world} rank"
        f"{'s' * (plan.world != 1)} ({plan.backend}, {measured.start_method}) in {measured.wall_s:.1f} s"
    )
    return code


def _preamble(cfg, plan, start_method: str, sums) -> list[str]:
    import platform

    import torch

    lines = [
        f"# commdsl {__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
        f"host {platform.node()}, {_devices(plan)}",
        f"# commdsl bench: {plan.world} rank{'s' * (plan.world != 1)}, {plan.backend} ({start_method}); "
        f"{plan.iters} iteration{'s' * (plan.iters != 1)} after {plan.warmup} warm-up; "
        "time = the slowest rank's mean per iteration"
        + ("; every iteration checked against the simulator" if plan.check else ""),
    ]
    for v, s in zip(plan.variants, sums):
        m = v.measure
        if m.kind is None:
            what = (
                f"sized by `{m.tensor}` (its largest tensor){_form(v)}; no collective declared "
                "(`# bench: KIND TENSOR`) or proved by its expects: busbw = algbw"
            )
        else:
            extra = "".join([f" op {m.redop}" if m.redop else "", f" root {m.root}" if m.root is not None else ""])
            what = f"{m.kind} of `{m.tensor}`{extra}, {m.how}{_form(v)}: busbw = algbw × {s.factor:.3g}"
        source = "" if m.how == "built-in" else f" ({v.program.path}, sweeping `{v.param}`)"
        lines.append(f"# {s.label}{source}: {what}")
    lines.append("#")
    return lines


def _form(v) -> str:
    """The variant's form for its header line: a built-in's only form is said to be its only one."""
    from commdsl.bench.builtin import has_in_place
    from commdsl.bench.output import form

    if v.in_place is None:
        return ""
    only = v.measure.how == "built-in" and not has_in_place(v.measure.kind)
    return f", {form(v.in_place)}{' only' * only}"


def _show_hang(out, rows, timeout: float):
    stuck = ", ".join(f"rank {r['rank']}" for r in rows if r["stuck"] and not r.get("stopped"))
    stopped = ", ".join(f"rank {r['rank']} (pid {r['pid']})" for r in rows if r.get("stopped"))
    if stopped:
        out.print(
            f"[bold red]error[/]: [bold]hang: {stopped} stopped by a signal (SIGSTOP or SIGTSTP) and never "
            f"resumed; {stuck or 'the others'} waited longer than --timeout {timeout:g} s[/]"
        )
    else:
        out.print(
            f"[bold red]error[/]: [bold]hang: {stuck} waited longer than --timeout {timeout:g} s; "
            "every rank was stopped[/]"
        )
    out.print(f"  {'rank':>4}  {'pid':>7}  {'state':<10} {'for':>8}  where", markup=False)
    for r in rows:
        rank = "?" if r["rank"] is None else str(r["rank"])
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f} s"
        mark = "  <- stopped by a signal: the culprit" if r.get("stopped") else "  <- stuck" if r["stuck"] else ""
        out.print(f"  {rank:>4}  {r['pid']:>7}  {r['state']:<10} {secs:>8}  {r['op']}{mark}", markup=False)


def _show_failures(out, failures, stderr: dict):
    culprit = failures[0]
    out.print(f"[bold red]error[/]: [bold]rank {culprit.rank} {escape(culprit.cause)}[/]")
    out.print(f"  --> {escape(culprit.at.text)}  (pid {culprit.pid})")
    for f in failures[1:]:
        out.print(f"  then rank {f.rank} at {escape(f.at.text)} {escape(f.cause)}")
    out.print("  every other worker was stopped")
    tail = stderr.get(culprit.rank, "").strip().splitlines()[-8:]
    if tail:
        out.print(f"  last lines of rank {culprit.rank}'s stderr:")
        for text in tail:
            out.print("    " + text, markup=False)


def _devices(plan) -> str:
    """What the ranks compute on, for the environment line: nccl-tests lists each rank's GPU."""
    if plan.backend != "nccl":
        return "CPU tensors"
    import torch

    names = [torch.cuda.get_device_name(r) for r in range(min(plan.world, torch.cuda.device_count()))]
    return "GPUs " + ", ".join(f"{r}: {n}" for r, n in enumerate(names))


class _Stream:
    """The table as it is measured: each size's row is printed as soon as every rank has reported it (also
    when the output is piped), a group's averages once its rows are all in, and on a terminal a progress bar
    with the time left. `update` runs on the bench's watcher thread (only once every worker has started);
    `finish` after the run prints what is left, a hung or failed run's missing rows blank."""

    def __init__(self, plan, groups: list[list[int]], out, err):
        self.plan, self.groups, self.out, self.err = plan, groups, out, err
        self.sizes = [sorted({c.requested for c in plan.cases if c.variant in g}) for g in groups]
        self.printed = [0] * len(groups)  # per group: how many of its sizes are printed
        self.closed = 0  # groups whose averages are printed
        self.bar = _Progress(out if out.is_terminal else err, len(plan.cases)) if err.is_terminal else None

    def emit(self, line: str) -> None:
        if self.bar is not None and self.bar.live:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            self.out.print(line, markup=False)
            self.out.file.flush()

    def update(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done)
        from commdsl.bench.launch import read_results
        from commdsl.bench.results import rows, summaries

        table = rows(self.plan, read_results(self.plan))
        self.advance(table, summaries(self.plan, table), final=False)

    def advance(self, table, sums, final: bool) -> None:
        from commdsl.bench import output

        for number in range(self.closed, len(self.groups)):
            group, sizes = self.groups[number], self.sizes[number]
            got = output.by_requested(table, group)
            k = self.printed[number]
            while k < len(sizes) and (final or len(got.get(sizes[k], {})) == len(group)):
                if k == 0:
                    if len(self.groups) > 1:
                        self.emit(("#\n" if number else "") + f"# {sums[group[0]].label}")
                    for line in output.header(sums, group):
                        self.emit(line)
                if sizes[k] in got:
                    self.emit(output.row_line(got[sizes[k]], group, output.compared(sums, group)))
                k += 1
            self.printed[number] = k
            if k < len(sizes) or not (final or number < len(self.groups) - 1):
                return  # the next group's rows come after this one's; the last group's averages after the run
            if k:
                for line in output.footer(sums, group):
                    self.emit(line)
            self.closed = number + 1

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def finish(self, table, sums) -> None:
        if table:
            self.advance(table, sums, final=True)


class _Progress:
    """A rich progress bar with the time left (a terminal only: on stdout when that is the terminal too, so the
    rows printed above it stay in order), fed from the bench's watcher thread."""

    def __init__(self, console, total: int):
        self.console, self.total = console, total
        self._bar = None
        self._task = None

    @property
    def live(self) -> bool:
        return self._bar is not None

    def update(self, done: int):
        if self._bar is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("bench"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("cases"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._task = self._bar.add_task("bench", total=self.total)
            self._bar.start()
        self._bar.update(self._task, completed=done)

    def stop(self):
        if self._bar is not None:
            self._bar.stop()


def _worker_threads(nproc: int) -> int | None:
    """The bench's workers' intra-op threads (bench/worker.py): one per rank when the host has several,
    unless OMP_NUM_THREADS says otherwise (None: leave torch's own)."""
    return 1 if nproc > 1 and "OMP_NUM_THREADS" not in os.environ else None


def _pairs_at_once(args, size: int, nproc: int, backend: str):
    """A `calibrate.AtOnce` with 4 ranks or more (else None): `nproc // 2` ping-pong pairs at once
    (`calibrate.PAIRS`) against one pair (`calibrate.PINGPONG`), one way, at the largest size. ValueError
    when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    if nproc < 4:
        return None
    alone = ("<calibrate>", cal.PINGPONG, {})
    together = ("<calibrate-pairs>", cal.PAIRS, {"k": nproc})
    return _at_once(args, size, nproc, backend, nproc // 2, alone, together, per_time=0.5)


def _streams(args, size: int, nproc: int, backend: str, cores: int):
    """A `calibrate.Streams` with 4 ranks or more and more ranks than the host's `cores` (else None): one pair
    sending one way on and on (`calibrate.PAIRS` with `back = 0`), and `nproc // 2` such pairs at once, in turn,
    at the largest size. ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    if nproc < 4 or nproc <= cores:
        return None
    cases = {
        "alone": ("<calibrate-streams>", cal.PAIRS, {"k": 2, "back": 0}),
        "together": ("<calibrate-streams>", cal.PAIRS, {"k": nproc, "back": 0}),
    }
    mean = _in_turn(args, size, nproc, backend, cases)
    return None if mean is None else cal.Streams(size, nproc // 2, mean["alone"], mean["together"])


def _adds_at_once(args, nproc: int, backend: str, size: int = 64 << 20):
    """A `calibrate.AtOnce`: every rank's add (`calibrate.ADDS`) against rank 0's alone, on `size`-byte
    tensors, timed by the bench as a program's local op is. ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    alone = ("<calibrate-adds>", cal.ADDS, {"k": 1})
    together = ("<calibrate-adds>", cal.ADDS, {"k": nproc})
    return _at_once(args, size, nproc, backend, nproc, alone, together)


def _collective_steps(args, nproc: int, backend: str, beta: float):
    """A `calibrate.Steps`: the built-in all_reduce of every rank (`calibrate.COLLECTIVE`), each call's time.
    ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    points = _latency_points(args, cal.COLLECTIVE, "<calibrate-collective>", nproc, backend, cal.slowest)
    if not points:
        raise ValueError("the built-in all_reduce timed nothing")
    return cal.Steps(nproc, beta, points)


def _lone_call(args, nproc: int, backend: str, cores: int):
    """A `calibrate.Lone`: every rank's built-in all_reduce on a group of its own (`calibrate.LONE`, its line's
    time), at as many ranks as the host has cores (at most `nproc`): the call's own cost, not a wait for a
    core. ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    world = min(nproc, cores)  # both at least 1: --calibrate needs --nproc 2, `host_cores` counts one or more
    points = _latency_points(args, cal.LONE, "<calibrate-lone>", world, backend, cal.lone_call)
    if not points:
        raise ValueError("the all_reduce on a group of one timed nothing")
    return cal.Lone(world, points)


def _crowded(args, nproc: int, backend: str, beta: float, cores: int):
    """A `calibrate.Crowded` when `nproc` ranks are more than the host's `cores` (else None): every rank's isend
    to the next and irecv from the last at once (`calibrate.OVERLAP` without its adds), each launch's time of
    the slowest rank. ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    if nproc <= cores:
        return None
    points = _latency_points(args, cal.OVERLAP, "<calibrate-ring>", nproc, backend, cal.slowest, {"adds": 0})
    if not points:
        raise ValueError("the ring of messages timed nothing")
    return cal.Crowded(cores, nproc, beta, points)


def _latency_points(
    args, text: str, name: str, nproc: int, backend: str, seconds, params: dict | None = None
) -> tuple[tuple[int, float], ...]:
    """(bytes, seconds) of one of the calibration's programs (with `params`) at `calibrate.LATENCY_SIZES`, benched
    `calibrate.AT_ONCE_ROUNDS` times (one launch's waits differ from the next's more than its iterations do);
    `seconds` reads a launch's times (`calibrate.slowest`, `calibrate.one_way`)."""
    from commdsl.bench.results import rows
    from commdsl.predict import calibrate as cal

    points: list[tuple[int, float]] = []
    for _ in range(cal.AT_ONCE_ROUNDS):
        plan, results = _bench_calibration(args, text, name, list(cal.LATENCY_SIZES), nproc, backend, params or {})
        points += zip((r.size for r in rows(plan, results)), seconds(plan, results))
    return tuple(points)


def _turns(args, nproc: int, backend: str):
    """A `calibrate.Turns`: every rank's isend and irecv (`calibrate.OVERLAP`), its adds, and both at once, at
    `calibrate.OVERLAP_BYTES` (`_in_turn`); None when a run timed nothing. ValueError when a rank fails or
    hangs."""
    from commdsl.predict import calibrate as cal

    params = {"messages": {"adds": 0}, "adds": {"messages": 0}, "together": {}}
    cases = {key: ("<calibrate-overlap>", cal.OVERLAP, p) for key, p in params.items()}
    mean = _in_turn(args, cal.OVERLAP_BYTES, nproc, backend, cases)
    return None if mean is None else cal.Turns(cal.OVERLAP_BYTES, mean["messages"], mean["adds"], mean["together"])


def _swap(args, nproc: int, backend: str):
    """A `calibrate.Swap` when the calibration runs more than 2 ranks (at 2, `_turns` times a swap): 2 ranks'
    isend and irecv to each other (`calibrate.OVERLAP` without its adds) at `calibrate.OVERLAP_BYTES`; None
    when a run timed nothing. ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    if nproc <= 2:
        return None
    cases = {"swap": ("<calibrate-swap>", cal.OVERLAP, {"adds": 0})}
    mean = _in_turn(args, cal.OVERLAP_BYTES, 2, backend, cases)
    return None if mean is None else cal.Swap(cal.OVERLAP_BYTES, mean["swap"])


def _at_once(args, size, nproc, backend, count, alone, together, per_time=1.0):
    """`count` things at once against one alone (`_in_turn`), times `per_time` (a round trip's half for one
    way). None when a run timed nothing."""
    from commdsl.predict import calibrate as cal

    mean = _in_turn(args, size, nproc, backend, {"alone": alone, "together": together})
    if mean is None:
        return None
    return cal.AtOnce(size, count, mean["alone"] * per_time, mean["together"] * per_time)


def _in_turn(args, size: int, nproc: int, backend: str, cases: dict[str, tuple[str, str, dict]]):
    """Each case (name, program text, params) benched at `size` bytes `calibrate.AT_ONCE_ROUNDS` times, the
    cases in turn each round (a launch's placement of ranks on cores varies more than its iterations do, and a
    slow spell of the host then weighs on every case): per case the mean of its rounds' times, or None when a
    run timed nothing."""
    from commdsl.predict import calibrate as cal

    times: dict[str, list[float]] = {key: [] for key in cases}
    for _ in range(cal.AT_ONCE_ROUNDS):
        for key, (name, text, params) in cases.items():
            got = _timed_once(args, text, name, size, nproc, backend, params)
            if got is None:
                return None
            times[key].append(got)
    return {key: sum(t) / len(t) for key, t in times.items()}


def _timed_once(args, text: str, name: str, size: int, nproc: int, backend: str, params: dict) -> float | None:
    """Seconds of one of the calibration's programs at `size` bytes (`calibrate.slowest`: the mean of the
    slowest rank's time); ValueError when a rank fails or hangs."""
    from commdsl.predict import calibrate as cal

    plan, results = _bench_calibration(args, text, name, [size], nproc, backend, params)
    got = cal.slowest(plan, results)
    return got[0] if got else None


def _bench_calibration(args, text: str, name: str, sizes: list[int], nproc: int, backend: str, params: dict):
    """One of the calibration's programs (`text`, named `name`) benched over `sizes` as every `commdsl bench`
    is (the same workers, hang guard and timeout): its plan and the per-rank results. ValueError when it
    cannot be benched or a rank fails or hangs."""
    from commdsl.bench.identify import BenchError
    from commdsl.bench.launch import run_plan
    from commdsl.bench.plan import Refused, build, program_variant
    from commdsl.resolve import load
    from commdsl.runtime.launch import LaunchError
    from commdsl.source import SourceFile

    program = load(SourceFile(name, text))
    with tempfile.TemporaryDirectory(prefix="commdsl-calibrate-") as out_dir:
        try:
            variant = program_variant(program, nproc, "n", params, None)
            plan = build([variant], sizes, nproc, backend, args.iters, args.warmup, False, out_dir, [])
            measured = run_plan(plan, args.timeout, args.verbose)
        except (BenchError, Refused, LaunchError) as e:
            raise ValueError(str(e)) from None
    if measured.hang or measured.failures or measured.interrupted:
        raise ValueError(f"a rank hung or failed in {name[1:-1]} (rerun with -v)")
    return plan, measured.results


def calibrate(args) -> int:
    """`--calibrate`: bench the ping-pong program, fit α and β, time local ops, a built-in collective's step and
    whether a rank's messages and adds overlap, `--runs` times (`_measure`), and write the topology file of
    their medians."""
    from commdsl.bench.sizes import parse_sweep
    from commdsl.predict import calibrate as cal
    from commdsl.runtime.envinfo import EnvError, choose_backend

    if args.file or args.collective or args.compare:
        raise UsageError("--calibrate times its own ping-pong: give no FILE, --collective or --compare")
    if not args.output:
        raise UsageError("--calibrate needs -o FILE: the topology file to write")
    if args.nproc is None or int(args.nproc) < 2:
        raise UsageError("--calibrate needs --nproc 2 or more (the ping-pong runs between ranks 0 and 1)")
    try:
        check_output(args.output, [], "-o")
        sizes = parse_sweep(_sweep_text(args))
    except FileError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    if len(sizes) < 2:
        raise UsageError("--calibrate fits a line: give --sizes with at least two sizes (MIN:MAX)")
    out, err = consoles(args)
    nproc = int(args.nproc)
    try:
        backend = choose_backend(args.backend, nproc)
    except EnvError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    cores = cal.host_cores()
    busy = cal.busy_host(cores)
    if busy is not None:
        err.print(f"[bold yellow]warning[/]: {escape(busy)}")
    count = cal.RUNS if args.runs is None else args.runs
    runs = []
    try:
        for number in range(count):
            if count > 1:
                err.print(f"commdsl bench --calibrate: run {number + 1} of {count}", markup=False)
            runs.append(_measure(args, sizes, nproc, backend, cores))
    except ValueError as e:
        err.print(f"[bold red]error[/]: calibration failed: {escape(str(e))}")
        return EXIT_FAILURE
    m = cal.Measured.median(runs)
    runs_flag = "" if args.runs is None else f" --runs {count}"
    command = f"commdsl bench --calibrate --nproc {nproc} --sizes {args.sizes}{runs_flag} -o {args.output}"
    text = cal.topology_text(m, nproc, backend, command, cal.send_buffer_bytes(), cores, runs)
    try:
        write_atomic(args.output, text)
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    for line in text.splitlines():
        if line.startswith("#"):
            out.print(line, markup=False)
    steps = "" if m.steps is None else f", a collective's step {m.steps.alpha * 1e6:.2f} us"
    out.print(
        f"# alpha {m.fit.alpha * 1e6:.2f} us"
        + ("" if m.crowded is None else f" ({m.crowded.alpha * 1e6:.2f} us crowded)")
        + f"{steps}, beta {m.fit.beta / 1e9:.3f} GB/s, memory {m.memory_bps / 1e9:.2f} GB/s, fresh pages "
        f"{'not measurable' if m.page_bps is None else f'{m.page_bps / 1e9:.2f} GB/s'}: written to {args.output}",
        markup=False,
    )
    return EXIT_OK


def _measure(args, sizes: list[int], nproc: int, backend: str, cores: int):
    """One run of every measurement `--calibrate` makes: a `calibrate.Measured`. ValueError when one fails."""
    from commdsl.bench.results import rows
    from commdsl.predict import calibrate as cal

    plan, results = _bench_calibration(args, cal.PINGPONG, "<calibrate>", sizes, nproc, backend, {})
    table = rows(plan, results)
    if len(table) < 2:
        raise ValueError("fewer than two sizes were measured")
    f = cal.fit([r.size for r in table], cal.one_way(plan, results))
    return cal.Measured(
        f,
        cal.memory_bandwidth(threads=_worker_threads(nproc)),
        cal.page_fault_bandwidth(threads=_worker_threads(nproc)),
        _pairs_at_once(args, sizes[-1], nproc, backend),
        _adds_at_once(args, nproc, backend),
        _collective_steps(args, nproc, backend, f.beta),
        _turns(args, nproc, backend),
        _crowded(args, nproc, backend, f.beta, cores),
        _lone_call(args, nproc, backend, cores),
        _swap(args, nproc, backend),
        _streams(args, sizes[-1], nproc, backend, cores),
    )
