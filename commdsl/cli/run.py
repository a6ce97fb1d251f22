"""`commdsl run FILE --nproc N`: check, launch N real torch.distributed workers, verify, report.

Without `--nproc` the command is one rank of a job that torchrun, mpirun or srun started, and reads
its rank from their environment variables (`commdsl.runtime.envinfo`). Output is the same either
way: each rank's prints grouped by rank, every `expect`, the comparison with the simulator, and, when
something goes wrong, the hang table or the failing rank with its cause. Exit 0 only when every
expect holds and every tensor matches; 1 for findings (refused, failed, hung, crashed, differs); 2
when the job could not be run at all.
"""

from __future__ import annotations

import os

from rich.markup import escape

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
    load_one,
    parse_sets,
    print_diagnostics,
)
from commdsl.diagnostics import CommdslError
from commdsl.dtypes import TOLERANCE
from commdsl.files import FileError, check_output
from commdsl.runtime.config import SUMMARY_ABOVE
from commdsl.runtime.rendezvous import Endpoint, EndpointError, listen


def add_parser(sub):
    p = sub.add_parser(
        "run",
        help="run a program on real torch.distributed processes and check the results",
        description="Check the program, launch one process per rank with torch's elastic launcher (or run as one "
        "rank under torchrun, mpirun or srun when --nproc is not given), execute every op with "
        "torch.distributed, and compare each rank's tensors with the simulator.",
    )
    p.add_argument("file", metavar="FILE")
    add_launch_flags(p, "ranks to start on this node (without it: run as one rank of an externally launched job)")
    p.add_argument("--report", metavar="FILE", help="write the verdict, tensors and per-op timings as JSON")
    p.add_argument(
        "--report-values",
        action="store_true",
        help=f"--report lists every element of every tensor (default: tensors over {SUMMARY_ABOVE} "
        "elements are summarised by shape, dtype, SHA-256 and their first and last elements)",
    )
    p.add_argument("--trace", metavar="FILE", help="write per-rank op timings as Chrome trace JSON (Perfetto)")
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="launch even when the static checks find errors (to watch a hang or a crash for real)",
    )
    # torchrun's flags keep torchrun's meaning, spellings (--rdzv_endpoint too) and PET_<FLAG> variables
    torchrun_flag(p, "--nnodes", type=integer("--nnodes", 1), default="1", help="nodes in the job (default: 1)")
    torchrun_flag(
        p,
        "--node-rank",
        type=integer("--node-rank", 0),
        default="0",
        help="this node's rank (used by --rdzv-backend static)",
    )
    torchrun_flag(
        p,
        "--rdzv-backend",
        choices=("c10d", "static"),
        default=None,
        help="rendezvous of the nodes (default: c10d; static with --master-addr/--master-port)",
    )
    torchrun_flag(
        p,
        "--rdzv-endpoint",
        default=None,
        metavar="HOST:PORT",
        help="rendezvous address, the same on every node (default: 127.0.0.1 and a free port)",
    )
    torchrun_flag(p, "--rdzv-id", default=None, help="job id shared by every node (default: random)")
    torchrun_flag(
        p,
        "--master-addr",
        default=None,
        metavar="HOST",
        help="static rendezvous at the rank-0 node's address (torchrun's; with --master-port, default 29500)",
    )
    torchrun_flag(
        p,
        "--master-port",
        type=integer("--master-port", 0, 65535),
        default=None,
        metavar="PORT",
        help="static rendezvous port (with --master-addr, default 127.0.0.1)",
    )
    torchrun_flag(
        p,
        "--standalone",
        action="store_true",
        default=False,
        help="one node, a rendezvous on 127.0.0.1 at a free port and a new job id (what commdsl does anyway)",
    )
    torchrun_flag(
        p,
        "--max-restarts",
        type=integer("--max-restarts", 0, 100),
        default="0",
        help="start every worker again after a failure, up to N times (default: 0); a hang is never retried",
    )
    torchrun_flag(
        p,
        "--start-method",
        choices=("fork", "spawn"),
        default=None,
        help="how workers start (default: fork, or spawn when CUDA is initialised in this process)",
    )
    torchrun_flag(
        p,
        "--log-dir",
        default=None,
        help="keep every worker's stdout/stderr and records here (default: a temporary directory)",
    )
    add_program_flags(p)
    add_output_flags(p)
    p.set_defaults(handler=run)


