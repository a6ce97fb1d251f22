"""How fast `commdsl lint` is, as a user sees it: wall time and peak RSS of the command run as a subprocess.

    python benchmarks/lint_speed.py                     # every row, 3 runs each
    python benchmarks/lint_speed.py --quick             # without ring world 4096 and the world-65536 rows
    python benchmarks/lint_speed.py --rows ring-1024 startup --repeat 5

Every row is one `commdsl lint ... --format json` command (the JSON is parsed for the findings; it is
the same check as the default text output). The programs are generated into a temporary directory:

* ring-N: programs/ring_allreduce.comm with its `world 1..16` line widened, clean, `--world N`;
* ring-1024-unmatched / -deadlock / -reduce-op: the same ring at world 1024 with one bug added;
* ring-4096-wrong-peer / -dtype / -size / -isend / -isend-race / -isend-unwaited, dead-stores-4096: a bug
  on every rank at every step (the ring changed in one place), the ring's steps as `isend`, `recv`, `wait`,
  and 16 `all_reduce` results overwritten unread (`every_rank_programs`; heavy, skipped by --quick);
* 1f1b-64, interleaved-1f1b-64 / -nccl: programs/pipeline_1f1b.comm (256 micro-batches) and
  programs/interleaved_1f1b.comm with their `world` lines widened, at world 64, the interleaved one also
  on NCCL, where it deadlocks: a pipeline's ranks step apart, so the engine runs one rank per record (heavy);
* oworld-65536 / -missing: an O(world)-ops program (all_reduce, a batched neighbour exchange, an
  expect) at world 65536, clean and with rank 12345 left out of the all_reduce;
* programs: one `commdsl lint programs/*.comm` at every declared size;
* startup: `commdsl lint programs/p2p.comm`, a two-rank program: the cost of starting the command.

The rows are run round-robin (run 1 of every row, then run 2 of every row, ...) so that a change in
the machine's load spreads over all rows; the median and min-max of the runs are printed. Each run
has a wall-clock limit (--timeout); a row that hits it is not run again. The peak RSS is
`getrusage(RUSAGE_CHILDREN).ru_maxrss` of a small timer process that forks and execs the command
and has no other child (see TIMER); wall time is measured there from fork to reaping. "ops" is
`commdsl.expand(program, world).num_ops` (ops over all ranks, each op of a batch counted), computed
in this process once per row before any timing; µs/op is the median wall time over that count, and
"net" (rows of ≥ 1 M ops) subtracts the startup row's median. Prints a markdown table for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RING = "programs/ring_allreduce.comm"
PIPELINES = ("pipeline_1f1b", "interleaved_1f1b")  # their `world` lines widened: every rank steps apart
LOOPS = "for s in 0 .. world - 2:                       # reduce-scatter"

OWORLD = """\
program oworld
world 1..65536

tensor x: int64[4] = rank
tensor y: int64[4]

all_reduce x
batch:
    send x to (rank + 1) % world
    recv y from (rank - 1) % world
