"""One rank of a bench launch: every case of the Plan, `warmup + iters` times each, timed by the runtime's loop.

The rank sets up torch.distributed once for the whole sweep (a launch per size would cost a second or
more of start-up each) and keeps the runtime's conventions, so its hang guard and blame work as in
`commdsl run`: the progress slot shows the op (numbered in the Plan's guard schedule), errors and the
end go to the runtime's record file. What the bench measures goes, one line per case, to
`<out_dir>/rank<r>.jsonl`: the duration of each timed iteration (first op's start to last op's end),
the time spent in each op summed over the timed iterations, and with `--check` the number of elements
that differed from the simulator, over every iteration, warm-up included.

The cases of one round (the variants of `--compare` at one size) are set up together and alternate
iteration by iteration, so a load that comes and goes on a shared machine weighs on both sides of
the ratio alike. Between iterations, `--check` restores the initial tensors (so every iteration
computes the same thing), compares afterwards, and lines the ranks up with a barrier; none of that
is timed. Without `--check` the iterations run back to back, as in nccl-tests.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from commdsl.bench.plan import Plan, expected_path
from commdsl.runtime import progress
from commdsl.runtime.records import line
from commdsl.runtime.worker import BACKSTOP_S, Job, attach, run_steps


def entry(plan: Plan, job: Job) -> None:
    """What the elastic agent runs in each worker (through functools.partial); exits non-zero on failure."""
    rank, local_rank, slot = attach(job)
    with (
        open(os.path.join(job.run_dir, f"rank{rank}.jsonl"), "w", encoding="utf-8") as records,
        open(os.path.join(plan.out_dir, f"rank{rank}.jsonl"), "w", encoding="utf-8") as results,
    ):

        def emit(kind: str, payload: dict):
            records.write(line(kind, payload))
            records.flush()

        def result(payload: dict):
            results.write(json.dumps(payload, separators=(",", ":")) + "\n")
            results.flush()

        failed = measure(plan, rank, local_rank, job.timeout + BACKSTOP_S, slot, emit, result)
    if failed:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # at once, as the runtime's workers do: peers may still be waiting on this rank


def measure(plan: Plan, rank: int, local_rank: int, pg_timeout: float, slot: progress.Slot, emit, result) -> bool:
    """Run every case on this rank; True if it failed (the error record says where and why)."""
    import torch
    import torch.distributed as dist

    from commdsl.runtime.ops import Context, allocate, build_steps

    emit("start", {"pid": os.getpid(), "host": socket.gethostname()})
    try:
        torch.set_default_dtype(torch.float64)  # as the runtime: int / int gives float64, as in NumPy
        if "OMP_NUM_THREADS" not in os.environ and int(os.environ["LOCAL_WORLD_SIZE"]) > 1:
            torch.set_num_threads(1)  # as torchrun does: ranks × intra-op threads spinning on few cores crawl
        nccl = plan.backend == "nccl"
        if nccl:
            torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank) if nccl else torch.device("cpu")
        timeout = timedelta(seconds=pg_timeout)
        store, _, _ = next(dist.rendezvous("env://", rank, plan.world, timeout=timeout))
        dist.init_process_group(plan.backend, store=store, rank=rank, world_size=plan.world, timeout=timeout)
        # the bench's own barriers run on a Gloo group of their own:
        # never paired with a program's `barrier`, and no device to name under NCCL
        own = dist.new_group(list(range(plan.world)), backend="gloo")

        def barrier():
            dist.barrier(group=own)

        made: dict[tuple[int, ...], object] = {}  # process groups by members, made in Plan order on every rank

        def group(ranks):
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
            return made[ranks]

        def prepare(number: int) -> _Live:
            case = plan.cases[number]
            s, specs = case.schedule, case.schedule.tensors[rank]
            ctx = Context(
                rank=rank,
                backend=plan.backend,
                device=device,
                buffers=allocate(specs, rank, plan.world, device),
                dtypes={name: spec.dtype for name, spec in specs.items()},
                groups=[None] + [group(g.ranks) for g in s.groups[1:]],
                emit=emit,
                sync=torch.cuda.current_stream(device).synchronize if nccl else None,
            )
            steps = build_steps(s.ops[rank], ctx)
            return _Live(
                number,
                ctx,
                steps,
                case.bases[rank],
                [(0, 0)] * len(steps),
                [0] * len(steps),
                _expected(plan, number, rank) if plan.check else None,
                {name: b.clone() for name, b in ctx.buffers.items()} if plan.check else None,
            )

        for numbers in plan.rounds:
            slot.state(progress.RUNNING)  # local work (op -1): the hang guard only times waits
            live = [prepare(number) for number in numbers]
            slot.state(progress.INIT)  # a wait on the others, which the guard times
            barrier()  # every rank starts the round together
            for iteration in range(plan.warmup + plan.iters):
                for c in live:  # a round's cases alternate iteration by iteration: they see the same load
                    _iterate(c, plan.check, iteration >= plan.warmup, slot, barrier)
            for c in live:
                result(
                    {
                        "case": c.number,
                        "durations_ns": c.durations,
                        "page_faults": c.faults,
                        "cpu_ns": c.cpu_ns,
                        "op_ns": c.spent,
                        "wrong": c.wrong if plan.check else None,
                    }
                )
            del live
        slot.state(progress.FINISHING)
        barrier()  # nobody tears down while a peer still talks to it
        emit("final", {"tensors": {}, "times": [], "init": [0, 0]})
        dist.destroy_process_group()
        slot.state(progress.DONE)
        return False
    except Exception as e:  # noqa: BLE001 - any failure of this rank is reported, then the rank exits
        index = slot.op if slot.s[progress.STATE] == progress.RUNNING else -1
        emit("error", {"index": index, "type": type(e).__name__, "message": str(e).strip(), "time_ns": time.time_ns()})
        slot.state(progress.FAILED, index)
        return True


def _iterate(c: _Live, check: bool, timed: bool, slot: progress.Slot, barrier) -> None:
    """One iteration of one case: reset its buffers (with --check), run its steps, keep the times of a timed
    iteration, count the elements that differ from the simulator."""
    if check:
        slot.state(progress.RUNNING)
        for name, b in c.ctx.buffers.items():
            b.copy_(c.initial[name])
        slot.state(progress.INIT)
        barrier()
    slot.s[progress.STATE] = progress.RUNNING
    faults, cpu_ns = _usage()
    run_steps(c.steps, slot, c.times, c.base)
    if timed and c.steps:
        faults_after, cpu_ns_after = _usage()
        c.faults += faults_after - faults
        c.cpu_ns += cpu_ns_after - cpu_ns
        c.durations.append(c.times[-1][1] - c.times[0][0])
        for i, (t0, t1) in enumerate(c.times):
            c.spent[i] += t1 - t0
    if check:  # once every rank is through: a rank that finished first would compare on a core the others use
        slot.state(progress.INIT)
        barrier()
        slot.state(progress.RUNNING)
        c.wrong += _wrong(c.ctx, c.expected)


@dataclass
class _Live:
    """One case set up on this rank: its tensors and steps, and what was measured so far."""

    number: int
    ctx: object  # runtime.ops.Context
    steps: list
    base: int  # its first op's index in the guard schedule
    times: list
    spent: list[int]  # ns per op, summed over the timed iterations
    expected: dict | None  # the simulator's tensors (--check)
    initial: dict | None  # the tensors to restore before each iteration (--check)
    durations: list[int] = field(default_factory=list)
    faults: int = 0  # minor page faults of the whole process over the timed iterations
    cpu_ns: int = 0  # CPU time (user and system) of the whole process over the timed iterations
    wrong: int = 0


def _usage() -> tuple[int, int]:
    """The process's minor page faults and CPU time (user and system, ns) so far, every thread's (Gloo's
    too), from one call. An iteration that faults pages in pays for memory malloc handed back to the kernel
    and maps again (docs/predict-accuracy.md, "The heap's trims, measured"); the CPU time is the host's work
    the iteration took, which, summed over the ranks and spread over the host's cores, bounds its time from below
    (docs/predict-accuracy.md, "A receiver's CPU, measured")."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, round((usage.ru_utime + usage.ru_stime) * 1e9)


def _expected(plan: Plan, case: int, rank: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with np.load(expected_path(plan.out_dir, case, rank)) as f:
        return {key[2:]: (f[key], ~f["u_" + key[2:]]) for key in f.files if key.startswith("t_")}


def _wrong(ctx, expected: dict[str, tuple[np.ndarray, np.ndarray]]) -> int:
    """Elements of this rank's tensors that differ from the simulator's (undefined ones are skipped)."""
    from commdsl.simulate import close

    count = 0
    for name, (values, defined) in expected.items():
        actual = ctx.host_flat(name)
        count += int((~close(actual, values, ctx.dtypes[name]) & defined).sum())
    return count
