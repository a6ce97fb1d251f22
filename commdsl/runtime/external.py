"""One rank of a job that torchrun, mpirun or srun started: `commdsl run FILE` without `--nproc`.

There is no commdsl launcher to collect anything, so rank 0 takes that role through the job's c10d
store (the one `init_process_group` uses): it checks the program once and tells every rank to go or
stop, and afterwards gathers every rank's records, compares with the simulator and prints. The
hang guard here is the process group's own timeout set to `--timeout`: a blocked op raises, the
rank records where, and rank 0's table shows every rank's op. A rank that dies without a word is
reported as silent (the launcher, not commdsl, then stops the rest).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from commdsl.diagnostics import CommdslError, Diagnostic
from commdsl.resolve import Program
from commdsl.runtime import progress
from commdsl.runtime.config import RunConfig
from commdsl.runtime.envinfo import Placement
from commdsl.runtime.records import RankResult, assemble, line
from commdsl.schedule import Schedule
from commdsl.simulate import SimResult

_PREFIX = "commdsl/"
# how long rank 0 waits for a rank's records after its own ops are done or failed, beyond --timeout
_GRACE_S = 10.0


@dataclass
class RankRun:
    """What one rank knows at the end; rank 0 also holds every rank's records and the simulation."""

    placement: Placement
    backend: str
    schedule: Schedule | None = None
    sim: SimResult | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)  # rank 0: why the job was refused
    refused: bool = False
    failed: bool = False  # this rank's own ops failed
    results: dict[int, RankResult] = field(default_factory=dict)  # rank 0 only
    wall_s: float = 0.0
    store: object = None

    def release(self) -> None:
        """Rank 0, after printing: the other ranks may exit now (had they exited first with an error,
        torchrun would have stopped rank 0 in the middle of its report)."""
        if self.store is not None:
            self.store.set("done", "1")


def run_rank(cfg: RunConfig, program: Program, place: Placement, backend: str) -> RankRun:
    import torch.distributed as dist

    from commdsl.runtime.prepare import prepare
    from commdsl.runtime.rendezvous import worker_store
    from commdsl.runtime.worker import execute

    started = time.perf_counter()
    run = RankRun(place, backend)
    timeout = timedelta(seconds=cfg.timeout)
    # the store outlives rank 0's check and every rank's run: give it more than one op's timeout
    store_timeout = timedelta(seconds=max(cfg.timeout, 300))
    # under mpirun or srun rank 0 hosts the job's store: bound to MASTER_ADDR's address only, never `*`
    store = worker_store(place.rank, place.world, store_timeout)
    ours = dist.PrefixStore(_PREFIX, store)
    if place.rank == 0:
        try:
            prepared = prepare(program, place.world, cfg.params, backend, local_ranks=place.local_world)
            run.schedule, run.sim, run.diagnostics = prepared.schedule, prepared.sim, prepared.diagnostics
            run.refused = bool(prepared.errors) and cfg.check
        except CommdslError as e:
            run.diagnostics, run.refused = e.diagnostics, True
        ours.set("verdict", "refuse" if run.refused else "go")
    else:
        verdict = ours.get("verdict").decode()  # waits for rank 0's check
        run.refused = verdict != "go"
        if not run.refused:
            from commdsl.expand import expand

            run.schedule = expand(program, place.world, cfg.params)
    if run.refused:
        run.wall_s = time.perf_counter() - started
        return run
    records: list[str] = []
    slot = progress.Slot()
    slot.start(place.rank)
    run.failed = execute(
        run.schedule,
        place.rank,
        place.local_rank,
        backend,
        timeout.total_seconds(),
        slot,
        lambda kind, payload: records.append(line(kind, payload)),
        store=store,
    )
    ours.set(f"result/{place.rank}", "".join(records))
    if place.rank == 0:
        run.results = _gather(ours, place.world, cfg.timeout + _GRACE_S)
        run.store = ours
    else:
        try:
            ours.wait(["done"], timedelta(seconds=cfg.timeout + 2 * _GRACE_S))
        except Exception:  # noqa: BLE001 - rank 0 is gone (it hosted the store) or never finished: leave anyway
            pass
    run.wall_s = time.perf_counter() - started
    return run


def _gather(store, world: int, wait_s: float) -> dict[int, RankResult]:
    """Every rank's records that arrive within `wait_s`; a rank that died never sends any."""
    keys = {r: f"result/{r}" for r in range(world)}
    deadline = time.monotonic() + wait_s
    out: dict[int, RankResult] = {}
    while keys and time.monotonic() < deadline:
        for r, key in list(keys.items()):
            if store.check([key]):
                out[r] = assemble(r, store.get(key).decode("utf-8").splitlines())
                del keys[r]
        if keys:
            time.sleep(0.05)
    return out
