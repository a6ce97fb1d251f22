"""Memory of one rank of `commdsl run`, in multiples of its tensors' bytes (issue 14: at most 3x).

Runs `commdsl run PROGRAM --nproc N` twice: with a tensor of `--mib` MiB of float32 per rank (an
all_reduce and an expect over it) and with one element (the baseline: Python, torch, Gloo, the
launcher's pages a forked worker shares). While each run is up, every process under the launcher is
polled (`/proc/PID/smaps_rollup`, every `--poll` seconds) for its private memory (Private_Clean +
Private_Dirty: what that process alone holds) and its peak resident set (VmHWM in `/proc/PID/status`,
exact whatever the polling rate; it also counts pages shared with the launcher). A worker's figure is
its peak in the large run minus the peak of a worker in the baseline run, over the tensor's bytes
(workers are listed largest first).

    python benchmarks/run_memory.py --mib 200 --nproc 2

The launcher is reported too (it holds the simulator's copy of every rank's tensors).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = """\
program memory
world 1..
param n = 1
tensor x: float32[n] = i % 1000 + rank
all_reduce x
expect x == world * (i % 1000) + world * (world - 1) / 2
"""


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                parent[int(entry)] = int(fields[1])
    out, frontier = [pid], [pid]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        out += frontier
    return out


def sample(pid: int) -> tuple[int, int] | None:
    """(private bytes, peak RSS bytes) of `pid`, None when it is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in rollup.splitlines()[1:] if line.split()[1:]}
    hwm = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), None)
    if hwm is None:  # exiting: its memory is gone already
        return None
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0), hwm


def measure(n: int, nproc: int, poll: float) -> dict[str, tuple[int, int]]:
    """Peak (private, VmHWM) per role over one run with `n` elements per rank."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.comm"
        path.write_text(PROGRAM)
        proc = subprocess.Popen([sys.executable, "-m", "commdsl", "run", str(path), "--nproc", str(nproc),
                                 "--set", f"n={n}", "--timeout", "600"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        peaks: dict[int, list] = {}
        while proc.poll() is None:
            for pid in descendants(proc.pid):
                got = sample(pid)
                if got is None:
                    continue
                old = peaks.setdefault(pid, [0, 0, "launcher" if pid == proc.pid else ""])
                old[0], old[1] = max(old[0], got[0]), max(old[1], got[1])
            time.sleep(poll)
        out = proc.stdout.read()
        if proc.returncode != 0:
            raise SystemExit(f"the run failed (exit {proc.returncode}):\n{out}")
    # the launcher's children, in the order they started (pids): the workers, largest first by private memory
    workers = sorted((v for v in peaks.values() if v[2] != "launcher"), key=lambda v: -v[0])
    roles = {f"worker {k}": (v[0], v[1]) for k, v in enumerate(workers)}
    roles.update({v[2]: (v[0], v[1]) for v in peaks.values() if v[2] == "launcher"})
    return roles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=200, help="MiB of float32 per rank (default 200)")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--poll", type=float, default=0.005, help="seconds between samples (default 0.005)")
    args = ap.parse_args()
    n = args.mib * (1 << 20) // 4
    tensor = 4 * n
    base = measure(1, args.nproc, args.poll)
    big = measure(n, args.nproc, args.poll)
    mib = 1 << 20
    print(f"tensor: {tensor / mib:.0f} MiB float32 per rank, --nproc {args.nproc}, torch run on this machine")
    print(f"{'process':<10} {'private, base':>14} {'private, big':>13} {'growth':>9} {'ratio':>6}   "
          f"{'VmHWM, base':>12} {'VmHWM, big':>11} {'growth':>9} {'ratio':>6}")
    for role in sorted(big, key=lambda r: (r == "launcher", r)):
        b, g = base.get(role, (0, 0)), big[role]
        print(f"{role:<10} {b[0] / mib:>10.0f} MiB {g[0] / mib:>9.0f} MiB {(g[0] - b[0]) / mib:>5.0f} MiB "
              f"{(g[0] - b[0]) / tensor:>5.2f}x   {b[1] / mib:>8.0f} MiB {g[1] / mib:>7.0f} MiB "
              f"{(g[1] - b[1]) / mib:>5.0f} MiB {(g[1] - b[1]) / tensor:>5.2f}x")


if __name__ == "__main__":
    main()
