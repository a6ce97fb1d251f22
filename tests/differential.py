"""Differential testing: checker, simulator and real Gloo must agree on generated programs.

For each random program (2–4 ranks; blocking and async P2P with tags, waits, collectives):
* the checker's verdict: clean, a stall (deadlock, unmatched op, missing participant...), or another
  error;
* the simulator: clean ⇔ it completes with no leftover message and no unwaited request;
* real Gloo (`commdsl run --no-check`): a clean program completes with every tensor equal to the
  simulator's; a stalled one is stopped by the hang guard, whose table names exactly the ranks the
  engine found stuck, at the same source lines. Programs with other errors (collective mismatches:
  Gloo may crash, hang or compute garbage) are judged statically only.

    python tests/differential.py --count 1000 --seed 1     # the tally in docs/reliability.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from commdsl.checker import CheckOptions, check_program
from commdsl.engine import run_engine
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.source import SourceFile

STALLS = {"D401", "D402", "C307", "C308", "P201", "P202", "P204"}
# Members disagreeing about a collective: the engine pairs the calls and goes on, a real backend hangs,
# crashes or computes garbage, depending on the algorithm. Such programs are judged statically only.
MISMATCHES = {"C301", "C302", "C303", "C304", "C305", "C306", "C309", "C312"}


def generate(rng: random.Random) -> tuple[int, str]:
    """A random program: each rank's ops are its part of one global sequence of events (messages and
    collectives), which never deadlocks; half the programs then get one mutation — two ops swapped,
    an op dropped, a tag or a peer changed — the way real bugs come about."""
    world = rng.randint(2, 4)
    ranks: list[list[str]] = [[] for _ in range(world)]
    asyncs = [0] * world
    for k in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.7:
            src, dst = rng.sample(range(world), 2)
            tag = f" tag {rng.choice([1, 2])}" if rng.random() < 0.3 else ""
            if rng.random() < 0.35:
                ranks[src].append(f"h{k}s = isend b{k} to {dst}{tag}")
                asyncs[src] += 1
            else:
                ranks[src].append(f"send b{k} to {dst}{tag}")
            if rng.random() < 0.35:
                ranks[dst].append(f"h{k}r = irecv b{k} from {src}{tag}")
                asyncs[dst] += 1
            else:
                ranks[dst].append(f"recv b{k} from {src}{tag}")
        else:
            op = rng.choice(["all_reduce z", "broadcast y from 0", "barrier"])
            for r in range(world):
                ranks[r].append(op)
    for r in range(world):
        if asyncs[r]:
            ranks[r].append("wait all")
    if rng.random() < 0.5:
        _mutate(rng, ranks, world)
    lines = [f"world {world}", "tensor z: float32[2] = rank + 1", "tensor y: float32[2] = rank * 10"]
    lines += [f"tensor b{k}: float32[2] = rank * 100 + {k}" for k in range(6)]
    for r in range(world):
        lines.append(f"on rank == {r}:")
        lines += ["    " + b for b in (ranks[r] or ["z += 0"])]
    return world, "\n".join(lines) + "\n"


def _mutate(rng: random.Random, ranks: list[list[str]], world: int) -> None:
    r = rng.randrange(world)
    ops = ranks[r]
    kind = rng.randrange(4)
    if kind == 0 and len(ops) >= 2:
        i = rng.randrange(len(ops) - 1)
        ops[i], ops[i + 1] = ops[i + 1], ops[i]
    elif kind == 1 and ops and not ops[-1].startswith("wait"):
        ops.pop(rng.randrange(len(ops)))
    elif kind == 2 and any("send" in op or "recv" in op for op in ops):
        i = rng.choice([i for i, op in enumerate(ops) if "send" in op or "recv" in op])
        if " tag " in ops[i]:
            head, tag = ops[i].rsplit(" tag ", 1)
            ops[i] = f"{head} tag {3 - int(tag)}"
        else:
            ops[i] += " tag 1"
    elif ops:
        i = rng.randrange(len(ops))
        for word in (" to ", " from "):
            if word in ops[i]:
                head, tail = ops[i].split(word)
                peer = int(tail.split()[0])
                other = rng.choice([p for p in range(world) if p not in (peer, r)] or [peer])
                ops[i] = f"{head}{word}{other}" + tail[len(str(peer)):]


# Collectives whose Gloo algorithm (a tree from or to the root) can release a member before every
# member arrives; the engine's model — a collective completes when all members have called it, the
# portable assumption (NCCL's ring kernels need every member) — holds such a rank back.
EARLY_RELEASE = {"broadcast", "reduce", "gather", "scatter"}


@dataclass
class Verdict:
    kind: str  # "clean", "stall", "other"
    stuck: dict[int, int]  # rank -> line, for stalls
    codes: list[str]
    held_at_rooted: frozenset = frozenset()  # stuck ranks the engine holds at a rooted collective


def static_verdict(world: int, text: str) -> Verdict:
    program = load(SourceFile("gen.comm", text))
    errors = [d for d in check_program(program, CheckOptions(worlds=(world,))) if d.severity == "error"]
    result = run_engine(expand(program, world))
    codes = sorted({d.code for d in errors})
    clean_run = result.completed and not len(result.unmatched) and not result.never_waited.size
    if not errors and not clean_run or errors and clean_run and set(codes) <= STALLS | {"R501"}:
        raise AssertionError(f"checker and simulator disagree: codes {codes}, completed {result.completed}\n{text}")
    if not errors:
        return Verdict("clean", {}, codes)
    if result.stops and not set(codes) & MISMATCHES:
        assert set(codes) & STALLS, f"a stall reported without a stall code: {codes}\n{text}"
        rooted = frozenset(r for r, b in result.stops.items() if getattr(b.op, "kind", None) in EARLY_RELEASE)
        return Verdict("stall", {r: b.op.span.line for r, b in result.stops.items()}, codes, rooted)
    return Verdict("other", {}, codes)


def real_run(world: int, text: str, timeout: float) -> dict:
    """`commdsl run --no-check` (workers fork from this process); returns the --report JSON.

    A run whose every rank was still setting up its process group when the hang guard fired says
    nothing about the program (a loaded machine can take seconds to form a group): it is run again
    with a longer timeout.
    """
    data = _run_once(world, text, timeout)
    hang = data.get("hang") or []
    if hang and all(h.get("state") == "setting up" for h in hang):
        data = _run_once(world, text, timeout * 4)
    return data


def _run_once(world: int, text: str, timeout: float) -> dict:
    from commdsl.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gen.comm"
        path.write_text(text)
        report = Path(tmp) / "report.json"
        log = Path(tmp) / "output.txt"
        with _fds_to(log):
            code = main(["run", str(path), "--nproc", str(world), "--no-check", "--timeout", str(timeout),
                         "--report", str(report), "--color", "never"])
        data = json.loads(report.read_text()) if report.exists() else {}
        data["exit_code"] = code
        data["output"] = log.read_text()
        return data


@contextlib.contextmanager
def _fds_to(path: Path):
    """Send this process's stdout and stderr to a file at the descriptor level, as a shell redirect does
    (workers fork from here and need real descriptors)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def compare(verdict: Verdict, run: dict) -> tuple[str, str]:
    """("exact" | "early-release" | "disagree", detail) for a real run against the static verdict.

    "early-release": the run hung as predicted, but the engine holds a rank at a rooted collective
    (broadcast, reduce, gather, scatter) that Gloo's tree algorithm let through early, so that rank —
    and ranks it then served — stopped at later lines than the engine's.
    """
    output = run.get("output", "")[-800:]
    if verdict.kind == "clean":
        if run.get("ok") is True and run["exit_code"] == 0:
            return "exact", ""
        return "disagree", f"clean program failed on Gloo (exit {run['exit_code']}): {output}"
    blocked = {h["rank"]: h["line"] for h in run.get("hang") or [] if h.get("state") == "blocked"}
    if run["exit_code"] != 0 and blocked == verdict.stuck:
        return "exact", ""
    everyone_finished = not run.get("hang") and not run.get("failures")
    if verdict.held_at_rooted and (blocked and run["exit_code"] != 0 or everyone_finished):
        # Gloo released a member early: it (and whoever it then served) stops later than the engine says,
        # or, when nothing hung at all, every rank finished (the program runs on Gloo, not portably)
        return "early-release", f"engine {verdict.stuck}, Gloo {blocked}; held at a rooted collective: " \
                                f"{sorted(verdict.held_at_rooted)}"
    return "disagree", f"expected stuck {verdict.stuck}, hang guard saw {blocked} (exit {run['exit_code']}): {output}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=2.0, help="the hang guard's --timeout for each run")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tally = {"clean": 0, "stall": 0, "other": 0}
    outcomes = {"exact": 0, "early-release": 0, "disagree": 0}
    ran = 0
    start = time.perf_counter()
    for k in range(args.count):
        world, text = generate(rng)
        verdict = static_verdict(world, text)  # raises on a checker/simulator disagreement
        tally[verdict.kind] += 1
        if verdict.kind == "other":
            continue
        ran += 1
        outcome, detail = compare(verdict, real_run(world, text, args.timeout))
        outcomes[outcome] += 1
        if outcome != "exact":
            print(f"{outcome.upper()} on program {k}:\n{text}{detail}", file=sys.stderr)
        if (k + 1) % 50 == 0:
            print(f"{k + 1} programs, {ran} real runs: {outcomes} ({time.perf_counter() - start:.0f} s)", flush=True)
    print(f"programs: {args.count} (seed {args.seed}); checker = simulator on all of them")
    print(f"verdicts: {tally['clean']} clean, {tally['stall']} stalled, {tally['other']} other errors (not run)")
    print(f"real Gloo runs: {ran}: {outcomes['exact']} exact, {outcomes['early-release']} hung as predicted but a rank "
          f"passed a rooted collective early (later stopping points), {outcomes['disagree']} disagree; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
