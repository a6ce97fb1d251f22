"""Run a torch.distributed script at N ranks as `torchrun --standalone --nproc-per-node N` starts it, but
forked from one process that has imported torch once.

    python tests/forked_ranks.py N SCRIPT [ARGS...]

Each rank is `python SCRIPT ARGS` with torchrun's worker environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, ...; env:// rendezvous on a free port of 127.0.0.1). On this 2-core machine
torchrun spends most of a launch importing torch in its agent and in every worker (~2.5 s each: a 4-rank
run of the ring takes 8 s, this 3.5 s), and the suite launches compiled scripts some eighty times. The
tests that are about torchrun itself, and the generated programs of test_differential's fourth leg (clean
and stalled), still run under real torchrun.

As torchrun does, the first rank to fail ends the run: the others are killed (after a second for their
output to come out) and the exit status is 1.
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import sys
import time

import torch.distributed  # noqa: F401  (imported once, before the fork: the point of this launcher)

GRACE_S = 1.0
"""How long the other ranks get to finish once one has failed."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, nproc: int, port: int, script: str, args: list[str]) -> int:
    """Run the script as rank `rank`; its exit status."""
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
        WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), ROLE_WORLD_SIZE=str(nproc), GROUP_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0",
    )  # fmt: skip
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:  # as the interpreter ends on it: a message is printed and exits 1
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1


def main() -> int:
    nproc, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    port = _free_port()
    pids = []
    for rank in range(nproc):
        pid = os.fork()
        if pid == 0:
            code = _rank(rank, nproc, port, script, args)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        pids.append(pid)
    failed_at = None
    left = set(pids)
    while left:
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        pid, status = os.waitpid(-1, os.WNOHANG) if failed_at is not None else os.waitpid(-1, 0)
        if pid == 0:
            time.sleep(0.05)
            continue
        left.discard(pid)
        if os.waitstatus_to_exitcode(status) != 0 and failed_at is None:
            failed_at = time.monotonic()
    return 0 if failed_at is None else 1


if __name__ == "__main__":
    sys.exit(main())
