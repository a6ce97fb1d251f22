"""`commdsl predict`: the bench's table for a world size and a network you do not have, from the cost model.

    commdsl predict programs/ring_allreduce.comm --world 4096 --topology dgx-h100 --sizes 1K:1G
    commdsl predict --collective all_reduce --world 1024 --topology dgx-h100 --sizes 256M
    commdsl predict programs/ring_allreduce.comm --world 4 --topology host.toml --measured bench.json --plot p.png

Every row is marked "predicted". Exit 0 when the prediction was made, 1 when the topology file or the
program has errors (diagnostics), 2 when it could not be made at all (a usage error, a file that cannot
be read, a program that does not complete at this world size).
"""

from __future__ import annotations

import os

from rich.markup import escape

from commdsl.cli.common import (
    EXIT_FAILURE,
    EXIT_FINDINGS,
    EXIT_OK,
    UsageError,
    add_max_time_flag,
    add_output_flags,
    add_program_flags,
    consoles,
    env_default,
    integer,
    load_files,
    not_utf8,
    parse_sets,
    print_diagnostics,
    refuse_unused_variant_flags,
)
from commdsl.files import FileError, check_output
from commdsl.limits import TIME_LIMIT, Deadline, TimeLimitReached
from commdsl.resolve import MAX_WORLD


def add_parser(sub):
    from commdsl.bench.builtin import COLLECTIVES
    from commdsl.predict.topology import PRESETS

    p = sub.add_parser(
        "predict",
        help="predict a program's time, algbw and busbw at any world size on a described network",
        description="Predict the bench's table (size, time, algbw, busbw) for a program or a built-in "
        "collective at --world N on the network a --topology file (or preset) describes, from the cost "
        "model over the program's expansion (docs/predict.md); with the critical path as source lines "
        "and the busiest links.",
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="the program (or give --collective)")
    p.add_argument(
        "--collective",
        metavar="NAME",
        choices=COLLECTIVES,
        help=f"predict a built-in instead of a program: {', '.join(COLLECTIVES)}",
    )
    p.add_argument(
        "--world",
        type=integer("--world", 1, MAX_WORLD),
        metavar="N",
        help="ranks (default: the one world size the program declares; required with --collective)",
    )
    p.add_argument(
        "--topology",
        required=True,
        metavar="FILE|PRESET",
        help=f"a topology TOML file (`commdsl bench --calibrate -o FILE` writes one) or a preset: {', '.join(PRESETS)}",
    )
    p.add_argument(
        "--sizes",
        default=env_default("sizes", "1K:16M"),
        metavar="MIN:MAX[:FACTOR]",
        help="bytes of the measured buffer, as `commdsl bench --sizes` (default: 1K:16M)",
    )
    p.add_argument("--dtype", help="element type (built-ins: default float32; a program: as `commdsl bench`)")
    p.add_argument(
        "--op",
        choices=("sum", "product", "min", "max", "avg", "band", "bor", "bxor"),
        help="reduce op of the built-ins that reduce (default: sum)",
    )
    p.add_argument("--root", type=integer("--root", 0), help="root of the rooted built-ins (default: 0)")
    p.add_argument("--param", metavar="NAME", help="the integer param that sets the size (default: n)")
    p.add_argument("--json", metavar="FILE", help="write the rows as `commdsl bench --json` does, marked predicted")
    p.add_argument(
        "--measured",
        metavar="BENCH_JSON",
        help="a `commdsl bench --json` file of the same program: adds the measured time and the error per row",
    )
    p.add_argument("--plot", metavar="FILE", help="plot predicted (and measured) busbw against size (PNG/SVG/PDF)")
    p.add_argument(
        "--algo",
        choices=("auto", "ring"),
        default="auto",
        help="built-in all_reduce: the topology's choice (auto: NCCL's faster of ring and tree) or the ring only "
        "(as NCCL_ALGO=Ring)",
    )
    p.add_argument(
        "--links", type=integer("--links", 0), default=8, metavar="K", help="show the K busiest links (default: 8)"
    )
    add_max_time_flag(p, "predicting")
    add_program_flags(p)
    add_output_flags(p)
    p.set_defaults(handler=run)


