"""The runtime's local ops and data reads against the same statements written by hand in torch.

    python benchmarks/local_step_overhead.py [--calls 3000] [--rounds 5]

`programs/moe_dispatch.comm` at world 2, rank 0: the steps `commdsl run` and `commdsl bench` execute for its
histogram (`send_counts[j] = sum(expert == j)`: a data read the run checks against the value the schedule
was expanded with, then the constant it stores), its `let received = sum(recv_counts)`, one element of a
split list (`send_counts[j]`) and its expert (`expert_out[0:received] = expert_in[0:received] * 2 + rank`),
each timed alone (`ops.build_steps`, no process group: none of them communicates), beside the torch a user
would write for it. Rounds alternate the two sides; each figure is the median over the rounds of each
round's median call, in µs, one intra-op thread (as the bench runs). Results: docs/benchmarks.md,
"Local ops and data reads".
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.runtime.ops import Context, allocate, build_steps
from commdsl.schedule import Compute, Read
from commdsl.simulate import simulate
from commdsl.source import SourceFile

PROGRAM = Path(__file__).resolve().parent.parent / "programs" / "moe_dispatch.comm"


def median_us(f, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    schedule = expand(load(SourceFile(str(PROGRAM), PROGRAM.read_text())), 2, {})
    specs, ops, cpu = schedule.tensors[0], list(schedule.ops[0]), torch.device("cpu")
    ctx = Context(0, "gloo", cpu, allocate(specs, 0, 2, cpu), {n: s.dtype for n, s in specs.items()}, [None], print)
    for name, values in simulate(schedule).tensors[0].items():  # the end state: every read finds its value
        ctx.buffers[name].copy_(torch.from_numpy(values.reshape(-1)))

    def step(op):
        return build_steps([op], ctx)[0]

    def read(text: str):
        return step(next(op for op in ops if isinstance(op, Read) and op.text == text))

    count = next(i for i, op in enumerate(ops) if isinstance(op, Read) and op.text == "sum(expert == j)")
    histogram, store = step(ops[count]), step(ops[count + 1])  # the read, then the value it stores
    expert_op = next(op for op in ops if isinstance(op, Compute) and op.value[0] != "c")
    b, n = ctx.buffers, expert_op.target.numel

    def hand_histogram():
        b["send_counts"][0] = (b["expert"] == 0).sum()

    def hand_expert():
        b["expert_out"][:n] = b["expert_in"][:n] * 2 + 0

    cases = [
        ("send_counts[j] = sum(expert == j)", lambda: (histogram(), store()), hand_histogram),
        ("let received = sum(recv_counts)", read("sum(recv_counts)"), lambda: int(b["recv_counts"].sum())),
        ("send_counts[j] (a split)", read("send_counts[j]"), lambda: int(b["send_counts"][0])),
        ("expert_out[0:received] = expert_in[0:received] * 2 + rank", step(expert_op), hand_expert),
    ]
    print("| statement | commdsl (µs) | by hand (µs) | ratio |\n|---|---:|---:|---:|")
    for text, ours, hand in cases:
        mine, theirs = [], []
        for _ in range(a.rounds):
            mine.append(median_us(ours, a.calls))
            theirs.append(median_us(hand, a.calls))
        m, h = statistics.median(mine), statistics.median(theirs)
        print(f"| `{text}` | {m:.1f} | {h:.1f} | {m / h:.2f} |")


if __name__ == "__main__":
    main()
