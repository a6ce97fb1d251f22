"""`coalesced:` through the pipeline: expansion (each collective's place in its block), the engine's comparison of
that place across members (C316), the block rules (C314, C315), the simulator (a block reduces with its first op, as
torch does), `compile`, `fmt`, and real Gloo runs that must equal the simulator (docs/backend-support.md#coalesced)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.emit.fmt import format_source
from commdsl.emit.python import emit_python
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.schedule import Collective
from commdsl.simulate import simulate
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent

# What torch gives, measured on Gloo: the block's call reduces with its first op (`sum`), so `peak` gets the sum;
# all_gather_into_tensor and reduce_scatter_tensor blocks, on the world and on a subgroup; a tensor all-reduced
# twice in one block is summed once, as every input is read before any output is written.
MIXED = """\
program mixed
world [2, 4]
tensor total: float32[4] = rank + 1
tensor peak: float32[4] = rank + 1
tensor shard1: int64[2] = 10 * rank + i
tensor shard2: int64[3] = 100 * rank + i
tensor full1: int64[world * 2]
tensor full2: int64[world * 3]
tensor grad1: float32[world * 2] = rank + i
tensor grad2: float32[world] = 1
tensor mine1: float32[2]
tensor mine2: float32[1]
tensor pair: float32[2] = rank
tensor twice: int64[2] = rank + 1
tensor late: float32[2] = rank
group halves = split by rank // 2
coalesced:
    all_reduce total op sum
    all_reduce peak op max
expect total == world * (world + 1) / 2
expect peak == world * (world + 1) / 2
coalesced:
    all_gather shard1 into full1
    all_gather shard2 into full2