MASTER_PORT = 29500
"""torchrun's default `--master-port`."""


def torchrun_flag(p, flag: str, default, **kwargs) -> None:
    """A flag torchrun has: also spelt with underscores (`--rdzv_endpoint`), defaulting to COMMDSL_<FLAG>, then
    torchrun's PET_<FLAG>, then `default`."""
    name = flag[2:]
    spellings = [flag] + ([f"--{name.replace('-', '_')}"] if "-" in name else [])
    value = env_default(name.replace("-", "_"), default, torchrun=name.replace("-", "_"))
    if kwargs.get("action") == "store_true":
        value = value if isinstance(value, bool) else value.strip().lower() in ("1", "true", "yes")
    p.add_argument(*spellings, dest=name.replace("-", "_"), default=value, **kwargs)


def _check_outputs(args) -> None:
    """--report and --trace: files that can be written, neither the input nor each other (before any work)."""
    for flag, path in (("--report", args.report), ("--trace", args.trace)):
        if path:
            try:
                check_output(path, [args.file], flag)
            except FileError as e:
                raise UsageError(str(e)) from None
    if args.report and args.trace and os.path.abspath(args.report) == os.path.abspath(args.trace):
        raise UsageError(f"--report and --trace name the same file {args.report}: give each its own")


def _make_log_dir(path: str) -> None:
    """--log-dir: a directory this process can write, made if missing (torch's launcher raised otherwise)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--log-dir {path}: this is a file, not a directory")
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise UsageError(f"--log-dir {path}: cannot write there ({e.strerror or e})") from None


def _torchrun_rendezvous(args) -> None:
    """torchrun's ways of naming the rendezvous, as torchrun reads them: `--standalone` is one node at a free
    local port; `--master-addr`/`--master-port` are the static rendezvous at the rank-0 node."""
    if args.standalone:
        if args.nnodes > 1 or args.rdzv_endpoint or args.master_addr or args.master_port is not None:
            raise UsageError(
                "--standalone is one node at a free local port: drop --nnodes, --rdzv-endpoint and --master-*"
            )
        args.rdzv_backend = "c10d"
    if args.master_addr or args.master_port is not None:
        if args.rdzv_endpoint:
            raise UsageError("--master-addr/--master-port and --rdzv-endpoint both name the rendezvous: give one")
        if args.rdzv_backend == "c10d":
            raise UsageError(
                "--master-addr/--master-port are the static rendezvous (torchrun's): drop --rdzv-backend c10d"
            )
        args.rdzv_endpoint = (
            f"{args.master_addr or '127.0.0.1'}:{29500 if args.master_port is None else args.master_port}"
        )
        args.rdzv_backend = "static"
    args.rdzv_backend = args.rdzv_backend or "c10d"


def config_from_args(args):
    from commdsl.runtime.config import RunConfig

    if args.nproc is not None and int(args.nproc) < 1:
        raise UsageError(f"--nproc must be at least 1, got {args.nproc}")
    if args.nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {args.nnodes}")
    if not 0 <= args.node_rank < args.nnodes:
        raise UsageError(f"--node-rank {args.node_rank} is not below --nnodes {args.nnodes}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout:g}")
    _torchrun_rendezvous(args)
    if args.max_restarts and args.nnodes > 1:
        raise UsageError(
            "--max-restarts restarts this node's workers only (the nodes' rendezvous is settled once): "
            "to restart every node, launch with torchrun --max-restarts and run `commdsl run` as its ranks"
        )
    if args.nnodes > 1 and not args.rdzv_endpoint:
        raise UsageError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the same on every node")
    if args.nproc is None and args.nnodes > 1:
        raise UsageError("--nnodes needs --nproc (under torchrun, give the node flags to torchrun instead)")
    _check_outputs(args)
    if args.nnodes > 1 and not args.rdzv_id:
        raise UsageError(
            "--nnodes above 1 needs --rdzv-id JOB, the same on every node of the job and new for "
            "every job (one endpoint serves one job)"
        )
    endpoint = args.rdzv_endpoint or "127.0.0.1:0"
    try:
        Endpoint.parse(endpoint)
    except EndpointError as e:
        raise UsageError(str(e)) from None
    if args.report_values and not args.report:
        raise UsageError("--report-values says what --report FILE holds: give --report too")
    if args.log_dir is not None:  # last: it creates the directory, as torch's launcher would
        _make_log_dir(args.log_dir)
    return RunConfig(
        path=args.file,
        nproc=int(args.nproc) if args.nproc is not None else None,
        backend=args.backend,
        params=parse_sets(args.set),
        timeout=args.timeout,
        report=args.report,
        report_values=args.report_values,
        trace=args.trace,
        check=args.check,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        rdzv_backend=args.rdzv_backend,
        rdzv_endpoint=endpoint,
        rdzv_id=args.rdzv_id,
        start_method=args.start_method,
        log_dir=args.log_dir,
        verbose=args.verbose,
        max_restarts=args.max_restarts,
    )


def run(args) -> int:
    cfg = config_from_args(args)
    out, err = consoles(args)
    if cfg.nproc is None:
        return run_as_rank(cfg, args.format, out, err)
    listener = None
    if cfg.nnodes == 1:  # this process hosts the rendezvous store: bind now, so a taken port is refused at once
        try:
            listener = listen(Endpoint.parse(cfg.rdzv_endpoint))
        except EndpointError as e:
            raise UsageError(str(e)) from None
        except OSError as e:
            raise UsageError(f"--rdzv-endpoint {cfg.rdzv_endpoint}: cannot listen there ({e.strerror or e})") from None
    try:
        return _run_local(cfg, args, out, err, listener)
    finally:
        if listener is not None:
            listener.close()  # a no-op once the store owns it


def _run_local(cfg, args, out, err, listener) -> int:
    loaded = load_one(cfg.path, args.format, out, err)
    if isinstance(loaded, int):
        return loaded
    program, source = loaded.programs[0], loaded.sources[cfg.path]
    from commdsl.runtime.envinfo import EnvError, choose_backend
    from commdsl.runtime.prepare import prepare

    try:
        backend = choose_backend(cfg.backend, cfg.nproc)
    except EnvError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    world = cfg.nproc * cfg.nnodes
    try:
        prepared = prepare(program, world, cfg.params, backend, local_ranks=cfg.nproc)
    except CommdslError as e:
        print_diagnostics(e.diagnostics, loaded.sources, args.format, out, err)
        return EXIT_FINDINGS
    if prepared.errors and cfg.check:
        print_diagnostics(prepared.diagnostics, loaded.sources, args.format, out, err)
        err.print(
            f"refusing to launch: the checks found {len(prepared.errors)} error"
            f"{'s' * (len(prepared.errors) != 1)} at world size {world} (--no-check launches anyway)"
        )
        return EXIT_FINDINGS
    if prepared.errors:
        err.print(
            f"[yellow]warning[/]: --no-check: launching despite {len(prepared.errors)} error"
            f"{'s' * (len(prepared.errors) != 1)} the checks found (`commdsl check` shows them)"
        )
    return launch_and_show(cfg, prepared, source, backend, out, err, listener)


def launch_and_show(cfg, prepared, source, backend: str, out, err, listener=None) -> int:
    from commdsl.runtime.launch import LaunchError, run_local
    from commdsl.runtime.outcome import judge_run

    schedule = prepared.schedule
    try:
        run = run_local(schedule, source.text, backend, cfg, listener=listener)
    except LaunchError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    judged = judge_run(schedule, source.text, prepared.sim, run, cfg.nnodes == 1)
    code = show(
        out,
        err,
        cfg=cfg,
        schedule=schedule,
        source_text=source.text,
        backend=backend,
        start_method=run.start_method,
        verdict=judged.verdict,
        results=run.results,
        failures=judged.failures,
        hang=judged.hang,
        stderr=run.stderr,
        wall_s=run.wall_s,
        interrupted=run.interrupted,
    )
    ranks = judged.ranks
    if cfg.nnodes > 1 and ranks:
        err.print(f"(ranks {ranks[0]}..{ranks[-1]} of this node only: every node reports its own)")
    return code


def show(
    out,
    err,
    *,
    cfg,
    schedule,
    source_text: str,
    backend: str,
    start_method: str | None,
    verdict,
    results,
    failures,
    hang,
    stderr: dict,
    wall_s: float,
    interrupted: bool = False,
) -> int:
    """Print a run's outcome and write --report/--trace; returns the exit code."""
    from commdsl.runtime.outcome import passed
    from commdsl.runtime.report import build_report, chrome_trace, write_json

    for rank in sorted(results):
        for p in results[rank].prints:
            for text in p["lines"]:
                out.print(f"rank {rank}: {text}", markup=False)
    by_line: dict[int, list[dict]] = {}
    for e in verdict.expects:
        by_line.setdefault(e["line"], []).append(e)
    for line, es in sorted(by_line.items()):
        bad = [e for e in es if not e["ok"]]
        if not bad:
            out.print(f"expect at line {line}: [green]passed[/] on {len(es)} of {len(es)} rank{'s' * (len(es) != 1)}")
            continue
        out.print(f"expect at line {line}: [red]FAILED[/] on {len(bad)} of {len(es)} rank{'s' * (len(es) != 1)}")
        for e in bad:
            out.print(f"  rank {e['rank']}: {escape(e['detail'])}")
    if hang:
        _show_hang(out, schedule, hang, cfg.timeout)
    elif failures:
        _show_failures(out, schedule, failures, stderr)
    elif interrupted:
        err.print("interrupted: every worker was stopped")
    else:
        _show_comparison(out, verdict, schedule)
    ok = passed(verdict, failures, hang, interrupted)
    try:
        if cfg.report:
            write_json(
                cfg.report,
                build_report(
                    schedule=schedule,
                    source_text=source_text,
                    backend=backend,
                    start_method=start_method,
                    verdict=verdict,
                    results=results,
                    failures=failures,
                    hang=hang,
                    timeout=cfg.timeout,
                    wall_s=wall_s,
                    values=cfg.report_values,
                ),
                inputs=[cfg.path],
            )
        if cfg.trace:
            trace = chrome_trace(schedule, source_text, results, hang, tags=backend != "nccl")
            write_json(cfg.trace, trace, inputs=[cfg.path])
    except FileError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    how = backend + (f", {start_method}" if start_method else "")
    verdict_text = "[green]passed[/]" if ok else "[red]failed[/]"
    err.print(
        f"{escape(schedule.program)}: {schedule.world} rank{'s' * (schedule.world != 1)} ({how}) in "
        f"{wall_s:.2f} s: {verdict_text}"
    )
    if interrupted:
        return 130
    return EXIT_OK if ok else EXIT_FINDINGS


