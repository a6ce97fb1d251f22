"""`commdsl bench`: nccl-tests' bandwidth arithmetic, sizes, which collective a program is, and short real sweeps.

The Gloo tests run `commdsl.cli.main.main` inside this process (torch is imported once, workers fork
from here), with tiny sizes and few iterations; each asserts that no worker outlives its launch.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from commdsl.bench import busbw as bw
from commdsl.bench.builtin import COLLECTIVES, builtin
from commdsl.bench.identify import BenchError, Measure, pragma, prove
from commdsl.bench.output import table
from commdsl.bench.plan import build, builtin_variant, program_variant
from commdsl.bench.results import Row, Summary
from commdsl.bench.sizes import SizeError, format_size, parse_size, parse_sweep
from commdsl.cli.main import main
from commdsl.predict import calibrate
from commdsl.resolve import load
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
RING = str(ROOT / "programs" / "ring_allreduce.comm")


def program(text: str, path: str = "t.comm"):
    return load(SourceFile(path, text))


# ---- bandwidth arithmetic (nccl-tests' PERFORMANCE.md) -------------------------------------------

@pytest.mark.parametrize("kind, world, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75), ("all_reduce", 1, 0.0),
    ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875), ("all_to_all", 2, 0.5),
    ("gather", 4, 0.75), ("scatter", 4, 0.75),
    ("broadcast", 4, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0),
])
def test_bus_bandwidth_factor(kind, world, factor):
    assert bw.factor(kind, world) == pytest.approx(factor)


def test_algbw_and_busbw_by_hand():
    # 16 MiB all_reduce in 26.2 ms at world 4: 16777216 B / 0.0262 s = 0.640352 GB/s; × 2·3/4 = 0.960528
    assert bw.algbw(16 << 20, 0.0262) == pytest.approx(0.640352, rel=1e-5)
    assert bw.busbw("all_reduce", 4, 16 << 20, 0.0262) == pytest.approx(0.960528, rel=1e-5)
    # 1 MiB all_gather in 2 ms at world 8: 0.524288 GB/s, × 7/8
    assert bw.busbw("all_gather", 8, 1 << 20, 0.002) == pytest.approx(0.458752)
    assert bw.busbw("", 4, 1000, 1e-6) == pytest.approx(1.0)  # no collective known: busbw = algbw
    assert bw.algbw(1024, 0.0) == 0.0


# ---- sizes ----------------------------------------------------------------------------------------

def test_sizes():
    assert parse_size("4096") == 4096 and parse_size("1K") == 1024 and parse_size("16M") == 16 << 20
    assert parse_size("2KiB") == 2048 and parse_size("1g") == 1 << 30
    assert parse_sweep("1K:16M") == [1 << k for k in range(10, 25)]
    assert parse_sweep("1K:64M:4") == [1 << k for k in range(10, 27, 2)]
    assert parse_sweep("8M") == [8 << 20]
    assert format_size(1 << 20) == "1 MiB" and format_size(3996) == "3996 B"
    for bad in ("1X", "0", "16M:1K", "1K:2K:1", "1K:2K:x", "1:2:3:4"):
        with pytest.raises(SizeError):
            parse_sweep(bad)


# ---- which collective a program is ------------------------------------------------------------------

def test_ring_allreduce_is_proved_an_all_reduce():
    m = prove(load(SourceFile.read(RING)), 4, {})
    assert (m.kind, m.tensor, m.redop, m.root) == ("all_reduce", "x", "sum", None)


@pytest.mark.parametrize("text, expected", [
    ("tensor x: float32[3] = rank * 3 + i\ntensor y: float32[world * 3]\nall_gather x into y\nexpect y == i\n",
     ("all_gather", "y", None, None)),
    ("tensor x: int32[world * 2] = i + rank\ntensor y: int32[2]\nreduce_scatter x into y op max\n"
     "expect y == rank * 2 + i + world - 1\n", ("reduce_scatter", "x", "max", None)),
    ("tensor x: float32[4] = rank + i\nbroadcast x from 1\nexpect x == 1 + i\n", ("broadcast", "x", None, 1)),
    ("tensor x: float32[4] = rank + i\nreduce x to 1 op sum\non rank == 1:\n"
     "    expect x == world * i + world * (world - 1) / 2\n", ("reduce", "x", "sum", 1)),
    ("tensor x: int64[world] = rank * world + i\ntensor y: int64[world]\nall_to_all x into y\n"
     "expect y == i * world + rank\n", ("all_to_all", "x", None, None)),
])
def test_expects_prove_the_collective(text, expected):
    m = prove(program("program p\nworld 2..\n" + text), 4, {})
    assert m is not None and (m.kind, m.tensor, m.redop, m.root) == expected


@pytest.mark.parametrize("text", [
    # the expect stands before a barrier
    "tensor x: float32[4] = rank + 1\nall_reduce x\nexpect x == world * (world + 1) / 2\nbarrier\n",
    # ... before the wait of an async op that writes another tensor (DDP's buckets, then its step counter)
    "tensor x: float32[4] = rank + 1\ntensor s: int64[1] = 1\nh = all_reduce s op max\nall_reduce x\n"
    "expect x == world * (world + 1) / 2\nwait h\nexpect s == 1\n",
    # ... and after the wait of an async all_reduce of its own
    "tensor x: float32[4] = rank + 1\nh = all_reduce x\nwait h\nexpect x == world * (world + 1) / 2\nbarrier\n",
])
def test_an_expect_that_nothing_overwrites_proves_the_collective(text):
    """The bench proved a collective only from the expects a program ends with: one ending in a barrier, or in
    the wait of another op, was measured with busbw = algbw (programs/bucketed_allreduce.comm)."""
    m = prove(program("program p\nworld 2..\n" + text), 4, {})
    assert m is not None and (m.kind, m.tensor, m.redop) == ("all_reduce", "x", "sum")


@pytest.mark.parametrize("text", [
    # x is written after its expect: by a local op, by a collective (that leaves the value as it was), by an
    # async receive whose wait comes later
    "tensor x: float32[4] = rank + 1\nall_reduce x\nexpect x == world * (world + 1) / 2\nx += 1\nbarrier\n",
    "tensor x: float32[4] = rank + 1\nall_reduce x\nexpect x == world * (world + 1) / 2\nbroadcast x from 0\nbarrier\n",
    "tensor x: float32[4] = rank + 1\ntensor y: float32[4]\nall_reduce x\nexpect x == world * (world + 1) / 2\n"
    "y = x\nh = batch:\n    send y to (rank + 1) % world\n    recv x from (rank + world - 1) % world\nbarrier\nwait h\n",
])
def test_an_expect_on_a_tensor_written_after_it_proves_nothing(text):
    assert prove(program("program p\nworld 2..\n" + text), 4, {}) is None


@pytest.mark.parametrize("text", [
    "tensor x: float32[4] = 1\nbarrier\nexpect x == 1\n",  # nothing moved: equal to its initial value
    "tensor x: float32[4] = rank + 1\nall_reduce x\nx = rank\nexpect x == rank\n",  # the final expect shows no all_reduce
    "tensor x: float32[4] = rank + 1\nall_reduce x\nbarrier\n",  # no expect at all
])
def test_nothing_is_proved_without_a_final_expect_showing_it(text):
    assert prove(program("program p\nworld 2..\n" + text), 4, {}) is None


def test_pragma_declares_the_collective():
    p = program("program p\nworld 2..\nparam n = 8\n# bench: broadcast x from 1\ntensor x: float32[n]\nbarrier\n")
    assert pragma(p) == Measure("broadcast", "x", None, 1, "declared at line 4")
    p = program("program p\nparam n = 8\ntensor x: float32[n]\n#bench: all_reduce x op max\n")
    assert pragma(p).redop == "max"


@pytest.mark.parametrize("line, message", [
    ("# bench: allreduce x", "not a collective the bench knows"),
    ("# bench: all_reduce y", "which the program does not declare"),
    ("# bench: all_reduce", "expects KIND TENSOR"),
    ("# bench: all_reduce x op mean", "reduce op `mean`"),
])
def test_bad_pragma_is_a_clear_error(line, message):
    with pytest.raises(BenchError, match=message) as e:
        pragma(program(f"program p\nparam n = 8\ntensor x: float32[n]\n{line}\n"))
    assert str(e.value).startswith("t.comm:4: ")


# ---- a Plan: the size param fitted to bytes, every size checked ------------------------------------

def test_sizes_are_fitted_through_the_size_param(tmp_path):
    ring = program_variant(load(SourceFile.read(RING)), 4, "n", {}, None)
    gather = builtin_variant(builtin("all_gather", "float32", "sum", 0))
    plan = build([ring, gather], [1024, 3000, 1 << 20], 3, "gloo", 2, 1, False, str(tmp_path), notes := [],
                 interleave=True)
    got = [(plan.variants[c.variant].label, c.requested, c.value, c.size) for c in plan.cases]
    # size by size, the variants in turn; all_gather at world 3: y holds n // 3 * 3 elements, so 1 KiB
    # (256 elements) becomes 255
    assert got == [("ring_allreduce", 1024, 256, 1024), ("all_gather", 1024, 256, 1020),
                   ("ring_allreduce", 3000, 750, 3000), ("all_gather", 3000, 751, 3000),
                   ("ring_allreduce", 1 << 20, 262144, 1 << 20), ("all_gather", 1 << 20, 262146, 1048584)]
    assert not notes
    # the guard schedule holds every case's ops end to end, per rank (the ring: 6 ops at world 3)
    assert [c.bases[0] for c in plan.cases] == [0, 6, 7, 13, 14, 20]
    assert plan.locate(0, 13)[0] is plan.cases[3] and plan.locate(0, 13)[1] == 0
    assert plan.locate(0, 16)[0] is plan.cases[4] and plan.locate(0, 16)[1] == 2
    assert plan.rounds == ((0, 1), (2, 3), (4, 5))  # --compare: the variants of a size alternate


def test_dtype_replaces_the_measured_tensors_dtype(tmp_path):
    v = program_variant(load(SourceFile.read(RING)), 4, "n", {}, "bfloat16")
    assert {t.name: t.dtype.name for t in v.program.tensors} == {"x": "bfloat16", "tmp": "bfloat16"}
    assert v.measure.kind == "all_reduce"  # still proved in the new dtype
    plan = build([v], [4096], 4, "gloo", 1, 0, False, str(tmp_path), [])
    assert (plan.cases[0].count, plan.cases[0].dtype) == (2048, "bfloat16")


def test_every_builtin_passes_the_checks(tmp_path):
    variants = [builtin_variant(builtin(k, "float32", "sum", 1)) for k in COLLECTIVES]
    plan = build(variants, [4096], 4, "gloo", 1, 0, True, str(tmp_path), [])
    assert len(plan.cases) == len(COLLECTIVES)
    assert len(list(tmp_path.glob("expect-*.npz"))) == 4 * len(COLLECTIVES)


@pytest.mark.parametrize("text, expected", [
    ("tensor x: float32[4] = rank\nall_reduce x", True),
    ("tensor x: float32[2] = rank\ntensor y: float32[2 * world]\nall_gather x into y", False),
    ("tensor y: float32[2 * world] = rank\nall_gather y.chunk(rank, world) into y", True),
    ("tensor x: float32[2 * world] = rank\nreduce_scatter x into x.chunk(rank, world)", True),
    # the result lands in `x` through `+=`: in place, as recursive doubling is
    ("tensor x: float32[4] = rank\ntensor t: float32[4]\nsend x to (rank + 1) % world\n"
     "recv t from (rank + world - 1) % world\nx += t", True),
    ("tensor x: float32[4] = rank\ntensor t: float32[4]\nsend x to (rank + 1) % world\n"
     "recv t from (rank + world - 1) % world", False),
    ("tensor x: float32[4] = rank\non rank == 0:\n    send x to 1\non rank == 1:\n    recv x from 0", None),
])
def test_a_program_is_in_place_when_it_sends_from_where_its_result_lands(text, expected):
    from commdsl.bench.plan import in_place
    from commdsl.expand import expand

    program = load(SourceFile("t.comm", f"program t\nworld 2..\n{text}\n"))
    assert in_place(expand(program, 2, {})) is expected


def test_builtins_time_both_forms_where_torch_has_both():
    from commdsl.bench.builtin import has_in_place

    forms = {k: (builtin_variant(builtin(k, "float32", "sum", 0)).in_place, has_in_place(k)) for k in COLLECTIVES}
    # torch's all_reduce, broadcast and reduce take one tensor: in place only; all_to_all in one buffer gives
    # wrong blocks on Gloo; the ping has no rank that both sends and receives
    assert forms == {"all_reduce": (True, False), "broadcast": (True, False), "reduce": (True, False),
                     "all_gather": (False, True), "reduce_scatter": (False, True), "gather": (False, True),
                     "scatter": (False, True), "all_to_all": (False, False), "sendrecv": (None, False)}
    second = [builtin_variant(builtin(k, "float32", "sum", 1, True)) for k in COLLECTIVES if has_in_place(k)]
    assert all(v.in_place for v in second) and len({v.program.path for v in second}) == 4


def test_forms_side_by_side_have_no_ratio_column():
    rows = [Row(0, "all_gather", "all_gather", 1024, 1024, 256, "float32", None, None, "n", 256, 100.0, 0.01024,
                0.00512, 0, in_place=False),
            Row(1, "all_gather in-place", "all_gather", 1024, 1024, 256, "float32", None, None, "n", 256, 50.0,
                0.02048, 0.01024, 0, in_place=True)]
    sums = [Summary("all_gather", "<all_gather>", "all_gather", "built-in", 0.5, False, 0.00512, False),
            Summary("all_gather in-place", "<all_gather in-place>", "all_gather", "built-in", 0.5, False, 0.01024,
                    True)]
    lines = table(rows, sums, [0, 1])
    assert lines[0].split() == ["#", "out-of-place", "in-place"]
    assert "ratio" not in lines[1] and not any("ratio" in line for line in lines)
    assert lines[3].split() == ["1024", "256", "float32", "none", "-1", "100.0", "0.010", "0.005", "0",
                                "50.0", "0.020", "0.010", "0"]


def test_wrong_elements_are_counted_outside_undefined_ones():
    from commdsl.bench.worker import _wrong

    class Ctx:
        dtypes = {"x": "float32"}

        def host_flat(self, name):
            return np.array([1.0, 2.0, 9.0, 9.0], dtype=np.float32)

    expected = {"x": (np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32), np.array([True, True, True, False]))}
    assert _wrong(Ctx(), expected) == 1  # element 3 differs but is undefined (a reduce's non-root)


def test_table_layout_with_a_ratio_column():
    rows = [Row(0, "ring", "all_reduce", 1024, 1024, 256, "float32", "sum", None, "n", 256, 100.0, 0.01024,
                0.01536, None),
            Row(1, "all_reduce (built-in)", "all_reduce", 1024, 1024, 256, "float32", "sum", None, "n", 256, 50.0,
                0.02048, 0.03072, 0)]
    sums = [Summary("ring", "r.comm", "all_reduce", "proved", 1.5, False, 0.01536),
            Summary("all_reduce (built-in)", "<all_reduce>", "all_reduce", "built-in", 1.5, True, 0.03072)]
    lines = table(rows, sums, [0, 1])
    assert "ring" in lines[0] and "all_reduce (built-in)" in lines[0]
    assert lines[1].split()[1:6] == ["size", "count", "type", "redop", "root"] and lines[1].split()[-1] == "ratio"
    assert lines[3].split() == ["1024", "256", "float32", "sum", "-1", "100.0", "0.010", "0.015", "N/A",
                                "50.0", "0.020", "0.031", "0", "0.50"]
    assert lines[-1].startswith("# Avg busbw ratio      : 0.50")
    assert lines[-3].startswith("# Avg bus bandwidth    : 0.015 GB/s")


# ---- the command line ------------------------------------------------------------------------------

def run_here(argv, capfd) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["bench", "--nproc", "2"], "give a program FILE, or --collective NAME"),
    (["bench", RING, "--collective", "all_reduce", "--nproc", "2"], "not both"),
    (["bench", "--collective", "all_reduce"], "--nproc N is required"),
    (["bench", "--collective", "allreduce", "--nproc", "2"], "not one of all_reduce"),
    (["bench", "--collective", "sendrecv", "--nproc", "1"], "needs --nproc 2 or more"),
    (["bench", RING, "--nproc", "2", "--op", "max"], "a program states its own"),
    (["bench", RING, "--nproc", "2", "--op", "sum"], "a program states its own"),
    (["bench", RING, "--nproc", "2", "--root", "1"], "a program's root is its own param (--set root=R)"),
    (["bench", "--collective", "all_reduce", "--nproc", "2", "--param", "m"], "--param sets a program's param"),
    (["bench", "--collective", "all_reduce", "--nproc", "2", "--set", "n=2"], "--set sets a program's param"),
    (["bench", RING, "--nproc", "2", "--compare", "builtin", "--root", "1"], "(--set root=R)"),
    (["bench", "--collective", "all_reduce", "--nproc", "2", "--compare", "builtin"], "give a FILE"),
    (["bench", "--collective", "all_reduce", "--nproc", "2", "--sizes", "4M:1K"], "MAX is below MIN"),
    (["bench", "--collective", "broadcast", "--nproc", "2", "--root", "2"], "--root 2 is not a rank"),
    (["bench", "--collective", "broadcast", "--nproc", "2", "--plot", "out.xyz"], "name a .png, .svg or .pdf"),
])
def test_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_compare_builtin_needs_a_known_collective(tmp_path, capfd):
    prog = tmp_path / "p.comm"
    prog.write_text("program p\nworld 2..\nparam n = 16\ntensor x: float32[n] = rank\nall_reduce x\nbarrier\n")
    code, out, err = run_here(["bench", str(prog), "--nproc", "2", "--compare", "builtin"], capfd)
    assert code == 2 and "declares no collective" in err and "Traceback" not in err


def test_refused_program_is_not_launched(tmp_path, capfd):
    prog = tmp_path / "p.comm"
    prog.write_text("program p\nworld 2\nparam n = 4\ntensor x: float32[n]\nsend x to (rank + 1) % world\n"
                    "recv x from (rank + 1) % world\n")
    code, out, err = run_here(["bench", str(prog), "--nproc", "2", "--sizes", "1K"], capfd)
    assert code == 1 and "error[D4" in out and "refusing to bench p" in err


def test_check_compares_only_once_every_rank_is_through_its_iteration(monkeypatch):
    """`--check` compares a rank's tensors after a barrier that follows the timed steps: a rank that finished
    first (a binomial reduce's leaves) compared on a core the others still timed on, and the 2-core host's
    reduce at N = 4, 8 MiB, came out at 25-27 ms with --check where a torch script with a barrier between
    its iterations takes 14-16 ms, as --check does now (docs/bench.md, `--check`)."""
    from commdsl.bench import worker

    calls: list[str] = []
    monkeypatch.setattr(worker, "run_steps", lambda *a: calls.append("steps"))
    monkeypatch.setattr(worker, "_wrong", lambda ctx, expected: calls.append("compare") or 0)
    monkeypatch.setattr(worker, "_usage", lambda: (0, 0))

    class Slot:
        s = [0] * 8

        def state(self, *a):
            pass

    c = worker._Live(0, type("Ctx", (), {"buffers": {}})(), ["op"], 0, [(0, 1)], [0], {}, {})
    worker._iterate(c, True, True, Slot(), lambda: calls.append("barrier"))
    assert calls == ["barrier", "steps", "barrier", "compare"]
    calls.clear()
    worker._iterate(c, False, True, Slot(), lambda: calls.append("barrier"))
    assert calls == ["steps"]  # without --check the iterations run back to back, as nccl-tests'


# ---- real sweeps on Gloo ---------------------------------------------------------------------------

@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_sweep_with_check_and_every_output(tmp_path, capfd, no_orphans):
    files = {k: str(tmp_path / f"out.{k}") for k in ("json", "csv", "png")}
    code, out, err = run_here(["bench", "--collective", "all_reduce,sendrecv", "--nproc", "2", "--sizes", "1K:4K",
                               "--iters", "3", "--warmup", "1", "--check", "--backend", "gloo",
                               "--json", files["json"], "--csv", files["csv"], "--plot", files["png"]], capfd)
    assert code == 0, out + err
    lines = out.splitlines()
    assert any(line.split()[1:10] == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"]
               for line in lines)
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert [r[:5] for r in rows] == [["1024", "256", "float32", "sum", "-1"], ["2048", "512", "float32", "sum", "-1"],
                                     ["4096", "1024", "float32", "sum", "-1"], ["1024", "256", "float32", "none", "-1"],
                                     ["2048", "512", "float32", "none", "-1"], ["4096", "1024", "float32", "none", "-1"]]
    assert all(r[-1] == "0" for r in rows)  # #wrong: every iteration matched the simulator
    assert sum(line.startswith("# Avg bus bandwidth    : ") for line in lines) == 2

    data = json.loads(Path(files["json"]).read_text())
    assert data["world"] == 2 and data["check"] and data["complete"]
    assert [v["busbw_factor"] for v in data["variants"]] == [1.0, 1.0]
    for r in data["rows"]:
        assert r["wrong"] == 0 and r["time_us"] > 0 and len(r["rank_time_us"]) == 2
        assert r["time_us"] == max(r["rank_time_us"])
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bw.factor(r["collective"], 2))
    with open(files["csv"], newline="") as f:
        table_rows = list(csv.DictReader(f))
    assert len(table_rows) == 6 and {r["variant"] for r in table_rows} == {"all_reduce", "sendrecv"}
    assert float(table_rows[0]["busbw_gbps"]) == pytest.approx(data["rows"][0]["busbw_gbps"])
    import matplotlib.image

    assert Path(files["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(files["png"]).shape[0] > 100


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_each_rank_counts_the_pages_an_iteration_faults_in_and_its_cpu(tmp_path, capfd, no_orphans):
    """`x = x * 2 + 1` on 32 MiB makes two 32 MiB temporaries, which glibc maps anew on every call (its mmap
    threshold never rises above 32 MiB): each timed iteration faults in at least their 2 × 8192 pages, on
    every rank; a message of 1 KiB faults in next to nothing. Each rank's CPU an iteration (the kernel zeroing
    those pages is its own) is counted too, and the host's cores beside them (`busy_cores`)."""
    prog = tmp_path / "faults.comm"
    prog.write_text("program faults\nworld 2\nparam n = 256\ntensor x: float32[n] = 1\nx = x * 2 + 1\n"
                    "all_reduce x\n")
    out_json = tmp_path / "b.json"
    code, out, err = run_here(["bench", str(prog), "--nproc", "2", "--sizes", "1K:32M:32768", "--iters", "3",
                               "--warmup", "1", "--json", str(out_json)], capfd)
    assert code == 0, out + err
    small, large = json.loads(out_json.read_text())["rows"]
    assert len(large["rank_page_faults"]) == 2 and min(large["rank_page_faults"]) >= 2 * 8192
    assert max(small["rank_page_faults"]) < 100
    assert json.loads(out_json.read_text())["host_cores"] == calibrate.host_cores()
    assert len(large["rank_cpu_us"]) == 2 and min(large["rank_cpu_us"]) > max(small["rank_cpu_us"]) > 0


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_all_on_one_rank_is_every_collective_but_sendrecv(tmp_path, capfd, no_orphans):
    """One GPU is NCCL at world 1: `--collective all --nproc 1` benches every collective one rank can run
    (sendrecv needs two), where it once stopped at a usage error (seen on a lent H200)."""
    out_json = tmp_path / "b.json"
    code, out, err = run_here(["bench", "--collective", "all", "--nproc", "1", "--sizes", "1K:1K", "--iters", "2",
                               "--warmup", "1", "--backend", "gloo", "--json", str(out_json)], capfd)
    assert code == 0, out + err
    from commdsl.bench.builtin import COLLECTIVES

    measured = {r["collective"] for r in json.loads(out_json.read_text())["rows"]}
    assert measured == set(COLLECTIVES) - {"sendrecv"}


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_ring_against_the_builtin_and_the_floor_gate(tmp_path, capfd, no_orphans):
    report = tmp_path / "ring.json"
    code, out, err = run_here(["bench", RING, "--nproc", "4", "--compare", "builtin", "--sizes", "1K:2K",
                               "--iters", "2", "--warmup", "1", "--check", "--backend", "gloo",
                               "--min-busbw", "1000", "--json", str(report)], capfd)
    assert code == 1, out + err  # no 1 KiB all_reduce on Gloo reaches 1000 GB/s
    assert "ring_allreduce: average bus bandwidth" in out and "below --min-busbw 1000" in out
    assert "all_reduce (built-in): average" not in out  # the reference is shown, never gated
    assert "all_reduce of `x` op sum, proved by its expects, in-place: busbw = algbw × 1.5" in out
    assert "all_reduce of `x` op sum, built-in, in-place only: busbw" in out  # torch has no out-of-place all_reduce
    heads = next(line for line in out.splitlines() if "ring_allreduce" in line and "built-in" in line)
    assert heads.startswith("#")
    assert "# Avg busbw ratio      : " in out
    data = json.loads(report.read_text())
    assert [v["label"] for v in data["variants"]] == ["ring_allreduce", "all_reduce (built-in)"]
    assert [v["baseline"] for v in data["variants"]] == [False, True]
    assert all(r["wrong"] == 0 for r in data["rows"]) and len(data["rows"]) == 4
    ring = data["rows"][0]
    assert [line["line"] for line in ring["lines"]] == [17, 20, 22]  # where the ring's time goes, per source line
    assert len(ring["rank_lines"]) == 4  # and every rank's, the slowest's among them
    assert ring["rank_lines"][ring["rank_time_us"].index(max(ring["rank_time_us"]))] == ring["lines"]


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_each_line_is_named_by_its_statement_not_a_value_it_reads(tmp_path, capfd, no_orphans):
    """The all_to_all whose splits read `send_counts[j]` is quoted whole in `lines`, not as its first read."""
    report = tmp_path / "moe.json"
    code, out, err = run_here(["bench", str(Path(RING).parent / "moe_dispatch.comm"), "--nproc", "2", "--param",
                               "hidden", "--sizes", "1K", "--iters", "2", "--warmup", "1", "--backend", "gloo",
                               "--json", str(report)], capfd)
    assert code == 0, out + err
    texts = {e["line"]: e["text"] for e in json.loads(report.read_text())["rows"][0]["lines"]}
    assert texts[23].startswith("all_to_all routed into expert_in[0:received] splits [send_counts[j]"), texts


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_out_of_place_and_in_place_columns_as_nccl_tests_prints_them(tmp_path, capfd, no_orphans):
    report = tmp_path / "forms.json"
    code, out, err = run_here(["bench", "--collective", "all_gather,all_reduce", "--nproc", "2", "--sizes", "1K:4K:4",
                               "--iters", "2", "--warmup", "1", "--check", "--backend", "gloo",
                               "--json", str(report)], capfd)
    assert code == 0, out + err
    lines = out.splitlines()
    assert "# all_gather: all_gather of `y`, built-in, out-of-place: busbw = algbw × 0.5" in lines
    assert "# all_gather in-place: all_gather of `y`, built-in, in-place: busbw = algbw × 0.5" in lines
    assert "# all_reduce: all_reduce of `x` op sum, built-in, in-place only: busbw = algbw × 1" in lines
    heads = [line.split() for line in lines if "out-of-place" in line and not line.startswith("# all_")]
    assert heads == [["#", "out-of-place", "in-place"]]  # all_gather's table only: all_reduce has one form
    rows = [line.split() for line in lines if not line.startswith("#")]
    # all_gather: two groups of time, algbw, busbw, #wrong per size; all_reduce: one
    assert [len(r) for r in rows] == [13, 13, 9, 9] and [r[0] for r in rows] == ["1024", "4096"] * 2
    assert all(r[8] == "0" and r[-1] == "0" for r in rows)  # every iteration of both forms matched
    data = json.loads(report.read_text())
    assert [(v["label"], v["in_place"]) for v in data["variants"]] == [
        ("all_gather", False), ("all_gather in-place", True), ("all_reduce", True)]
    # size by size, out-of-place then in-place, as nccl-tests runs them
    assert [(r["variant"], r["size_bytes"], r["in_place"]) for r in data["rows"]] == [
        ("all_gather", 1024, False), ("all_gather in-place", 1024, True), ("all_reduce", 1024, True),
        ("all_gather", 4096, False), ("all_gather in-place", 4096, True), ("all_reduce", 4096, True)]