expect full1 == 10 * (i // 2) + i % 2
expect full2 == 100 * (i // 3) + i % 3
coalesced:
    reduce_scatter grad1 into mine1 op avg
    reduce_scatter grad2 into mine2 op avg
expect mine1 == (world - 1) / 2 + 2 * rank + i
expect mine2 == 1
coalesced:
    all_reduce pair in halves
    all_reduce mine2 in halves
expect pair == 4 * (rank // 2) + 1
expect mine2 == 2
coalesced:
    all_reduce twice
    all_reduce twice
expect twice == world * (world + 1) / 2
h = coalesced:
    all_reduce late
    all_reduce pair
total *= 1                                     # overlapped work on a buffer the block does not use
wait h
expect late == world * (world - 1) / 2
"""


def program(text: str):
    return load(SourceFile("t.comm", text))


def codes(text: str) -> list[tuple[str, int, list[int]]]:
    """(code, line, the lines of its secondary labels) of every finding."""
    found = check_program(program(text), CheckOptions(bound=8))
    return [(d.code, d.span.line, [lab.span.line for lab in d.labels]) for d in found]


HEAD = "program p\nworld 2..4\ntensor a: float32[4] = rank\ntensor b: float32[2] = rank\ntensor c: int64[2] = rank\n"


# ---- expansion ------------------------------------------------------------------------------------------------


def test_each_collective_knows_its_place_and_the_block_s_reduce_op():
    s = expand(program(MIXED), 4)
    ops = [op for op in s.ops[1] if isinstance(op, Collective)]
    assert [(op.kind, op.block.index, op.block.count, op.block.redop) for op in ops[:2]] == [
        ("all_reduce", 0, 2, "sum"),
        ("all_reduce", 1, 2, "sum"),
    ]
    assert ops[1].redop == "max"  # what the line says stays on the op: the rules compare it
    assert [op.group.name for op in ops[6:8]] == ["halves[0]", "halves[0]"]  # rank 1 is in the first half
    plain = expand(program(HEAD + "all_reduce a\n"), 2)
    assert [op.block for op in plain.ops[0] if isinstance(op, Collective)] == [None]


def test_a_block_in_a_function_is_coalesced_at_each_call_and_a_call_in_a_block_is_n115():
    body = "def sync(x, y):\n    coalesced:\n        all_reduce x\n        all_reduce y\n"
    s = expand(program(HEAD + body + "sync(a, b)\nsync(b, a)\n"), 2)
    blocks = [(op.view.tensor if hasattr(op, "view") else op.inputs[0].tensor, op.block.index) for op in s.ops[0]]
    assert blocks == [("a", 0), ("b", 1), ("b", 0), ("a", 1)]
    with pytest.raises(CommdslError) as e:
        program(HEAD + body + "coalesced:\n    sync(a, b)\n")
    assert [(d.code, d.span.line) for d in e.value.diagnostics] == [("N115", 11)]


# ---- engine and rules ---------------------------------------------------------------------------------------------


def test_the_same_block_on_every_rank_is_clean_even_in_different_branches():
    block = "    coalesced:\n        all_reduce a\n        all_reduce b\n"
    assert codes(HEAD + "on rank == 0:\n" + block + "else:\n" + block) == []


def test_a_rank_that_calls_the_block_s_collectives_one_by_one_is_c316_naming_both_lines():
    text = HEAD + "on rank == 0:\n    coalesced:\n        all_reduce a\n        all_reduce b\nelse:\n" \
                  "    all_reduce a\n    all_reduce b\n"
    assert codes(text) == [("C316", 8, [11])]  # one finding: the calls after it follow from it


def test_blocks_of_different_lengths_are_c316():
    text = HEAD + "on rank == 1:\n    coalesced:\n        all_reduce a\nelse:\n    coalesced:\n" \
                  "        all_reduce a\n        all_reduce b\n"
    d, missing = check_program(program(text))
    assert (d.code, d.span.line, d.labels[0].span.line) == ("C316", 11, 8)
    assert (missing.code, missing.span.line) == ("C307", 12)  # rank 1 never calls the second: the others wait
    assert d.label == "rank 0: `all_reduce` 1st of 2 in a `coalesced` block"
    assert d.labels[0].message == "rank 1: `all_reduce` 1st of 1 in a `coalesced` block"


def test_mixed_kinds_and_mixed_all_reduce_dtypes_are_c314_once_per_block():
    text = HEAD + "tensor f: float32[8]\ncoalesced:\n    all_reduce a\n    all_gather b into f[0 : 2 * world]\n" \
                  "    all_reduce b\ncoalesced:\n    all_reduce a\n    all_reduce c\n"
    found = codes(text)
    assert found == [("C314", 9, [8]), ("C314", 13, [12])]


def test_all_gathers_of_different_dtypes_coalesce():
    text = HEAD + "tensor f: float32[2 * world]\ntensor g: int64[2 * world]\ncoalesced:\n" \
                  "    all_gather b into f\n    all_gather c into g\n"
    assert codes(text) == []


def test_mixed_reduce_ops_are_c315_at_the_later_line():
    text = HEAD + "tensor e: float32[2]\ncoalesced:\n    all_reduce a op max\n    all_reduce b op max\n" \
                  "    all_reduce e op min\n"
    (d,) = check_program(program(text))
    assert (d.code, d.span.line, d.labels[0].span.line) == ("C315", 10, 8)
    assert d.message == "`all_reduce` asks for `min` but its `coalesced` block reduces with `max`"


def test_a_later_collective_reading_an_earlier_one_s_output_is_c317():
    text = HEAD + "coalesced:\n    all_reduce a\n    all_reduce b\n    all_reduce a[2 : 4]\n"
    assert codes(text) == [("C317", 9, [7])]
    assert codes(HEAD + "coalesced:\n    all_reduce a[0 : 2]\n    all_reduce a[2 : 4]\n") == []


def test_a_bound_block_is_one_request_in_flight_until_its_wait():
    bound = HEAD + "h = coalesced:\n    all_reduce a\n    all_reduce b\n"
    assert codes(bound + "wait h\n") == []
    assert codes(bound + "b += 1\nwait h\n") == [("R503", 9, [8])]
    (d,) = check_program(program(bound))
    assert (d.code, d.span.line, d.span.end_line) == ("R501", 6, 8)  # the block, not one of its lines
    assert d.message == "the request of `coalesced` on rank 0 is never waited"
    s = expand(program(bound + "wait h\n"), 2)
    first, second = (op for op in s.ops[0] if isinstance(op, Collective))
    assert first.req == second.req is not None and s.requests.parts.tolist() == [2, 2]


# ---- simulator, compile, fmt --------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4])
def test_the_simulator_computes_what_torch_does(world):
    result = simulate(expand(program(MIXED), world))
    assert result.engine.completed
    assert all(e.ok for e in result.expects), [e.detail for e in result.expects if not e.ok]


def test_compile_writes_the_coalescing_manager_on_the_block_s_group():
    lines = emit_python(program(MIXED), "gloo", checked=False).splitlines()
    managers = [k for k, line in enumerate(lines) if "_coalescing_manager(" in line]
    assert [lines[k].strip().split("  #")[0] for k in managers[:3]] == ["with dist._coalescing_manager():"] * 3
    last = lines[managers[3]].strip()
    assert last.startswith("with dist._coalescing_manager(") and "()" not in last
    assert lines[managers[0] + 1].strip().startswith("dist.all_reduce(total, dist.ReduceOp.SUM)")
    assert lines[managers[0] + 2].strip().startswith("dist.all_reduce(peak, dist.ReduceOp.MAX)")
    assert lines[managers[-1]].strip().startswith("with dist._coalescing_manager(async_ops=True) as h:")


def test_fmt_round_trips_the_block():
    messy = "program p\nworld 2\ntensor a: float32[4]\ncoalesced :\n  all_reduce   a\n  all_reduce a op  max\n" \
            "h[0]=coalesced:\n  all_reduce a\nwait h[0]\n"
    once = format_source(SourceFile("t.comm", messy))
    assert "coalesced:\n    all_reduce a\n    all_reduce a op max\nh[0] = coalesced:\n    all_reduce a\n" in once
    assert format_source(SourceFile("t.comm", once)) == once


# ---- real Gloo runs ------------------------------------------------------------------------------------------------


def _run(argv: list[str], capfd) -> tuple[int, str]:
    """`commdsl ARGV` in this process (torch's agent installs signal handlers: put ours back after)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
    try:
        code = main(argv)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    captured = capfd.readouterr()
    return code, captured.out + captured.err


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_gloo_gives_the_first_op_s_result_and_equals_the_simulator(tmp_path, capfd, no_orphans):
    path = tmp_path / "mixed.comm"
    path.write_text(MIXED)
    report = tmp_path / "report.json"
    argv = ["run", str(path), "--nproc", "4", "--backend", "gloo", "--no-check", "--timeout", "60", "--report",
            str(report)]
    code, out = _run(argv, capfd)
    assert code == 0, out
    data = json.loads(report.read_text())
    assert data["ok"] and data["mismatches"] == [] and data["failures"] == []
    assert all(e["ok"] for e in data["expects"])
    assert "every rank matches the simulator" in out
