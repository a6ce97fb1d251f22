"""One rank: set up torch.distributed, walk this rank's op list of the Schedule, report what happened.

The same loop serves both ways of starting ranks: workers forked or spawned by `commdsl run --nproc N`
(`local_entry`, records go to a file the launcher reads) and ranks started by torchrun, mpirun or srun
(`execute` called from `external.py`, records go through the store). Before each op the rank writes
the op index and start time into its progress slot, which is how the launcher's hang guard knows
where everybody is.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from commdsl.runtime import progress
from commdsl.runtime.records import TimesLog, encode_array, line
from commdsl.schedule import Schedule

# Seconds the process-group timeout exceeds `--timeout` in local runs, so the launcher's hang guard
# (which sees every rank) fires first and Gloo's own timeout is only a backstop.
BACKSTOP_S = 30.0


@dataclass(frozen=True)
class Job:
    """What every worker of a local launch needs; plain values apart from the Schedule."""

    schedule: Schedule | None  # inherited through fork; None under spawn, which rebuilds it from the source
    path: str
    text: str
    world: int
    params: dict
    backend: str
    timeout: float  # `--timeout`, seconds
    run_dir: str
    close_fds: tuple[int, ...] = ()  # the launcher's listening sockets a forked worker inherits: closed at once

    @property
    def forked(self) -> bool:
        return self.schedule is not None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its launcher dies, so no worker outlives a killed launcher."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


def rebuild(job: Job) -> Schedule:
    """The Schedule a spawned worker cannot inherit: parse and expand again (the launcher checked it)."""
    from commdsl.expand import expand
    from commdsl.resolve import load
    from commdsl.source import SourceFile

    return expand(load(SourceFile(job.path, job.text)), job.world, job.params)


def leave_evidence(run_dir: str, rank: int) -> None:
    """Make deaths that leave no record attributable afterwards.

    A forked worker inherits the agent's Python SIGTERM/SIGINT handlers, which cannot run while the
    rank is blocked inside Gloo: back to the default action, so a stop takes effect at once. A crash
    (SIGSEGV, SIGABRT from a C++ check, …) writes `rank<r>.fault`, a SIGTERM writes `rank<r>.term`
    before dying, so the launcher can tell the rank that crashed from the ranks stopped because of it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.enable(file=open(os.path.join(run_dir, f"rank{rank}.fault"), "w"), all_threads=False)
    faulthandler.register(
        signal.SIGTERM, file=open(os.path.join(run_dir, f"rank{rank}.term"), "w"), all_threads=False, chain=True
    )


def attach(job: Job) -> tuple[int, int, progress.Slot]:
    """A worker's first steps: die with the launcher, leave crash evidence, claim its progress slot.
    Returns (rank, local rank, slot)."""
    die_with_parent()
    gc.freeze()  # a forked worker never runs the launcher's destructors (its store server's among them)
    for fd in job.close_fds:  # only the launcher serves the rendezvous store
        try:
            os.close(fd)
        except OSError:
            pass
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    leave_evidence(job.run_dir, rank)
    board = progress.Board(os.path.join(job.run_dir, "progress"), int(os.environ["LOCAL_WORLD_SIZE"]), create=False)
    slot = progress.Slot(board.slots[local_rank])
    slot.start(rank)
    if job.forked:
        wait_for_siblings(board)
    return rank, local_rank, slot


SIBLINGS_LIMIT_S = 10.0


def wait_for_siblings(board: progress.Board, limit_s: float = SIBLINGS_LIMIT_S) -> None:
    """Under fork, touch the network only once every worker of this node has been forked. The launcher's store
    thread looks up a connecting worker's address (c10d logs it: glibc's getnameinfo, under the resolver's
    process-wide lock); a worker forked while it does inherits that lock held and blocks forever in its own
    first connect. Seen about once in 100 in-process runs (the tests', the API's): every rank "stalled in
    set-up", gdb showing the last-forked rank in `__resolv_context_get`. With every fork done before the first
    connect, there is nothing to inherit. After `limit_s` it goes on: a worker that never starts is the hang
    guard's to name."""
    deadline = time.monotonic() + limit_s
    while not all(_alive(slot[progress.PID]) for slot in board.slots) and time.monotonic() < deadline:
        time.sleep(0.001)


