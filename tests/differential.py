"""Differential testing: lint, the simulator, `commdsl run` and the compiled script must agree.

For each random program (2–4 ranks; blocking and async P2P with tags, waits, collectives), four legs:
* lint: the checker's verdict: clean, a stall (deadlock, unmatched op, missing participant...), or
  another error;
* sim: clean ⇔ the simulation completes with no leftover message and no unwaited request; its final
  tensors are then written into the program as `expect`s (`with_expects`), so both real legs check
  the simulator's values themselves;
* run (`commdsl run --no-check`, real Gloo): a clean program completes with every expect holding and
  every tensor equal to the simulator's; a stalled one stops exactly where the engine says (its stuck
  ranks block until the hang guard stops them, or fail when a finished rank exits);
* script (`commdsl compile`, then `torchrun` on the script — plain torch, no commdsl): a clean program
  exits 0 with every expect holding on every rank; a stalled one fails or hangs (stopped after
  `--script-timeout`).
Programs with other errors (collective mismatches: Gloo may crash, hang or compute garbage) are judged
statically only. `--programs` runs the four legs on every program in programs/ instead.

    python tests/differential.py --count 1000 --seed 1               # lint, sim, run (docs/reliability.md)
    python tests/differential.py --count 100 --seed 1 --script       # all four legs
    python tests/differential.py --programs                          # programs/, all four legs
    python tests/differential.py --elements --count 300 --script     # element expressions, every dtype
    python tests/differential.py --spmd --count 300 --script         # the golden verdicts' SPMD programs
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

import numpy as np

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics import CommdslError
from commdsl.engine import run_engine
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.source import SourceFile
from processes import failed_in_set_up
from spmd_programs import generate as generate_any_backend

STALLS = {"D401", "D402", "C307", "C308", "P201", "P202", "P204"}
# Members disagreeing about a collective: the engine pairs the calls and goes on, a real backend hangs,
# crashes or computes garbage, depending on the algorithm. Such programs are judged statically only.
MISMATCHES = {"C301", "C302", "C303", "C304", "C305", "C306", "C309", "C312"}
# Ops torch refuses as they are called (a peer out of range or in no group, a send to oneself, a tag beyond
# int, a reduce op the backend lacks for the dtype) or that meet a partner of another size or dtype: the rank
# raises at once (Gloo: "Pair is not connected" for a receive from itself, "Cannot use ReduceOp.BAND with
# non-integral dtype") instead of waiting, so such programs are judged statically too.
RAISES = {"B601", "P205", "P206", "P208", "P209", "P210", "P212"}


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


DTYPES_ = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]
# numbers where NumPy's arithmetic and torch's part: float16 and int32 limits, wraps, steps of float16 and
# bfloat16, beyond int32 and float32, NaN from 0 / 0 and inf from x / 0
_INTS = ["0", "1", "2", "3", "7", "-1", "-3", "100", "127", "128", "255", "256", "-129", "1000", "65504", "65536",
         "2147483647", "2147483648", "-2147483649", "10000000000", "rank", "world"]
_FLOATS = ["0.5", "-0.5", "1.5", "2.5", "-2.5", "0.001", "10000.0", "3.4e38", "65504.0", "70000.0", "1e20", "0.1",
           "-7.75", "300.7", "-300.7", "1e-8", "3e9"]
_INITS = ["i", "i - 3", "rank * 3 + i", "(i - 3) * 1000.5", "i * 0.1 - 0.3", "rank * 200 + i * 20", "65504 - i",
          "i * 37 - 100", "i % 2 == 0", "2147483647 - i", "(i - 2) * 1e10", "i * 1.7", "-i * 0.5"]


def generate_spmd(rng: random.Random) -> tuple[int, str]:
    """A random program of tests/spmd_programs.py (views and chunks, loops with per-rank bounds, groups and
    meshes of ranks, collectives with every reduce op, local compute in every dtype), run on Gloo: its
    `backend` line dropped. Its golden verdicts pin lint and the simulator against themselves; here the run
    and the compiled script hold the simulator's values."""
    world, text = generate_any_backend(rng)
    return world, "".join(line for line in text.splitlines(keepends=True) if not line.startswith("backend"))