expect y == world * (world - 1) / 2
"""


@dataclass
class Row:
    name: str
    label: str
    files: list[str]  # relative to the temp dir, or to ROOT when `in_repo`
    world: int | None  # --world N, or every declared size
    target_s: float | None = None
    target_mb: float | None = None
    findings_expected: bool = False
    per_op: bool = True
    heavy: bool = False  # skipped by --quick
    in_repo: bool = False
    params: dict[str, int] = field(default_factory=dict)  # --set NAME=VALUE
    backend: str | None = None  # --backend, else the program's own
    ops: int = 0
    walls: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    timed_out: float | None = None
    findings: str = ""
    rcs: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"expected one {old!r} in the program"
    return text.replace(old, new)


def write_programs(tmp: Path) -> None:
    ring = replace_once((ROOT / RING).read_text(), "world 1..16\n", "world 1..65536\n")
    (tmp / "ring.comm").write_text(ring)
    (tmp / "ring_unmatched.comm").write_text(ring + "on rank == world - 1:\n    send x to 0\n")
    (tmp / "ring_deadlock.comm").write_text(replace_once(
        ring, LOOPS, "on rank < 2:\n    send x to 1 - rank\n    recv tmp from 1 - rank\n" + LOOPS))
    (tmp / "ring_reduce_op.comm").write_text(replace_once(
        ring, LOOPS, "on rank == 3:\n    all_reduce x op max\nelse:\n    all_reduce x op sum\n" + LOOPS))
    for name, text in every_rank_programs(ring).items():
        (tmp / f"{name}.comm").write_text(text)
    for name in PIPELINES:
        text = (ROOT / "programs" / f"{name}.comm").read_text()
        (tmp / f"{name}.comm").write_text(re.sub(r"(?m)^world .*$", "world 2..", text, count=1))
    (tmp / "oworld.comm").write_text(OWORLD)
    (tmp / "oworld_missing.comm").write_text(replace_once(
        OWORLD, "\nall_reduce x\n", "\non rank != 12345:\n    all_reduce x\n"))


RS_BATCH = """\
    batch:
        send x.chunk(out, world) to right
        recv tmp[0 : x.chunk(into, world).size] from left
"""
AG_BATCH = """\
    batch:
        send x.chunk((rank - s + 1) % world, world) to right
        recv x.chunk((rank - s) % world, world) from left
"""
RS_ISEND = """\
    h = isend x.chunk(out, world) to right
    recv tmp[0 : x.chunk(into, world).size] from left
WAIT_H"""
AG_ISEND = """\
    g = isend x.chunk((rank - s + 1) % world, world) to right
    recv x.chunk((rank - s) % world, world) from left
WAIT_G"""
DEAD_STORES = """\
program dead_stores
world 1..65536
param n = 64
tensor x: float32[n] = rank
for s in 0 .. 15:
    all_reduce x
    x = rank
