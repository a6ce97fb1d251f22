"""Checker, simulator and real Gloo agree on generated programs (a bounded share of tests/differential.py)."""

import os
import random
from pathlib import Path

import pytest

from differential import agree, generate, real_run, static_verdict


def _children() -> set[int]:
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                out.add(int(entry))
    return out


def test_checker_and_simulator_agree_on_200_programs():
    rng = random.Random(20261122)
    kinds = {"clean": 0, "stall": 0, "other": 0}
    for _ in range(200):
        kinds[static_verdict(*generate(rng)).kind] += 1  # raises on a disagreement
    assert kinds["clean"] > 50 and kinds["stall"] > 20


@pytest.mark.gloo
@pytest.mark.timeout(400)
def test_real_gloo_agrees_with_the_checker_on_30_programs():
    before = _children()
    rng = random.Random(7)
    ran = {"clean": 0, "stall": 0}
    problems = []
    while sum(ran.values()) < 30:
        world, text = generate(rng)
        verdict = static_verdict(world, text)
        if verdict.kind == "other" or (verdict.kind == "stall" and ran["stall"] >= 10):
            continue
        ran[verdict.kind] += 1
        problem = agree(verdict, real_run(world, text, timeout=2.0))
        if problem:
            problems.append(f"{text}{problem}")
    assert problems == []
    assert ran["stall"] >= 5
    assert _children() - before == set(), "a worker outlived its run"