def generate_elements(rng: random.Random) -> tuple[int, str]:
    """A random program of element expressions over every dtype (world 2): four tensors of random dtypes and
    hostile values, 3-10 assignments mixing them with numbers at the dtypes' limits through every operator,
    `min`, `max`, `abs` and `**`, sometimes an all_reduce. Where the simulator's NumPy arithmetic and torch's
    part, the run (and the compiled script) differs from the simulator's values."""
    names = ["a", "b", "c", "d"]

    def expr(depth: int, view: str) -> str:
        r = rng.random()
        if depth <= 0 or r < 0.3:
            return rng.choice([rng.choice(names) + view] * 3 + [rng.choice(_INTS), rng.choice(_FLOATS), "i"])
        if r < 0.75:
            op = rng.choice(["+", "-", "*", "/", "//", "%", "+", "*", "==", "<", ">=", "!="])
            return f"({expr(depth - 1, view)} {op} {expr(depth - 1, view)})"
        if r < 0.85:
            return f"{rng.choice(['min', 'max'])}({expr(depth - 1, view)}, {expr(depth - 1, view)})"
        if r < 0.92:
            return f"abs({expr(depth - 1, view)})"
        if r < 0.96:
            return f"({expr(depth - 1, view)}) ** {rng.choice(['2', '3', '0', '-1', '2.0', '0.5'])}"
        return f"-{expr(depth - 1, view)}"

    lines = ["world 2"] + [f"tensor {t}: {rng.choice(DTYPES_)}[6] = {rng.choice(_INITS)}" for t in names]
    for _ in range(rng.randint(3, 10)):
        view = rng.choice(["", "", "[1:4]", ".chunk(rank, 2)"])
        op = rng.choice(["=", "=", "+=", "-=", "*=", "/="])
        lines.append(f"{rng.choice(names)}{view} {op} {expr(rng.randint(0, 3), view)}")
    if rng.random() < 0.5:
        lines.append(f"all_reduce {rng.choice(names)} op {rng.choice(['sum', 'max', 'min', 'product'])}")
    return 2, "\n".join(lines) + "\n"


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


@dataclass
class Verdict:
    kind: str  # "clean", "stall", "other"
    stuck: dict[int, int]  # rank -> line, for stalls
    codes: list[str]


def static_verdict(world: int, text: str) -> Verdict:
    try:
        program = load(SourceFile("gen.comm", text))
    except CommdslError as e:  # a program that does not resolve (the SPMD generator's misspelt names)
        return Verdict("other", {}, sorted({d.code for d in e.diagnostics}))
    errors = [d for d in check_program(program, CheckOptions(worlds=(world,))) if d.severity == "error"]
    codes = sorted({d.code for d in errors})
    try:
        result = run_engine(expand(program, world))
    except CommdslError:  # a program that does not expand (torch refuses an element op, N135): lint said so
        assert errors, f"expansion failed where the checker found no error\n{text}"
        return Verdict("other", {}, codes)
    clean_run = result.completed and not len(result.unmatched) and not result.never_waited.size
    if not errors and not clean_run or errors and clean_run and set(codes) <= STALLS | {"R501"}:
        raise AssertionError(f"checker and simulator disagree: codes {codes}, completed {result.completed}\n{text}")
    if not errors:
        return Verdict("clean", {}, codes)
    if result.stops and not set(codes) & (MISMATCHES | RAISES):
        assert set(codes) & STALLS, f"a stall reported without a stall code: {codes}\n{text}"
        return Verdict("stall", {r: b.op.span.line for r, b in result.stops.items()}, codes)
    return Verdict("other", {}, codes)


def with_expects(world: int, text: str) -> str:
    """The program with the simulator's final values of every tensor of every rank appended as `expect`s, so a
    real run checks them itself. Only for programs the simulation completes. Each row of the last dimension is
    cut into runs that one `expect` states exactly (`_runs`): the pinned ring was 3,000 lines, one an element,
    and parsing them, not running, was most of a leg's time."""
    from commdsl.simulate import simulate

    sim = simulate(expand(load(SourceFile("gen.comm", text)), world))
    assert sim.engine.completed, "with_expects needs a program that completes"
    lines = [text.rstrip("\n")]
    for rank in range(world):
        lines.append(f"on rank == {rank}:")
        for name, values in sim.tensors[rank].items():
            undefined = sim.undefined[rank][name]
            if not values.shape:
                if not undefined and _pinnable(values.item()):
                    lines.append(f"    expect {name} == {_literal(values.item())}")
                continue
            rows = values.reshape(-1, values.shape[-1])
            for r, (row, skip) in enumerate(zip(rows.tolist(), undefined.reshape(rows.shape).tolist())):
                head = "".join(f"[{k}]" for k in np.unravel_index(r, values.shape[:-1])) if values.ndim > 1 else ""
                for start, stop, expr in _runs(row, skip):
                    lines.append(f"    expect {name}{head}[{start}:{stop}] == {expr}")
    return "\n".join(lines) + "\n"


def _pinnable(v) -> bool:
    return v == v and abs(v) != float("inf")  # the language has no NaN or inf


