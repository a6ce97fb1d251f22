"""Folding a loop's alike iterations when timing (`commdsl.steady`, `Clocks.settled` and `Clocks.fold`): the same
predictions as timing every step, folds where a loop repeats, none where its iterations differ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from commdsl.predict import cost, sweep, variant_for
from commdsl.predict.topology import load
from commdsl.resolve import load as load_program
from commdsl.source import SourceFile
from commdsl.steady import FEWEST_FOLDED, moved_alike, whole_periods

ROOT = Path(__file__).resolve().parent.parent
SIZES = [1 << 12, 1 << 16, 1 << 20]

WRITTEN = {  # loops of async ops and waits, written for these tests
    # the ring all-reduce with each step as an isend, a blocking receive and a wait
    "ring_isend.comm": """program ring_isend
world 1..
param n = 1024
tensor x: float32[n] = rank + 1
tensor tmp: float32[(n + world - 1) // world]
let left = (rank - 1) % world
let right = (rank + 1) % world
for s in 0 .. world - 2:
    let out = (rank - s) % world
    let into = (rank - s - 1) % world
    h = isend x.chunk(out, world) to right
    recv tmp[0 : x.chunk(into, world).size] from left
    wait h
    x.chunk(into, world) += tmp[0 : x.chunk(into, world).size]
for s in 0 .. world - 2:
    h = isend x.chunk((rank - s + 1) % world, world) to right
    recv x.chunk((rank - s) % world, world) from left
    wait h
expect x == world * (world + 1) / 2
""",
    # a halo exchange: receives posted first, tags, work while the halos move, one wait for four requests
    "halo_loop.comm": """program halo_loop
world 2..
param n = 1024
tensor u: float32[n] = rank + 1
tensor lo_halo: float32[n // 4]
tensor hi_halo: float32[n // 4]
tensor acc: float32[n] = 0
let h = n // 4
let left = (rank - 1) % world
let right = (rank + 1) % world
for s in 0 .. 39:
    r1 = irecv lo_halo from left tag 1
    r2 = irecv hi_halo from right tag 2
    s1 = isend u[0:h] to left tag 2
    s2 = isend u[n - h : n] to right tag 1
    acc += u
    wait r1, r2, s1, s2
    acc[0:h] += lo_halo
    acc[n - h : n] += hi_halo
""",
    # a batch bound to a handle, waited after local work
    "batch_handle.comm": """program batch_handle
world 2..
param n = 1024
tensor x: float32[n] = rank + 1
tensor y: float32[n]
tensor z: float32[n] = 0
let left = (rank - 1) % world
let right = (rank + 1) % world
for s in 0 .. 39:
    b = batch:
        send x to right
        recv y from left
    z += x
    wait b
    x = y
""",
    # each iteration waits for the requests the one before posted: read from its isend, a period posts and
    # waits its own
    "pipelined.comm": """program pipelined
world 2..
param n = 1024
tensor a: float32[n] = rank + 1
tensor ra: float32[n]
let left = (rank - 1) % world
let right = (rank + 1) % world
h = isend a to right
r = irecv ra from left
for s in 0 .. 39:
    wait h, r
    a += ra
    h = isend a to right
    r = irecv ra from left
wait h, r
""",
    # an exchange posted before the loop and waited after it, on streams of its own (NCCL: their last request
    # stays what it was while the loop's move on)
    "early_isend.comm": """program early_isend
world 5..
param n = 1024
tensor a: float32[n] = rank + 1
tensor b: float32[n]
tensor x: float32[n] = rank
tensor y: float32[n]
let left = (rank - 1) % world
let right = (rank + 1) % world
h0 = isend a to (rank + 2) % world
r0 = irecv b from (rank - 2) % world
for s in 0 .. 39:
    h = isend x to right
    recv y from left
    wait h
    x += y
wait h0, r0
""",
    # each request waited two iterations after it was posted: no period waits for all its own
    "deep.comm": """program deep
world 2..
param n = 1024
tensor a: float32[n] = rank + 1
tensor ra: float32[3 * n]
let left = (rank - 1) % world
let right = (rank + 1) % world
for s in 0 .. 39:
    h[s] = isend a to right
    r[s] = irecv ra.chunk(s % 3, 3) from left
    on s >= 2:
        wait h[s - 2], r[s - 2]
wait all h
wait all r
""",
}

PROGRAMS = [  # (program, size param, params, world): loops every rank runs in step, and ones it does not
    ("ring_allreduce.comm", "n", {}, 64),
    ("recursive_doubling_allreduce.comm", "n", {}, 16),
    ("hierarchical_allreduce.comm", "n", {"local": 4}, 16),
    ("torus_allreduce.comm", "n", {}, 16),
    ("pipeline_1f1b.comm", "width", {}, 4),
    ("moe_all_to_all.comm", "hidden", {}, 8),
    ("ring_attention.comm", "block", {}, 32),
    ("ring_isend.comm", "n", {}, 32),
    ("halo_loop.comm", "n", {}, 8),
    ("batch_handle.comm", "n", {}, 8),
    ("pipelined.comm", "n", {}, 8),
    ("early_isend.comm", "n", {}, 8),
    ("deep.comm", "n", {}, 8),
]
CALIBRATED = ROOT / "benchmarks" / "figures" / "predict-all-host-38.toml"  # streams, crowds, fresh pages, shared cores
TOPOLOGIES = ["localhost-gloo", "dgx-h100", str(CALIBRATED)]
FOLD = cost.Clocks.fold


def predicted(name, param, params, world, topology, monkeypatch, fold: bool, tracked: bool = False):
    """The prediction with folding on or off, the critical path and profile kept (every size's) or not; and the
    periods folded."""
    if not tracked:
        monkeypatch.setattr(cost, "PATH_MAX_OPS", -1)
    monkeypatch.setattr(cost.Clocks, "folds", fold)
    folded = []

    def counting(self, shift, periods, rids):
        folded.append(periods)
        FOLD(self, shift, periods, rids)

    monkeypatch.setattr(cost.Clocks, "fold", counting)
    v = variant_for(load_program(SourceFile(name, widened(name))), world, param, params, None)
    return sweep(v, world, SIZES, load(topology)[0], paths=tracked), sum(folded)


def widened(name: str) -> str:
    """The program's text (a shipped one, or one of `WRITTEN`), the ring's `world` line widened to any size (as
    benchmarks/predict_speed.py does)."""
    if name in WRITTEN:
        return WRITTEN[name]
    return (ROOT / "programs" / name).read_text().replace("world 1..16", "world 1..")


CASES = [  # every program on every topology, but the halo exchange on NCCL, where it deadlocks (D401)
    pytest.param(*program, topology, id=f"{program[0]}-{label}")
    for program in PROGRAMS
    for topology, label in zip(TOPOLOGIES, ["localhost-gloo", "dgx-h100", "calibrated"])
    if not (program[0] == "halo_loop.comm" and topology == "dgx-h100")
]


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "path-kept"])
@pytest.mark.parametrize(("name", "param", "params", "world", "topology"), CASES)
def test_a_folded_loop_predicts_what_timing_every_step_predicts(
    name, param, params, world, topology, tracked, monkeypatch
):
    """Every rank's clock, every port's figures and the rows, folded or timed step by step, agree to rounding;
    so do the critical path at every size (its ops, records, ranks and times) and every rank's time per line."""
    folded, periods = predicted(name, param, params, world, topology, monkeypatch, True, tracked)
    stepped, none = predicted(name, param, params, world, topology, monkeypatch, False, tracked)
    assert none == 0
    np.testing.assert_allclose(folded.timing.rank_seconds, stepped.timing.rank_seconds, rtol=1e-9, atol=0)
    np.testing.assert_allclose(folded.timing.port_bytes, stepped.timing.port_bytes, rtol=1e-9, atol=0)
    np.testing.assert_allclose(folded.timing.port_busy, stepped.timing.port_busy, rtol=1e-9, atol=0)
    assert [r.time_us for r in folded.rows] == pytest.approx([r.time_us for r in stepped.rows], rel=1e-9)
    assert folded.paths.keys() == stepped.paths.keys()
    for k, path in stepped.paths.items():
        assert (folded.paths[k] is None) == (path is None)
        for a, b in zip(folded.paths[k] or [], path or []):
            assert (a["line"], a["rid"], a["steps"], a["ranks"]) == (b["line"], b["rid"], b["steps"], b["ranks"])
            assert (a["us"], a["start_us"]) == pytest.approx((b["us"], b["start_us"]), rel=1e-9, abs=1e-9)
        assert len(folded.paths[k] or []) == len(path or [])
    profiles = stepped.timing.profiles
    assert (folded.timing.profiles is None) == (profiles is None) == (not tracked)
    for rank, lines in (profiles or {}).items():
        got = folded.timing.profiles[rank]
        assert [e["line"] for e in got] == [e["line"] for e in lines]
        assert [e["us"] for e in got] == pytest.approx([e["us"] for e in lines], rel=1e-9, abs=1e-9)
    if name == "ring_allreduce.comm":
        assert periods > 100  # most of the ring's 126 steps: its two loops settle within a few iterations
    if name in WRITTEN and name != "deep.comm" or name == "ring_attention.comm":
        assert periods >= FEWEST_FOLDED  # async ops waited within a period fold as a batch does
    if name == "deep.comm":
        assert not periods  # requests outlive any period: timed step by step


def test_a_loop_whose_iterations_move_other_bytes_or_are_few_is_not_folded(monkeypatch):
    """Uneven chunks (n = 1000 on 64 ranks: 16 or 15 elements) rotate with the step, so no two alike iterations
    follow one another for every rank; a message growing with the step never repeats; a loop of 7 steps is too
    short to fold (where the same ring at world 64 folds)."""
    _, periods = predicted("ring_allreduce.comm", "n", {}, 64, "dgx-h100", monkeypatch, True)
    assert periods
    _, periods = predicted("ring_allreduce.comm", "n", {}, 8, "dgx-h100", monkeypatch, True)
    assert not periods  # 7 steps a loop: fewer than FEWEST_FOLDED are timed step by step, to the bit
    folded = []
    monkeypatch.setattr(cost.Clocks, "fold", lambda self, shift, periods, rids: folded.append(periods))
    v = variant_for(load_program(SourceFile("ring.comm", widened("ring_allreduce.comm"))), 64, "n", {}, None)
    assert sweep(v, 64, [4000], load("dgx-h100")[0], paths=False).rows  # 1000 float32 elements
    assert not folded
    growing = """program grows
world 2..
param n = 1024
tensor x: float32[n] = rank
let right = (rank + 1) % world
let left = (rank - 1) % world
for s in 0 .. 30:
    batch:
        send x[0 : s + 1] to right
        recv x[n // 2 : n // 2 + s + 1] from left
"""
    v = variant_for(load_program(SourceFile("grows.comm", growing)), 8, "n", {}, None)
    sweep(v, 8, [1 << 16], load("dgx-h100")[0], paths=False)
    assert not folded


def test_only_a_uniform_shift_is_folded():
    """`moved_alike`: every moved time moved by its column's amount at every period; one that did not move lies at
    or below the earliest clock; anything else declines the fold."""
    delta, floor = np.array([1.0, 2.0]), np.array([10.0, 10.0])
    base = np.array([[10.0, 10.0], [12.0, 15.0], [3.0, 4.0]])  # the last row never moves: a port idle since long
    states = [base + np.array([[1, 1], [1, 1], [0, 0]]) * delta * k for k in range(3)]
    np.testing.assert_array_equal(moved_alike(states, delta, floor), [[True, True], [True, True], [False, False]])
    uneven = [s.copy() for s in states]
    uneven[2][1, 0] += 1e-6  # one time moved a little more in the last period
    assert moved_alike(uneven, delta, floor) is None
    late = [s.copy() for s in states]
    for s in late:
        s[2] = [11.0, 4.0]  # a time that stood still above the earliest clock may yet matter
    assert moved_alike(late, delta, floor) is None


def test_whole_periods_counts_only_complete_repeats():
    assert whole_periods(["b", "a"], iter(["b", "a", "b", "a", "b"])) == 2
    assert whole_periods(["b", "a"], iter(["b", "a", "c", "a"])) == 1
    assert whole_periods(["b"], iter([None, "b"])) == 0
