"""`commdsl run --nproc N`: start the local workers with torch's elastic launcher and collect their reports.

Start-up dominates a short run: a spawned worker re-imports torch (≈1.7 s each here), a forked one
inherits the launcher's. So the launcher parses, checks and simulates first (no torch), imports torch
once, and forks — unless CUDA was already initialised in this process, where fork is unsafe and we
spawn (the workers then rebuild the Schedule from the source text instead of inheriting it).

The launcher also owns the two guarantees torch's agent does not give: the hang guard (`guard.py`)
and naming the rank that really failed (`outcome.py`, from the records and slots collected here).
Whatever happens, every worker is gone when `run_local` returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

from commdsl.runtime import progress, rendezvous
from commdsl.runtime.config import RunConfig
from commdsl.runtime.guard import Guard, Hang, kill_workers
from commdsl.runtime.outcome import Evidence
from commdsl.runtime.records import RankResult, assemble, read_times
from commdsl.runtime.worker import Job, local_entry
from commdsl.schedule import Schedule


class LaunchError(Exception):
    """The job could not be started (exit 2): bad rendezvous endpoint, nodes that never joined, …"""


@dataclass
class LocalRun:
    """What the local workers did, as far as this node can tell."""

    backend: str
    start_method: str
    results: dict[int, RankResult]  # global rank → what it reported
    evidence: Evidence = field(default_factory=Evidence)  # how ranks that did not finish ended
    hang: Hang | None = None
    stderr: dict[int, str] = field(default_factory=dict)  # global rank → the end of its stderr
    interrupted: bool = False
    wall_s: float = 0.0


def fork_is_safe() -> bool:
    """Fork only where CUDA has not been initialised in this process (and the platform has fork)."""
    import torch

    return sys.platform.startswith("linux") and not torch.cuda.is_initialized()


def _quiet_torch_logs(verbose: bool) -> None:
    """torch's agent logs every stopped worker and blames the wrong rank; we report failures ourselves."""
    log = logging.getLogger("torch.distributed.elastic")
    if not verbose and not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
        log.propagate = False


def run_local(
    schedule: Schedule,
    text: str,
    backend: str,
    opts: RunConfig,
    entry=local_entry,
    listener: socket.socket | None = None,
) -> LocalRun:
    """Launch this node's `opts.nproc` workers on `schedule` (already checked) and wait for them.

    `entry(job)` is what each worker runs (`commdsl bench` passes its own loop); it keeps the slot
    and record conventions of `local_entry`, so the guard and the blame work unchanged. `listener`: the
    rendezvous socket, already bound (`rendezvous.listen`), for a one-node run; bound here when None."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # LaunchConfig asks about CUDA: through NVML, fork stays safe
    _quiet_torch_logs(opts.verbose)
    start_method = opts.start_method or ("fork" if fork_is_safe() else "spawn")
    rdzv_timeout = int(max(opts.timeout, 900 if opts.nnodes > 1 else 60))
    run_id = opts.rdzv_id or f"commdsl-{uuid.uuid4().hex[:12]}"
    try:
        rendezvous.require_torch()
        endpoint = rendezvous.Endpoint.parse(opts.rdzv_endpoint)
        if opts.nnodes == 1 and listener is None:
            listener = rendezvous.listen(endpoint)
        joined = rendezvous.join(
            endpoint,
            run_id,
            opts.nnodes,
            None if opts.rdzv_backend == "c10d" and opts.nnodes > 1 else opts.node_rank,
            rdzv_timeout,
            sock=listener,
        )
    except (rendezvous.EndpointError, OSError, RuntimeError) as e:
        if listener is not None:
            listener.close()
        raise LaunchError(str(e)) from None
    rendezvous.register(run_id, rendezvous.handler_for(joined, run_id, opts.nnodes))
    saved = {k: os.environ.get(k) for k in ("GLOO_SOCKET_IFNAME",)}
    loopback = rendezvous.loopback_interface()
    if opts.nnodes == 1 and loopback and not saved["GLOO_SOCKET_IFNAME"]:
        os.environ["GLOO_SOCKET_IFNAME"] = loopback  # one node: Gloo's pair sockets on loopback too
    run_dir = tempfile.mkdtemp(prefix="commdsl-run-")
    try:
        with _process_streams():
            return _launch(schedule, text, backend, opts, entry, start_method, run_id, joined, run_dir)
    finally:
        rendezvous.unregister(run_id)
        joined.store = None  # the store server stops listening now, not whenever the last reference goes
        shutil.rmtree(run_dir, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _process_streams():
    """The process's own stdout and stderr as `sys.stdout`/`sys.stderr` while workers start: a forked worker
    inherits the Python objects, and where they are not files (Jupyter, doctest, a test's capture) the
    workers died before their first record. The launcher sends each worker's output to its log files."""
    saved = sys.stdout, sys.stderr
    for name in ("stdout", "stderr"):
        try:
            getattr(sys, name).fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            setattr(sys, name, getattr(sys, f"__{name}__"))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _launch(schedule, text, backend, opts, entry, start_method, run_id, joined, run_dir) -> LocalRun:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    log_dir = opts.log_dir or os.path.join(run_dir, "logs")
    board = progress.Board(os.path.join(run_dir, "progress"), opts.nproc, create=True)
    job = Job(
        schedule=schedule if start_method == "fork" else None,
        path=opts.path,
        text=text,
        world=schedule.world,
        params=opts.params,
        backend=backend,
        timeout=opts.timeout,
        run_dir=run_dir,
        close_fds=(joined.listen_fd,) if start_method == "fork" and joined.listen_fd is not None else (),
    )
    fields = dict(
        min_nodes=opts.nnodes,
        max_nodes=opts.nnodes,
        nproc_per_node=opts.nproc,
        run_id=run_id,
        role="commdsl",
        rdzv_backend=rendezvous.BACKEND,
        rdzv_endpoint=f"{joined.host}:{joined.port}",
        rdzv_configs={},
        max_restarts=opts.max_restarts,
        monitor_interval=0.05,
        start_method=start_method,
        shutdown_timeout=5,
        logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ALL),
        local_addr=None,
    )
    # LaunchConfig grew fields across releases (shutdown_timeout is new in 2.13; torch 2.11 rejects it):
    # pass the ones this torch has, the others keep their (older) behaviour
    known = {f.name for f in dataclasses.fields(LaunchConfig)}
    config = LaunchConfig(**{k: v for k, v in fields.items() if k in known})
    run = LocalRun(backend=backend, start_method=start_method, results={})
    guard = Guard(board, schedule, opts.timeout, opts.verbose)
    started = time.perf_counter()
    guard.start()
    try:
        elastic_launch(config, entry)(job)
    except ChildFailedError as e:
        run.evidence.agent = {
            rank: {"pid": f.pid, "exitcode": f.exitcode, "signal": f.signal_name() if f.exitcode < 0 else None}
            for rank, f in e.failures.items()
        }
    except (SignalException, KeyboardInterrupt):
        run.interrupted = True
    except Exception as e:  # noqa: BLE001 - rendezvous and agent failures: report, never a traceback
        kill_workers(board)
        raise LaunchError(f"torch's launcher failed: {type(e).__name__}: {e}") from None
    finally:
        guard.stop()
        kill_workers(board)  # nothing outlives the launch, whatever happened above
        run.wall_s = time.perf_counter() - started
        run.hang = guard.hang
        run.evidence.slots = board.snapshot()
        run.evidence.exits = {
            s.rank: guard.exits[s.local_rank] for s in run.evidence.slots if s.local_rank in guard.exits
        }
        _collect(run, run_dir, log_dir)
        if opts.log_dir is not None:
            for f in glob.glob(os.path.join(run_dir, "rank*.jsonl")):
                shutil.move(f, os.path.join(opts.log_dir, os.path.basename(f)))
    return run