def test_nccl_tests_flags_mean_what_they_mean_there():
    """-b/-e/-f make the sweep, -n -w -c -d -r the counts, check, dtype (nccl-tests' names too) and root."""
    from commdsl.cli.bench import config_from_args
    from commdsl.cli.main import build_parser

    def cfg(*argv):
        return config_from_args(build_parser().parse_args(["bench", "--collective", "all_reduce", "--nproc", "2",
                                                           *argv]))

    short = cfg("-b", "1K", "-e", "8K", "-f", "2", "-n", "7", "-w", "1", "-c", "1", "-d", "half", "-r", "1")
    long = cfg("--sizes", "1K:8K:2", "--iters", "7", "--warmup", "1", "--check", "--dtype", "float16", "--root", "1")
    assert short == long and short.sizes == (1024, 2048, 4096, 8192) and short.dtype == "float16"
    assert cfg("-b", "4K").sizes == (4096,) and cfg("-c", "0").check is False
    assert cfg("-d", "float").dtype == "float32" and cfg("-d", "double").dtype == "float64"


def test_rows_are_printed_as_their_sizes_finish_and_averages_after_each_group(tmp_path):
    """The stream the bench prints while it measures (`commdsl bench` piped shows rows before the end)."""
    from rich.console import Console

    from commdsl.bench.results import rows, summaries
    from commdsl.cli.bench import _Stream

    variants = [builtin_variant(builtin(k, "float32", "sum", 0)) for k in ("all_reduce", "broadcast")]
    plan = build(variants, [1024, 2048], 2, "gloo", 1, 0, False, str(tmp_path), [])
    out = Console(file=io.StringIO(), width=200)
    stream = _Stream(plan, [[0], [1]], out, Console(file=io.StringIO()))

    def results(done: int) -> dict:
        return {n: {r: {"durations_ns": [1000 * (n + 1)], "wrong": 0, "op_ns": [1000 * (n + 1)]} for r in (0, 1)}
                for n in range(done)}

    def printed() -> list[str]:
        return [ln.split()[0] if not ln.startswith("#") else ln[:12] for ln in out.file.getvalue().splitlines()]

    table = rows(plan, results(1))
    stream.advance(table, summaries(plan, table), final=False)
    assert printed() == ["# all_reduce", "#       size", "#        (B)", "1024"]  # all_reduce's first size only
    table = rows(plan, results(3))
    stream.advance(table, summaries(plan, table), final=False)
    assert printed()[4:] == ["2048", "# Avg bus ba", "#", "# broadcast", "#       size", "#        (B)", "1024"]
    table = rows(plan, results(4))
    stream.finish(table, summaries(plan, table))
    assert printed()[-2:] == ["2048", "# Avg bus ba"] and printed().count("# Avg bus ba") == 2


