"""Issue 17: how long `commdsl predict` takes for the hand-written ring at world 4096 (goal: 8 sizes in ≤ 5 s).

    python benchmarks/predict_speed.py [--repeat 3] [--baseline /path/to/other/checkout] [--only TEXT]

The ring is programs/ring_allreduce.comm with its `world` line widened to `1..` (as benchmarks/lint_speed.py
does); the async ring is the same with each step's `batch:` written as `h = isend ...`, `recv ...`, `wait h`.
`--only TEXT` runs the rows whose label begins with TEXT (`ring`, `async`). Each row is `commdsl predict` as a
user runs it: a subprocess, wall time from fork to exit and the child's peak RSS, on the dgx-h100 preset, and
its CPU seconds (user + system), which a loaded machine inflates less than wall time. `--baseline TREE` runs
each row with that checkout's commdsl too, the two alternately, so a change is compared with what it replaces
under the same load.

Each tree's modules are compiled to bytecode first, as an installed package's are (`pip install` compiles
them; an editable install writes them at the first import). Where PYTHONDONTWRITEBYTECODE is set (it is on
the team's machines) an uncompiled tree would be compiled again at every run: 0.24 s of this command here.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ROWS = [  # (label, program, world, sizes)
    ("ring, world 1024, 8 sizes", "ring", 1024, "1K:128K"),
    ("ring, world 4096, 1 size", "ring", 4096, "128K"),
    ("ring, world 4096, 8 sizes", "ring", 4096, "1K:128K"),
    ("async ring, world 1024, 8 sizes", "async", 1024, "1K:128K"),
    ("async ring, world 4096, 8 sizes", "async", 4096, "1K:128K"),
]
STEP = re.compile(r"batch:\n        send (.*) to right\n        recv (.*) from left\n")


def programs(tmp: Path) -> dict[str, Path]:
    """The ring, widened, and the same ring with async steps."""
    text = (ROOT / "programs" / "ring_allreduce.comm").read_text().replace("world 1..16", "world 1..")
    async_text, steps = STEP.subn(r"h = isend \1 to right\n    recv \2 from left\n    wait h\n", text)
    assert steps == 2, "the ring's steps are no longer written as this script expects"
    out = {"ring": Path(tmp) / "ring.comm", "async": Path(tmp) / "ring_async.comm"}
    out["ring"].write_text(text)
    out["async"].write_text(async_text)
    return out


def run(path: str, world: int, sizes: str, root: Path = ROOT) -> tuple[float, float, float]:
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [
        sys.executable,
        "-m",
        "commdsl",
        "predict",
        path,
        "--world",
        str(world),
        "--topology",
        "dgx-h100",
        "--sizes",
        sizes,
        "--links",
        "0",
    ]
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.chdir(root)  # `python -m` puts the working directory first on the path
        os.execvpe(cmd[0], cmd, env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({status})")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout to time alternately with this one")
    ap.add_argument("--only", default="", help="the rows whose label begins with this text")
    a = ap.parse_args()
    trees = [("this", ROOT)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
    for _, root in trees:
        compileall.compile_dir(root / "commdsl", quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        paths = programs(Path(tmp))
        print(f"load before: {os.getloadavg()[0]:.2f}")
        print("| row | tree | wall median [min–max] | CPU median [min–max] | peak RSS (max) |")
        print("|---|---|---:|---:|---:|")
        for label, program, world, sizes in ROWS:
            if not label.startswith(a.only):
                continue
            got: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in trees}
            for _ in range(a.repeat):
                for name, root in trees:
                    got[name].append(run(str(paths[program]), world, sizes, root))
            for name, _ in trees:
                walls, peaks, cpus = zip(*got[name])
                print(
                    f"| {label} | {name} | {_spread(walls)} | {_spread(cpus)} | {max(peaks):.0f} MB |",
                    flush=True,
                )
        print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


def _spread(xs) -> str:
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}–{max(xs):.2f}]"


if __name__ == "__main__":
    sys.exit(main())