def _collect(run: LocalRun, run_dir: str, log_dir: str) -> None:
    """Read every rank's records, crash and SIGTERM dumps, and the tail of its stderr (under `log_dir`)."""
    for s in run.evidence.slots:
        if s.rank < 0:
            continue
        dump = _read(os.path.join(run_dir, f"rank{s.rank}.fault")).strip()
        if dump:
            run.evidence.crashes[s.rank] = dump.splitlines()[0]
        if _read(os.path.join(run_dir, f"rank{s.rank}.term")).strip():
            run.evidence.terminated.add(s.rank)
        records = _read(os.path.join(run_dir, f"rank{s.rank}.jsonl"))
        if records:
            result = run.results[s.rank] = assemble(s.rank, records.splitlines(), run_dir)
            logged = None if result.finished else read_times(os.path.join(run_dir, f"rank{s.rank}.times"))
            if logged is not None:  # a rank that hung or failed: the ops it did, from its times file
                result.times, result.init = logged
        logs = glob.glob(os.path.join(log_dir, "*", "attempt_*", str(s.local_rank), "stderr.log"))
        tail = _read(max(logs, key=os.path.getmtime))[-4000:] if logs else ""
        if tail.strip():
            run.stderr[s.rank] = tail


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def run_program(program, nproc: int, params=None, backend: str = "auto", timeout: float = 60.0, check: bool = True):
    """`commdsl run FILE --nproc N` as a function (the Python API, `commdsl.run`): check, launch this node's
    ranks, judge; returns `outcome.Judged`. CommdslError when the program cannot run at this size, or the
    checks find errors and `check` is set; LaunchError when the workers cannot be started."""
    from commdsl.diagnostics import CommdslError
    from commdsl.runtime.envinfo import EnvError, choose_backend
    from commdsl.runtime.outcome import judge_run
    from commdsl.runtime.prepare import prepare

    try:
        chosen = choose_backend(backend, nproc)
    except EnvError as e:
        raise LaunchError(str(e)) from None
    params = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (params or {}).items()}
    prepared = prepare(program, nproc, params, chosen, local_ranks=nproc)
    if prepared.errors and check:
        raise CommdslError(prepared.errors)
    cfg = RunConfig(path=program.path, nproc=nproc, backend=chosen, params=params, timeout=timeout, check=check)
    run = run_local(prepared.schedule, program.source.text, chosen, cfg)
    return judge_run(prepared.schedule, program.source.text, prepared.sim, run, one_node=True)