def _show_comparison(out, verdict, schedule):
    if not verdict.sim_complete:
        out.print(
            "[yellow]not compared with the simulator[/]: the simulation does not complete (`commdsl check` says why)"
        )
    for m in verdict.mismatches:
        out.print(
            f"[red]rank {m.rank}: `{escape(m.tensor)}` differs from the simulator[/] at {m.count} element"
            f"{'s' * (m.count != 1)}; first at element {m.index}: got {m.actual!r}, expected {m.expected!r}"
        )
    for d in verdict.disagreements:
        a, b = d.ranks
        more = f" (and {d.more} more rank{'s' * (d.more != 1)})" if d.more else ""
        out.print(
            f"[red]ranks {a} and {b}{more} hold different `{escape(d.tensor)}`[/] at {d.count} element"
            f"{'s' * (d.count != 1)}, though the simulation gives them the same values; first at element "
            f"{d.index}: {d.values[0]!r} and {d.values[1]!r}"
        )
    for rank in verdict.missing:
        out.print(f"[red]rank {rank} did not report its tensors[/]")
    if verdict.sim_complete and not verdict.mismatches and not verdict.missing and not verdict.disagreements:
        n = verdict.compared
        out.print(
            f"tensors: every rank matches the simulator ({n} rank{'s' * (n != 1)}, "
            f"{len(schedule.tensors[0])} tensor{'s' * (len(schedule.tensors[0]) != 1)} each)"
        )
    if verdict.undefined:
        out.print(
            f"  {verdict.undefined} element{'s' * (verdict.undefined != 1)} left undefined by `reduce` on "
            "non-root ranks not compared (Gloo leaves partial sums there; R504)"
        )
    if verdict.order_dependent:
        out.print(
            f"  {verdict.order_dependent} element{'s' * (verdict.order_dependent != 1)} of sums and products that "
            "may differ with the order the ranks are combined in (V803) compared across ranks only"
        )
    tolerances = [f"{d} rtol {TOLERANCE[d][0]:g} atol {TOLERANCE[d][1]:g}" for d in verdict.dtypes if d in TOLERANCE]
    if verdict.sim_complete and tolerances:
        out.print(
            f"  floats compared within {', '.join(tolerances)}; other dtypes and ranks with each other exactly",
            markup=False,
        )


