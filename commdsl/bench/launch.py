"""Run a Plan on this node's ranks with the runtime's launcher, and read back what every rank measured."""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from commdsl.bench.plan import Plan
from commdsl.runtime.outcome import Failure, Where, where


@dataclass
class Measured:
    results: dict[int, dict[int, dict]]  # case → rank → its result line
    failures: list[Failure] = field(default_factory=list)  # culprit first
    hang: list[dict] | None = None  # the hang guard's table
    stderr: dict[int, str] = field(default_factory=dict)
    interrupted: bool = False
    wall_s: float = 0.0
    start_method: str = ""


def run_plan(plan: Plan, timeout: float, verbose: bool, progress: Callable[[int], None] | None = None) -> Measured:
    """Launch `plan.world` workers on this node and wait; LaunchError if torch's launcher itself fails.

    `progress(cases_done)` is called from a watcher thread, and only once every worker has started:
    a thread that writes to the terminal while the agent forks could leave a child holding its lock.
    """
    from commdsl.bench.worker import entry
    from commdsl.runtime.config import RunConfig
    from commdsl.runtime.launch import run_local
    from commdsl.runtime.outcome import blame, hang_rows

    opts = RunConfig(path="bench", nproc=plan.world, backend=plan.backend, timeout=timeout, verbose=verbose)
    halt = threading.Event()
    watcher = None
    if progress is not None:
        watcher = threading.Thread(
            target=_watch, args=(plan, progress, halt), name="commdsl-bench-progress", daemon=True
        )
        watcher.start()
    try:
        work = functools.update_wrapper(functools.partial(entry, plan), entry)  # the agent logs its __name__
        run = run_local(plan.guard, "", plan.backend, opts, entry=work)
    finally:
        halt.set()
        if watcher is not None:
            watcher.join()
    out = Measured(
        results=read_results(plan),
        stderr=run.stderr,
        interrupted=run.interrupted,
        wall_s=run.wall_s,
        start_method=run.start_method,
    )
    ranks = list(range(plan.world))
    if run.hang is not None:
        out.hang = [
            _relocate_row(plan, row, s)
            for row, s in zip(
                hang_rows(plan.guard, "", run.hang.slots, run.hang.at_ns, run.hang.stuck, run.hang.stopped),
                run.hang.slots,
            )
        ]
    elif not run.interrupted:
        out.failures = [_relocate(plan, f) for f in blame(plan.guard, "", run.results, run.evidence, ranks)]
    return out


def _watch(plan: Plan, progress: Callable[[int], None], halt: threading.Event) -> None:
    files = [os.path.join(plan.out_dir, f"rank{r}.jsonl") for r in range(plan.world)]
    while not all(os.path.exists(f) for f in files):
        if halt.wait(0.1):
            return
    done = -1
    while not halt.wait(0.2):
        try:
            with open(files[0], encoding="utf-8") as f:
                count = sum(1 for text in f if text.endswith("\n"))
        except OSError:
            continue
        if count != done:
            done = count
            progress(done)


def read_results(plan: Plan) -> dict[int, dict[int, dict]]:
    """case → rank → its result line, as far as the ranks have written them (also while they run)."""
    out: dict[int, dict[int, dict]] = {}
    for rank in range(plan.world):
        try:
            with open(os.path.join(plan.out_dir, f"rank{rank}.jsonl"), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for text in lines:
            try:
                rec = json.loads(text)
            except ValueError:
                continue  # torn by a kill
            out.setdefault(rec["case"], {})[rank] = rec
    return out


def place(plan: Plan, rank: int, index: int, state: int | None = None) -> tuple[str, Where]:
    """The program and the op at `index` of `rank` in the guard schedule, in that program's own words."""
    found = plan.locate(rank, index)
    if found is None:
        return "", where(plan.guard, "", rank, -1 if index < 0 else len(plan.guard.ops[rank]), state)
    case, local = found
    program = plan.variants[case.variant].program
    return program.path, where(case.schedule, program.source.text, rank, local, state)


def _relocate(plan: Plan, f: Failure) -> Failure:
    path, at = place(plan, f.rank, f.at.index)
    f.at = Where(at.rank, at.index, at.line, f"{path}:{at.line}  {at.text}" if at.line else at.text)
    return f


def _relocate_row(plan: Plan, row: dict, snap) -> dict:
    if row["rank"] is None:
        return row
    path, at = place(plan, row["rank"], snap.op, snap.state)
    return {**row, "line": at.line, "op": f"{path}:{at.line}  {at.text}" if at.line else at.text}
