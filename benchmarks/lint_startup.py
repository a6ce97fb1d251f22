"""Start-up of `commdsl lint programs/p2p.comm`, this tree against another checkout, paired in one run.

    git worktree add /tmp/commdsl-before <commit>        # or: git archive <commit> | tar -x -C DIR
    python benchmarks/lint_startup.py --before /tmp/commdsl-before --repeat 21

Each repetition runs the command once from each tree, in alternating order (before, after, then after,
before, ...), so a change in the machine's load weighs on both alike; medians and min–max of the wall
time and of the CPU time (user + system, which load inflates less) are printed, with the median of the
per-pair ratios after / before. After each pair, the floor: `python -c "import numpy, lark"`, what no lint
can start without. Each tree runs as `python -m commdsl` in its own directory (which `-m`
puts first on sys.path) on its own `programs/p2p.comm`, and with bytecode caches (warmed by one untimed
run of each, in a temporary PYTHONPYCACHEPREFIX): an installed package has its `.pyc` files, and a
`PYTHONDONTWRITEBYTECODE` environment would otherwise time the compilation of every module instead of
the start-up. Each tree's lint must exit 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "commdsl", "lint", "programs/p2p.comm"]
FLOOR = ["-c", "import numpy, lark"]
"""The floor: Python and the libraries a lint cannot start without (the engine's arrays, the parser), imported
and nothing done. (Until the AST became dataclasses it was `pydantic.main` too.)"""


def run_once(tree: Path, env: dict, command: list[str] = COMMAND) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `command` in `tree`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *command], cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, timeout=120
    )  # in `tree`: `python -m` puts the working directory first on sys.path
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{tree}: {' '.join(command)} exited {proc.returncode}: {proc.stdout.decode()}{proc.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s ({min(xs):.3f}–{max(xs):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, type=Path, help="the checkout to compare with (its repository root)")
    ap.add_argument("--repeat", type=int, default=21, help="runs of each tree (default: 21)")
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    with tempfile.TemporaryDirectory(prefix="commdsl-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pyc
        for tree in trees.values():
            run_once(tree, env)  # writes the bytecode caches
        walls: dict[str, list[float]] = {name: [] for name in [*trees, "floor"]}
        cpus: dict[str, list[float]] = {name: [] for name in walls}
        for i in range(args.repeat):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                wall, cpu = run_once(trees[name], env)
                walls[name].append(wall)
                cpus[name].append(cpu)
            wall, cpu = run_once(ROOT, env, FLOOR)
            walls["floor"].append(wall)
            cpus["floor"].append(cpu)
    print(
        f"`python {' '.join(COMMAND)}`, {args.repeat} runs of each tree, alternating; load average "
        f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print()
    print("| tree | wall median (min–max) | CPU median (min–max) |")
    print("|---|---:|---:|")
    for name in walls:
        print(f"| {name} | {spread(walls[name])} | {spread(cpus[name])} |")
    ratio_wall = statistics.median(a / b for a, b in zip(walls["after"], walls["before"]))
    ratio_cpu = statistics.median(a / b for a, b in zip(cpus["after"], cpus["before"]))
    print(f"| after / before (median of pairs) | {ratio_wall:.2f} | {ratio_cpu:.2f} |")


if __name__ == "__main__":
    main()