def _runs(row: list, skip: list) -> list[tuple[int, int, str]]:
    """(start, stop, element expression) covering every defined, finite element of one row: the longest runs
    of one value (`v`) or of integers stepping by one integer (`v + d * i`, `i` counting from the run's start;
    not for booleans), else one element each."""
    out, k = [], 0
    while k < len(row):
        if skip[k] or not _pinnable(row[k]):
            k += 1
            continue
        end = k + 1
        nxt = k + 1 < len(row) and not skip[k + 1] and _pinnable(row[k + 1])
        step = None if not nxt or isinstance(row[k], bool) and row[k + 1] != row[k] else row[k + 1] - row[k]
        whole = step is not None and _exact(row[k]) and _exact(step)
        while end < len(row) and not skip[end] and _pinnable(row[end]) and row[end] - row[end - 1] == step:
            if step != 0 and not whole:
                break
            end += 1
        if end - k == 1 or step == 0:
            out.append((k, end, _literal(row[k])))
        else:
            out.append((k, end, f"{_literal(row[k])} + {_literal(step)} * i"))
        k = end
    return out


def _exact(v) -> bool:
    """An integer that `v + d * i` computes exactly in any dtype the expect compares in (3.4e38 is an integer
    too, but `3.4e38 + -3.4e38 * i` in float32 is not the next element)."""
    return float(v).is_integer() and abs(v) < 2**24


def _literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "(-9223372036854775807 - 1)" if v == -(2**63) and isinstance(v, int) else repr(v)  # no literal is 2**63