def _show_hang(out, schedule, rows, timeout: float):
    stuck = [r for r in rows if r["stuck"]]
    names = ", ".join(f"rank {r['rank']}" for r in stuck)
    stopped = [r for r in rows if r.get("stopped")]
    if stopped:  # the culprit: a process someone stopped (kill -STOP, Ctrl-Z), which the others waited for
        culprits = ", ".join(f"rank {r['rank']} (pid {r['pid']})" for r in stopped)
        names = ", ".join(f"rank {r['rank']}" for r in stuck if not r.get("stopped"))
        out.print(
            f"[bold red]error[/]: [bold]hang: {culprits} {'was' if len(stopped) == 1 else 'were'} stopped "
            f"by a signal (SIGSTOP or SIGTSTP) and never resumed; {names or 'the others'} waited longer "
            f"than --timeout {timeout:g} s; every rank was killed[/]"
        )
    else:
        out.print(
            f"[bold red]error[/]: [bold]hang: {names} waited longer than --timeout {timeout:g} s; "
            f"every rank was stopped[/]"
        )
    out.print(f"  {'rank':>4}  {'pid':>7}  {'state':<10} {'for':>8}  where", markup=False)
    for r in rows:
        rank = "?" if r["rank"] is None else str(r["rank"])
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f} s"
        place = f"{schedule.path}:{r['line']}  {r['op']}" if r["line"] else r["op"]
        mark = "  <- stopped by a signal: the culprit" if r.get("stopped") else "  <- stuck" if r["stuck"] else ""
        out.print(f"  {rank:>4}  {r['pid']:>7}  {r['state']:<10} {secs:>8}  {place}{mark}", markup=False)