def test_a_row_with_both_forms_is_printed_once_both_are_measured(tmp_path):
    """Out-of-place and in-place share a row, as in nccl-tests: it streams when the second form is in."""
    from rich.console import Console

    from commdsl.bench.results import rows, summaries
    from commdsl.cli.bench import _Stream

    variants = [builtin_variant(builtin("reduce_scatter", "float32", "sum", 0, in_place))
                for in_place in (False, True)]
    plan = build(variants, [1024, 2048], 2, "gloo", 1, 0, False, str(tmp_path), [])
    out = Console(file=io.StringIO(), width=200)
    stream = _Stream(plan, [[0, 1]], out, Console(file=io.StringIO()))

    def measured(done: int) -> list:
        results = {n: {r: {"durations_ns": [1000], "wrong": 0, "op_ns": [1000]} for r in (0, 1)} for n in range(done)}
        return rows(plan, results)

    table = measured(1)  # 1 KiB out-of-place only
    stream.advance(table, summaries(plan, table), final=False)
    assert [ln for ln in out.file.getvalue().splitlines() if not ln.startswith("#")] == []
    table = measured(3)  # and 1 KiB in-place, 2 KiB out-of-place
    stream.advance(table, summaries(plan, table), final=False)
    lines = out.file.getvalue().splitlines()
    assert lines[0].split() == ["#", "out-of-place", "in-place"]
    assert [ln.split()[0] for ln in lines if not ln.startswith("#")] == ["1024"]
    assert len(lines[-1].split()) == 13  # both column groups, no ratio


def test_dtype_all_is_every_dtype_the_backend_takes():
    from commdsl.cli.bench import _every_dtype, config_from_args
    from commdsl.cli.main import build_parser

    args = build_parser().parse_args(["bench", "--collective", "all_reduce,broadcast", "--nproc", "2", "-d", "all",
                                      "--op", "bxor"])
    cfg = config_from_args(args)
    notes: list[str] = []
    labels = [v.label for table in _every_dtype(cfg, [], "gloo", notes) for v in table]
    assert "all_reduce int32" in labels and "all_reduce float32" not in labels  # Gloo's bxor: integers only
    assert "broadcast float32" in labels and "broadcast bool" in labels  # nothing to refuse
    assert any("all_reduce op bxor on float32 left out" in n for n in notes)


def test_iteration_spread_is_over_the_slowest_rank_of_each_iteration():
    from commdsl.bench.results import iteration_spread

    spread = iteration_spread([[1000, 5000, 3000], [2000, 1000, 3000]])  # iterations: 2, 5, 3 µs
    assert spread["min_us"] == 2.0 and spread["max_us"] == 5.0 and spread["median_us"] == 3.0
    assert abs(spread["stdev_us"] - 1.247219) < 1e-5
    assert iteration_spread([]) == {}