def script_run(world: int, text: str, timeout: float, env: dict | None = None, forked: bool = False) -> dict:
    """`commdsl compile --no-check` the program, then run the script under torchrun (a subprocess in its own
    session, killed with everything it started after `timeout` seconds): exit code, output, whether it hung.
    `forked`: the ranks are forked from one torch import with torchrun's worker environment instead
    (tests/forked_ranks.py: 3.5 s a launch here where torchrun takes 7-12 s)."""
    import subprocess

    from commdsl.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        path, script = Path(tmp) / "gen.comm", Path(tmp) / "gen.py"
        path.write_text(text)
        with _fds_to(Path(tmp) / "compile.txt"):
            code = main(["compile", str(path), "--world", str(world), "--no-check", "-o", str(script)])
        if code != 0:
            return {"exit_code": code, "output": (Path(tmp) / "compile.txt").read_text(), "hung": False, "compiled": False}
        launch = ([str(Path(__file__).with_name("forked_ranks.py")), str(world)] if forked else
                  ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world)])  # fmt: skip
        proc = subprocess.Popen([sys.executable, *launch, str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=tmp, start_new_session=True,
                                env={**os.environ, **(env or {})})
        try:
            out, _ = proc.communicate(timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)  # torchrun's workers run in sessions of their own: kill them by descent
            out, _ = proc.communicate()
            hung = True
        return {"exit_code": proc.returncode, "output": out, "hung": hung, "compiled": True}


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant, the deepest first (found before any of them dies)."""
    import signal

    from processes import children

    order, todo = [], [pid]
    while todo:
        p = todo.pop()
        order.append(p)
        todo += children(p)
    for p in reversed(order):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def compare_script(verdict: Verdict, world: int, result: dict) -> tuple[str, str]:
    """("exact" | "disagree", detail): the plain torch script against the static verdict."""
    output = result["output"][-800:]
    if verdict.kind == "clean":
        holds = sum(f"rank {r}: every expect holds" in result["output"] for r in range(world))
        if result["exit_code"] == 0 and not result["hung"] and holds == world:
            return "exact", ""
        return "disagree", f"clean program: script exit {result['exit_code']}, hung {result['hung']}: {output}"
    if result["hung"] or result["exit_code"] != 0:
        return "exact", ""
    return "disagree", f"stalled program, but the script exited 0: {output}"


def real_run(world: int, text: str, timeout: float, clean: bool = False) -> dict:
    """`commdsl run --no-check` (workers fork from this process); returns the --report JSON.

    A run that torch's set-up failed says nothing about the program (a loaded machine can take seconds to
    form a group, and a rank that ends at once can break a slower rank's connecting: `failed_in_set_up`):
    it is run again with a longer timeout. So is a `clean` program (the checker's verdict) that the hang
    guard stopped: a rank of a loaded 2-core machine can make no progress for the 2 s the random programs
    are given, and a program that hangs hangs again.
    """
    data = _run_once(world, text, timeout)
    if failed_in_set_up(data) or clean and data.get("hang"):
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
    """("exact" | "disagree", detail) for a real run against the static verdict.

    A stalled program ends on Gloo in one of two ways, both at the engine's lines (the engine models
    Gloo's early release from rooted collectives): its stuck ranks block until the hang guard stops
    them, or, once a rank that finished has exited (no closing barrier, as in a plain torch script),
    they fail with "Connection closed by peer". Ranks the launcher stopped because another failed had
    not passed their stopping point.
    """
    output = run.get("output", "")[-800:]
    if verdict.kind == "clean":
        if run.get("ok") is True and run["exit_code"] == 0:
            return "exact", ""
        return "disagree", f"clean program failed on Gloo (exit {run['exit_code']}): {output}"
    failures = run.get("failures") or []
    stuck = {h["rank"]: h["line"] for h in run.get("hang") or [] if h.get("state") == "blocked"}
    stuck.update({f["rank"]: f["line"] for f in failures if f["kind"] in ("peer", "timeout")})
    stopped = {f["rank"]: f["line"] for f in failures if f["kind"] == "stopped"}
    before = all(r in verdict.stuck and line is not None and line <= verdict.stuck[r] for r, line in stopped.items())
    if run["exit_code"] != 0 and stuck and before and all(verdict.stuck.get(r) == line for r, line in stuck.items()) \
            and set(stuck) | set(stopped) == set(verdict.stuck):
        return "exact", ""
    return "disagree", (f"expected stuck {verdict.stuck}, Gloo: stuck {stuck}, stopped {stopped} "
                        f"(exit {run['exit_code']}): {output}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=2.0, help="the hang guard's --timeout for each run")
    ap.add_argument("--script", action="store_true", help="also run each program's compiled script under torchrun")
    ap.add_argument("--script-timeout", type=float, default=30.0, help="seconds before a script counts as hung")
    ap.add_argument("--programs", action="store_true", help="the four legs on programs/*.comm instead")
    ap.add_argument("--elements", action="store_true", help="programs of element expressions over every dtype")
    ap.add_argument("--spmd", action="store_true", help="the random SPMD programs of the golden verdicts")
    args = ap.parse_args()
    if args.programs:
        return shipped(args)
    rng = random.Random(args.seed)
    tally = {"clean": 0, "stall": 0, "other": 0}
    legs = {"run": {"exact": 0, "disagree": 0}, "script": {"exact": 0, "disagree": 0}}
    ran = 0
    start = time.perf_counter()
    for k in range(args.count):
        world, text = (generate_elements if args.elements else generate_spmd if args.spmd else generate)(rng)
        verdict = static_verdict(world, text)  # raises on a checker/simulator disagreement
        tally[verdict.kind] += 1
        if verdict.kind == "other":
            continue
        ran += 1
        if verdict.kind == "clean":
            text = with_expects(world, text)
        outcome, detail = compare(verdict, real_run(world, text, args.timeout, clean=verdict.kind == "clean"))
        legs["run"][outcome] += 1
        if outcome != "exact":
            print(f"run: {outcome.upper()} on program {k}:\n{text}{detail}", file=sys.stderr)
        if args.script:
            outcome, detail = compare_script(verdict, world, script_run(world, text, args.script_timeout))
            legs["script"][outcome] += 1
            if outcome != "exact":
                print(f"script: {outcome.upper()} on program {k}:\n{text}{detail}", file=sys.stderr)
        if (k + 1) % 50 == 0:
            print(f"{k + 1} programs, {ran} real: {legs} ({time.perf_counter() - start:.0f} s)", flush=True)
    run, script = legs["run"], legs["script"]
    print(f"programs: {args.count} (seed {args.seed}); lint = simulator on all of them")
    print(f"verdicts: {tally['clean']} clean, {tally['stall']} stalled, {tally['other']} other errors (not run)")
    print(f"commdsl run on Gloo: {ran}: {run['exact']} exact, {run['disagree']} disagree")
    if args.script:
        print(f"compiled script under torchrun: {ran}: {script['exact']} exact, {script['disagree']} disagree")
    print(f"{time.perf_counter() - start:.0f} s")


def shipped(args) -> None:
    """The four legs on every program of programs/ at the world sizes test_runtime.py runs them at."""
    root = Path(__file__).resolve().parent.parent
    worlds = (2, 4)
    rows = []
    for path in sorted((root / "programs").glob("*.comm")):
        text = path.read_text()
        program = load(SourceFile(path.name, text))
        for world in (w for w in worlds if program.accepts(w)):
            verdict = static_verdict(world, text)
            pinned = with_expects(world, text)
            run_outcome, detail = compare(verdict, real_run(world, pinned, args.timeout, clean=verdict.kind == "clean"))
            script_outcome, detail2 = compare_script(verdict, world, script_run(world, pinned, args.script_timeout))
            rows.append((path.stem, world, verdict.kind, run_outcome, script_outcome))
            print(f"| {path.stem} | {world} | {verdict.kind} | {run_outcome} | {script_outcome} |", flush=True)
            for d in (detail, detail2):
                if d:
                    print(d, file=sys.stderr)
    agree = sum(r[3] == r[4] == "exact" for r in rows)
    print(f"{agree} of {len(rows)} (program, world) pairs: lint, sim, run and script agree")


if __name__ == "__main__":
    main()