expect x == rank
"""


def every_rank_programs(ring: str) -> dict[str, str]:
    """The ring changed in one place so that every rank has the bug at every step (docs/benchmarks.md, "A bug on
    every rank of a loop"), its steps as `isend`, `recv`, `wait`, and a dead store on every rank."""
    isend = replace_once(replace_once(ring, RS_BATCH, RS_ISEND), AG_BATCH, AG_ISEND)
    return {
        "ring_wrong_peer": replace_once(ring, "recv tmp[0 : x.chunk(into, world).size] from left",
                                        "recv tmp[0 : x.chunk(into, world).size] from right"),
        "ring_dtype": replace_once(ring, "tensor tmp: float32", "tensor tmp: float64"),
        "ring_size": replace_once(ring, "recv tmp[0 : x.chunk(into, world).size] from left", "recv tmp from left"),
        "ring_isend": isend.replace("WAIT_H", "    wait h\n").replace("WAIT_G", "    wait g\n"),
        "ring_isend_race": isend.replace("WAIT_H", "    x.chunk(out, world) *= 1\n    wait h\n").replace(
            "WAIT_G", "    wait g\n"),
        "ring_isend_unwaited": isend.replace("WAIT_H", "").replace("WAIT_G", ""),
        "dead_stores": DEAD_STORES,
    }


def all_rows() -> list[Row]:
    rows = [Row(f"ring-{w}", f"ring all-reduce, clean, world {w}", ["ring.comm"], w, heavy=w > 1024)
            for w in (64, 256, 1024, 4096)]
    for name, file, what in (("unmatched", "ring_unmatched.comm", "+ one unmatched send"),
                             ("deadlock", "ring_deadlock.comm", "+ head-to-head deadlock, ranks 0 and 1"),
                             ("reduce-op", "ring_reduce_op.comm", "+ reduce op `max` on rank 3")):
        rows.append(Row(f"ring-1024-{name}", f"ring, world 1024, {what}", [file], 1024, 2.0, 1000.0, True))
    for name, what, findings in (
        ("wrong_peer", "`recv` from the wrong side", True),
        ("dtype", "`recv` into a float64 buffer", True),
        ("size", "`recv` into the whole buffer", True),
        ("isend", "steps as `isend`, `recv`, `wait` (clean)", False),
        ("isend_race", "`isend` buffer written before its `wait`", True),
        ("isend_unwaited", "`isend` never waited", True),
    ):
        rows.append(Row(f"ring-4096-{name.replace('_', '-')}", f"ring, world 4096, every rank: {what}",
                        [f"ring_{name}.comm"], 4096, findings_expected=findings, heavy=True))
    rows.append(Row("dead-stores-4096", "16 all_reduce results overwritten unread on every rank, world 4096",
                    ["dead_stores.comm"], 4096, findings_expected=True, heavy=True))
    for name, label, params, backend, findings in (
        ("1f1b-64", "1F1B pipeline, 256 micro-batches, world 64, clean", {"micro": 256}, None, False),
        ("interleaved-1f1b-64", "interleaved 1F1B, 2 chunks × 128 micro-batches, world 64, clean", {}, None, False),
        ("interleaved-1f1b-64-nccl", "the same on NCCL: a rank's isends in issue order deadlock", {}, "nccl", True),
    ):
        file = "interleaved_1f1b.comm" if name.startswith("interleaved") else "pipeline_1f1b.comm"
        rows.append(Row(name, label, [file], 64, params=params, backend=backend, findings_expected=findings,
                        heavy=True))
    rows.append(Row("oworld-65536", "O(world) ops, clean, world 65536", ["oworld.comm"], 65536, 5.0, 2000.0,
                    heavy=True))
    rows.append(Row("oworld-65536-missing", "O(world) ops, rank 12345 skips the all_reduce, world 65536",
                    ["oworld_missing.comm"], 65536, 5.0, 2000.0, True, heavy=True))
    progs = sorted(os.path.relpath(p, ROOT) for p in glob.glob(str(ROOT / "programs" / "*.comm")))
    rows.append(Row("programs", "all of programs/, every declared size", progs, None, 2.0, per_op=False,
                    in_repo=True))
    rows.append(Row("startup", "startup: programs/p2p.comm (world 2)", ["programs/p2p.comm"], None, per_op=False,
                    in_repo=True))
    return rows


def lint_command() -> list[str]:
    """The installed `commdsl` script beside this interpreter, else `python -m commdsl`."""
    beside = Path(sys.executable).parent / "commdsl"
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-m", "commdsl"]


def argv_of(row: Row, tmp: Path) -> list[str]:
    files = [f if row.in_repo else str(tmp / f) for f in row.files]
    sets = [arg for name, value in row.params.items() for arg in ("--set", f"{name}={value}")]
    backend = ["--backend", row.backend] if row.backend else []
    return ["lint", *files, *(["--world", str(row.world)] if row.world else []), *sets, *backend, "--format", "json"]


def count_ops(row: Row, tmp: Path) -> int:
    import commdsl

    total = 0
    for f in row.files:
        program = commdsl.load(ROOT / f if row.in_repo else tmp / f)
        for world in [row.world] if row.world else program.world_sizes():
            schedule = commdsl.expand(program, world, row.params)
            total += schedule.num_ops
            del schedule
    gc.collect()
    return total


# Times one command and reads its peak RSS from a small, fresh process: a child's ru_maxrss starts at
# the RSS of the process that forked it (Linux keeps the old address space's high-water mark across
# exec), so forking `commdsl` straight from this script, which has expanded a ring of 84 M ops to count
# them, would report this script's size instead of the child's.
TIMER = """\
import os, resource, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status = os.waitpid(pid, 0)
wall = time.perf_counter() - t0
rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
with open(sys.argv[1], "w") as f:
    f.write(f"{wall!r} {rss_kb} {os.waitstatus_to_exitcode(status)}")
"""


def run_once(cmd: list[str], env: dict, timeout: float) -> tuple[float, float, int, str, bool]:
    """(wall s, peak RSS MB, exit code, stdout, timed out) of one run of `cmd`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryDirectory() as tdir:
        result = Path(tdir) / "result"
        proc = subprocess.Popen([sys.executable, "-S", "-c", TIMER, str(result), *cmd], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return timeout, 0.0, -9, "", True
        out.seek(0)
        text = out.read().decode(errors="replace")
        if not result.exists():
            return 0.0, 0.0, proc.returncode or 2, text + "\n(no timing: the timer process failed)", False
        wall, rss_kb, rc = result.read_text().split()
    return float(wall), int(rss_kb) / 1000.0, int(rc), text, False


RANK = re.compile(r"\branks? (\[[^\]]*\]|\d+)")


def ranks_in(text: str) -> list[str]:
    found = []
    for m in RANK.finditer(text):
        for part in m.group(1).strip("[]").split(","):
            part = part.strip()
            if part and part not in found:
                found.append(part)
    return found


def summarise(text: str) -> str:
    """`code line N ranks ...` for each finding in lint's JSON."""
    start = text.find("[")
    diags = json.loads(text[start:]) if start >= 0 else []
    if not diags:
        return "none"
    parts = []
    for d in diags:
        ranks = ranks_in(d["message"]) or ranks_in(" ".join([d.get("label") or ""] +
                                                            [n["message"] for n in d.get("notes", [])]))
        lines = [str(d["line"])] + [str(n["line"]) for n in d.get("notes", []) if n.get("line")]
        where = f"line {', '.join(dict.fromkeys(lines))}"
        parts.append(f"{d['code']} {where}" + (f", ranks {', '.join(ranks)}" if ranks else ""))
    if len(parts) > 3:
        parts = parts[:3] + [f"+{len(parts) - 3} more"]
    return "; ".join(parts)


def fmt_s(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}–{max(xs):.2f}]"


