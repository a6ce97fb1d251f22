"""How often a launch stalls in set-up: `commdsl run` again and again in ONE process, as the tests' `run_here`
and the API's `commdsl.run` launch (forking workers from a process with threads and a history).

    python benchmarks/launch_stalls.py programs/zero_bubble_pipeline.comm --nproc 4 --runs 1000

A watchdog thread writes every thread's stack of this process and of its workers (`gdb -batch`, where gdb is
installed) to `--dumps DIR/stall<N>.txt` when a run takes longer than `--stall` seconds; each run's exit code
and time go to stderr, the count of stalls to stdout. docs/runtime.md ("One Schedule") has what it found: a
forked worker inheriting glibc's resolver lock held by the launcher's store thread.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commdsl.cli.main import main  # noqa: E402


def dump(path: Path) -> None:
    """Every thread's stack of this process and its children, by gdb."""
    children = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout.split()
    pids = [str(os.getpid()), *children]
    with open(path, "w") as f:
        for pid in pids:
            f.write(f"==== pid {pid}\n")
            if shutil.which("gdb"):
                bt = subprocess.run(
                    ["gdb", "-p", pid, "-batch", "-ex", "thread apply all bt 30"],
                    capture_output=True,
                    text=True,
                    timeout=90,
                )
                f.write(bt.stdout)
            f.flush()


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("--nproc", default="4")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--stall", type=float, default=15.0, help="seconds after which a run counts as stalled")
    ap.add_argument("--dumps", default="/tmp/commdsl-launch-stalls", help="where the stacks of a stall go")
    a = ap.parse_args()
    Path(a.dumps).mkdir(parents=True, exist_ok=True)
    now = {"run": -1, "start": time.monotonic()}
    stalled: list[int] = []

    def watchdog():
        while True:
            time.sleep(1)
            run = now["run"]
            if run >= 0 and run not in stalled and time.monotonic() - now["start"] > a.stall:
                stalled.append(run)
                dump(Path(a.dumps) / f"stall{run}.txt")

    threading.Thread(target=watchdog, daemon=True).start()
    for run in range(a.runs):
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
        now["start"], now["run"] = time.monotonic(), run
        try:  # torch's agent installs signal handlers: put ours back after each run
            code = main(["run", a.program, "--nproc", a.nproc, "--timeout", str(2 * a.stall)])
        finally:
            for s, h in saved.items():
                signal.signal(s, h)
        print(f"run {run}: exit {code}, {time.monotonic() - now['start']:.1f} s", file=sys.stderr, flush=True)
    now["run"] = -1
    print(f"{len(stalled)} of {a.runs} runs stalled (over {a.stall:g} s): {stalled}; stacks in {a.dumps}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
