"""The hang guard of a local launch: a thread in the launcher that watches every rank's progress slot.

A rank is *stuck* when it has sat in one communication op (or in set-up, or in its teardown)
for longer than `--timeout`. The guard then takes one snapshot of every slot — the table the user
sees, taken at a single instant — notes every worker the kernel shows as stopped (SIGSTOP, Ctrl-Z):
those are what the others wait for — and SIGKILLs every worker, which makes torch's agent return.
Local ops (compute, expect, print) are never timed out: they cannot wait on anybody.

Output from this thread goes through `os.write`, never `print`: the agent forks workers while the
thread runs, and a child forked while this thread held Python's stdout lock would inherit it held.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

from commdsl.runtime import progress
from commdsl.schedule import Compute, Expect, Print, Read, Schedule

POLL_S = 0.05


@dataclass(frozen=True)
class Hang:
    """What the guard saw when it fired."""

    at_ns: int
    slots: list[progress.Snapshot]
    stuck: list[int]  # local ranks past the deadline
    stopped: list[int] = field(default_factory=list)  # local ranks whose process was stopped (SIGSTOP, SIGTSTP)


def waits_on_others(schedule: Schedule, snap: progress.Snapshot) -> bool:
    """Whether the rank in this slot is somewhere it can wait on another rank forever."""
    if snap.state in (progress.INIT, progress.FINISHING):
        return True
    if snap.state != progress.RUNNING or not 0 <= snap.rank < schedule.world:
        return False
    ops = schedule.ops[snap.rank]
    return 0 <= snap.op < len(ops) and not isinstance(ops[snap.op], (Compute, Expect, Print, Read))


def is_child(pid: int) -> bool:
    """Whether `pid` is still a child of this process (never signal a pid that was reused)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0] != "Z" and int(fields[1]) == os.getpid()


def is_stopped(pid: int) -> bool:
    """Whether `pid` is stopped by a signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) or a tracer: state T or t."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] in ("T", "t")


def kill_workers(board: progress.Board) -> None:
    """SIGKILL every worker that is still our child: the guard's verdict and the final clean-up alike."""
    for snap in board.snapshot():
        if snap.pid > 0 and is_child(snap.pid):
            try:
                os.kill(snap.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Guard(threading.Thread):
    def __init__(self, board: progress.Board, schedule: Schedule, timeout: float, verbose: bool = False):
        super().__init__(name="commdsl-hang-guard", daemon=True)
        self.board, self.schedule, self.timeout_ns = board, schedule, int(timeout * 1e9)
        self.verbose = verbose
        self.hang: Hang | None = None
        self.exits: dict[int, str] = {}  # local rank → how its process ended, when seen before torch's agent reaped it
        self._halt = threading.Event()
        self._announced: set[int] = set()

    def run(self):
        while not self._halt.wait(POLL_S):
            now = time.time_ns()
            slots = self.board.snapshot()
            if self.verbose:
                self._announce(slots)
            self._sample_exits(slots)
            stuck = [
                s.local_rank for s in slots if waits_on_others(self.schedule, s) and now - s.since_ns > self.timeout_ns
            ]
            if stuck:
                # a stopped worker waits on nobody, so it is never past the deadline itself: it is what the
                # others wait for, and the culprit to name (looked at before the SIGKILL that ends it)
                stopped = [s.local_rank for s in slots if s.pid > 0 and is_child(s.pid) and is_stopped(s.pid)]
                self.hang = Hang(now, slots, stuck, stopped)
                break
        # a hang is the program's, not the machine's: with --max-restarts, every worker torch's agent starts
        # again is stopped too, until it gives up (the verdict is the hang above)
        while self.hang is not None:
            kill_workers(self.board)
            if self._halt.wait(POLL_S):
                return

    def stop(self):
        self._halt.set()
        if self.is_alive():
            self.join()

    def _sample_exits(self, slots):
        """Peek at exited workers without reaping them (WNOWAIT): torch's agent still collects them."""
        for s in slots:
            if s.pid <= 0 or s.local_rank in self.exits:
                continue
            try:
                info = os.waitid(os.P_PID, s.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                continue
            if info is None:
                continue
            if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
                self.exits[s.local_rank] = signal.Signals(info.si_status).name
            else:
                self.exits[s.local_rank] = f"exit code {info.si_status}"

    def _announce(self, slots):
        for s in slots:
            if s.pid and s.state >= progress.RUNNING and s.local_rank not in self._announced:
                self._announced.add(s.local_rank)
                os.write(2, f"commdsl: rank {s.rank} is running as pid {s.pid}\n".encode())