def _check_args(args) -> list[int]:
    from commdsl.bench.sizes import SizeError, parse_sweep
    from commdsl.dtypes import DTYPES

    if (args.file is None) == (args.collective is None):
        raise UsageError("give either a program FILE or --collective NAME, not both" if args.file else "give a FILE")
    if args.collective and args.world is None:
        raise UsageError(f"--collective {args.collective} needs --world N: the ranks to predict for")
    if args.dtype is not None and args.dtype not in DTYPES:
        raise UsageError(f"--dtype {args.dtype}: not one of {', '.join(DTYPES)}")
    if args.collective == "sendrecv" and args.world < 2:
        raise UsageError("--collective sendrecv needs --world 2 or more")
    refuse_unused_variant_flags(args, built_in=args.collective is not None, program=args.file is not None)
    if args.root is not None and not args.root < args.world:
        raise UsageError(f"--root {args.root} is not a rank of --world {args.world}")
    try:
        sizes = parse_sweep(str(args.sizes))
    except SizeError as e:
        raise UsageError(str(e)) from None
    outputs = [(f, p) for f, p in (("--json", args.json), ("--plot", args.plot)) if p]
    inputs = [p for p in (args.file, args.measured, args.topology) if p]
    for flag, path in outputs:
        try:
            check_output(path, inputs, flag)
        except FileError as e:
            raise UsageError(str(e)) from None
    if args.json and args.plot and os.path.abspath(args.json) == os.path.abspath(args.plot):
        raise UsageError("--json and --plot must name different files")
    if args.plot and os.path.splitext(args.plot)[1].lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"--plot {args.plot}: name a .png, .svg or .pdf file (the format follows the name)")
    return sizes


def run(args) -> int:
    sizes = _check_args(args)
    out, err = consoles(args)
    from commdsl.diagnostics import CommdslError

    topo = _topology(args, out, err)
    if isinstance(topo, int):
        return topo
    bench = _read_measured(args.measured) if args.measured else None
    variant = _variant(args, out, err)
    if isinstance(variant, int):
        return variant
    measured = _measured_rows(args, bench, variant.label) if bench is not None else None
    if bench is not None and bench.get("backend") not in (None, topo.backend):
        err.print(
            f"note: {escape(args.measured)} was measured on {escape(str(bench['backend']))}, and the topology"
            f" prices {topo.backend}: the error column compares the two"
        )
    if topo.capacity() is not None and args.world > topo.capacity():
        raise UsageError(
            f"--world {args.world}: the topology ({args.topology}) holds {topo.capacity()} ranks: "
            f"{topo.nodes} node{'s' * (topo.nodes != 1)} of {topo.ranks_per_node}; raise `nodes` or leave it out"
        )
    for src, dst in topo.overrides:
        if max(src, dst) >= args.world:
            unused = f"the [[link]] from rank {src} to rank {dst} is outside --world {args.world}: not used"
            err.print(f"note: {escape(unused)}")
    from commdsl.bench.identify import BenchError
    from commdsl.bench.plan import Refused
    from commdsl.predict import sweep

    deadline = Deadline(
        args.max_time or TIME_LIMIT, "prediction", "predict fewer sizes (`--sizes`) or a smaller world (`--world`)"
    )
    try:
        pred = sweep(variant, args.world, sizes, topo, paths=args.json is not None, deadline=deadline)
    except TimeLimitReached as stop:
        print_diagnostics([stop.diagnostic], {variant.program.path: variant.program.source}, args.format, out, err)
        return EXIT_FAILURE
    except BenchError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    except Refused as e:
        print_diagnostics(e.diagnostics, {variant.program.path: variant.program.source}, args.format, out, err)
        err.print(escape(e.summary("predict", args.world)))
        return EXIT_FINDINGS
    except CommdslError as e:
        print_diagnostics(e.diagnostics, {variant.program.path: variant.program.source}, args.format, out, err)
        return EXIT_FINDINGS
    for note in pred.notes:
        err.print(f"note: {escape(note)}")
    # a rank's CPU is work on Gloo; on NCCL it is mostly the host spinning while its GPU works
    cores = bench.get("host_cores") if bench is not None and bench.get("backend") == "gloo" else None
    for line in report(pred, measured, args.links, cores):
        out.print(line, markup=False)
    try:
        _write(args, pred, measured)
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    return EXIT_OK


def _topology(args, out, err):
    """The topology `--topology` names (with `--algo ring`, rings only), or the exit code when it cannot be
    read (the error said) or is not one (its N136 diagnostics printed)."""
    from commdsl.diagnostics import CommdslError
    from commdsl.predict import topology

    try:
        topo, _ = topology.load(args.topology)
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    except UnicodeDecodeError as e:
        err.print(f"[bold red]error[/]: {escape(not_utf8(args.topology, e))}")
        return EXIT_FAILURE
    except CommdslError as e:
        source = topology.source_of(args.topology)
        print_diagnostics(e.diagnostics, {source.path: source}, args.format, out, err)
        return EXIT_FINDINGS
    if args.algo == "ring":
        import dataclasses

        topo = dataclasses.replace(topo, tree=False)
    return topo


