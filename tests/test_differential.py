"""Checker, simulator and real Gloo agree on generated programs (a bounded share of tests/differential.py)."""

import random

import pytest

from differential import compare, generate, real_run, static_verdict
from processes import children


def test_checker_and_simulator_agree_on_200_programs():
    rng = random.Random(20261122)
    kinds = {"clean": 0, "stall": 0, "other": 0}
    for _ in range(200):
        kinds[static_verdict(*generate(rng)).kind] += 1  # raises on a disagreement
    assert kinds["clean"] > 50 and kinds["stall"] > 20


@pytest.mark.gloo
@pytest.mark.timeout(400)
def test_real_gloo_agrees_with_the_checker_on_30_programs():
    before = set(children())
    rng = random.Random(7)
    ran = {"clean": 0, "stall": 0}
    problems = []
    while sum(ran.values()) < 30:
        world, text = generate(rng)
        verdict = static_verdict(world, text)
        if verdict.kind == "other" or (verdict.kind == "stall" and ran["stall"] >= 10):
            continue
        ran[verdict.kind] += 1
        outcome, detail = compare(verdict, real_run(world, text, timeout=2.0))
        if outcome == "disagree":
            problems.append(f"{text}{detail}")
    assert problems == []
    assert ran["stall"] >= 5
    assert set(children()) - before == set(), "a worker outlived its run"


MISSING_BARRIER = """world 3
tensor b: float32[2] = rank
on rank == 0:
    barrier
on rank == 1:
    barrier
    barrier
on rank == 2:
    barrier
    barrier
"""


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_a_missing_participant_hangs_for_real():
    """Regression: the runtime's closing barrier ran on the world group, so Gloo paired a finished
    rank's teardown with the others' second `barrier` and the missing participant went unseen."""
    verdict = static_verdict(3, MISSING_BARRIER)
    assert verdict.kind == "stall" and verdict.stuck == {1: 7, 2: 10} and "C307" in verdict.codes
    assert compare(verdict, real_run(3, MISSING_BARRIER, timeout=2.0)) == ("exact", "")