def _show_failures(out, schedule, failures, stderr: dict):
    culprit = failures[0]
    place = f"{schedule.path}:{culprit.at.line}  {culprit.at.text}" if culprit.at.line else culprit.at.text
    out.print(f"[bold red]error[/]: [bold]rank {culprit.rank} {escape(culprit.cause)}[/]")
    out.print(f"  --> {escape(place)}  (pid {culprit.pid})")
    for f in failures[1:]:
        at = f"line {f.at.line} `{f.at.text}`" if f.at.line else f.at.text
        out.print(f"  then rank {f.rank} at {escape(at)} {escape(f.cause)}")
    out.print("  every other worker was stopped")
    tail = stderr.get(culprit.rank, "").strip().splitlines()[-8:]
    if tail:
        out.print(f"  last lines of rank {culprit.rank}'s stderr:")
        for text in tail:
            out.print("    " + text, markup=False)


def run_as_rank(cfg, fmt: str, out, err) -> int:
    """One rank of a job started by torchrun, mpirun or srun; rank 0 prints for everyone."""
    from commdsl.runtime.envinfo import EnvError, choose_backend, placement
    from commdsl.runtime.external import run_rank
    from commdsl.runtime.outcome import Evidence, blame, judge_results, timeout_rows

    try:
        place = placement()
        backend = choose_backend(cfg.backend, place.local_world)
    except EnvError as e:
        err.print(f"[bold red]error[/]: {escape(str(e))}")
        return EXIT_FAILURE
    loaded = load_one(cfg.path, fmt, out, err, report=place.rank == 0)
    if isinstance(loaded, int):
        return loaded
    source = loaded.sources[cfg.path]
    run = run_rank(cfg, loaded.programs[0], place, backend)
    if run.refused:
        if place.rank == 0:
            print_diagnostics(run.diagnostics, loaded.sources, fmt, out, err)
            err.print(f"refusing to run: the checks found errors at world size {place.world} (--no-check runs anyway)")
        return EXIT_FINDINGS
    if place.rank != 0:
        return EXIT_FINDINGS if run.failed else EXIT_OK
    schedule, ranks = run.schedule, list(range(place.world))
    failures = blame(schedule, source.text, run.results, Evidence(), ranks)
    hang = None
    if failures and any(f.kind == "timeout" for f in failures) and all(f.kind in ("timeout", "peer") for f in failures):
        hang, failures = timeout_rows(schedule, source.text, run.results, place.world), []
    verdict = judge_results(schedule, run.sim, run.results, ranks)
    try:
        return show(
            out,
            err,
            cfg=cfg,
            schedule=schedule,
            source_text=source.text,
            backend=backend,
            start_method=place.source,
            verdict=verdict,
            results=run.results,
            failures=failures,
            hang=hang,
            stderr={},
            wall_s=run.wall_s,
        )
    finally:
        run.release()