def _variant(args, out, err):
    """The variant to predict, loading the program; sets `args.world` to the program's one declared size
    when `--world` is not given."""
    from commdsl.bench.identify import BenchError
    from commdsl.diagnostics import CommdslError
    from commdsl.predict import variant_for

    if args.collective:
        from commdsl.bench.builtin import builtin
        from commdsl.bench.plan import builtin_variant

        return builtin_variant(builtin(args.collective, args.dtype or "float32", args.op or "sum", args.root or 0))
    loaded = load_files([args.file], err)
    if loaded.io_failed:
        return EXIT_FAILURE
    if loaded.diagnostics:
        print_diagnostics(loaded.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    program = loaded.programs[0]
    if args.world is None:
        args.world = program.only_world()
        if args.world is None:
            raise UsageError(f"{args.file} runs at world sizes {program.describe_world()}: give --world N")
    try:
        return variant_for(program, args.world, args.param or "n", parse_sets(args.set), args.dtype)
    except BenchError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    except CommdslError as e:
        print_diagnostics(e.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS


def _read_measured(path: str) -> dict:
    """A bench JSON, checked to hold what the report reads (`bench.output.read_json`)."""
    from commdsl.bench.output import read_json

    try:
        return read_json(path)
    except OSError as e:
        raise UsageError(f"--measured {path}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"--measured {path}: {e}") from None


def _measured_rows(args, bench: dict, label: str) -> dict[int, dict]:
    """The bench's rows of what is predicted, by size_bytes: a bench of another world or another program
    would put its times beside these rows as if they measured them, so it is refused (UsageError)."""
    world = bench.get("world")
    if isinstance(world, int) and world != args.world:
        raise UsageError(
            f"--measured {args.measured}: measured at {world} ranks, and this predicts --world {args.world}"
        )
    labels = list(dict.fromkeys(r.get("variant") for r in bench["rows"]))
    # the bench names a form or a dtype after the label (`all_reduce in-place`, `ring float64` of --dtype all)
    same = [v for v in labels if v == label] or [v for v in labels if v == f"{label} {args.dtype}"]
    same = same or [v for v in labels if isinstance(v, str) and v.startswith(f"{label} ")]
    if labels == [None]:
        raise UsageError(f"--measured {args.measured}: its rows name no `variant`, so none can be matched to `{label}`")
    if labels and not same:
        measured = ", ".join(f"`{m}`" for m in sorted(map(str, labels)))
        raise UsageError(f"--measured {args.measured}: measures {measured}, and this predicts `{label}`")
    return {int(r["size_bytes"]): r for r in bench["rows"] if r.get("variant") == same[0]} if same else {}


def report(pred, measured: dict[int, dict] | None, links: int, cores: int | None = None) -> list[str]:
    """The preamble, the bench's table (marked predicted; with the measured time and error when given, and
    what the measurement says the model does not count: pages, CPU on the bench's `cores`), the critical path
    and the busiest links."""
    from commdsl.bench import output
    from commdsl.bench.sizes import format_size
    from commdsl.predict import link_table, ranks_text

    topo, v = pred.topology, pred.variant
    m = v.measure
    lines = [
        f"# commdsl predict: {pred.world} rank{'s' * (pred.world != 1)}, PREDICTED (not measured) on topology "
        f"{topo.describe()}",
    ]
    if topo.source:
        lines.append(f"#   numbers from: {topo.source}")
    what = f"{m.kind} of `{m.tensor}`" if m.kind else f"sized by `{m.tensor}`; busbw = algbw"
    src = "" if m.how == "built-in" else f" ({v.program.path}, sweeping `{v.param}`)"
    lines += [f"# {v.label}{src}: {what}", "#"]
    table = output.table(pred.rows, [pred.summary], [0])
    table = [t.replace("#wrong", "  pred") if i == 0 else t for i, t in enumerate(table)]
    if measured is not None:
        table[0] += f"  {'measured':>9}  {'error':>7}"
        table[1] += f"  {'(us)':>9}  {'(%)':>7}"
        for i, row in enumerate(pred.rows):
            got = measured.get(row.size)
            if got is not None:
                table[2 + i] += f"  {got['time_us']:>9.1f}  {_error(row.time_us, got['time_us']):>+7.1f}"
    lines += [t.replace("     N/A", "    pred") for t in table]
    path = pred.paths.get(pred.timing.path_size)
    size = pred.rows[pred.timing.path_size].size
    if measured is not None:
        lines += _unexpected_pages(pred, measured)
        lines += _busy_cores(pred, measured, cores)
        lines += _by_line(pred, size, measured.get(size))
    if path is None:
        lines.append(f"# critical path: not kept above {_ops_limit():,} ops; predict at a smaller --world to see it")
    elif path:
        total = pred.timing.seconds[pred.timing.path_size] * 1e6
        steps = sum(e["steps"] for e in path)
        lines.append(
            f"# critical path at {format_size(size)} ({total:.1f} us, {steps} op{'s' * (steps != 1)} one after "
            "another), by line (--json: in time order):"
        )
        by_line: dict[int, list] = {}
        for run in path:
            entry = by_line.setdefault(run["line"], [0.0, 0, set()])
            entry[0] += run["us"]
            entry[1] += run["steps"]
            entry[2].update(run["ranks"])
        for line, (us, n, ranks) in sorted(by_line.items()):
            lines.append(
                f"#   line {line:>4}  {us:>11.1f} us  {n:>6} op{'s' * (n != 1)}  ranks {ranks_text(sorted(ranks))}  "
                f"`{_line_text(v.program, line)}`"
            )
        idle = total - sum(e["us"] for e in path)
        if idle > 0.05:
            lines.append(f"#   waiting between them: {idle:.1f} us")
    busiest = link_table(pred.timing, links) if links > 0 else []
    if busiest:
        lines.append(f"# busiest links at {format_size(size)} (busy time / predicted time):")
        for link in busiest:
            lines.append(
                f"#   {link['link']:<28} {link['utilisation'] * 100:>6.1f} %  {link['bytes'] / 2**20:>10.2f} MiB"
            )
    return lines


def _error(predicted_us: float, measured_us: float) -> float:
    """The prediction's error in percent of the measured time (+: predicted slower than measured)."""
    return (predicted_us - measured_us) / measured_us * 100


def _unexpected_pages(pred, measured: dict[int, dict]) -> list[str]:
    """The measured rows whose ranks faulted in pages the model does not count (`unexpected_pages`): glibc
    trimmed its heap between calls, which depends on the process's history and not on the program
    (docs/predict-accuracy.md, "The heap's trims, measured"). Such a row's error is that: each names the
    prediction with those pages added at `page_fault_gbps` (in runs 16 and 17, every one of 42 such rows
    then within ±25 % of what the bench measured)."""
    from commdsl.bench.sizes import format_size
    from commdsl.predict import unexpected_pages

    rate = pred.topology.page_bps
    out = []
    for row in pred.rows:
        got = measured.get(row.size) or {}
        found = unexpected_pages(got, row.rank_faults, rate)
        if found is None or rate is None:  # without a rate nothing is found
            continue
        surplus, rank = found
        extra = surplus / rate * 1e6
        with_them = row.time_us + extra
        out.append(
            f"#   {format_size(row.size)}: rank {rank} faulted in {got['rank_page_faults'][rank]:.0f} pages an "
            f"iteration, {surplus / 2**20:.1f} MiB more than predicted: about {extra:,.0f} us at {rate / 1e9:.3g} "
            f"GB/s; predicted with them {with_them:,.0f} us ({_error(with_them, got['time_us']):+.1f} %)"
        )
    if out:
        out.insert(
            0,
            "# measured rows that faulted in pages the model does not count (malloc gave its heap back between "
            'calls; docs/predict-accuracy.md, "The heap\'s trims, measured"):',
        )
    return out


def _busy_cores(pred, measured: dict[int, dict], cores: int | None) -> list[str]:
    """The measured rows whose ranks used more CPU an iteration than the bench's host had cores for in the
    predicted time (`busy_cores`): the cores set the row's time, with work the model does not price (on the
    2-core machine, Gloo's receivers burning several times a sender's CPU a message)."""
    from commdsl.bench.sizes import format_size
    from commdsl.predict import busy_cores

    out = []
    for row in pred.rows:
        got = measured.get(row.size) or {}
        found = busy_cores(got, row.time_us, cores)
        if found is None:
            continue
        least, rank = found
        cpu = got["rank_cpu_us"]
        out.append(
            f"#   {format_size(row.size)}: its {len(cpu)} ranks used {sum(cpu):,.0f} us of CPU an iteration (rank "
            f"{rank} the most, {cpu[rank]:,.0f} us): at least {least:,.0f} us on {cores} cores, "
            f"{_error(least, row.time_us):.0f} % more than predicted"
        )
    if out:
        out.insert(
            0,
            "# measured rows whose ranks' CPU alone, over the bench host's cores, outlasts the prediction (work the "
            'model does not price; docs/predict-accuracy.md, "A receiver\'s CPU, measured"):',
        )
    return out


def _by_line(pred, size: int, got: dict | None) -> list[str]:
    """At the path size, each source line's measured time (the bench's `lines`: its slowest rank's) beside
    the predicted time of that same rank: which statement the model gets wrong. Nothing when either side has
    no lines."""
    from commdsl.bench.sizes import format_size

    measured = {int(e["line"]): float(e["us"]) for e in (got or {}).get("lines") or []}
    times = (got or {}).get("rank_time_us") or []
    rank = max(range(len(times)), key=times.__getitem__) if times else pred.timing.last_rank
    profiles = pred.timing.profiles or {}
    rank = rank if rank in profiles else pred.timing.last_rank
    if not measured or not profiles.get(rank):
        return []
    predicted = {e["line"]: e["us"] for e in profiles[rank]}
    out = [
        f"# where rank {rank}'s iteration goes at {format_size(size)} (the bench's"
        f" slowest), per source line: {'measured':>11} {'predicted':>11}  {'error':>7}"
    ]
    for line in sorted(measured.keys() | predicted.keys()):
        m, p = measured.get(line), predicted.get(line, 0.0)
        err = f"{_error(p, m):>+6.1f} %" if m else f"{'':>8}"
        shown = f"{m:>11.1f}" if m is not None else f"{'-':>11}"
        out.append(f"#   line {line:>4} {shown} us {p:>11.1f} us  {err}  `{_line_text(pred.variant.program, line)}`")
    return out


def _ops_limit() -> int:
    from commdsl.predict.cost import PATH_MAX_OPS

    return PATH_MAX_OPS


def _line_text(program, line: int) -> str:
    """The code of the statement that starts on `line`, its continued lines (`\\`) joined."""
    from commdsl.source import logical_lines

    text = program.source.text.splitlines()
    return next(logical_lines(text[line - 1 :]), "") if 0 < line <= len(text) else ""


def _write(args, pred, measured) -> None:
    from commdsl.bench import output
    from commdsl.bench.results import Row, Summary
    from commdsl.predict import link_table

    inputs = [p for p in (args.file, args.measured, args.topology) if p]
    if args.json:
        meta = {
            "world": pred.world,
            "backend": pred.topology.backend,
            "predicted": True,
            "topology": {"name": pred.topology.name, "path": pred.topology.path, "source": pred.topology.source},
        }
        data = output.as_dict(meta, pred.rows, [pred.summary])
        for row in data["rows"]:
            row["predicted"] = True
        data["critical_path"] = {
            str(pred.rows[k].size): path for k, path in sorted(pred.paths.items()) if path is not None
        }
        data["links"] = link_table(pred.timing, 0)
        output.write_json(args.json, data, inputs)
    if args.plot:
        rows, sums = list(pred.rows), [pred.summary]
        title = f"predicted busbw, {pred.world} ranks, {pred.topology.name}"
        if measured:
            got = [
                Row(
                    1,
                    "measured",
                    r.kind,
                    r.requested,
                    r.size,
                    r.count,
                    r.dtype,
                    r.redop,
                    r.root,
                    r.param,
                    r.value,
                    measured[r.size]["time_us"],
                    measured[r.size]["algbw_gbps"],
                    measured[r.size]["busbw_gbps"],
                    None,
                )
                for r in pred.rows
                if r.size in measured
            ]
            rows += got
            sums = [
                Summary("predicted", *_tail(pred.summary)),
                Summary("measured", *_tail(pred.summary)),
            ]
            title = f"predicted vs measured busbw, {pred.world} ranks, {pred.topology.name}"
        else:
            sums = [Summary("predicted", *_tail(pred.summary))]
        output.plot(args.plot, rows, sums, title, inputs)


def _tail(s) -> tuple:
    return (s.program, s.kind, s.how, s.factor, s.baseline, s.avg_busbw)
