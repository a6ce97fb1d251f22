"""Start-up: wall time of `commdsl run` on a trivial program versus the tutorials' `mp.spawn` script.

Both do the same work at the same world size on Gloo: start N processes, init the process group,
all_reduce one float, print it, exit. The `mp.spawn` script is the one the PyTorch tutorials teach
(every child re-imports torch); `commdsl run` parses and checks in the parent and forks. Runs
alternate (commdsl, spawn, commdsl, …) so both see the same machine load; medians are reported,
with `python -c "import torch"` as the floor.

    python benchmarks/startup.py --nproc 4 --repeat 7 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = """\
program trivial
world 1..
tensor t: float32[1] = rank + 1
all_reduce t
print t
expect t == world * (world + 1) / 2
"""

SPAWN_SCRIPT = """\
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t)
    print(f"rank {rank}: t = {t}")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size, port = int(sys.argv[1]), int(sys.argv[2])
    mp.spawn(run, args=(world_size, port), nprocs=world_size, join=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "trivial.comm")
        script = os.path.join(tmp, "spawn_allreduce.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        with open(script, "w") as f:
            f.write(SPAWN_SCRIPT)
        commdsl = [sys.executable, "-m", "commdsl", "run", prog, "--nproc", str(args.nproc), "--backend", "gloo"]
        times: dict[str, list[float]] = {"commdsl run": [], "mp.spawn": [], "import torch": []}
        timed(commdsl)  # warm the page cache for both
        timed([sys.executable, script, str(args.nproc), str(free_port())])
        for _ in range(args.repeat):
            times["commdsl run"].append(timed(commdsl))
            times["mp.spawn"].append(timed([sys.executable, script, str(args.nproc), str(free_port())]))
            times["import torch"].append(timed([sys.executable, "-c", "import torch"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["commdsl run"] / med["mp.spawn"]
    print(f"world {args.nproc}, Gloo, {args.repeat} alternating runs, median wall time:")
    for k, v in times.items():
        print(f"  {k:<13} {med[k]:6.2f} s   (min {min(v):.2f}, max {max(v):.2f})")
    print(f"  ratio commdsl run / mp.spawn = {ratio:.2f}  (target <= 0.45)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": args.nproc, "repeat": args.repeat, "times": times, "median": med, "ratio": ratio},
                      f, indent=1)


if __name__ == "__main__":
    main()