def _alive(pid: int) -> bool:
    """A slot's worker has started (a slot left by a worker of an earlier start, dead since, does not count)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def local_entry(job: Job) -> None:
    """Entry point the elastic agent calls in each worker process; exits non-zero on failure."""
    rank, local_rank, slot = attach(job)
    with open(os.path.join(job.run_dir, f"rank{rank}.jsonl"), "w", encoding="utf-8") as f:

        def emit(kind: str, payload: dict):
            f.write(line(kind, payload))
            f.flush()

        schedule = job.schedule if job.schedule is not None else rebuild(job)

        def save(name, tensor):  # raw bytes beside the records, a chunk at a time: no base64 copy of a tensor
            from commdsl.runtime.ops import write_tensor

            return write_tensor(os.path.join(job.run_dir, f"rank{rank}.{name}.bin"), tensor)

        times = TimesLog(os.path.join(job.run_dir, f"rank{rank}.times"), len(schedule.ops[rank]))
        failed = execute(
            schedule, rank, local_rank, job.backend, job.timeout + BACKSTOP_S, slot, emit, save=save, times=times
        )
    if failed:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # at once: a clean interpreter exit could block in teardown with peers still waiting


def run_steps(steps, slot: progress.Slot, times: list, base: int = 0) -> int:
    """The timed loop: before each step its index and start time go to the progress slot (where the
    hang guard looks), after it the (start, end) pair goes to `times`. Nothing else, so a step costs
    about a microsecond more than the bare torch call (benchmarks/overhead.py measures it).

    `base` is added to the index the slot shows: `commdsl bench` runs several programs' steps in
    one launch and lays their ops end to end in the Schedule the hang guard reads."""
    s, clock, since, at = slot.s, time.time_ns, progress.SINCE, progress.OP
    for index, step in enumerate(steps):
        t0 = clock()
        s[since] = t0
        s[at] = base + index
        step()
        times[index] = (t0, clock())
    return len(steps)


def execute(
    schedule: Schedule,
    rank: int,
    local_rank: int,
    backend: str,
    pg_timeout: float,
    slot: progress.Slot,
    emit: Callable[[str, dict], None],
    store=None,
    save=None,
    times=None,
) -> bool:
    """Run this rank's ops; True if it failed (the error record says where and why).

    `store`: a c10d store already connected (external launchers); otherwise one is made from the
    MASTER_ADDR/MASTER_PORT the launcher exported. `save(name, tensor)`: writes a final tensor somewhere
    the launcher can read and returns its record; without it, tensors go into the record in base64.
    `times`: where each op's (start, end) goes as it ends (`records.TimesLog`, which outlives a killed rank);
    without it, a list sent with the final record.
    """
    import torch
    import torch.distributed as dist

    from commdsl.runtime.ops import Context, allocate, build_steps

    emit("start", {"pid": os.getpid(), "host": socket.gethostname()})
    if "OMP_NUM_THREADS" not in os.environ and int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > 1:
        torch.set_num_threads(1)  # as torchrun does: ranks × intra-op threads on few cores crawl
    index = -1
    ops = schedule.ops[rank]
    try:
        init_start = time.time_ns()
        torch.set_default_dtype(torch.float64)  # int / int and int * 0.5 give float64, as in NumPy
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
        else:
            device = torch.device("cpu")
        timeout = timedelta(seconds=pg_timeout)
        slot.setup(progress.SETUP_STORE)
        if store is None:
            store, _, _ = next(dist.rendezvous("env://", rank, schedule.world, timeout=timeout))
            # the launcher's store outlives a restart (`--max-restarts`): each start of the workers gets keys
            # of its own, or the second would read the first's (dead) addresses and wait forever
            store = dist.PrefixStore(f"start{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        slot.setup(progress.SETUP_PROCESS_GROUP)
        dist.init_process_group(backend, store=store, rank=rank, world_size=schedule.world, timeout=timeout)
        slot.setup(progress.SETUP_GROUPS)
        # declared groups now, in order; a group `new_group` makes as a step is made when the step runs
        groups = [None] + [None if g.step else dist.new_group(list(g.ranks)) for g in schedule.groups[1:]]
        slot.setup(progress.SETUP_TENSORS)
        specs = schedule.tensors[rank]
        ctx = Context(
            rank=rank,
            backend=backend,
            device=device,
            buffers=allocate(specs, rank, schedule.world, device),
            dtypes={name: s.dtype for name, s in specs.items()},
            groups=groups,
            emit=emit,
            sync=torch.cuda.current_stream(device).synchronize if backend == "nccl" else None,
        )
        steps = build_steps(ops, ctx)
        init = (init_start, time.time_ns())
        if times is None:
            times = [(0, 0)] * len(steps)
        else:
            times[len(steps)] = init
        slot.s[progress.STATE] = progress.RUNNING
        index = run_steps(steps, slot, times)
        slot.state(progress.FINISHING, index)
        # no closing barrier: the rank ends when its program does, as a torch script would, so a message
        # still in flight (an isend never waited) is lost here as it is there (R501)
        tensors = {name: save(name, ctx.buffers[name]) if save else encode_array(ctx.host_flat(name)) for name in specs}
        emit("final", {"tensors": tensors, "times": [times[i] for i in range(len(steps))], "init": init})
        dist.destroy_process_group()
        slot.state(progress.DONE, index)
        return False
    except Exception as e:  # noqa: BLE001 - any failure of this rank is reported, then the rank exits
        index = slot.op if slot.s[progress.STATE] == progress.RUNNING else index
        emit("error", {"index": index, "type": type(e).__name__, "message": str(e).strip(), "time_ns": time.time_ns()})
        slot.state(progress.FAILED, index)
        return True