def verdict(row: Row) -> tuple[str, str]:
    """(target, met?) cells."""
    if row.target_s is None:
        return "—", "—"
    target = f"≤ {row.target_s:g} s" + (f", ≤ {row.target_mb / 1000:g} GB" if row.target_mb else "")
    if row.timed_out or not row.walls:
        return target, "**no** (timed out)"
    misses = []
    wall = statistics.median(row.walls)
    if wall > row.target_s:
        misses.append(f"+{wall - row.target_s:.2f} s ({wall / row.target_s:.2f}×)")
    if row.target_mb and max(row.rss_mb) > row.target_mb:
        misses.append(f"+{max(row.rss_mb) - row.target_mb:.0f} MB")
    if row.findings_expected and row.findings == "none":
        misses.append("bug not reported")
    return target, "yes" if not misses else "**no**: " + ", ".join(misses)


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


def version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def main() -> None:
    rows = all_rows()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip ring world 4096 and the world-65536 rows")
    ap.add_argument("--rows", nargs="+", metavar="NAME", choices=[r.name for r in rows],
                    help="only these rows: " + ", ".join(r.name for r in rows))
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (default 3)")
    ap.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit of one run, s (default 60)")
    args = ap.parse_args()
    if args.rows:
        rows = [r for r in rows if r.name in args.rows]
    if args.quick:
        rows = [r for r in rows if not r.heavy]

    sys.path.insert(0, str(ROOT))
    import commdsl

    assert Path(commdsl.__file__).resolve().is_relative_to(ROOT), commdsl.__file__
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("COMMDSL_MAX_WORLD", None)
    cmd0 = lint_command()
    load_before = loadavg()
    started = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="lint_speed_") as tmpdir:
        tmp = Path(tmpdir)
        write_programs(tmp)
        for row in rows:
            row.ops = count_ops(row, tmp)
        for _ in range(args.repeat):
            for row in rows:
                if row.timed_out:
                    continue
                wall, rss, rc, text, hit = run_once(cmd0 + argv_of(row, tmp), env, args.timeout)
                if hit:
                    row.timed_out = args.timeout
                    continue
                row.walls.append(wall)
                row.rss_mb.append(rss)
                row.rcs.add(rc)
                if rc not in (0, 1):
                    row.errors.append(text[-500:])
                    continue
                try:
                    row.findings = summarise(text)
                except (ValueError, KeyError) as exc:
                    row.errors.append(f"unreadable JSON ({exc}): {text[:300]}")
    load_after = loadavg()
    total = time.perf_counter() - started

    startup = next((statistics.median(r.walls) for r in rows if r.name == "startup" and r.walls), None)
    print("| row | ops | wall median [min–max] | peak RSS (max of runs) | µs/op | findings | target | met? |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for row in rows:
        if row.timed_out and not row.walls:
            wall, rss = f"> {row.timed_out:g} s (timed out)", "—"
        else:
            wall = fmt_s(row.walls) + (f" (then > {row.timed_out:g} s)" if row.timed_out else "")
            rss = f"{max(row.rss_mb):,.0f} MB"
        per_op = "—"
        if row.per_op and row.walls and row.ops:
            med = statistics.median(row.walls)
            per_op = f"{med / row.ops * 1e6:.3g}"
            if startup is not None and row.ops >= 1_000_000:
                per_op += f" ({max(med - startup, 0.0) / row.ops * 1e6:.2g} net)"
        findings = row.findings or "—"
        if row.errors:
            findings = f"exit {sorted(row.rcs)}: " + row.errors[0].strip().splitlines()[-1][:120]
        print(f"| {row.label} | {row.ops:,} | {wall} | {rss} | {per_op} | {findings} | {' | '.join(verdict(row))} |")

    ring = [r for r in rows if r.name.startswith("ring-") and r.name[5:].isdigit() and r.walls]
    if len(ring) > 1:
        def trend(costs: list[float]) -> str:
            flat = all(b <= a * 1.1 for a, b in zip(costs, costs[1:]))
            return f"{' → '.join(f'{c:.3g}' for c in costs)} ({'flat or falling' if flat else 'RISING'})"

        print(f"\nclean ring µs/op, world {' → '.join(str(r.world) for r in ring)}: "
              f"{trend([statistics.median(r.walls) / r.ops * 1e6 for r in ring])}", end="")
        big = [r for r in ring if r.ops >= 1_000_000]  # below that, wall minus startup is mostly noise
        if startup is not None and len(big) > 1:
            print(f"; net of startup, world {' → '.join(str(r.world) for r in big)}: "
                  f"{trend([max(statistics.median(r.walls) - startup, 0.0) / r.ops * 1e6 for r in big])}", end="")
        print("  [flat = within 10 % of the row before, or below it]")

    print(f"\ncommand: python benchmarks/lint_speed.py {shlex.join(sys.argv[1:])}".rstrip())
    print(f"each run: {shlex.join(cmd0)} lint FILE... [--world N] --format json   (cwd {ROOT}, "
          f"PYTHONPATH={ROOT}; {args.repeat} runs per row, round-robin, timeout {args.timeout:g} s per run)")
    for row in rows:
        print(f"  {row.name}: commdsl {shlex.join(argv_of(row, Path('$TMP')))}")
    print(f"machine: nproc {len(os.sched_getaffinity(0))}, {platform.machine()}, Python {platform.python_version()}, "
          f"torch {version('torch')}, numpy {version('numpy')}, commdsl from {Path(commdsl.__file__).parent}")
    print(f"load (/proc/loadavg): before {load_before} · after {load_after}; whole script {total:.1f} s")


if __name__ == "__main__":
    main()
