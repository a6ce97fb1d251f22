"""Issue 17: `commdsl predict` against `commdsl bench` on this machine, every program the bench runs.

    python benchmarks/predict_accuracy.py [--out DIR] [--iters 10] [--sizes 64K:64M] [--worlds 2,4]

Calibrates first (`commdsl bench --calibrate --nproc N -o DIR/host.toml`, N the largest world), then for each program and world
size measures it (`commdsl bench ... --json DIR/<name>-<N>-bench.json`) and predicts it on the calibrated
topology (`commdsl predict ... --measured ... --json DIR/<name>-<N>-predict.json`), and prints one markdown
table: size, measured and predicted time, error. Every command it runs is printed to stderr first.

    python benchmarks/predict_accuracy.py --topology benchmarks/figures/predict-host.toml \
        --table benchmarks/figures/predict-run1.md

predicts again the measured column of a table this script printed (the two campaigns of docs/predict.md are
kept in benchmarks/figures/predict-run1.md and -run2.md), measuring nothing: how a change to the model moves
every row, on the same measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = [  # (name, program args, size param args)
    ("ring_allreduce", ["programs/ring_allreduce.comm"], []),
    ("recursive_doubling_allreduce", ["programs/recursive_doubling_allreduce.comm"], []),
    ("hierarchical_allreduce", ["programs/hierarchical_allreduce.comm"], []),
    ("pipeline_1f1b", ["programs/pipeline_1f1b.comm"], ["--param", "width"]),
    ("moe_all_to_all", ["programs/moe_all_to_all.comm"], ["--param", "hidden"]),
    ("all_reduce (built-in)", ["--collective", "all_reduce"], []),
    ("all_to_all (built-in)", ["--collective", "all_to_all"], []),
]


def commdsl(*args: str) -> None:
    cmd = [sys.executable, "-m", "commdsl", *args]
    print("$ commdsl " + " ".join(args), file=sys.stderr, flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, timeout=900)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/commdsl-predict-accuracy")
    ap.add_argument("--iters", default="10")
    ap.add_argument("--sizes", default="64K:64M")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--topology", help="use this topology file instead of calibrating")
    ap.add_argument("--reuse", action="store_true", help="keep bench JSONs already in --out (predict again only)")
    ap.add_argument("--table", help="take the measured times from this script's table (needs --topology)")
    a = ap.parse_args()
    if a.table and not a.topology:
        ap.error("--table needs --topology (the calibration the measurements were made with)")
    table = _measured_table(Path(a.table)) if a.table else None
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    topo = a.topology or str(out / "host.toml")
    if not a.topology:
        nproc = str(max(int(w) for w in a.worlds.split(",")))  # as many ranks as the most it predicts: at 4 and
        # more the calibration also times messages and adds at once (how much of the host they share)
        commdsl("bench", "--calibrate", "--nproc", nproc, "--sizes", "1K:64M", "--iters", a.iters, "-o", topo)
    print("| program | N | size | measured (us) | predicted (us) | error |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, prog, param in CASES:
        for world in a.worlds.split(","):
            stem = name.split(" ")[0] + ("-builtin" if "built-in" in name else "")
            bench = out / f"{stem}-{world}-bench.json"
            pred = out / f"{stem}-{world}-predict.json"
            try:
                if table is not None:
                    measured = table.get((name, int(world)), {})
                    if not measured:
                        continue
                elif not (a.reuse and bench.exists()):
                    commdsl(
                        "bench",
                        *prog,
                        *param,
                        "--nproc",
                        world,
                        "--sizes",
                        a.sizes,
                        "--iters",
                        a.iters,
                        "--warmup",
                        "3",
                        "--json",
                        str(bench),
                    )
                commdsl(
                    "predict",
                    *prog,
                    *param,
                    "--world",
                    world,
                    "--topology",
                    topo,
                    "--sizes",
                    a.sizes,
                    *([] if table is not None else ["--measured", str(bench)]),
                    "--json",
                    str(pred),
                )
            except subprocess.SubprocessError as e:
                print(f"| {name} | {world} | failed: {e} | | | |", flush=True)
                continue
            if table is None:
                measured = {r["size_bytes"]: r for r in json.loads(bench.read_text())["rows"]}
            for r in json.loads(pred.read_text())["rows"]:
                m = measured.get(r["size_bytes"])
                if m is None:
                    continue
                err = (r["time_us"] - m["time_us"]) / m["time_us"] * 100
                print(
                    f"| {name} | {world} | {r['size_bytes']} | {m['time_us']:.1f} | {r['time_us']:.1f} | "
                    f"{err:+.1f} % |",
                    flush=True,
                )
    return 0


def _measured_table(path: Path) -> dict[tuple[str, int], dict[int, dict]]:
    """(program, N) → size → {"time_us": measured}, from the rows of a table this script printed."""
    out: dict[tuple[str, int], dict[int, dict]] = {}
    row = re.compile(r"^\| ([\w ()-]+?) \| (\d+) \| (\d+) \| ([\d.]+) \|", re.M)
    for name, world, size, us in row.findall(path.read_text()):
        out.setdefault((name, int(world)), {})[int(size)] = {"time_us": float(us)}
    return out


if __name__ == "__main__":
    sys.exit(main())
