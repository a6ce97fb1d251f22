"""`commdsl predict` (issue 17): topology files, the cost formulas by hand, the critical path, the JSON rows,
`bench --calibrate` on real Gloo, and a world-4096 prediction (its speed is in docs/benchmarks.md, not here)."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commdsl.bench.identify import BenchError
from commdsl.bench.plan import Refused
from commdsl.cli.main import main
from commdsl.collectives import KINDS
from commdsl.diagnostics import CommdslError
from commdsl.predict import sweep, variant_for
from commdsl.predict import calibrate
from commdsl.predict.calibrate import fit
from commdsl.predict.topology import PRESETS, Topology, load, parse
from commdsl.resolve import load as load_program
from commdsl.source import SourceFile
from fuzzing import CALIBRATED

ROOT = Path(__file__).resolve().parent.parent
RING = str(ROOT / "programs" / "ring_allreduce.comm")


def topo(alpha_us=10.0, gbps=1.0, rpn=64, extra="", inter="") -> Topology:
    text = f"ranks_per_node = {rpn}\nmemory_gbps = 1e6\n{extra}\n[intra]\nalpha_us = {alpha_us}\nbandwidth_gbps = {gbps}\n"
    return parse(SourceFile("t.toml", text + inter))


def predict_text(text: str, world: int, t: Topology, size: int, param: str = "n"):
    program = load_program(SourceFile("p.comm", text))
    v = variant_for(program, world, param, {}, None)
    return sweep(v, world, [size], t)


def seconds(text: str, world: int, t: Topology, size: int) -> float:
    return predict_text(text, world, t, size).rows[0].time_us * 1e-6


# ---- topology files ------------------------------------------------------------------------------------


def as_measured(doc: dict) -> dict:
    """A `predict --json` document made to stand for a bench's (`--measured` refuses what says it is predicted)."""
    doc = {k: v for k, v in doc.items() if k != "predicted"}
    doc["rows"] = [{k: v for k, v in r.items() if k != "predicted"} for r in doc["rows"]]
    return doc


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_parses_and_cites_a_source(name):
    t, _ = load(name)
    assert t.name == name and t.source and t.intra_beta > 0 and t.inter_beta > 0


def test_a_misspelt_preset_names_the_presets_and_the_closest(tmp_path, monkeypatch, capsys):
    """A bare name that is no file is most likely a preset misspelt: the error lists them and the nearest;
    a path stays a plain "no such file"."""
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--collective", "all_reduce", "--world", "4", "--topology", "dgx-h10"]) == 2
    err = capsys.readouterr().err
    assert "not a preset (dgx-h100, dgx-a100, localhost-gloo)" in err and "did you mean `dgx-h100`?" in err
    assert main(["predict", "--collective", "all_reduce", "--world", "4", "--topology", "gone.toml"]) == 2
    err = capsys.readouterr().err
    assert "gone.toml" in err and "preset" not in err


def test_a_topology_file_in_full():
    t = topo(extra='name = "x"\nbackend = "nccl"\nnics_per_node = 4',
             inter="[inter]\nalpha_us = 20\nbandwidth_gbps = 0.5\n[[link]]\nsrc = 0\ndst = 1\nalpha_us = 1\nbandwidth_gbps = 9\n")
    assert (t.name, t.backend, t.nics_per_node) == ("x", "nccl", 4)
    assert t.intra_alpha == pytest.approx(10e-6) and t.inter_beta == pytest.approx(0.5e9)
    assert t.overrides == {(0, 1): (pytest.approx(1e-6), pytest.approx(9e9), pytest.approx(1e-6))}
    assert (t.intra_step_alpha, t.inter_step_alpha) == (t.intra_alpha, t.inter_alpha)  # a step: a message's α
    steps = topo(inter="[inter]\nalpha_us = 20\nbandwidth_gbps = 0.5\ncollective_alpha_us = 300\n[[link]]\nsrc = 0\n"
                       "dst = 1\nalpha_us = 1\nbandwidth_gbps = 9\ncollective_alpha_us = 2\n")
    assert steps.inter_step_alpha == pytest.approx(300e-6) and steps.intra_step_alpha == pytest.approx(10e-6)
    assert steps.overrides[0, 1] == (pytest.approx(1e-6), pytest.approx(9e9), pytest.approx(2e-6))


@pytest.mark.parametrize("text, message, line", [
    ("ranks_per_node = 8\n[intra\n", "not a TOML file", 2),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwith_gbps = 100\n", "unknown key `intra.bandwith_gbps`", 4),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\n", "`intra.bandwidth_gbps` is required", 2),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 0\n", "`intra.bandwidth_gbps`: input should be greater than or equal to 0.000001", 4),
    # past these a predicted time is not a finite number
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1e-305\n", "`intra.bandwidth_gbps`: input should be greater", 4),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1e300\nbandwidth_gbps = 1\n", "`intra.alpha_us`: input should be less", 3),
    ("ranks_per_node = 8\nmemory_gbps = 1e300\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n", "`memory_gbps`: input should be less", 2),
    # a table that is not a setting points at its header, a key inside an inline table at the key
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[intra.sub]\nx = 1\n", "unknown key `intra.sub`", 5),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[bogus]\nx = 1\n", "unknown key `bogus`", 5),
    ("ranks_per_node = 8\n\nintra = { alpha_us = 1, bandwidth_gbps = 1, bogus = 3 }\n", "unknown key `intra.bogus`", 3),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[link]\nsrc = 0\ndst = 1\nalpha_us = 1\n"
     "bandwidth_gbps = 1\n", "`link`: input should be a valid tuple", 5),
    ("ranks_per_node = 8\n[intra]\nalpha_us = -1\nbandwidth_gbps = 1\n", "`intra.alpha_us`", 3),
    ("[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n", "`ranks_per_node` is required", 1),
    ('ranks_per_node = "8x"\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n', "`ranks_per_node`", 1),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[[link]]\nsrc = 0\ndst = 1\nalpha_us = 1\n",
     "`link.1.bandwidth_gbps` is required", 5),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[[link]]\nsrc = 3\ndst = 3\nalpha_us = 1\n"
     "bandwidth_gbps = 1\n", "src and dst are the same rank", 7),
    ("ranks_per_node = 8\nbus_gbps = 4\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n",
     "`bus_gbps`: needs `shared_node = true`", 2),
    ("ranks_per_node = 8\nshared_node = true\nnode_memory_gbps = 0\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n",
     "`node_memory_gbps`: input should be greater than or equal to 0.000001", 3),
    ('backend = "nccl"\nranks_per_node = 8\nsend_buffer_bytes = 4194304\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n',
     '`send_buffer_bytes`: needs `backend = "gloo"`', 3),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\ncrowded_alpha_us = 5\n",
     "`intra.crowded_alpha_us` needs `cores_per_node`", 5),
    # TOML's own types, no conversions (each was read as something before 2026-11-28), and finite numbers
    ('ranks_per_node = 8\n[intra]\nalpha_us = "5"\nbandwidth_gbps = 1\n', "`intra.alpha_us`: input should be a valid number", 3),
    ("ranks_per_node = true\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n", "`ranks_per_node`: input should be a valid integer", 1),
    ('ranks_per_node = 8\nshared_node = "yes"\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n', "`shared_node`", 2),
    ("ranks_per_node = 8\n[intra]\nalpha_us = inf\nbandwidth_gbps = 1\n", "`intra.alpha_us`: input should be a finite number", 3),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = inf\n", "finite", 4),
    ("ranks_per_node = 99999999999999999999\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n", "less than or equal to 65536", 1),
    ("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[[link]]\nsrc = 0\ndst = 1\nalpha_us = 1\n"
     "bandwidth_gbps = 1\n[[link]]\nsrc = 0\ndst = 1\nalpha_us = 2\nbandwidth_gbps = 2\n", "rank 0 to rank 1 again (link 1)", 12),
])
def test_bad_topology_is_an_n136_at_its_line(text, message, line):
    with pytest.raises(CommdslError) as e:
        parse(SourceFile("bad.toml", text))
    found = [d for d in e.value.diagnostics if message in d.message]
    assert found, [d.message for d in e.value.diagnostics]
    assert all(d.code == "N136" for d in e.value.diagnostics)
    assert found[0].span is not None and found[0].span.line == line


def test_bad_topology_on_the_command_line_is_a_diagnostic_with_a_caret(tmp_path, capsys):
    bad = tmp_path / "topo.toml"
    bad.write_text("ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwith_gbps = 100\n")
    code = main(["predict", RING, "--world", "4", "--topology", str(bad), "--color", "never"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "N136" in out and f"{bad}:4:1" in out and "bandwith_gbps = 100" in out and "^" in out
    assert "Traceback" not in out + err


def test_what_a_user_can_get_wrong_around_a_prediction_is_said_not_crashed(tmp_path, capsys):
    """Found by a sweep of 2,257 `predict` runs (2026-11-28): each of these was an internal error, a silent
    misreading or an unexplained refusal."""
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe ranks_per_node = 8\n")
    outside = tmp_path / "outside.toml"
    outside.write_text("ranks_per_node = 8\n[intra]\nalpha_us = 5\nbandwidth_gbps = 100\n"
                       "[[link]]\nsrc = 0\ndst = 100\nalpha_us = 1\nbandwidth_gbps = 10\n")
    hsdp = str(ROOT / "programs" / "hsdp_step.comm")
    hier = str(ROOT / "programs" / "hierarchical_allreduce.comm")
    cases = [
        (["--collective", "all_reduce", "--world", "4", "--topology", str(binary)], 2, "not UTF-8 text (byte 0"),
        (["--collective", "all_reduce", "--world", "4", "--topology", str(outside), "--sizes", "1K"], 0,
         "the [[link]] from rank 0 to rank 100 is outside --world 4: not used"),
        ([hsdp, "--param", "replicas", "--world", "4", "--topology", "dgx-h100", "--sizes", "1K"], 1, "N126"),
        ([hier, "--world", "4", "--topology", "dgx-h100", "--sizes", "1"], 2, "(1 B leaves `x` empty; size skipped)"),
    ]
    for argv, want, said in cases:
        code = main(["predict", *argv, "--color", "never"])
        out, err = capsys.readouterr()
        assert code == want, (argv, out, err)
        assert said in out + err and "internal error" not in out + err, (argv, out, err)
    with pytest.raises(SystemExit):  # the language's own limit, not a misleading N124 past it
        main(["predict", "--collective", "all_reduce", "--world", "65537", "--topology", "dgx-h100"])
    assert "from 1 to 65536" in capsys.readouterr().err


def test_the_simulators_memory_is_checked_before_it_allocates(capsys):
    """A program that reads its data is expanded beside the simulator: N132 said before every rank's tensors
    are allocated (`moe_dispatch` at world 1024 and 256 MiB needs 4 TiB: it was a MemoryError)."""
    code = main(["predict", str(ROOT / "programs" / "moe_dispatch.comm"), "--param", "hidden", "--world", "1024",
                 "--topology", "dgx-h100", "--sizes", "256M"])
    out, err = capsys.readouterr()
    assert code == 1 and "N132" in out, out + err


def test_dtype_retypes_a_program_as_the_bench_does_and_a_group_of_one_moves_nothing():
    t = topo(10, 1)
    program = load_program(SourceFile("r.comm", Path(RING).read_text()))
    wide = variant_for(program, 4, "n", {}, "float64")
    row = sweep(wide, 4, [1 << 20], t).rows[0]
    assert (row.dtype, row.count) == ("float64", (1 << 20) // 8)  # it stayed float32 without a `# bench:` line
    one = "program o\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nbroadcast x from 0\n"
    assert seconds(one, 1, t, 1 << 20) == 0  # a broadcast of one was priced n/β, an all_reduce of one 0
    # but torch's Gloo all_gather of one still copies its input into a flat temporary and that into the
    # output (measured: hsdp_step's all_gather in a mesh dimension of one took 52-55 ms at 64 MiB on the
    # 2-core machine; plain torch at 16 MiB 6.9 ms where one copy took 2.9)
    gather = "program o\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n * world]\nall_gather x into y\n"
    assert seconds(gather, 1, t, 1 << 20) == pytest.approx(2 * 2 * (1 << 20) / 1e15)  # memory_gbps = 1e6


def test_a_collective_on_a_group_of_one_costs_the_call():
    """A group of one sends nothing, but torch still hands the call to Gloo's worker thread and waits for it
    (plain torch on the 2-core machine: an all_reduce on a group of one took 160-250 µs at 4 KiB-4 MiB):
    `collective_call_us`, once per call whatever its size; absent, nothing. A larger group's steps already
    hold it (`collective_alpha_us` is timed from whole calls)."""
    program = (
        "program o\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ngroup own = split by rank\n"
        "all_reduce x op sum in own\nbarrier in own\nall_reduce x op sum\n"
    )
    lone = topo(10, 1, extra="collective_call_us = 200\n")
    assert "a built-in collective on a group of one 200 µs" in lone.describe()
    for n in (1 << 12, 1 << 20):
        plain = seconds(program, 2, topo(10, 1), n)
        assert seconds(program, 2, lone, n) == pytest.approx(plain + 2 * 200e-6)  # the all_reduce and barrier
    assert seconds(program, 1, lone, 1 << 20) == pytest.approx(3 * 200e-6)  # at world 1 every group is of one


# ---- the cost formulas, by hand ------------------------------------------------------------------------

SEND = "program p\nworld 2\nparam n = 1024\ntensor x: float32[n] = 1\non rank == 0:\n    send x to 1\non rank == 1:\n" \
       "    recv x from 0\n"


def test_one_send_costs_alpha_plus_bytes_over_beta():
    n_bytes = 1 << 20
    assert seconds(SEND, 2, topo(10, 1), n_bytes) == pytest.approx(10e-6 + n_bytes / 1e9)


def test_inter_node_and_a_link_override_price_the_message():
    inter = "[inter]\nalpha_us = 50\nbandwidth_gbps = 0.25\n"
    assert seconds(SEND, 2, topo(10, 1, rpn=1, inter=inter), 1 << 20) == pytest.approx(50e-6 + (1 << 20) / 0.25e9)
    over = inter + "[[link]]\nsrc = 0\ndst = 1\nalpha_us = 1\nbandwidth_gbps = 4\n"
    assert seconds(SEND, 2, topo(10, 1, rpn=1, inter=over), 1 << 20) == pytest.approx(1e-6 + (1 << 20) / 4e9)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_builtin_ring_all_reduce_is_2_p_minus_1_steps(p):
    text = "program a\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\nexpect x == world\n"
    n = 1 << 20
    want = 2 * (p - 1) * 10e-6 + 2 * (p - 1) / p * n / 1e9
    assert seconds(text, p, topo(10, 1), n) == pytest.approx(want)


BUILT_IN_A2A = "program a\nworld 1..\nparam n = 1024\ntensor x: float32[n] = rank\ntensor y: float32[n]\nall_to_all x into y\n"
PAIRWISE_A2A = (  # the same exchange as each pair's messages, posted at once
    "program d\nworld 1..\nparam n = 1024\ntensor x: float32[world, n // world] = rank\n"
    "tensor y: float32[world, n // world]\nbatch:\n    for j in 0 .. world - 1:\n        on rank != j:\n"
    "            send x[j] to j\n            recv y[j] from j\ny[rank] = x[rank]\n"
)


def test_a_built_in_all_to_all_between_nodes_is_bound_by_their_nics():
    """Every member sends to every other at once: at world 16 on two 8-GPU nodes each member sends half its
    bytes off its node, through the node's 8 NICs together. Priced as the ring of an all_gather (8 NICs side
    by side per hop), it took 728 µs at 256 MiB where the NICs need 2,684 and the same exchange written as
    messages took 2,711 (found 2026-11-30). On one node nothing changes."""
    t = load("dgx-h100")[0]
    n = 256 << 20
    nics = 8 * 8 / 16 * n / (8 * 50e9)  # a node's members' bytes for the other node over its 8 NICs
    built_in = seconds(BUILT_IN_A2A, 16, t, n)
    assert nics < built_in < nics * 1.05
    assert built_in == pytest.approx(seconds(PAIRWISE_A2A, 16, t, n), rel=0.05)
    assert seconds(BUILT_IN_A2A, 8, t, n) == pytest.approx(7 * 5.7e-6 + 7 / 8 * n / 450e9, rel=1e-6)  # one node


def test_a_node_holding_one_member_drives_one_ring_between_nodes():
    """NCCL runs one ring per NIC between nodes, as many as the group has members per node, on its emptiest
    node: world 9 on 8-GPU nodes puts rank 8 alone on the second, with one NIC, so the ring's hop between the
    nodes is 50 GB/s, not 8 × 50 (busbw was 367 GB/s, over NVLink's 450, before 2026-11-30)."""
    t = load("dgx-h100")[0]
    n = 256 << 20
    ring = "program r\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x op sum\n"
    assert seconds(ring, 9, t, n) > 2 * 8 / 9 * n / 50e9  # the ring's bytes at one NIC's β
    assert seconds(ring, 16, t, n) < 2 * 15 / 16 * n / (4 * 50e9)  # two full nodes: eight rings side by side


def test_a_link_override_between_nodes_is_not_multiplied_by_the_rings_beside_it():
    """NCCL's rings side by side between nodes multiply a NIC's β; a [[link]] names one rank pair, its own β:
    a built-in ring through a 1 GB/s override ran at 2 GB/s on two NICs, twice the hand-written ring's speed
    over the same link (found 2026-11-30)."""
    slow = "[[link]]\nsrc = 3\ndst = 4\nalpha_us = 10\nbandwidth_gbps = 1\n"
    t = topo(10, 100, rpn=4, extra='backend = "nccl"\ntree = false\nnics_per_node = 2', inter=slow)
    n = 64 << 20
    ring = "program r\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x op sum\n"
    assert seconds(ring, 8, t, n) >= 2 * 7 / 8 * n / 1e9


@pytest.mark.parametrize("argv", [
    ["--collective", "all_reduce", "--algo", "ring", "--world", "16"],
    ["--collective", "all_to_all", "--world", "16"],
    ["--collective", "all_gather", "--world", "24"],
    ["--collective", "all_reduce", "--algo", "ring", "--world", "9"],
])
def test_a_built_in_collectives_link_figures_are_possible(argv, tmp_path, capsys):
    """No port busier than the prediction, both ends of each hop counted, and the bytes between nodes spread
    over the NICs of the rings side by side: all 480 MiB of a ring all_reduce at world 16 were on one 50 GB/s
    NIC, busy as if at 400 GB/s, and no way in was counted (before 2026-11-30)."""
    out = tmp_path / "p.json"
    assert main(["predict", *argv, "--topology", "dgx-h100", "--sizes", "256M", "--json", str(out)]) == 0
    capsys.readouterr()
    links = json.loads(out.read_text())["links"]
    assert links and all(e["utilisation"] <= 1 + 1e-9 for e in links), links[:3]
    assert any(e["link"].endswith(" in") for e in links) and any(e["link"].endswith(" out") for e in links)
    for e in links:
        if "NIC" in e["link"]:
            assert e["bytes"] / (e["busy_us"] * 1e-6) == pytest.approx(50e9)  # each NIC at its own β


def test_a_large_world_is_labelled_by_the_collective_proved_nearest_it():
    """Above world 16 the collective a program computes is proved at a smaller size it declares, the nearest:
    pairs swapping with `rank ^ 1` all-reduce at world 2 and at no larger size. Proved at the smallest, this
    program was an all_reduce at world 64, with a busbw over NVLink's (found 2026-11-30)."""
    pairs = ("program pairs\nworld [2, 4, 16, 64]\nparam n = 1024\ntensor x: float32[n] = rank\ntensor y: float32[n]\n"
             "batch:\n    send x to rank ^ 1\n    recv y from rank ^ 1\nx += y\nexpect x == rank + (rank ^ 1)\n")
    program = load_program(SourceFile("p.comm", pairs))
    assert variant_for(program, 2, "n", {}, None).measure.kind == "all_reduce"
    assert variant_for(program, 64, "n", {}, None).measure.kind is None
    ring = load_program(SourceFile("r.comm", Path(RING).read_text().replace("world 1..16", "world 1..")))
    assert variant_for(ring, 256, "n", {}, None).measure.kind == "all_reduce"


def test_a_collective_on_a_group_of_one_puts_nothing_on_a_link(tmp_path, capsys):
    """It sends nothing: a broadcast of one had its bytes on the rank's port, 11,292 % busy (before 2026-11-30)."""
    out = tmp_path / "p.json"
    for argv in (["--collective", "broadcast", "--world", "1"], ["--collective", "reduce", "--world", "1"]):
        assert main(["predict", *argv, "--topology", "localhost-gloo", "--sizes", "64M", "--json", str(out)]) == 0
        capsys.readouterr()
        assert all(e["bytes"] == 0 for e in json.loads(out.read_text())["links"])


def test_nccl_takes_the_tree_when_it_is_faster():
    text = "program a\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\nexpect x == world\n"
    t = topo(10, 1, extra='backend = "nccl"')
    small = 1024
    tree = 2 * math.ceil(math.log2(64)) * 10e-6 + 2 * small / 1e9
    assert seconds(text, 64, t, small) == pytest.approx(tree)  # the ring's 126 hops of latency lose
    big = 1 << 30
    ring = 2 * 63 * 10e-6 + 2 * 63 / 64 * big / 1e9
    assert seconds(text, 64, t, big) == pytest.approx(min(ring, 2 * 6 * 10e-6 + 2 * big / 1e9))


def test_hand_written_ring_matches_the_formula_step_by_step():
    p, n = 4, 1 << 22  # 4 MiB: chunks of n/4 bytes, 2(p-1) steps, p-1 local adds of a chunk (2 views counted)
    mem = 5e9
    t = parse(SourceFile("t.toml", f"ranks_per_node = 8\nmemory_gbps = {mem / 1e9}\n[intra]\nalpha_us = 10\n"
                                   "bandwidth_gbps = 1\n"))
    got = predict_text(Path(RING).read_text(), p, t, n).rows[0].time_us * 1e-6
    chunk = n / p
    assert got == pytest.approx(2 * (p - 1) * (10e-6 + chunk / 1e9) + (p - 1) * 2 * chunk / mem)


TWO_SENDS = """program two
world 4
param n = 1024
tensor x: float32[n] = 1
on rank == 0:
    batch:
        send x to 1
        send x to 2
on rank == 1 or rank == 2:
    recv x from 0
"""

TWO_PAIRS = """program pairs
world 4
param n = 1024
tensor x: float32[n] = 1
on rank % 2 == 0:
    send x to rank + 1
else:
    recv x from rank - 1
"""


def test_two_messages_on_one_link_each_get_half():
    n = 1 << 20
    assert seconds(TWO_SENDS, 4, topo(10, 1), n) == pytest.approx(10e-6 + 2 * n / 1e9)  # rank 0's way out is shared
    assert seconds(TWO_PAIRS, 4, topo(10, 1), n) == pytest.approx(10e-6 + n / 1e9)  # two links, full speed each


FAN_IN = """program fanin
world 3
param n = 1024
tensor x: float32[n]
tensor a: float32[n]
tensor b: float32[n]
on rank == 1:
    send x to 0
on rank == 2:
    send x to 0
on rank == 0:
    batch:
        recv a from 1
        recv b from 2
"""


@pytest.mark.parametrize("slow_gbps", [0.1, 0.5, 0.9])
def test_a_slow_link_beside_a_fast_one_on_a_port_keeps_its_own_rate(slow_gbps):
    """Rank 0's way in carries two messages, one over a [[link]] slower than half the port: its link holds it
    below its fair share, so it moves at its own β the whole time and the other takes the rest of the port
    until it ends (max-min fair). It was charged half its own β throughout: 2n/β, twice its time alone (found
    2026-11-30); a link above half the port shares evenly until the other ends, then runs at its own β."""
    n = 1 << 20
    override = f"[[link]]\nsrc = 1\ndst = 0\nalpha_us = 10\nbandwidth_gbps = {slow_gbps}\n"
    t = topo(10, 1, inter=override)
    got = predict_text(FAN_IN, 3, t, n)
    slow = slow_gbps * 1e9
    if slow <= 0.5e9:
        assert got.rows[0].time_us * 1e-6 == pytest.approx(10e-6 + n / slow)
    else:
        half = n / 0.5e9  # both at half the port until the fast one ends, then the slow one at its own β
        assert got.rows[0].time_us * 1e-6 == pytest.approx(10e-6 + half + (n - 0.5e9 * half) / slow)


BATCH_WAITED_LATER = """program b
world 3
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n]
tensor z: float32[n]
on rank == 0:
    b = batch:
        recv y from 1
        recv z[0:1] from 2
    wait b
    send x to 1 tag 9
on rank == 1:
    send x to 0
    recv y from 2 tag 5
    recv y from 0 tag 9
on rank == 2:
    send x to 1 tag 5
    send x[0:1] to 0
"""


def test_a_batch_bound_to_a_handle_is_waited_until_its_slowest_op():
    """Rank 0's batch: the large message from rank 1 ends at α + n/β, the 4-byte one from rank 2 only after rank 2
    has sent to rank 1 (2α + 2n/β, then α + 4/β); rank 0 sends on after its wait, to rank 1, which finishes last."""
    n = 1 << 20
    assert seconds(BATCH_WAITED_LATER, 3, topo(10, 1), n) == pytest.approx(4 * 10e-6 + (3 * n + 4) / 1e9)


def test_a_shared_node_bus_halves_a_pairwise_exchange():
    n = 1 << 20
    assert seconds(TWO_PAIRS, 4, topo(10, 1, extra="shared_node = true"), n) == pytest.approx(10e-6 + 2 * n / 1e9)


@pytest.mark.parametrize(("bus_gbps", "each"), [(1, 4), (2, 2), (1.5, 4 / 1.5), (4, 1), (8, 1)])
def test_a_bus_carries_its_bandwidth_over_the_messages_at_once(bus_gbps, each):
    """`bus_gbps`: the bus's bandwidth for all its messages together, each still at most its link's: four
    messages of a ring exchange at once each move at min(β, bus / 4) (a 1 GB/s link here)."""
    n = 1 << 20
    t = topo(10, 1, extra=f"shared_node = true\nbus_gbps = {bus_gbps}")
    assert t.bus_capacity == pytest.approx(bus_gbps)
    assert seconds(EXCHANGE, 4, t, n) == pytest.approx(10e-6 + each * n / 1e9)
    assert f"one bus of {bus_gbps:.3g} GB/s" in t.describe()


def test_an_exchange_on_a_bus_gets_the_exchanges_bandwidth_and_pairs_the_buss():
    """`exchange_gbps`: the bus's bandwidth when some rank of the messages at once sends and receives (a ring's
    step: the 2-core host moved 0.6-1.1 x β in all so, where two ping-pong pairs moved 1.4-1.7 x β); messages
    that only go one way each (two pairs) keep `bus_gbps`. Without the key an exchange gets `bus_gbps`."""
    n = 1 << 20
    t = topo(10, 1, extra="shared_node = true\nbus_gbps = 2\nexchange_gbps = 1")
    assert t.bus_capacity_for(True) == pytest.approx(1.0) and t.bus_capacity_for(False) == pytest.approx(2.0)
    assert seconds(EXCHANGE, 4, t, n) == pytest.approx(10e-6 + 4 * n / 1e9)  # four at once on 1 GB/s
    assert seconds(TWO_PAIRS, 4, t, n) == pytest.approx(10e-6 + n / 1e9)  # two at once on 2 GB/s: full speed
    assert "one bus of 2 GB/s (1 GB/s where ranks send and receive at once)" in t.describe()
    plain = topo(10, 1, extra="shared_node = true\nbus_gbps = 2")
    assert plain.bus_capacity_for(True) == plain.bus_capacity == pytest.approx(2.0)
    assert seconds(EXCHANGE, 4, plain, n) == pytest.approx(10e-6 + 2 * n / 1e9)


PAIRWISE = """program pairwise
world 2..
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n] = 2
batch:
    send x to rank ^ 1
    recv y from rank ^ 1
"""


def test_a_swap_on_a_bus_gets_the_swaps_bandwidth_and_more_ranks_the_exchanges():
    """`swap_gbps`: the bus's bandwidth when only two of a node's ranks send and receive, to each other (the
    2-core host: a swap moved 0.76-0.87 x β in all, where 4 ranks' ring step moved 0.9-1.4 x β). The ring's step
    at 2 ranks is a swap; at 4 ranks, and two pairs swapping at once, it is an exchange. Without the key a swap
    gets `exchange_gbps`."""
    n = 1 << 20
    t = topo(10, 1, extra="shared_node = true\nbus_gbps = 2\nexchange_gbps = 1\nswap_gbps = 0.5")
    assert t.bus_capacity_for(True, swap=True) == pytest.approx(0.5) and t.bus_capacity_for(False, swap=True) == 2.0
    assert seconds(EXCHANGE, 2, t, n) == pytest.approx(10e-6 + 4 * n / 1e9)  # two at once on 0.5 GB/s
    assert seconds(PAIRWISE, 2, t, n) == pytest.approx(10e-6 + 4 * n / 1e9)
    assert seconds(EXCHANGE, 4, t, n) == pytest.approx(10e-6 + 4 * n / 1e9)  # four at once on 1 GB/s
    assert seconds(PAIRWISE, 4, t, n) == pytest.approx(10e-6 + 4 * n / 1e9)  # two swaps: four ranks at once
    assert "(1 GB/s where ranks send and receive at once, 0.5 GB/s where two ranks swap)" in t.describe()
    one_node_each = topo(10, 1, rpn=2, extra="shared_node = true\nexchange_gbps = 1\nswap_gbps = 0.5")
    assert seconds(PAIRWISE, 4, one_node_each, n) == pytest.approx(10e-6 + 4 * n / 1e9)  # a swap on each node's bus
    plain = topo(10, 1, extra="shared_node = true\nbus_gbps = 2\nexchange_gbps = 1")
    assert seconds(EXCHANGE, 2, plain, n) == pytest.approx(10e-6 + 2 * n / 1e9)  # two at once on 1 GB/s


def test_a_built_in_ring_on_a_bus_gets_its_share_of_it():
    """Every member's hop of a built-in ring crosses the bus at once: min(β, bus / members) per hop, and at
    most half the link when a rank's sends and receives share one way."""
    n, world = 1 << 20, 4
    ring = "program r\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\nexpect x == world\n"
    latency = 2 * (world - 1) * 10e-6
    sums = 2 * (world - 1) / world * n / (1e15 / world)  # Gloo's, every member at once on the node's memory
    for extra, hop_gbps in (("", 1 / 4), ("\nbus_gbps = 2", 2 / 4), ("\nbus_gbps = 8", 1), ("\nbus_gbps = 8\nduplex = false", 1 / 2)):
        t = topo(10, 1, extra="shared_node = true" + extra)
        want = latency + 2 * (world - 1) / world * n / (hop_gbps * 1e9) + sums
        assert seconds(ring, world, t, n) == pytest.approx(want), extra


def test_messages_of_different_sizes_share_a_bus_of_capacity_two():
    """Processor sharing with a capacity: on a bus carrying two messages at full speed, three messages of n, 2n
    and 3n bytes first move at 2/3 speed each until the smallest is through (1.5n bytes of time), then the two
    others at full speed: the largest ends after 1.5n + 2n = 3.5n."""
    from commdsl.predict.cost import _shared

    b = np.array([[1.0], [2.0], [3.0]])
    eff = _shared(np.array([5, 5, 5]), b, 0, 8, capacity=2.0)
    assert eff[:, 0] == pytest.approx([1.5, 2.5, 3.5])
    assert _shared(np.array([5, 5, 5]), b, 0, 8)[:, 0] == pytest.approx([3.0, 5.0, 6.0])  # capacity 1
    assert _shared(np.array([5, 5, 5]), b, 0, 8, capacity=3.0)[:, 0] == pytest.approx([1.0, 2.0, 3.0])


EXCHANGE = """program exchange
world 2..
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n] = 2
batch:
    send x to (rank + 1) % world
    recv y from (rank - 1) % world
"""


@pytest.mark.parametrize("world", [2, 4])
def test_a_rank_that_is_not_duplex_sends_and_receives_through_one_way(world):
    """`duplex = false`: a rank's send and its receive share its one way (Gloo's one loop thread per process),
    so a ring exchange moves each message at half speed; pairs of ranks apart still run side by side, and a
    built-in ring's step (send and receive at once) gets half the link."""
    n, alpha = 1 << 20, 10e-6
    half = topo(10, 1, extra="duplex = false")
    assert seconds(EXCHANGE, world, topo(10, 1), n) == pytest.approx(alpha + n / 1e9)
    assert seconds(EXCHANGE, world, half, n) == pytest.approx(alpha + 2 * n / 1e9)
    assert seconds(TWO_PAIRS, 4, half, n) == pytest.approx(alpha + n / 1e9)  # no bus: the pairs do not meet
    ring = "program r\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\nexpect x == world\n"
    full = 2 * (world - 1) * alpha + 2 * (world - 1) / world * n / 1e9
    assert seconds(ring, world, half, n) == pytest.approx(full + 2 * (world - 1) / world * n / 1e9)
    assert "in and out share one way" in half.describe()
    links = predict_text(EXCHANGE, world, half, n).timing
    busiest = links.port_names[int(np.argmax(links.port_busy))]
    assert busiest.startswith("rank ") and "in and out" in busiest  # one way carries both directions

def test_a_later_message_waits_for_its_link():
    text = """program q
world 3
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n] = 2
on rank == 0:
    h = isend x to 2
    wait h
on rank == 1:
    x = 3
    send x to 2
on rank == 2:
    recv x from 0
    recv y from 1
"""
    n = 1 << 20
    got = seconds(text, 3, topo(10, 1), n)
    assert got == pytest.approx(2 * (10e-6 + n / 1e9), rel=1e-3)  # rank 2's way in carries one after the other


# ---- all sizes at once ---------------------------------------------------------------------------------------

SAME = [  # (program, size param, params, world)
    ("ring_allreduce.comm", "n", {}, 8),
    ("recursive_doubling_allreduce.comm", "n", {}, 8),
    ("hierarchical_allreduce.comm", "n", {"local": 2}, 8),
    ("pipeline_1f1b.comm", "width", {}, 4),
    ("moe_all_to_all.comm", "hidden", {}, 8),
]
NETWORKS = {  # one node with a shared bus; NVLink nodes and NICs (NCCL); 2 ranks a node, a slow NIC, a link override
    "localhost-gloo": lambda: load("localhost-gloo")[0],
    "dgx-h100": lambda: load("dgx-h100")[0],
    "pairs": lambda: topo(3, 5, rpn=2, extra="nics_per_node = 1", inter="[inter]\nalpha_us = 30\nbandwidth_gbps = 1\n"
                          "[[link]]\nsrc = 0\ndst = 1\nalpha_us = 7\nbandwidth_gbps = 0.5\n"),
    "not-duplex": lambda: topo(40, 3.9, rpn=4, extra="duplex = false"),  # one way per rank, 2 nodes at 8 ranks
}
SIZES = [1 << 12, 1 << 16, 1 << 20, 1 << 22]


@pytest.mark.parametrize("network", list(NETWORKS))
@pytest.mark.parametrize(("name", "param", "params", "world"), SAME, ids=[c[0] for c in SAME])
def test_all_sizes_in_one_pass_equal_each_size_alone(name, param, params, world, network):
    """The clocks of several sizes in one engine pass (one messages × sizes array per step) give exactly what
    each size gives on its own, every rank's time included."""
    t = NETWORKS[network]()
    v = variant_for(load_program(SourceFile(name, (ROOT / "programs" / name).read_text())), world, param, params, None)
    together = sweep(v, world, SIZES, t)
    assert len(together.rows) == len(SIZES)
    for k, size in enumerate(SIZES):
        alone = sweep(v, world, [size], t)
        assert together.rows[k].time_us == alone.rows[0].time_us
        np.testing.assert_array_equal(together.timing.rank_seconds[:, k], alone.timing.rank_seconds[:, 0])
        assert together.paths[k] == alone.paths[0]


@pytest.mark.parametrize("network", list(NETWORKS))
def test_sizes_scaled_from_one_expansion_equal_each_size_expanded(network, monkeypatch):
    """Above `EXACT_OPS` only the largest size is expanded and the others' bytes scaled from it: for the ring
    (chunks linear in `n`, sizes a power of two apart) that is exact."""
    import commdsl.predict

    t = NETWORKS[network]()
    v = variant_for(load_program(SourceFile("ring.comm", Path(RING).read_text())), 8, "n", {}, None)
    monkeypatch.setattr(commdsl.predict, "EXACT_OPS", 0)
    scaled = sweep(v, 8, SIZES, t)
    assert any("scaled" in note for note in scaled.notes)
    monkeypatch.undo()
    for k, size in enumerate(SIZES):
        alone = sweep(v, 8, [size], t)
        assert scaled.rows[k].time_us == alone.rows[0].time_us
        np.testing.assert_array_equal(scaled.timing.rank_seconds[:, k], alone.timing.rank_seconds[:, 0])



@pytest.mark.parametrize("network", list(NETWORKS))
@pytest.mark.parametrize(("name", "param", "params", "world"), SAME, ids=[c[0] for c in SAME])
def test_held_ports_give_the_times_of_ports_written_every_step(name, param, params, world, network, monkeypatch):
    """A pattern whose messages have their ports to themselves keeps their free times as its messages' ends
    until another pattern needs them (`Clocks.held`): exactly the times of writing the ports every step."""
    from commdsl.predict import cost

    t = NETWORKS[network]()
    v = variant_for(load_program(SourceFile(name, (ROOT / "programs" / name).read_text())), world, param, params, None)
    owned = []
    route = cost.Clocks.route

    def noting(self, src, dst):
        way = route(self, src, dst)
        owned.append(way.own)
        return way

    monkeypatch.setattr(cost.Clocks, "route", noting)
    held = sweep(v, world, SIZES, t)

    def eager(self, src, dst):
        way = route(self, src, dst)
        way.own = False
        return way

    monkeypatch.setattr(cost.Clocks, "route", eager)
    written = sweep(v, world, SIZES, t)
    np.testing.assert_array_equal(held.timing.rank_seconds, written.timing.rank_seconds)
    np.testing.assert_array_equal(held.timing.port_busy, written.timing.port_busy)
    assert [r.time_us for r in held.rows] == [r.time_us for r in written.rows]
    if network == "dgx-h100" and name == "ring_allreduce.comm":
        assert any(owned)  # a ring step on its own ports: the held path was taken


def test_rows_joined_when_read_equal_rows_joined_at_once():
    """`Rows.concat` joins a column when it is first read: the same arrays as joining every column at once."""
    from commdsl.engine import Posts

    cols = {c: 3 for c in Posts.COLUMNS}
    a = Posts(size=4, **{**cols, "rank": np.arange(4), "src": np.arange(4) + 10})
    b = Posts(size=2, **{**cols, "rank": np.array([7, 8]), "req": np.array([-1, 5])})
    c = Posts(size=3, **{**cols, "rank": np.array([1, 2, 3]), "tag": 9})
    both = Posts.concat([a, b, c])
    assert len(both) == 9 and both.const("dtype") == 3 and both.const("rank") is None
    np.testing.assert_array_equal(both.column("src"), [10, 11, 12, 13, 3, 3, 3, 3, 3])
    np.testing.assert_array_equal(both.rank, [0, 1, 2, 3, 7, 8, 1, 2, 3])
    np.testing.assert_array_equal(both.tag, [3] * 6 + [9] * 3)
    again = Posts.concat([both, a])  # a part whose columns are still unjoined
    np.testing.assert_array_equal(again.req, [3, 3, 3, 3, -1, 5, 3, 3, 3, 3, 3, 3, 3])
    picked = both.take(np.array([5, 0]))
    np.testing.assert_array_equal(picked.req, [5, 3])
    np.testing.assert_array_equal(picked.src, [3, 10])


@pytest.mark.parametrize("op", ["%", "//"])
def test_int64_remainder_and_floor_division_are_pythons(op):
    """The expansion's `%` and `//` of an int64 array by a Python int skip the magnitude check: NumPy gives
    Python's result for every int64 (MIN // -1, the one overflow, still takes the careful path)."""
    from commdsl.values import _int_op

    a = np.array([-(2**63), -(2**62) - 3, -7, -1, 0, 5, 2**62 + 1, 2**63 - 1], dtype=np.int64)
    for b in (1, 2, 3, -2, -3, 7, 4096, 2**61 + 5, -(2**61)):
        got = _int_op(None, op, a, b, a.size)
        want = [x % b if op == "%" else x // b for x in a.tolist()]
        assert [int(x) for x in got] == want, (op, b)

# ---- output: critical path, JSON, plot ---------------------------------------------------------------------


def test_critical_path_names_the_ring_lines_and_adds_up():
    t = topo(10, 1)
    pred = predict_text(Path(RING).read_text(), 4, t, 1 << 20)
    path = pred.paths[0]
    lines = {e["line"] for e in path}
    assert {18, 20, 23} <= lines, lines  # the reduce-scatter send, the add, the all-gather send
    assert all(e["ranks"] for e in path)
    busy = sum(e["us"] for e in path) + sum(e["idle_before_us"] for e in path)
    assert busy == pytest.approx(pred.rows[0].time_us, rel=1e-6)


@pytest.mark.parametrize("world", [2, 4])
def test_async_ops_are_timed_the_same_where_the_path_is_not_kept(world, monkeypatch):
    """Above PATH_MAX_OPS no node of the critical path is made: an `isend` ring then crashed where its posts'
    times were read back (`post_time`), at world 4096."""
    text = Path(RING).read_text()
    text = text.replace("""    batch:
        send x.chunk(out, world) to right
        recv tmp[0 : x.chunk(into, world).size] from left
""", """    h = isend x.chunk(out, world) to right
    recv tmp[0 : x.chunk(into, world).size] from left
    wait h
""")
    assert "isend" in text
    t = topo(10, 1)
    kept = predict_text(text, world, t, 1 << 20)
    monkeypatch.setattr("commdsl.predict.cost.PATH_MAX_OPS", 0)
    dropped = predict_text(text, world, t, 1 << 20)
    assert dropped.timing.path is None and kept.timing.path
    np.testing.assert_array_equal(dropped.timing.seconds, kept.timing.seconds)


def test_lines_are_where_the_slowest_ranks_time_goes_as_the_bench_counts_it():
    """A row's `lines` are the bench's (`bench/results.py` `_by_line`): the slowest rank's time per source
    statement, from its call to its return, so they add up to the row's time; a batch counts on its `batch:`
    line (the critical path names the send inside it), an async op's wait on its `wait` line."""
    t = topo(10, 1)
    ring = predict_text(Path(RING).read_text(), 4, t, 1 << 20)
    (row,) = ring.rows
    assert {e["line"] for e in row.lines} == {17, 20, 22}, row.lines  # the two `batch:` statements and the add
    assert sum(e["us"] for e in row.lines) == pytest.approx(row.time_us, rel=1e-9)
    assert {e["line"] for e in ring.paths[0]} >= {18, 23}  # the path names the sends themselves
    pipeline = load_program(SourceFile("p.comm", (ROOT / "programs" / "pipeline_1f1b.comm").read_text()))
    by_size = sweep(variant_for(pipeline, 2, "micro", {}, None), 2, [1024, 4096], t)  # one engine run per size
    for r in by_size.rows:
        assert r.lines and sum(e["us"] for e in r.lines) == pytest.approx(r.time_us, rel=1e-9)

    text = """\
program overlap
world 2
param n = 1024
tensor x: float32[n] = rank
tensor y: float32[n]
tensor z: float32[n] = 1
on rank == 0:
    h = isend x to 1
    z += z
    wait h
    expect z == 2
on rank == 1:
    h = irecv y from 0
    wait h
"""
    pred = predict_text(text, 2, t, 1 << 20)
    (row,) = pred.rows
    us = {e["line"]: e["us"] * 1e-6 for e in row.lines}
    assert set(us) in ({13, 14}, {8, 9, 10}), us  # the slowest rank's statements; never the `expect`
    assert sum(us.values()) == pytest.approx(row.time_us * 1e-6, rel=1e-9)
    message = 10e-6 + (1 << 20) / 1e9
    if set(us) == {13, 14}:  # the receiver: the whole message is its wait
        assert us[13] == 0 and us[14] == pytest.approx(message, rel=1e-6)
    else:  # the sender: the add, then what is left of the message
        assert us[8] == 0 and us[9] > 0 and us[9] + us[10] == pytest.approx(message, rel=1e-6)


def test_every_ranks_lines_sit_beside_the_slowest_ones():
    """`rank_lines` holds each rank's `lines` (as the bench's rows now do), so a prediction can be set beside
    the rank the bench found slowest even where the model's slowest is another rank, running other statements:
    here the sender runs lines 8-10 and the receiver 12-15."""
    text = """\
program overlap
world 2
param n = 1024
tensor x: float32[n] = rank
tensor y: float32[n]
tensor z: float32[n] = 1
on rank == 0:
    h = isend x to 1
    z += z
    wait h
on rank == 1:
    h = irecv y from 0
    z += z
    z += z
    wait h
"""
    (row,) = predict_text(text, 2, topo(10, 1), 1 << 20).rows
    assert [{e["line"] for e in lines} for lines in row.rank_lines] == [{8, 9, 10}, {12, 13, 14, 15}]
    for lines, us in zip(row.rank_lines, row.rank_us):
        assert sum(e["us"] for e in lines) == pytest.approx(us, rel=1e-9)
    assert row.lines == row.rank_lines[row.rank_us.index(max(row.rank_us))]


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_measured_lines_are_compared_line_by_line(tmp_path, capfd, no_orphans):
    """With `--measured`, the bench's per-line times at the path size sit beside the predicted ones, on the
    same statements (measured on real Gloo ranks here)."""
    bench = tmp_path / "b.json"
    code = main(["bench", RING, "--nproc", "2", "--sizes", "256K", "--iters", "3", "--warmup", "1",
                 "--json", str(bench)])
    text, err = capfd.readouterr()
    assert code == 0, text + err
    got = {e["line"] for e in json.loads(bench.read_text())["rows"][0]["lines"]}
    code = main(["predict", RING, "--world", "2", "--topology", "localhost-gloo", "--sizes", "256K",
                 "--measured", str(bench)])
    text, err = capfd.readouterr()
    assert code == 0, err
    assert "iteration goes at 256 KiB (the bench's slowest), per source line:" in text
    compared = [line for line in text.splitlines() if re.match(r"#   line +\d+ +[\d.]+ us +[\d.]+ us +[+-]", line)]
    assert {int(line.split()[2]) for line in compared} == got == {17, 20, 22}, text


def test_a_continued_statement_is_quoted_whole_on_the_critical_path(tmp_path, capsys):
    prog = tmp_path / "c.comm"
    prog.write_text("program c\nworld 2\nparam n = 1024\ntensor x: float32[n] = rank\ntensor y: float32[n]\n"
                    "batch:\n    send x to \\\n        (rank + 1) % world\n    recv y from (rank + 1) % world\n")
    assert main(["predict", str(prog), "--topology", "dgx-h100", "--sizes", "1M", "--links", "0"]) == 0
    assert "`send x to (rank + 1) % world`" in capsys.readouterr().out  # it was `send x to \`


def test_each_line_is_named_by_its_statement_not_a_value_it_reads(tmp_path, capsys):
    """An all_to_all whose splits read tensor data holds reads on its line before the collective: the line's
    `lines` entry quotes the all_to_all (once quoted `send_counts[j]`, the first read)."""
    out = tmp_path / "p.json"
    moe = str(ROOT / "programs" / "moe_dispatch.comm")
    code = main(["predict", moe, "--world", "2", "--topology", "localhost-gloo", "--param", "hidden", "--sizes", "64K",
                 "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    texts = {e["line"]: e["text"] for e in json.loads(out.read_text())["rows"][0]["lines"]}
    assert texts[23].startswith("all_to_all routed into expert_in[0:received] splits [send_counts[j]")
    assert texts[25].startswith("all_to_all expert_out[0:received] into combined splits")
    assert texts[19] == "send_counts[j] = sum(expert == j)"


def test_json_rows_have_the_bench_schema_and_are_marked_predicted(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["predict", RING, "--world", "4", "--topology", "dgx-h100", "--sizes", "64K:1M", "--json", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "PREDICTED" in text and "critical path" in text and "busiest links" in text
    data = json.loads(out.read_text())
    assert data["predicted"] is True and data["world"] == 4
    assert [r["size_bytes"] for r in data["rows"]] == [65536, 131072, 262144, 524288, 1048576]
    for r in data["rows"]:
        assert {"size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "lines"} <= set(r) and r["predicted"] is True
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * 3 / 4)
        assert r["lines"] and all({"line", "text", "us"} <= set(x) for x in r["lines"])
    assert data["links"] and data["critical_path"]


def test_measured_rows_give_an_error_column_and_a_plot(tmp_path, capsys):
    pred = tmp_path / "pred.json"
    main(["predict", RING, "--world", "4", "--topology", "dgx-h100", "--sizes", "64K:128K", "--json", str(pred)])
    capsys.readouterr()
    bench = as_measured(json.loads(pred.read_text()))
    for r in bench["rows"]:
        r["time_us"] *= 2  # a "measurement" twice the prediction
    fake = tmp_path / "bench.json"
    fake.write_text(json.dumps(bench))
    png = tmp_path / "p.png"
    code = main(["predict", RING, "--world", "4", "--topology", "dgx-h100", "--sizes", "64K:128K",
                 "--measured", str(fake), "--plot", str(png)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "measured" in out and out.count("-50.0") == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bench_of_another_world_or_program_is_refused_as_measured(tmp_path, capsys):
    """Its times would stand beside these rows as if they measured them: world 2's ring against world 4's,
    or the ring's against the built-in all_reduce's, is a usage error naming both."""
    pred = tmp_path / "pred.json"
    main(["predict", RING, "--world", "2", "--topology", "dgx-h100", "--sizes", "64K", "--json", str(pred)])
    capsys.readouterr()
    assert json.loads(pred.read_text())["world"] == 2
    pred.write_text(json.dumps(as_measured(json.loads(pred.read_text()))))
    common = ["--topology", "dgx-h100", "--sizes", "64K", "--measured", str(pred)]
    for argv, says in (
        ([RING, "--world", "4"], "measured at 2 ranks, and this predicts --world 4"),
        (["--collective", "all_reduce", "--world", "2"], "measures `ring_allreduce`, and this predicts `all_reduce`"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["predict", *argv, *common])
        assert stop.value.code == 2 and says in capsys.readouterr().err
    assert main(["predict", RING, "--world", "2", *common]) == 0
    assert "note" not in capsys.readouterr().err
    # a bench that names a form or a dtype after the label (`--dtype all`: `ring_allreduce float64`) matches
    data = json.loads(pred.read_text())
    row = data["rows"][0]
    data["rows"] = [dict(row, variant="ring_allreduce float32", time_us=1.0), dict(row, variant="ring_allreduce float64")]
    forms = tmp_path / "forms.json"
    forms.write_text(json.dumps(data))
    at = ["predict", RING, "--world", "2", "--topology", "dgx-h100", "--sizes", "64K", "--measured", str(forms)]
    assert main([*at, "--dtype", "float64"]) == 0
    assert " pred " in (out := capsys.readouterr().out) and "+0.0" in out  # float64's row: the prediction itself
    assert main(["predict", RING, "--world", "2", *common, "--topology", "localhost-gloo"]) == 0  # the last wins
    assert "was measured on nccl, and the topology prices gloo" in capsys.readouterr().err


def test_a_malformed_or_predicted_measurement_is_refused_naming_the_field(tmp_path, capsys):
    """Each of these was an internal error (TypeError, KeyError, ZeroDivisionError, OverflowError) or was
    compared as if measured (a negative time, a `predict --json` document): found by a sweep of bad files
    (2026-11-30)."""
    pred = tmp_path / "pred.json"
    args = ["predict", RING, "--world", "4", "--topology", "localhost-gloo", "--sizes", "1K:4K"]
    assert main([*args, "--json", str(pred)]) == 0
    capsys.readouterr()
    good = as_measured(json.loads(pred.read_text()))
    row = good["rows"][0]
    cases = [
        (json.loads(pred.read_text()), "written by `commdsl predict --json`: its times are predicted, not measured"),
        (dict(good, rows=[dict(row, time_us=None)]), "rows[0].time_us: Input should be a valid number"),
        (dict(good, rows=[{k: v for k, v in row.items() if k != "time_us"}]), "rows[0].time_us: Field required"),
        (dict(good, rows=[dict(row, time_us="slow")]), "rows[0].time_us: Input should be a valid number"),
        (dict(good, rows=[dict(row, time_us=0)]), "rows[0].time_us: Input should be greater than 0"),
        (dict(good, rows=[dict(row, time_us=-5.0)]), "rows[0].time_us: Input should be greater than 0"),
        (dict(good, rows=[dict(row, lines="x")]), "rows[0].lines: Input should be a valid list"),
        (dict(good, rows=[dict(row, lines=[{"line": "a", "us": 1.0}])]), "rows[0].lines[0].line: Input should be"),
        (dict(good, rows=[dict(row, size_bytes=1.5)]), "rows[0].size_bytes: Input should be a valid integer"),
        (dict(good, rows=[]), "rows: List should have at least 1 item"),
        ([row], "not a JSON object"),
        (dict(good, rows=[dict(row, variant=None)]), "its rows name no `variant`"),
    ]
    bad = tmp_path / "bad.json"
    for doc, says in cases:
        bad.write_text(json.dumps(doc))
        with pytest.raises(SystemExit) as stop:
            main([*args, "--measured", str(bad)])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and says in err and "internal error" not in err, (says, err)
    for text, says in (('{"rows": [{"size_bytes": 1e400, ', "not JSON"), ('{"rows": [{"time_us": NaN}]}', "`NaN` is not")):
        bad.write_text(text)
        with pytest.raises(SystemExit):
            main([*args, "--measured", str(bad)])
        assert says in capsys.readouterr().err


def test_a_program_of_no_ops_is_predicted_to_take_no_time(tmp_path, capsys):
    """It was an IndexError in the profile: a rank that ran no record has no line to close."""
    empty = tmp_path / "empty.comm"
    empty.write_text("program empty\nworld 2\nparam n = 16\ntensor x: float32[n] = rank\n")
    looped = tmp_path / "none.comm"
    looped.write_text("program none\nworld 2\nparam n = 16\nparam steps = 0\ntensor x: float32[n] = rank\n"
                      "for s in 0 .. steps - 1:\n    all_reduce x op sum\n")
    for path in (empty, looped):
        assert main(["predict", str(path), "--topology", "dgx-h100", "--sizes", "64K:128K"]) == 0
        out, err = capsys.readouterr()
        assert "internal error" not in err and re.search(r"65536 .* 0\.0 +0\.000 +0\.000 +pred", out), out + err


def test_a_table_where_a_list_of_tables_goes_says_to_double_its_brackets():
    text = "ranks_per_node = 8\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n[link]\nsrc = 0\ndst = 1\n"
    with pytest.raises(CommdslError) as e:
        parse(SourceFile("bad.toml", text))
    (d,) = e.value.diagnostics
    assert d.help == "each entry of a list of tables is its own `[[link]]`"
    inline = "ranks_per_node = 8\nintra = { alpha_us = 1, bandwidth_gbps = 1, bogus = 3 }\n"
    with pytest.raises(CommdslError) as e:
        parse(SourceFile("bad.toml", inline))
    (d,) = e.value.diagnostics
    assert (d.span.line, d.span.column) == (2, inline.splitlines()[1].index("bogus") + 1)


def test_without_json_the_clocks_run_once_for_the_largest_sizes_path():
    """The text shows the largest size's path only; every size's path and per-line profile (an engine run per
    size) is for `--json`: a 500-rank GPipe of 15 sizes took 89 s with them, 10 s without (2026-11-30)."""
    program = load_program(SourceFile("r.comm", Path(RING).read_text()))
    v = variant_for(program, 4, "n", {}, None)
    sizes = [1 << 16, 1 << 18, 1 << 20]
    every, last = sweep(v, 4, sizes, topo(10, 1)), sweep(v, 4, sizes, topo(10, 1), paths=False)
    assert sorted(every.paths) == [0, 1, 2] and sorted(last.paths) == [2] and last.paths[2] == every.paths[2]
    assert [r.time_us for r in last.rows] == [r.time_us for r in every.rows]
    assert [bool(r.lines) for r in last.rows] == [False, False, True]


def test_measured_rows_that_faulted_in_pages_the_model_does_not_count_are_named(tmp_path, capsys):
    """`x = i + 1` on the root makes two int64 temporaries: at 16 MiB (32 MiB each) malloc maps them on every
    call, which the model counts; below, they come from the heap, and a run whose malloc trimmed it between
    calls (rank_page_faults as the bench measured them on the 2-core machine) is named with what it cost."""
    tree = str(ROOT / "programs" / "binomial_tree_broadcast.comm")
    args = ["predict", tree, "--world", "2", "--topology", "localhost-gloo", "--sizes", "4M:16M"]
    pred = tmp_path / "pred.json"
    assert main([*args, "--json", str(pred)]) == 0
    capsys.readouterr()
    bench = as_measured(json.loads(pred.read_text()))
    from commdsl.predict.cost import PAGE

    assert [r["rank_page_faults"] for r in bench["rows"]] == [[0, 0], [0, 0], [2 * (32 << 20) / PAGE, 0]]
    faults = {4 << 20: [0, 0], 8 << 20: [8160, 0], 16 << 20: [16386, 1]}
    for r in bench["rows"]:
        r["rank_page_faults"] = faults[r["size_bytes"]]
    measured = tmp_path / "bench.json"
    measured.write_text(json.dumps(bench))
    assert main([*args, "--measured", str(measured)]) == 0
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if re.match(r"#   \d+ MiB: rank", line)]
    assert "the model does not count" in out and len(named) == 1, out
    assert named[0].startswith("#   8 MiB: rank 0 faulted in 8160 pages an iteration, 31.9 MiB more than predicted")
    # and the prediction with those pages counted, against the measured time (here the prediction itself)
    found = re.search(r"about ([\d,]+) us at .* GB/s; predicted with them ([\d,]+) us \(\+([\d.]+) %\)$", named[0])
    assert found, named[0]
    extra, with_them, error = (float(found[i].replace(",", "")) for i in (1, 2, 3))
    row = next(r for r in bench["rows"] if r["size_bytes"] == 8 << 20)
    assert abs(with_them - (row["time_us"] + extra)) <= 1
    assert abs(error - extra / row["time_us"] * 100) < 0.1


def test_measured_rows_whose_ranks_used_more_cpu_than_the_cores_give_are_named(tmp_path, capsys):
    """The binomial reduce at N = 4 on the 2-core machine: its receivers burned about 3 ms of CPU a 1 MiB message
    where its senders burned 0.4 (`gloo_queue_facts.py receivers`), so the ranks' CPU over the host's 2 cores
    alone outlasts the prediction: the row is named with that bound. A row whose ranks' CPU fits, a bench that
    did not count the host's cores, one on NCCL, or one that did not count CPU, names nothing."""
    reduce = str(ROOT / "benchmarks" / "figures" / "predict-novel" / "binomial_reduce.comm")
    args = ["predict", reduce, "--world", "4", "--topology", "localhost-gloo", "--sizes", "1M:2M"]
    pred = tmp_path / "pred.json"
    assert main([*args, "--json", str(pred)]) == 0
    capsys.readouterr()
    bench = as_measured(json.loads(pred.read_text()))
    small, large = bench["rows"]
    small["rank_cpu_us"] = [small["time_us"] * 0.4] * 4  # 1.6 x the predicted time on 1 core, 0.8 x on 2
    large["rank_cpu_us"] = [large["time_us"] * c for c in (2.0, 0.3, 1.8, 0.3)]  # 4.4 x: 2.2 x on 2, 1.1 x on 4
    for r in bench["rows"]:
        r["time_us"] *= 2.5  # as measured, slower than predicted
    measured = tmp_path / "bench.json"
    # named where the bound outlasts the prediction by a tenth of the measured time (2.5 x the prediction)
    for cores, named in ((2, ["2 MiB"]), (4, []), (1, ["1 MiB", "2 MiB"]), (None, [])):
        measured.write_text(json.dumps({**bench, "host_cores": cores}))
        assert main([*args, "--measured", str(measured)]) == 0
        out = capsys.readouterr().out
        lines = [line for line in out.splitlines() if re.match(r"#   \d+ MiB: its 4 ranks used", line)]
        assert [line.split(":")[0][4:] for line in lines] == named, out
    measured.write_text(json.dumps({**bench, "host_cores": 2}))
    main([*args, "--measured", str(measured)])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("#   2 MiB: its 4 ranks"))
    predicted = json.loads(pred.read_text())["rows"][1]["time_us"]
    used = sum(large["rank_cpu_us"])
    assert f"used {used:,.0f} us of CPU an iteration (rank 0 the most, {2.0 * predicted:,.0f} us)" in line, line
    assert line.endswith(f"at least {used / 2:,.0f} us on 2 cores, {(used / 2 / predicted - 1) * 100:.0f} % more than"
                         " predicted"), line
    # on NCCL a rank's CPU spins while its GPU works: not work the cores were short of
    measured.write_text(json.dumps({**bench, "host_cores": 2, "backend": "nccl"}))
    main([*args, "--measured", str(measured)])
    assert "its 4 ranks used" not in capsys.readouterr().out
    for r in bench["rows"]:
        del r["rank_cpu_us"]
    measured.write_text(json.dumps({**bench, "host_cores": 2}))
    main([*args, "--measured", str(measured)])
    assert "its 4 ranks used" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["predict", RING, "--topology", "dgx-h100"], "--world"),
    (["predict", "--world", "4", "--topology", "dgx-h100"], "give a FILE"),
    (["predict", RING, "--world", "32", "--topology", "dgx-h100"], "not one of them"),
    (["predict", RING, "--world", "4", "--topology", "dgx-h100", "--sizes", "1X"], "not a size"),
    (["predict", RING, "--world", "4", "--topology", "dgx-h100", "--op", "max"], "a program states its own"),
    (["predict", RING, "--world", "4", "--topology", "dgx-h100", "--root", "1"], "(--set root=R)"),
    (["predict", "--collective", "all_reduce", "--world", "4", "--topology", "dgx-h100", "--param", "m"],
     "--param sets a program's param"),
    (["predict", "--collective", "all_reduce", "--world", "4", "--topology", "dgx-h100", "--set", "n=2"],
     "--set sets a program's param"),
    (["predict", "--collective", "broadcast", "--world", "4", "--topology", "dgx-h100", "--root", "4"],
     "--root 4 is not a rank of --world 4"),
    (["bench", RING, "--nproc", "2", "--runs", "3"], "--runs goes with --calibrate"),
    (["bench", "--calibrate", "--nproc", "2", "--runs", "0", "-o", "h.toml"], "--runs"),
])
def test_usage_errors(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and message in out + err


def test_a_world_beyond_the_topology_says_how_many_it_holds(tmp_path, capsys):
    small = tmp_path / "small.toml"
    small.write_text("nodes = 1\nranks_per_node = 2\n[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n")
    try:
        code = main(["predict", RING, "--world", "4", "--topology", str(small)])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2
    assert f"--world 4: the topology ({small}) holds 2 ranks: 1 node of 2; raise `nodes` or leave it out" in out + err


@pytest.mark.parametrize("declared", ["world 4", "world [4]", "world 4..4"])
def test_without_world_a_program_that_declares_one_size_is_predicted_at_it(declared, tmp_path, capsys):
    prog = tmp_path / "one.comm"
    body = "param n = 4\ntensor x: float32[n] = rank + 1\nall_reduce x\nexpect x == 10\n"
    prog.write_text(f"program one\n{declared}\n{body}")
    code = main(["predict", str(prog), "--topology", "dgx-h100", "--sizes", "1K", "--json", str(tmp_path / "p.json")])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert out.startswith("# commdsl predict: 4 ranks, PREDICTED")
    assert json.loads((tmp_path / "p.json").read_text())["world"] == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        ([RING], "ring_allreduce.comm runs at world sizes 1..16: give --world N"),
        (["--collective", "all_reduce"], "--collective all_reduce needs --world N"),
    ],
)
def test_without_world_several_sizes_or_a_built_in_is_a_usage_error(argv, message, capsys):
    try:
        code = main(["predict", *argv, "--topology", "dgx-h100"])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and message in out + err


def test_a_program_that_deadlocks_is_not_predicted(tmp_path, capsys):
    bad = tmp_path / "d.comm"
    bad.write_text("program d\nworld 2\nparam n = 4\ntensor x: float32[n] = 1\nsend x to 1 - rank\nrecv x from 1 - rank\n")
    code = main(["predict", str(bad), "--world", "2", "--topology", "dgx-h100", "--sizes", "1K"])
    out, err = capsys.readouterr()
    assert code == 1 and "error[D402]" in out and "refusing to predict d: the checks found errors at world size 2" in err


@pytest.mark.parametrize("world, checked_at", [(4, 4), (256, 64)])
def test_a_program_torch_would_refuse_is_not_predicted(world, checked_at, tmp_path, capsys):
    """`band` on float32 is a Gloo error (B601), found by the checker before anything is timed: at the predicted
    world up to CHECK_WORLD, above it at the largest declared size up to there."""
    bad = tmp_path / "b.comm"
    bad.write_text("program b\nworld 2..\nparam n = 16\ntensor x: float32[n] = rank\nall_reduce x op band\n")
    code = main(["predict", str(bad), "--world", str(world), "--topology", "localhost-gloo", "--sizes", "1M"])
    out, err = capsys.readouterr()
    assert code == 1 and "error[B601]" in out and f"at world size {checked_at}" in out
    assert f"refusing to predict b: the checks found errors at world size {checked_at} with `n = 262144`" in err


def test_above_the_check_world_a_note_says_where_the_check_ran(tmp_path, capsys):
    ring = tmp_path / "ring.comm"
    ring.write_text(Path(RING).read_text().replace("world 1..16", "world 1.."))
    code = main(["predict", str(ring), "--world", "128", "--topology", "dgx-h100", "--sizes", "1M"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "note: checked at world 64, the largest declared size up to 64" in " ".join(err.split())


def test_above_the_check_world_with_no_smaller_size_a_note_says_it_was_not_checked(tmp_path, capsys):
    ring = tmp_path / "ring.comm"
    ring.write_text(Path(RING).read_text().replace("world 1..16", "world [128]"))
    code = main(["predict", str(ring), "--topology", "dgx-h100", "--sizes", "1M"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "note: not checked: no declared world size up to 64 takes this program" in " ".join(err.split())



def test_a_prediction_past_its_time_limit_is_an_n134_at_the_statement(tmp_path, capsys):
    """A sweep of a param that sets loop counts too can expand millions of ops per size (interleaved_1f1b's
    `rounds` to 16 MiB ran for half an hour): predict stops at `--max-time`, as check does, and says where."""
    code = main(["predict", RING, "--world", "16", "--topology", "dgx-h100", "--max-time", "0.000001"])
    out, err = capsys.readouterr()
    text = " ".join((out + err).split())
    assert code == 2 and "error[N134]: the prediction reached its time limit of 1e-06 s while" in text
    assert "predict fewer sizes (`--sizes`) or a smaller world (`--world`)" in text

ISEND_CYCLE = """program c
world 2
param n = 1024
tensor x: float32[n] = rank
tensor z: float32[n]
h = isend x to 1 - rank
recv z from 1 - rank
wait h
"""


def test_a_program_that_hangs_only_on_nccl_is_predicted_only_on_gloo(capsys):
    """On NCCL the isend and the recv between one pair run in issue order on one stream, so both ranks' recvs
    wait behind isends their peer never receives: the checker's D402 on nccl. predict runs the checker's model of
    the topology's backend: it refuses on an NCCL topology and names the check that says why."""
    assert seconds(ISEND_CYCLE, 2, topo(10, 1), 1 << 20) == pytest.approx(10e-6 + (1 << 20) / 1e9)
    with pytest.raises(Refused) as refused:
        seconds(ISEND_CYCLE, 2, topo(10, 1, extra='backend = "nccl"'), 1 << 20)
    assert {d.code for d in refused.value.diagnostics} == {"D402"}


ISENDS_IN_ORDER = """program o
world 2
param n = 1024
tensor big: float32[n] = 1
tensor small: float32[n / 1024] = 2
on rank == 0:
    h = isend big to 1
    g = isend small to 1
    wait g
    wait h
else:
    a = irecv big from 0
    b = irecv small from 0
    wait a
    wait b
"""


def test_nccl_runs_a_pairs_async_sends_one_after_another():
    """Two isends to one peer: on Gloo they share the link (the small one ends first, the big one after the
    bytes of both); on NCCL the second waits on the stream for the first and then has the link to itself."""
    n = 1 << 20
    big, small = n, n // 1024
    assert seconds(ISENDS_IN_ORDER, 2, topo(10, 1), n) == pytest.approx(10e-6 + (big + small) / 1e9)
    nccl = topo(10, 1, extra='backend = "nccl"')
    assert seconds(ISENDS_IN_ORDER, 2, nccl, n) == pytest.approx(2 * 10e-6 + (big + small) / 1e9)
    path = predict_text(ISENDS_IN_ORDER, 2, nccl, n).paths[0]
    assert [step["line"] for step in path] == [7, 8]


ISEND_TO_A_WAITING_RECV = """program h
world 2
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n]
on rank == 0:
    y += x
    h = isend x to 1
    y += x
    wait h
on rank == 1:
    {late}recv y from 0
"""


def isend_topo(extra: str = "") -> Topology:
    """Gloo, 1 GB/s and 10 µs a message, 1 GB/s of memory: `y += x` of n bytes takes 2n ns."""
    text = f"ranks_per_node = 2\nmemory_gbps = 1\n{extra}\n[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"
    return parse(SourceFile("t.toml", text))


@pytest.mark.parametrize("buffer", [None, 1 << 22, 1 << 18])
def test_an_isend_to_a_posted_receive_holds_its_caller_while_its_first_bytes_move(buffer):
    """Gloo's TCP pair writes an isend's message from the calling thread when its receive is already posted,
    as far as the socket's send buffer takes it (`send_buffer_bytes`): rank 0's second add starts only then.
    Without the key the isend returns at once and the add runs beside the message."""
    n = 1 << 20
    add, message = 2 * n / 1e9, 10e-6 + n / 1e9
    t = isend_topo("" if buffer is None else f"send_buffer_bytes = {buffer}")
    held = 0.0 if buffer is None else 10e-6 + min(n, buffer) / 1e9
    expected = add + max(held + add, message)
    assert seconds(ISEND_TO_A_WAITING_RECV.format(late=""), 2, t, n) == pytest.approx(expected)
    path = predict_text(ISEND_TO_A_WAITING_RECV.format(late=""), 2, t, n).paths[0]
    if buffer == 1 << 22:  # the hold is on the path: the message, then the add it delayed
        assert [step["line"] for step in path] == [7, 8, 9]


HALO = """program halo
world 2
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n]
tensor z: float32[n] = 1
{first}
{second}
z += x
wait h, r
"""


def test_an_isend_after_its_receive_at_the_same_moment_holds_its_caller():
    """A halo exchange posts its irecvs, then its isends, none of which takes time in the model: each receive
    is posted at its send's own time, and came first (the engine met it as the send was posted), so the isend
    holds its caller while its message moves and the add waits (measured, 4 MiB halves on the 2-core machine:
    3-4 ms an isend; the model held them 0). Written the other way round, isends first, nothing is held."""
    n = 1 << 20
    add, message = 2 * n / 1e9, 10e-6 + n / 1e9
    t = isend_topo("send_buffer_bytes = 4194304")
    recv, send = "r = irecv y from 1 - rank", "h = isend x to 1 - rank"
    assert seconds(HALO.format(first=recv, second=send), 2, t, n) == pytest.approx(message + add)
    assert seconds(HALO.format(first=send, second=recv), 2, t, n) == pytest.approx(max(message, add))


def test_an_isend_writes_its_first_bytes_at_its_own_speed_whatever_shares_its_way():
    """The caller writes into its socket at its message's own β from when both are posted: with a rank's way
    in and out one (`duplex = false`) its message shares the way with the one coming in and ends after 2n/β,
    but the isend returns after α + n/β and the add starts then (a halo exchange at N = 2 on the 2-core
    machine: isends of 4 MiB returned in 0.2-1.4 ms where their shared bytes took 5-6 ms)."""
    n = 1 << 20
    alpha, add = 10e-6, 2 * n / 1e9
    t = isend_topo("send_buffer_bytes = 4194304\nduplex = false")
    halo = HALO.format(first="r = irecv y from 1 - rank", second="h = isend x to 1 - rank")
    assert seconds(halo, 2, t, n) == pytest.approx(max(alpha + n / 1e9 + add, alpha + 2 * n / 1e9))


def test_an_isend_before_its_receive_or_on_nccl_returns_at_once():
    """Posted before its receive (rank 1 adds first), the isend only announces itself and returns; on NCCL an
    isend returns once it is queued on its stream (the key is Gloo's only; without it nothing is held)."""
    n = 1 << 20
    add, message = 2 * n / 1e9, 10e-6 + n / 1e9
    late = ISEND_TO_A_WAITING_RECV.format(late="y += x\n    ")
    t = isend_topo("send_buffer_bytes = 4194304")
    assert seconds(late, 2, t, n) == pytest.approx(max(2 * add, add + message))  # rank 0: its two adds
    nccl = isend_topo('backend = "nccl"')
    assert seconds(ISEND_TO_A_WAITING_RECV.format(late=""), 2, nccl, n) == pytest.approx(2 * add)


def test_calibrating_on_a_busy_host_warns(monkeypatch):
    """A calibration at load 7 on two cores fitted α 1.6 ms where the quiet host gave 574 µs (2026-11-30), and
    wrote it without a word."""
    monkeypatch.setattr(calibrate.os, "getloadavg", lambda: (7.0, 4.0, 2.0))
    said = calibrate.busy_host(2)
    assert said is not None and "load average 7.0 on 2 cores" in said and "calibrate when it is idle" in said
    monkeypatch.setattr(calibrate.os, "getloadavg", lambda: (0.6, 0.4, 0.2))
    assert calibrate.busy_host(2) is None


def test_calibration_writes_the_send_buffer_the_kernel_gives(tmp_path):
    from commdsl.predict import calibrate

    wmem = tmp_path / "tcp_wmem"
    wmem.write_text("4096\t16384\t4194304\n")
    assert calibrate.send_buffer_bytes(wmem) == 4194304
    assert calibrate.send_buffer_bytes(tmp_path / "absent") is None
    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    t = parse(SourceFile("h.toml", calibrate.topology_text(calibrate.Measured(f, 10e9), 2, "gloo", "cmd", send_buffer=1 << 22)))
    assert t.send_buffer == 1 << 22
    nccl = calibrate.topology_text(calibrate.Measured(f, 10e9), 2, "nccl", "cmd", send_buffer=1 << 22)
    assert "send_buffer_bytes" not in nccl and parse(SourceFile("h.toml", nccl)).send_buffer is None


COLLECTIVE_BEHIND_A_BATCH = """program q
world 2
param n = 1024
tensor x: float32[n] = 1
tensor y: float32[n]
tensor s: float32[4] = 1
b = batch:
    send x to 1 - rank
    recv y from 1 - rank
all_reduce s
wait b
"""


def test_on_nccl_a_collective_waits_on_the_stream_for_an_async_batch():
    """An async batch and the collective after it run on the group's one stream: on NCCL the all_reduce starts
    when the batch ends; on Gloo it runs beside it."""
    n = 1 << 20
    gloo = seconds(COLLECTIVE_BEHIND_A_BATCH, 2, topo(10, 1), n)
    nccl = seconds(COLLECTIVE_BEHIND_A_BATCH, 2, topo(10, 1, extra='backend = "nccl"'), n)
    exchange = 10e-6 + n / 1e9
    assert gloo == pytest.approx(exchange)
    assert nccl > exchange and nccl == pytest.approx(exchange + seconds(COLLECTIVE_BEHIND_A_BATCH.replace(
        "b = batch:\n    send x to 1 - rank\n    recv y from 1 - rank\n", "").replace("wait b\n", ""), 2,
        topo(10, 1, extra='backend = "nccl"'), n))


ASYNC_BUCKETS = """program d
world 2..
param n = 1024
tensor a: float32[n] = 1
tensor b: float32[n] = 1
h = all_reduce a
g = all_reduce b
wait h
wait g
"""


def test_on_nccl_async_collectives_of_one_group_run_one_after_another():
    """DDP's bucket all_reduces, async: one communicator, one stream, so the second starts when the first ends
    (before, both were priced as if each had the network to itself at once)."""
    n = 1 << 20
    nccl = topo(10, 1, extra='backend = "nccl"')
    one = seconds(ASYNC_BUCKETS.replace("g = all_reduce b\n", "").replace("wait g\n", ""), 4, nccl, n)
    assert seconds(ASYNC_BUCKETS, 4, nccl, n) == pytest.approx(2 * one)


THREE_ASYNC = """program t
world 2..
param n = 1024
tensor a: float32[n] = 1
tensor b: float32[n] = 1
tensor c: float32[4] = 1
h = all_reduce a
g = all_reduce b
f = all_reduce c
wait f
wait h
wait g
"""


def test_on_gloo_a_third_async_collective_waits_for_a_worker_thread():
    """Gloo runs a group's collectives on two threads per process, in issue order: the two big all_reduces run
    at once and the small third starts when the first of them ends (measured: a 1-element all_reduce behind
    two of 256 MiB ended with the first). Before, all three were priced as running at once."""
    n = 1 << 20
    gloo = topo(10, 1)
    two = seconds(THREE_ASYNC.replace("f = all_reduce c\n", "").replace("wait f\n", ""), 2, gloo, n)
    small = THREE_ASYNC.replace("h = all_reduce a\ng = all_reduce b\n", "").replace("wait h\nwait g\n", "")
    assert seconds(THREE_ASYNC, 2, gloo, n) == pytest.approx(two + seconds(small, 2, gloo, n))
    path = predict_text(THREE_ASYNC, 2, gloo, n).paths[0]
    assert [step["line"] for step in path] == [7, 9]
    # each group has threads of its own: two pairs at once take as long as one
    pairs = THREE_ASYNC.replace("world 2..", "world [2, 4, 8]\ngroup pair = split by rank // 2")
    for a in "abc":
        pairs = pairs.replace(f"all_reduce {a}\n", f"all_reduce {a} in pair\n")
    assert seconds(pairs, 8, gloo, n) == pytest.approx(seconds(THREE_ASYNC, 2, gloo, n))


BARRIER_BEHIND_ASYNC = """program b
world 2..
param n = 1024
tensor a: float32[n] = 1
tensor c: float32[4] = 1
h = all_reduce a
g = all_reduce c
wait g
barrier
wait h
"""


def test_on_gloo_a_barrier_waits_for_the_groups_earlier_collectives():
    """torch's Gloo barrier waits for every earlier collective of its group: the small all_reduce frees a thread
    at once, but the barrier starts only when the big one has ended."""
    n = 1 << 20
    gloo = topo(10, 1)
    big = seconds(BARRIER_BEHIND_ASYNC.replace("g = all_reduce c\nwait g\nbarrier\n", ""), 2, gloo, n)
    alone = BARRIER_BEHIND_ASYNC.replace("h = all_reduce a\ng = all_reduce c\nwait g\n", "").replace("wait h\n", "")
    barrier = seconds(alone, 2, gloo, n)
    assert seconds(BARRIER_BEHIND_ASYNC, 2, gloo, n) == pytest.approx(big + barrier)


LINK = "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"
COALESCED_PAIR = """program k
world 2..
param n = 1024
tensor a: float32[n] = 1
tensor b: float32[n] = 1
coalesced:
    all_reduce a
    all_reduce b
"""


@pytest.mark.parametrize("world", [2, 4])
def test_on_gloo_a_coalesced_block_is_one_flattened_all_reduce(world):
    """Gloo's allreduce_coalesced copies the block's tensors into one, all-reduces it and copies them back:
    one latency for the block, each tensor's bytes, and 4 bytes of memory traffic per byte (measured: a
    coalesced 8 + 16 MiB at world 2 took 27 ms where one 24 MiB all_reduce took 16 and the three blocking 17-20)."""
    n = 1 << 20
    one_of_2n = "program o\nworld 2..\nparam n = 1024\ntensor x: float32[2 * n] = 1\nall_reduce x\n"
    for memory_gbps in (1e6, 1):
        t = parse(SourceFile("t.toml", f"ranks_per_node = 64\nmemory_gbps = {memory_gbps}\n{LINK}"))
        copies = 4 * 2 * n / (memory_gbps * 1e9)
        assert seconds(COALESCED_PAIR, world, t, n) == pytest.approx(seconds(one_of_2n, world, t, 2 * n) + copies)
    nccl = topo(10, 1, extra='backend = "nccl"')  # NCCL's block is priced as its collectives one after another
    one = seconds("program o\nworld 2..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\n", world, nccl, n)
    assert seconds(COALESCED_PAIR, world, nccl, n) == pytest.approx(2 * one)


NEW_GROUP_LATE = """program g
world 2
param n = 1024
tensor x: float32[n] = 1
on rank == 0:
    x += 1
    x += 1
    x += 1
pair = new_group [0, 1]
x += 1
"""


def test_on_gloo_new_group_returns_when_its_last_member_has_called_it():
    """Gloo connects a new group's members in its constructor: rank 1 leaves `new_group` only once rank 0,
    three local ops later, has called it too. NCCL's groups are made lazily: rank 1 goes on at once."""
    def host(backend: str) -> Topology:
        text = f'ranks_per_node = 2\nmemory_gbps = 1\nbackend = "{backend}"\n[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n'
        return parse(SourceFile("t.toml", text))

    one_op = 3 * (4 << 20) / 1e9  # x += 1: x, and its temporary written and read
    program = load_program(SourceFile("p.comm", NEW_GROUP_LATE))
    v = variant_for(program, 2, "n", {}, None)
    gloo = sweep(v, 2, [4 << 20], host("gloo"))
    assert gloo.rows[0].time_us * 1e-6 == pytest.approx(4 * one_op)
    nccl = sweep(v, 2, [4 << 20], host("nccl"))
    assert nccl.rows[0].time_us * 1e-6 == pytest.approx(4 * one_op)  # rank 0 is last either way
    assert float(gloo.timing.rank_seconds[1, 0]) == pytest.approx(4 * one_op)
    assert float(nccl.timing.rank_seconds[1, 0]) == pytest.approx(one_op)


SIZED_BY_N = """program b
world 2..8
param n = 8
tensor steps: int64[1] = rank + 1
tensor grads: float32[n] = rank + 1
all_reduce grads
all_reduce steps op max
expect grads == world * (world + 1) / 2
expect steps == world
"""


@pytest.mark.parametrize("verb", ["predict", "bench"])
def test_the_sweep_is_sized_by_a_tensor_the_param_sizes(verb, tmp_path, capsys):
    """`steps` is proved an all_reduce max as much as `grads` an all_reduce sum, but only `grads` grows with
    `n`: sized by `steps`, predict extrapolated `n` past what a tensor may hold and failed with a KeyError
    (programs/bucketed_allreduce.comm), and bench refused every size."""
    from commdsl.bench.plan import program_variant

    program = load_program(SourceFile("b.comm", SIZED_BY_N))
    v = variant_for(program, 4, "n", {}, None) if verb == "predict" else program_variant(program, 2, "n", {}, None)
    assert (v.measure.kind, v.measure.tensor) == ("all_reduce", "grads")
    assert v.measure.redop == "sum"


@pytest.mark.parametrize(
    "text, message",
    [
        (  # no tensor follows the param
            SIZED_BY_N.replace("float32[n]", "float32[4]"),
            "no tensor changes size with `n`, so sweeping it sizes nothing; --param NAME picks",
        ),
        (  # the author's pragma names one that does not
            "# bench: all_reduce steps op max\n" + SIZED_BY_N,
            "the rows would be sized by `steps` (declared at line 1), which does not change size with `n`",
        ),
    ],
)
def test_a_sweep_the_param_cannot_size_is_refused(text, message, tmp_path, capsys):
    path = tmp_path / "b.comm"
    path.write_text(text)
    for argv in (["predict", str(path), "--world", "4", "--topology", "dgx-h100"], ["bench", str(path), "--nproc", "2"]):
        code = main([*argv, "--sizes", "1K"])
        _, err = capsys.readouterr()
        assert code == 2 and message in " ".join(err.split()), err


UNEVEN_AT_SMALL_SIZES = """program uneven
world 4
param n = 64
tensor x: float32[n] = 1
tensor y: float32[n]
batch:
    send x.chunk(rank, world) to (rank + 1) % world
    recv y.chunk((rank + 1) % world, world) from (rank - 1) % world
"""


def test_a_size_where_the_program_breaks_is_refused_as_bench_refuses_it(tmp_path, capsys):
    """Each rank sends its own chunk and receives into its sender's neighbour's: the same size wherever `n`
    splits evenly (1008 B, n = 252), a message size mismatch where it does not (252 B, n = 63: 16 elements
    into 15), which Gloo aborts on. predict once checked the largest size only and timed both rows; it now
    refuses at the size bench refuses at (before it launches anything)."""
    prog = tmp_path / "uneven.comm"
    prog.write_text(UNEVEN_AT_SMALL_SIZES)
    for verb, world in (("predict", ["--world", "4", "--topology", "localhost-gloo"]), ("bench", ["--nproc", "4"])):
        code = main([verb, str(prog), *world, "--sizes", "252:1008:4"])
        out, err = capsys.readouterr()
        assert code == 1 and "error[P205]" in out, out + err
        assert f"refusing to {verb} uneven: the checks found errors at world size 4 with `n = 63`" in err
    assert main(["predict", str(prog), "--world", "4", "--topology", "localhost-gloo", "--sizes", "1008"]) == 0
    capsys.readouterr()


def test_a_size_that_does_not_expand_is_refused_naming_it(tmp_path, capsys):
    """`x[0 : 8]` needs 8 elements: at 16 B (n = 4) the view is out of bounds, at 1 KiB it is not."""
    prog = tmp_path / "head.comm"
    prog.write_text("program head\nworld 2\nparam n = 64\ntensor x: float32[n] = 1\nall_reduce x[0 : 8]\n")
    code = main(["predict", str(prog), "--world", "2", "--topology", "localhost-gloo", "--sizes", "16:1K"])
    out, err = capsys.readouterr()
    assert code == 1 and "out of bounds" in out + err, out + err
    assert "refusing to predict head: the checks found errors at world size 2 with `n = 4`" in err


def test_a_size_the_declarations_refuse_is_a_diagnostic(tmp_path, capsys):
    """x grows as n³, and the sweep scales `n` as if it grew as n (bench's rule): 1 GiB asks for an `n` whose x
    has more elements than a tensor may hold, which is said at the declaration, not a KeyError."""
    path = tmp_path / "cube.comm"
    path.write_text("program c\nworld 2\nparam n = 2\ntensor x: float32[n * n * n] = 1\nall_reduce x\nexpect x == 2\n")
    code = main(["predict", str(path), "--world", "2", "--topology", "dgx-h100", "--sizes", "1G"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "refusing to predict c: the checks found errors at world size 2 with `n = " in err
    assert "cube.comm:4:" in out + err and "over the limit" in out + err


def test_world_4096_ring_is_predicted(tmp_path):
    wide = tmp_path / "ring.comm"
    wide.write_text(Path(RING).read_text().replace("world 1..16", "world 1.."))
    t, _ = load("dgx-h100")
    pred = predict_text(wide.read_text(), 4096, t, 1 << 20)
    row = pred.rows[0]
    # 8190 steps, each at least the slowest hop's latency and a chunk over a NIC
    assert row.time_us * 1e-6 >= 8190 * (t.inter_alpha + (1 << 20) / 4096 / t.inter_beta)
    assert pred.paths == {}  # 84 M ops: the path is not kept


# ---- calibration ---------------------------------------------------------------------------------------------


def test_fit_recovers_alpha_and_beta():
    sizes = [1 << k for k in range(10, 27)]
    f = fit(sizes, [50e-6 + s / 2e9 for s in sizes])
    assert f.alpha == pytest.approx(50e-6) and f.beta == pytest.approx(2e9) and f.worst < 1e-9
    flat = fit([1024, 2048], [1e-3, 1e-3 + 1e-9])
    assert flat.alpha >= 0 and flat.beta > 0


def test_beta_is_the_slope_where_bytes_decide_a_messages_time():
    """The ping-pong of 2026-11-29 05:35 (benchmarks/figures/predict-all-host-14.toml: each size the median of
    three runs): its small sizes wait 0.3-0.9 ms in no order, which pulled the line fitted over every size to
    27.2 ms at 64 MiB where 31.5 was measured (16-64 MiB: 14-22 % under). β is fitted again over the sizes that
    are ≥ 95 % bytes: 16, 32 and 64 MiB here, which it now meets within 8 %."""
    from commdsl.predict.calibrate import STREAMING

    us = {1 << 10: 814.39, 1 << 11: 346.26, 1 << 12: 529.44, 1 << 13: 874.78, 1 << 14: 555.26, 1 << 15: 540.93,
          1 << 16: 595.51, 1 << 17: 314.13, 1 << 18: 982.30, 1 << 19: 327.94, 1 << 20: 884.61, 1 << 21: 960.11,
          1 << 22: 2574.88, 1 << 23: 4662.77, 1 << 24: 8875.16, 1 << 25: 16396.21, 1 << 26: 31458.84}
    f = fit(list(us), [t * 1e-6 for t in us.values()])
    streaming = [s for s in us if s / f.beta >= STREAMING * (f.alpha + s / f.beta)]
    assert streaming == [1 << 24, 1 << 25, 1 << 26]
    for s in streaming:
        assert f.alpha + s / f.beta == pytest.approx(us[s] * 1e-6, rel=0.08)
    assert 2.0e9 < f.beta < 2.2e9  # the fit over every size: 2.51 GB/s
    sizes, seconds = np.array([1 << 10, 1 << 12, 1 << 20], float), np.array([400e-6, 500e-6, 800e-6])
    (alpha, inv_beta), *_ = np.linalg.lstsq(np.stack([np.ones(3), sizes], axis=1) / seconds[:, None], np.ones(3))
    few = fit(list(sizes.astype(int)), list(seconds))  # none ≥ 95 % bytes: the first fit stands
    assert few.alpha == pytest.approx(alpha) and few.beta == pytest.approx(1 / inv_beta)



def test_memory_bandwidth_times_with_the_workers_threads(monkeypatch):
    """The bench's ranks run one intra-op thread each on a host with several (bench/worker.py): the calibration
    times its add with as many, and leaves this process's thread count as it was."""
    import torch

    from commdsl.predict import calibrate

    seen = []
    clock = time.perf_counter

    def counting():
        seen.append(torch.get_num_threads())
        return clock()

    before = torch.get_num_threads()
    monkeypatch.setattr(calibrate.time, "perf_counter", counting)
    assert calibrate.memory_bandwidth(1 << 16, repeats=2, threads=1) > 0
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before

@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_calibrate_on_gloo_writes_a_topology_predict_reads(tmp_path, capfd, no_orphans):
    out = tmp_path / "host.toml"
    # up to 32 MiB: on a loaded 2-core machine small messages wait a scheduler slice (ms), so only sizes
    # well above that show the bandwidth (1K:256K once fitted a falling line, and the fit refused it)
    code = main(["bench", "--calibrate", "--nproc", "2", "--sizes", "1K:32M:32", "--iters", "3", "--warmup", "1",
                 "--runs", "2", "--backend", "gloo", "-o", str(out)])
    text, err = capfd.readouterr()
    assert code == 0, text + err
    assert "alpha" in text and str(out) in text
    assert "run 1 of 2" in err and "run 2 of 2" in err
    assert re.search(r"# 2 runs of every measurement below.*\n#   alpha [\d.]+ / [\d.]+ us, beta [\d.]+ / [\d.]+ GB/s",
                     out.read_text())
    t, _ = load(str(out))
    assert t.backend == "gloo" and t.intra_alpha >= 0 and t.intra_beta > 0 and t.shared_node
    assert t.bus_bps is None and 1 <= t.memory_capacity <= 2  # two ranks: pairs at once need four
    assert t.lone_call > 0 and "each on a group of its own" in out.read_text()
    measured = [line for line in out.read_text().splitlines() if re.match(r"#\s+\d+\s+[\d.]+\s+[\d.]+\s+[+-]", line)]
    assert len(measured) == 4  # 1K, 32K, 1M, 32M, each with its fitted time and error
    code = main(["predict", RING, "--world", "2", "--topology", str(out), "--sizes", "64K"])
    assert code == 0
    assert np.isfinite(t.memory_bps) and (t.page_bps is None or t.page_bps > 0)



def test_calibration_writes_how_much_of_the_host_things_at_once_get():
    """`--calibrate --nproc N` (N >= 4) times N/2 ping-pong pairs at once against one pair, and every rank's add
    at once against one rank's: `count` at once taking `count / capacity` times as long, the host's bus carries
    `capacity` messages at full speed (`bus_gbps` = capacity × β) and its memory `capacity` adds (between 1:
    one at a time, and `count`: side by side). Unmeasured (N < 4): one message at a time. Gloo's ranks send
    and receive through one way (`duplex = false`)."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    quiet = calibrate.AtOnce(1 << 26, 4, 20.6e-3, 23.3e-3)  # the 16-core host: 4 pairs x1.13
    busy = calibrate.AtOnce(1 << 24, 2, 6.9e-3, 13.1e-3)  # the 2-core machine under load: 2 pairs x1.89
    assert quiet.capacity == pytest.approx(4 * 20.6 / 23.3) and busy.capacity == pytest.approx(2 * 6.9 / 13.1)
    assert calibrate.AtOnce(1, 2, 1.0, 3.0).capacity == 1.0 and calibrate.AtOnce(1, 2, 1.0, 0.9).capacity == 2.0
    adds = calibrate.AtOnce(1 << 26, 4, 5.3e-3, 11.8e-3)
    for pairs in (quiet, busy, None):
        text = calibrate.topology_text(calibrate.Measured(f, 10e9, pairs=pairs, adds=adds), 8, "gloo", "cmd")
        t = parse(SourceFile("h.toml", text))
        assert t.shared_node and not t.duplex
        assert t.bus_capacity == pytest.approx(1.0 if pairs is None else pairs.capacity, rel=1e-3)
        assert t.memory_capacity == pytest.approx(adds.capacity, rel=1e-3)
        assert ("pairs at once" in text) is (pairs is not None) and "4 ranks adding" in text
        assert ("may carry more than 4 at once" in text) is (pairs is quiet)  # x1.13 is side by side; x1.89 is not
    nccl = parse(SourceFile("h.toml", calibrate.topology_text(calibrate.Measured(f, 10e9), 2, "nccl", "cmd")))
    assert nccl.duplex and nccl.node_memory_bps is None and nccl.bus_bps is None


def test_calibration_writes_the_bus_of_an_exchange_from_every_ranks_messages_alone():
    """`--calibrate`'s OVERLAP messages alone (every rank's isend and irecv of 16 MiB at once) give
    `exchange_gbps`: their bytes over the time less one message's latency, the crowded one where the ranks
    outnumber the cores; none where the latency is most of the time."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    pairs = calibrate.AtOnce(1 << 24, 2, 6.9e-3, 8.0e-3)
    turns = calibrate.Turns(1 << 24, 35.6e-3, 50e-3, 84e-3)
    crowded = calibrate.Crowded(2, 4, f.beta, ((4096, 1.3e-3),))
    assert turns.exchange_bps(4, 0.3e-3, 1.3e-3, 2) == pytest.approx(4 * (1 << 24) / 34.3e-3)  # crowded
    assert turns.exchange_bps(2, 0.3e-3, 1.3e-3, 2) == pytest.approx(2 * (1 << 24) / 35.3e-3)  # within the cores
    assert calibrate.Turns(1 << 24, 1e-3, 1.0, 1.0).exchange_bps(4, 0.9e-3) is None
    m = calibrate.Measured(f, 10e9, pairs=pairs, turns=turns, crowded=crowded)
    t = parse(SourceFile("h.toml", calibrate.topology_text(m, 4, "gloo", "cmd", cores=2)))
    assert t.exchange_bps == pytest.approx(4 * (1 << 24) / (35.6e-3 - crowded.alpha), rel=1e-3)
    two = parse(SourceFile("h.toml", calibrate.topology_text(m, 2, "gloo", "cmd", cores=2)))  # within the cores
    assert two.exchange_bps == pytest.approx(2 * (1 << 24) / (35.6e-3 - f.alpha), rel=1e-3)


def test_calibration_writes_the_bus_of_a_swap_from_two_ranks_messages():
    """With more than 2 ranks, `--calibrate` also times 2 ranks' isend and irecv to each other (`Swap`): their
    bytes over the time less one message's latency, the crowded one only where 2 ranks outnumber the cores,
    give `swap_gbps`; at 2 ranks the exchange is the swap and nothing more is written."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    turns = calibrate.Turns(1 << 24, 35.6e-3, 50e-3, 84e-3)
    crowded = calibrate.Crowded(2, 4, f.beta, ((4096, 1.3e-3),))
    swap = calibrate.Swap(1 << 24, 20.3e-3)
    assert swap.bps(0.3e-3, 1.3e-3, 2) == pytest.approx(2 * (1 << 24) / 20e-3)  # 2 ranks fit 2 cores
    assert swap.bps(0.3e-3, 1.3e-3, 1) == pytest.approx(2 * (1 << 24) / 19e-3)  # 2 ranks crowd 1 core
    assert calibrate.Swap(1 << 24, 1e-3).bps(0.9e-3) is None
    m = calibrate.Measured(f, 10e9, turns=turns, crowded=crowded, swap=swap)
    text = calibrate.topology_text(m, 4, "gloo", "cmd", cores=2)
    t = parse(SourceFile("h.toml", text))
    assert t.swap_bps == pytest.approx(2 * (1 << 24) / (20.3e-3 - f.alpha), rel=1e-3)
    assert t.exchange_bps == pytest.approx(4 * (1 << 24) / (35.6e-3 - crowded.alpha), rel=1e-3)
    assert "# 2 ranks' isend and irecv of 16777216 bytes, to each other at once: 20300.0 us" in text
    assert calibrate.Measured.median([m, replace(m, swap=calibrate.Swap(1 << 24, 30e-3)), m]).swap == swap
    assert "#   a swap of 2 ranks 20.3 / 20.3 ms" in calibrate.topology_text(m, 4, "gloo", "cmd", cores=2, runs=[m, m])
    assert "swap_gbps" not in calibrate.topology_text(replace(m, swap=None), 2, "gloo", "cmd", cores=2)


def test_calibration_writes_a_collectives_step_from_the_built_in_all_reduce():
    """The built-in all_reduce of every rank at small sizes, less its bytes at β, over its 2(p - 1) steps, is
    the latency of one step (`collective_alpha_us`), the mean over every launch's calls."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    beta = 2e9
    calls = ((4096, 6.1e-3), (65536, 5.5e-3), (4096, 4.9e-3))
    steps = calibrate.Steps(4, beta, calls)
    want = sum((t - 1.5 * n / beta) / 6 for n, t in calls) / len(calls)  # 4 ranks: 6 steps, 2(p-1)/p of n
    assert steps.alpha == pytest.approx(want)
    assert calibrate.Steps(2, beta, ((4096, 1e-9),)).alpha == 0.0  # never below 0
    text = calibrate.topology_text(calibrate.Measured(f, 10e9, steps=steps), 4, "gloo", "cmd")
    t = parse(SourceFile("h.toml", text))
    assert t.intra_step_alpha == pytest.approx(steps.alpha, rel=1e-3) and t.intra_alpha == pytest.approx(f.alpha, rel=1e-3)
    assert "# built-in all_reduce of 4 ranks, us per call: 4096 B 6100, 65536 B 5500, 4096 B 4900:" in text
    assert parse(SourceFile("h.toml", calibrate.topology_text(calibrate.Measured(f, 10e9), 4, "gloo", "cmd"))).intra_step_alpha == (
        pytest.approx(f.alpha, rel=1e-3)
    )


def test_calibration_writes_one_way_streams_beside_the_ping_pong_pairs():
    """On more ranks than cores `--calibrate` also times one pair sending one way on and on and `nproc // 2`
    such pairs at once (`Streams`): one stream's bytes over its message's time give `stream_gbps`, the pairs'
    bytes together over theirs `stream_bus_gbps`; several runs keep the run whose streams at once took the
    median time; nothing is written where they were not measured."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    streams = calibrate.Streams(1 << 26, 2, 42.7e-3, 56.8e-3)  # the 2-core machine, 2026-12-02
    assert streams.bps == pytest.approx((1 << 26) / 42.7e-3)
    assert streams.bus_bps == pytest.approx(2 * (1 << 26) / 56.8e-3)
    m = calibrate.Measured(f, 10e9, pairs=calibrate.AtOnce(1 << 26, 2, 31.1e-3, 42.9e-3), streams=streams)
    text = calibrate.topology_text(m, 4, "gloo", "cmd", cores=2)
    t = parse(SourceFile("h.toml", text))
    assert t.stream_bps == pytest.approx(streams.bps, rel=1e-3)
    assert t.stream_bus_bps == pytest.approx(streams.bus_bps, rel=1e-3)
    assert "# 2 pairs each sending 67108864 bytes one way on and on, at once: 56800.0 us a message, one such pair" \
           " alone 42700.0 us" in text
    slow, fast = replace(streams, together=70e-3), replace(streams, together=50e-3)
    runs = [replace(m, streams=slow), m, replace(m, streams=fast)]
    assert calibrate.Measured.median(runs).streams == streams
    assert "#   one-way streams at once 70 / 56.8 / 50 ms" in calibrate.topology_text(m, 4, "gloo", "cmd", cores=2,
                                                                                   runs=runs)
    assert "stream" not in calibrate.topology_text(replace(m, streams=None), 4, "gloo", "cmd", cores=2)


def test_calibration_writes_a_crowded_hosts_message_latency():
    """With more ranks than the host's cores, every rank's isend to the next and irecv from the last at once
    (a ring's step), less its bytes at β, is a crowded message's latency (`crowded_alpha_us`), the mean over
    every launch's; the host's cores are `cores_per_node`. With the ranks fitting the cores, nothing is
    measured and the file says how to."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [100e-6, 4.3e-3])
    steps = ((4096, 900e-6), (65536, 600e-6), (4096, 1.2e-3))
    crowded = calibrate.Crowded(2, 4, 2e9, steps)
    assert crowded.alpha == pytest.approx(sum(t - n / 2e9 for n, t in steps) / 3)
    assert calibrate.Crowded(2, 4, 2e9, ((4096, 1e-9),)).alpha == 0.0  # never below 0
    text = calibrate.topology_text(calibrate.Measured(f, 10e9, crowded=crowded), 4, "gloo", "cmd", cores=2)
    t = parse(SourceFile("h.toml", text))
    assert t.cores_per_node == 2 and t.intra_alpha == pytest.approx(f.alpha, rel=1e-3)
    assert t.crowded_alphas is not None and t.crowded_alphas[0] == pytest.approx(crowded.alpha, rel=1e-3)
    assert t.at_world(4).crowded and t.at_world(2) is t
    assert "# 4 ranks on 2 cores each sending to the next and receiving from the last at once, us a step: 4096 B 900," in text
    roomy = calibrate.topology_text(calibrate.Measured(f, 10e9), 4, "gloo", "cmd", cores=16)
    assert "# 4 ranks on 16 cores: a crowded host's messages were not measured (--nproc 17 does)" in roomy
    assert parse(SourceFile("h.toml", roomy)).at_world(64).crowded is False


def test_calibration_writes_what_a_collective_on_a_group_of_one_costs():
    """Every rank's built-in all_reduce on a group of its own, at small sizes, each launch's calls: their mean is
    what a call that sends nothing costs (`collective_call_us`), every call in a comment; unmeasured, no key."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [100e-6, 4.3e-3])
    lone = calibrate.Lone(2, ((4096, 180e-6), (65536, 240e-6), (4096, 210e-6)))
    assert lone.seconds == pytest.approx(210e-6)
    text = calibrate.topology_text(calibrate.Measured(f, 10e9, lone=lone), 4, "gloo", "cmd", cores=2)
    assert parse(SourceFile("h.toml", text)).lone_call == pytest.approx(210e-6)
    assert "# built-in all_reduce of 2 ranks, each on a group of its own, us per call: 4096 B 180, 65536 B 240," in text
    plain = calibrate.topology_text(calibrate.Measured(f, 10e9), 4, "gloo", "cmd", cores=2)
    assert "collective_call_us" not in plain and parse(SourceFile("h.toml", plain)).lone_call == 0.0


def test_calibration_says_whether_a_ranks_messages_and_adds_overlap():
    """Every rank's isend and irecv, its adds, and both at once: where none of the shorter hides under the
    longer (the 2-core machine: 0-39 %), they take turns (`overlap = false`); where most does, side by side."""
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    turns = calibrate.Turns(1 << 24, 22.6e-3, 28.2e-3, 48.7e-3)  # the 2-core machine at 4 ranks
    assert turns.hidden == pytest.approx((22.6 + 28.2 - 48.7) / 22.6) and not turns.overlap
    side = calibrate.Turns(1 << 24, 10e-3, 8e-3, 10.5e-3)
    assert side.hidden == pytest.approx(7.5 / 8) and side.overlap
    assert calibrate.Turns(1, 1.0, 1.0, 3.0).hidden == 0.0 and calibrate.Turns(1, 1.0, 1.0, 0.5).hidden == 1.0
    for t, overlap in ((turns, False), (side, True), (None, True)):
        text = calibrate.topology_text(calibrate.Measured(f, 10e9, turns=t), 4, "gloo", "cmd")
        assert parse(SourceFile("h.toml", text)).overlap is overlap
        assert ("isend and irecv of 16777216 bytes" in text) is (t is not None)


def test_calibration_times_only_the_ranks_that_ping_pong():
    """Ranks beyond 0 and 1 time nothing in the ping-pong (an empty list): the one-way time is the slowest
    of the others', so `--calibrate --nproc 4` works."""
    from types import SimpleNamespace

    from commdsl.predict import calibrate

    plan = SimpleNamespace(cases=[0], world=4)
    results = {0: {0: {"durations_ns": [4000, 6000]}, 1: {"durations_ns": [5000, 5000]},
                   2: {"durations_ns": []}, 3: {"durations_ns": []}}}
    assert calibrate.one_way(plan, results) == [pytest.approx(5500 / 2 * 1e-9)]


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_calibrate_at_four_ranks_times_pairs_at_once(tmp_path, capfd, no_orphans):
    out = tmp_path / "host.toml"
    # the sizes of the 2-rank test above: on a loaded 2-core machine only sizes well apart fit a rising line
    code = main(["bench", "--calibrate", "--nproc", "4", "--sizes", "1K:32M:32", "--iters", "3", "--warmup", "1",
                 "--runs", "1", "--backend", "gloo", "-o", str(out)])
    text, err = capfd.readouterr()
    assert code == 0, text + err
    assert re.search(r"# 2 ping-pong pairs at once, 33554432 bytes: [\d.]+ us one way", out.read_text())
    assert re.search(r"# 4 ranks adding 67108864 bytes at once, six adds in a row: [\d.]+ us against", out.read_text())
    assert re.search(r"# built-in all_reduce of 4 ranks, us per call: (\d+ B \d+, ){8}\d+ B \d+: [\d.]+ us a step",
                     out.read_text())
    assert re.search(r"# every rank's isend and irecv of 16777216 bytes: [\d.]+ us, its adds of them: [\d.]+ us, both at"
                     r" once: [\d.]+ us \(\d+ % of the shorter hidden under the longer\): (side by side|they take turns)",
                     out.read_text())
    cores = calibrate.host_cores()
    crowded = re.search(r"# 4 ranks on \d+ cores each sending to the next and receiving from the last at once, us a"
                        r" step: (\d+ B \d+, ){8}\d+ B \d+: [\d.]+ us less", out.read_text())
    assert (crowded is not None) is (cores < 4)
    streams = re.search(r"# 2 pairs each sending 33554432 bytes one way on and on, at once: [\d.]+ us a message",
                        out.read_text())
    assert (streams is not None) is (cores < 4)
    t, _ = load(str(out))
    assert t.intra_beta > 0 and t.shared_node and not t.duplex and t.intra_step_alpha >= 0
    assert 1 <= t.bus_capacity <= 2 and 1 <= t.memory_capacity <= 4
    assert t.cores_per_node == cores and (t.at_world(4).crowded is (cores < 4))
    assert (t.stream_bps is not None and t.stream_bus_bps is not None) is (cores < 4)
    assert "runs of every measurement" not in out.read_text()  # one run: nothing to take the median of


def test_several_calibration_runs_keep_each_numbers_median():
    """`--calibrate --runs K` measures everything K times and writes each number's median: one run of the
    2-core machine is not the next (three back to back fitted β 3.15-4.17 GB/s, a crowded message 807-1,395
    µs), and their median predicted a campaign better than two of the three did alone (docs/predict-accuracy.md)."""
    from commdsl.predict import calibrate

    def run(alpha, beta, at_64k, pages, step, adds_together, hidden):
        points = ((1024, alpha + 1024 / beta), (65536, at_64k), (1 << 24, alpha + (1 << 24) / beta))
        return calibrate.Measured(
            calibrate.Fit(alpha, beta, 0.0, points),
            40e9,
            pages,
            adds=calibrate.AtOnce(1 << 26, 4, 3e-3, adds_together),
            steps=calibrate.Steps(4, beta, ((4096, step), (65536, step))),
            turns=calibrate.Turns(1 << 24, 10e-3, 10e-3, 20e-3 - hidden * 10e-3),
            lone=calibrate.Lone(2, ((4096, step / 20),)),
        )

    runs = [run(60e-6, 4.2e9, 150e-6, 2.8e9, 5e-3, 12e-3, 0.0),
            run(90e-6, 3.2e9, 400e-6, None, 7e-3, 14e-3, 0.1),
            run(70e-6, 3.8e9, 100e-6, 2.6e9, 6e-3, 3.5e-3, 0.8)]
    m = calibrate.Measured.median(runs)
    assert dict(m.fit.points)[65536] == 150e-6  # each size the median of its runs' times
    assert m.fit.alpha == 70e-6  # the runs' median α; β fitted over the median times
    assert m.fit.beta == calibrate.fit(*zip(*m.fit.points)).beta
    assert m.page_bps == 2.8e9  # a run whose fresh pages cost nothing counts as the fastest
    assert m.steps.points == runs[2].steps.points  # the run of the median step, its bytes at the fitted β
    assert m.steps.beta == m.fit.beta and m.steps.alpha == pytest.approx(runs[2].steps.alpha, rel=1e-3)
    assert m.adds is runs[1].adds and m.turns is runs[1].turns  # one run's parts together, the median result
    assert m.lone is runs[2].lone  # the median call on a group of one
    assert calibrate.Measured.median(runs[:1]) is runs[0]
    assert calibrate.Measured.median(runs[:2]).fit.alpha == 60e-6  # an even count: the lower middle, a measured one
    text = calibrate.topology_text(m, 4, "gloo", "cmd", cores=2, runs=runs)
    assert "# 3 runs of every measurement below" in text
    assert "#   alpha 60 / 90 / 70 us, beta 4.2 / 3.2 / 3.8 GB/s" in text
    assert "fresh pages 2.8 / - / 2.6 GB/s" in text
    assert "#   a call on a group of one 250 / 350 / 300 us" in text
    t = parse(SourceFile("h.toml", text))
    assert t.intra_alpha == pytest.approx(70e-6) and t.intra_beta == pytest.approx(m.fit.beta, rel=1e-3)


def test_several_calibration_runs_fit_beta_over_each_sizes_median():
    """A slow call in one run's large size moves that run's β; each size's median over the runs does not, so
    β is fitted once over the medians, not taken as the median of the runs' β (on the 2-core machine the
    runs' median β put seven campaigns on 1,701 rows within ±25 %, the fit over the medians on 1,749)."""
    from commdsl.predict import calibrate

    sizes = (1 << 20, 1 << 22, 1 << 24, 1 << 26)

    def run(slow: int):
        times = [(100e-6 + s / 4e9) * (1.3 if s == slow else 1.0) for s in sizes]
        return calibrate.Measured(calibrate.fit(list(sizes), times), 40e9)

    runs = [run(1 << 26), run(1 << 24), run(0)]  # a slow call at 64 MiB, at 16 MiB, none
    assert sorted(r.fit.beta for r in runs)[1] < 0.9 * 4e9  # two runs' β is off, and so is their median
    assert calibrate.Measured.median(runs).fit.beta == pytest.approx(4e9, rel=1e-6)


RS = """program rs
world 1..
param n = 1024
tensor x: float32[n // world * world] = 1
tensor y: float32[n // world]
reduce_scatter x into y
expect y == world
"""


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_sums_what_it_receives_at_memory_speed(world):
    """Gloo's ring all-reduce sums the block it receives into its own at each reduce-scatter step, on the
    CPU: (p - 1)/p of the buffer, 2 × that counted as `x += y` is, every member at once on its own memory
    here (a node a rank); a reduce_scatter's too (`test_gloo_collectives_pay_torchs_copies_at_memory_speed`).
    NCCL's kernels reduce as they move: nothing more."""
    n = 1 << 20
    text = "program r\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\n"
    gloo = parse(SourceFile("t.toml", "ranks_per_node = 1\nmemory_gbps = 2\n[intra]\nalpha_us = 0\nbandwidth_gbps = 1e6\n"))
    fast = parse(SourceFile("t.toml", "ranks_per_node = 1\nmemory_gbps = 1e6\n[intra]\nalpha_us = 0\nbandwidth_gbps = 1e6\n"))
    sums = 2 * (world - 1) / world * n / 2e9
    assert seconds(text, world, gloo, n) - seconds(text, world, fast, n) == pytest.approx(sums, rel=1e-5)
    nccl = parse(SourceFile("t.toml", 'backend = "nccl"\nranks_per_node = 1\nmemory_gbps = 2\n[intra]\nalpha_us = 0\n'
                                      "bandwidth_gbps = 1e6\n"))
    assert seconds(text, world, nccl, n) < sums / 100


def test_gloo_reduce_scatter_costs_the_all_reduce_torch_runs_for_it():
    p, n = 4, 1 << 20
    gloo = 2 * (p - 1) * 10e-6 + 2 * (p - 1) / p * n / 1e9 + (2 * n + 2 * n / p) / 1e15  # + the clone, the copy out
    ring = (p - 1) * 10e-6 + (p - 1) / p * n / 1e9
    assert seconds(RS, p, topo(10, 1), n) == pytest.approx(gloo)
    assert seconds(RS, p, topo(10, 1, extra='backend = "nccl"'), n) == pytest.approx(ring)


BCAST = "program b\nworld 1..\nparam n = 1024\ntensor x: float32[n] = rank\nbroadcast x from 0\nexpect x == 0\n"
GATHER = """program g
world 1..
param n = 1024
tensor x: float32[n // world] = rank
tensor y: float32[n // world * world]
gather x into y to 0
"""
SCATTER = """program s
world 1..
param n = 1024
tensor x: float32[n // world * world] = 1
tensor y: float32[n // world]
scatter x into y from 0
expect y == 1
"""
STEPS = "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\ncollective_alpha_us = 500\n"


def test_a_ring_collectives_step_costs_the_topologys_collective_alpha():
    """`collective_alpha_us` is the latency of one step of a built-in ring (Gloo's all_reduce waits on torch's
    worker thread and its neighbour at every step: 1 ms a step on the 2-core machine, where a message's α is
    0.2 ms); a point-to-point message keeps `alpha_us`."""
    t = parse(SourceFile("t.toml", "ranks_per_node = 64\nmemory_gbps = 1e6\n" + STEPS))
    text = "program a\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nall_reduce x\nexpect x == world\n"
    p, n = 4, 1 << 20
    assert seconds(text, p, t, n) == pytest.approx(2 * (p - 1) * 500e-6 + 2 * (p - 1) / p * n / 1e9)
    send = "program s\nworld 2\nparam n = 1024\ntensor x: float32[n] = 1\non rank == 0:\n    send x to 1\n" \
           "on rank == 1:\n    recv x from 0\n"
    assert seconds(send, 2, t, n) == pytest.approx(10e-6 + n / 1e9)
    # Gloo's all_to_all posts every message at once and waits for them all (gloo/alltoall.cc): one step; NCCL's
    # ring p - 1 of them
    a2a = "program x\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n]\nall_to_all x into y\n"
    nccl = parse(SourceFile("t.toml", 'ranks_per_node = 64\nmemory_gbps = 1e6\nbackend = "nccl"\n' + STEPS))
    assert seconds(a2a, p, t, n) == pytest.approx(500e-6 + (p - 1) / p * n / 1e9 + 2 * n / p / 1e15)
    assert seconds(a2a, p, nccl, n) == pytest.approx((p - 1) * 500e-6 + (p - 1) / p * n / 1e9)


@pytest.mark.parametrize(("world", "cores", "turns"), [(2, 2, 1), (4, 2, 2), (8, 2, 4), (8, 3, 3), (4, 4, 1), (4, None, 1)])
def test_a_gloo_all_to_alls_members_take_turns_for_their_nodes_cores(world, cores, turns):
    """Each member of a Gloo all_to_all waits for every peer's message, which comes when the peer gets a core:
    its one step's latency is taken once per turn the node's members take for its `cores_per_node` (the
    2-core machine: about two steps at N = 4 at small sizes; at N = 2 less than the one priced)."""
    head = "ranks_per_node = 64\nmemory_gbps = 1e6\n" + ("" if cores is None else f"cores_per_node = {cores}\n")
    t = parse(SourceFile("t.toml", head + "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\ncollective_alpha_us = 500\n"))
    a2a = "program x\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n]\nall_to_all x into y\n"
    n = 1 << 20
    want = turns * 500e-6 + (world - 1) / world * n / 1e9 + 2 * n / world / 1e15
    assert seconds(a2a, world, t, n) == pytest.approx(want)


def test_messages_at_once_on_a_node_with_more_ranks_than_cores_take_the_crowded_alpha():
    """Messages the engine matches together take the crowded α when the ranks they involve outnumber their
    node's `cores_per_node` (`bench --calibrate` times every rank sending to the next and receiving from the
    last: the 2-core machine's four ranks 0.9-1.2 ms a step, a lone ping-pong 0.1-0.2 ms one way), and so
    does a lock-step collective's step that has no α of its own. A chain's messages, matched one at a time,
    a node within its cores, or a topology without a crowded α keep the ping-pong's α; a node holds at most
    `ranks_per_node`."""
    head = "memory_gbps = 1e6\ncores_per_node = 2\n"
    links = "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\ncrowded_alpha_us = 300\n"
    t = parse(SourceFile("t.toml", "ranks_per_node = 64\n" + head + links))
    ring = "program r\nworld 2..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n]\nbatch:\n" \
           "    send x to (rank + 1) % world\n    recv y from (rank - 1) % world\n"
    chain = "program c\nworld 2..\nparam n = 1024\ntensor x: float32[n] = 1\non rank > 0:\n" \
            "    recv x from rank - 1\non rank < world - 1:\n    send x to rank + 1\n"
    n = 1 << 20
    assert seconds(ring, 2, t, n) == pytest.approx(seconds(ring, 2, topo(10, 1), n))  # two ranks on 2 cores
    # α 300 µs, not 10, and the longer of it and the bytes (while a rank waits for a core, the others move theirs)
    assert seconds(ring, 4, t, 4096) == pytest.approx(300e-6)
    assert seconds(ring, 4, t, n) == pytest.approx(n / 1e9)
    assert seconds(chain, 4, t, n) == pytest.approx(seconds(chain, 4, topo(10, 1), n))  # one after another
    pairs = "program p\nworld 4\nparam n = 1024\ntensor x: float32[n] = 1\non rank % 2 == 0:\n" \
            "    send x to rank + 1\non rank % 2 == 1:\n    recv x from rank - 1\n"
    assert seconds(pairs, 4, t, 4096) == pytest.approx(300e-6)  # two pairs at once: four ranks busy
    one = "program o\nworld 4\nparam n = 1024\ntensor x: float32[n] = 1\non rank == 0:\n    send x to 1\n" \
          "on rank == 1:\n    recv x from 0\n"
    assert seconds(one, 4, t, n) == pytest.approx(10e-6 + n / 1e9)  # two of the four ranks
    assert t.at_world(2) is t and not t.crowded and t.at_world(3).crowded
    assert "more ranks on a node than its 2 cores: messages at once on more ranks than cores, α 300 µs" in (
        t.at_world(3).describe()
    )
    assert "cores" not in t.describe()
    # (after a local op: a ring collective straight from communication hides its steps, see the next test)
    all_reduce = "program a\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nx += 1\nall_reduce x\n"
    p = 4
    bytes_part = 2 * (p - 1) / p * n / 1e9 + 2 * n / 1e15  # and the add
    # a ring's step without its own α is a message's: crowded too
    assert seconds(all_reduce, p, t, n) == pytest.approx(2 * (p - 1) * 300e-6 + bytes_part)
    steps = parse(SourceFile("t.toml", "ranks_per_node = 64\n" + head + links + "collective_alpha_us = 500\n"))
    assert seconds(all_reduce, p, steps, n) == pytest.approx(2 * (p - 1) * 500e-6 + bytes_part)
    two = parse(SourceFile("t.toml", "ranks_per_node = 2\n" + head + links))
    assert two.at_world(64) is two  # two ranks on each node of 2 cores
    plain = parse(SourceFile("t.toml", "ranks_per_node = 64\n" + head + "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"))
    assert plain.at_world(64) is plain
    # cores but no crowded α (a calibration within the cores): priced as idle, and the prediction says so
    notes = predict_text(ring, 4, plain, n).notes
    assert any("4 ranks on a node of 2 cores, but the topology gives no `crowded_alpha_us`" in m for m in notes)
    assert not any("crowded_alpha_us" in m for m in predict_text(ring, 2, plain, n).notes + predict_text(ring, 4, t, n).notes)


def test_one_way_streams_move_at_the_streams_pace_and_share_their_bus_on_a_crowded_node():
    """`stream_gbps` and `stream_bus_gbps`: a message between two ranks that never send the other way (a tree's
    level; none of the messages at once both sending and receiving) moves at most the stream's β at any world
    (the 2-core host: a 64 MiB stream's message 1.37 times a ping-pong's one way; a binomial reduce at 2 ranks
    4-37 % fast at the ping-pong's pace in thirteen campaigns), and on a node with more ranks than cores such
    messages at once share the streams' bus (two streams at once 1.32 times two ping-pong pairs) — unless its
    receiver was already waiting when it was sent (a tree broadcast's leaves). Ping-pong pairs, exchanges and
    a topology without the keys keep β and `bus_gbps`; streams on a node within its cores share `bus_gbps`."""
    head = "ranks_per_node = 64\nmemory_gbps = 1e6\ncores_per_node = 2\nshared_node = true\nbus_gbps = 2\n"
    links = "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\ncrowded_alpha_us = 300\n"
    keys = "stream_gbps = 0.5\nstream_bus_gbps = 0.8\n"
    t = parse(SourceFile("t.toml", head + keys + links))
    plain = parse(SourceFile("t.toml", head + links))
    streams = "program s\nworld 2..\nparam n = 1024\ntensor x: float32[n] = 1\non rank % 2 == 1:\n" \
              "    send x to rank - 1\non rank % 2 == 0 and rank + 1 < world:\n    recv x from rank + 1\n"
    lone = "program o\nworld 2..\nparam n = 1024\ntensor x: float32[n] = 1\non rank == 1:\n    send x to 0\n" \
           "on rank == 0:\n    recv x from 1\n"
    ping_pong = "program p\nworld 2..\nparam n = 1024\ntensor x: float32[n] = 1\non rank % 2 == 0:\n" \
                "    send x to rank + 1\n    recv x from rank + 1\non rank % 2 == 1:\n    recv x from rank - 1\n" \
                "    send x to rank - 1\n"
    n = 1 << 20
    assert seconds(streams, 4, t, n) == pytest.approx(2 * n / 0.8e9)  # two at once on the streams' bus
    assert seconds(streams, 4, plain, n) == pytest.approx(n / 1e9)  # two at once on a bus of 2
    assert seconds(lone, 4, t, n) == pytest.approx(10e-6 + n / 0.5e9)  # alone: the stream's β
    assert seconds(lone, 2, t, n) == pytest.approx(10e-6 + n / 0.5e9)  # two ranks on 2 cores: the same pace
    assert seconds(lone, 2, plain, n) == pytest.approx(10e-6 + n / 1e9)
    roomy = parse(SourceFile("t.toml", head.replace("cores_per_node = 2", "cores_per_node = 4") + keys + links))
    assert seconds(streams, 4, roomy, n) == pytest.approx(10e-6 + n / 0.5e9)  # 4 cores: a bus of 2 GB/s
    waiting = lone.replace("on rank == 1:\n", "on rank == 1:\n    x += 1\n")  # rank 0 receives before it is sent
    assert seconds(waiting, 4, t, n) == pytest.approx(2 * n / 1e15 + 10e-6 + n / 1e9)
    assert seconds(ping_pong, 4, t, n) == pytest.approx(seconds(ping_pong, 4, plain, n))  # there and back
    assert seconds(ping_pong, 4, t, n) == pytest.approx(2 * n / 1e9)
    assert seconds(EXCHANGE, 4, t, n) == pytest.approx(seconds(EXCHANGE, 4, plain, n))  # a ring's step
    assert "0.5 GB/s a one-way stream's message, 0.8 GB/s where such streams run at once on a crowded node" in (
        t.describe()
    )
    with pytest.raises(CommdslError, match="shared_node"):
        parse(SourceFile("t.toml", "ranks_per_node = 4\nstream_gbps = 1\n" + links))
    for value in ("0.000001", "1e9"):  # the ends of the range: finite times that grow with the size
        ends = parse(SourceFile("t.toml", head + f"stream_gbps = {value}\nstream_bus_gbps = {value}\n" + links))
        times = [seconds(streams, 4, ends, size) for size in (1024, 1 << 20, 1 << 26)]
        assert all(math.isfinite(x) for x in times) and times == sorted(times), (value, times)


def test_a_crowded_gloo_ring_straight_from_communication_hides_its_steps_under_its_bytes():
    """On a node with more ranks than cores, a Gloo ring collective costs the longer of its steps' latency and
    its bytes where its members come to it from communication (a collective or a message, as in a loop of one
    collective), and their sum where as many of them as the node's cores come from a local op or a data read
    (four ranks on the 2-core machine: `all_reduce` right after itself 5-18 ms at 1-8 MiB, right after an add
    on every rank 7-22, after an add on one rank as after itself; `benchmarks/gloo_queue_facts.py after`,
    `adders`). The program is priced as the bench loops it: its first collective comes from the rank's last op.
    Not the all_to_all (one wait after every message), not within the cores, not NCCL."""
    head = "ranks_per_node = 64\nmemory_gbps = 1e6\ncores_per_node = 2\n"
    links = "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\ncrowded_alpha_us = 300\ncollective_alpha_us = 500\n"
    t = parse(SourceFile("t.toml", head + links))
    decl = "program a\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n]\n"
    n, p = 1 << 20, 4
    latency, moved = 2 * (p - 1) * 500e-6, 2 * (p - 1) / p * n / 1e9  # 3.0 ms, 1.57 ms
    add = 2 * n / 1e15
    lone = seconds(decl + "all_reduce x\n", p, t, n)
    assert lone == pytest.approx(max(latency, moved))  # a loop of one all_reduce
    assert seconds(decl + "all_reduce x\nall_reduce y\n", p, t, n) == pytest.approx(2 * lone)
    assert seconds(decl + "x += 1\nall_reduce x\n", p, t, n) == pytest.approx(latency + moved + add)
    assert seconds(decl + "all_reduce x\nx += 1\n", p, t, n) == pytest.approx(latency + moved + add)  # the loop
    # a check is neither: the all_reduce still comes from the one before
    assert seconds(decl + "all_reduce x\nexpect x == world\n", p, t, n) == pytest.approx(lone)
    # members from their own work take the cores from the ring's wake-ups when they fill them: one adding rank
    # leaves the steps hidden, two (the node's cores) or three make the instance pay both
    for adding, hidden in (("rank == 0", True), ("rank < 2", False), ("rank < 3", False)):
        some_add = decl + f"on {adding}:\n    x += 1\nall_reduce x\n"
        assert seconds(some_add, p, t, n) == pytest.approx((lone if hidden else latency + moved) + add)
    # from a message: a ring step (crowded α) then the all_reduce with its steps hidden
    step = "batch:\n    send x to (rank + 1) % world\n    recv y from (rank - 1) % world\n"
    assert seconds(decl + step + "all_reduce x\n", p, t, n) == pytest.approx(max(300e-6, n / 1e9) + lone)
    # the all_gather (p - 1 steps) too; the all_to_all's one wait is not a ring's steps
    gather = decl + "tensor g: float32[world * n]\nall_gather x into g\n"
    after_add = decl + "tensor g: float32[world * n]\nx += 1\nall_gather x into g\n"
    g_latency, g_moved = (p - 1) * 500e-6, (p - 1) / p * n / 1e9  # the output's n bytes: 1.5 ms, 0.79 ms
    assert seconds(after_add, p, t, n) - seconds(gather, p, t, n) == pytest.approx(min(g_latency, g_moved) + add / p)
    a2a = decl + "all_to_all x into y\n"
    assert seconds(a2a, p, t, n) == pytest.approx(seconds(decl + "x += 1\n" + "all_to_all x into y\n", p, t, n) - add)
    # two ranks on two cores, and NCCL: the sum
    assert seconds(decl + "all_reduce x\n", 2, t, n) == pytest.approx(2 * 500e-6 + n / 1e9)
    nccl = parse(SourceFile("t.toml", head + 'backend = "nccl"\n' + links))
    assert seconds(decl + "all_reduce x\n", p, nccl, n) == pytest.approx(
        seconds(decl + "x += 1\nall_reduce x\n", p, nccl, n) - add
    )


@pytest.mark.parametrize("p", [2, 4, 5, 8])
def test_gloo_runs_broadcast_gather_and_scatter_as_gloo_does(p):
    """Gloo broadcasts down a binomial tree (gloo/broadcast.cc: ⌈log2 p⌉ levels, each the whole buffer), and
    gathers and scatters with every member's message to or from the root at once (gloo/gather.cc, scatter.cc),
    torch's gather copying out of a flat temporary on the root (2n at memory speed). None is a ring: a
    message's α, not a collective step's. NCCL's are priced as rings."""
    n, mem = 1 << 20, 2e9
    gloo = parse(SourceFile("t.toml", f"ranks_per_node = 64\nmemory_gbps = {mem / 1e9}\n" + STEPS))
    nccl = parse(SourceFile("t.toml", 'ranks_per_node = 64\nbackend = "nccl"\n' + STEPS))
    size = predict_text(SCATTER, p, gloo, n).rows[0].size  # the whole buffer nearest n (whole rows each)
    assert seconds(BCAST, p, gloo, n) == pytest.approx(math.ceil(math.log2(p)) * (10e-6 + n / 1e9))
    assert seconds(BCAST, p, nccl, n) == pytest.approx((p - 1) * 500e-6 + n / 1e9)
    assert seconds(SCATTER, p, gloo, n) == pytest.approx(10e-6 + (p - 1) / p * size / 1e9)
    assert seconds(GATHER, p, gloo, n) == pytest.approx(10e-6 + (p - 1) / p * size / 1e9 + 2 * size / mem)
    assert seconds(GATHER, p, nccl, n) == pytest.approx((p - 1) * 500e-6 + (p - 1) / p * size / 1e9)


def test_gloo_rooted_collectives_have_their_links_to_themselves_on_a_shared_host():
    """A ring's members all send and receive at once, so on a host whose ranks share one way and one bus each
    hop gets half its link and its share of the bus; a scatter's root sends alone through its way, each message
    at the link's β (the bus carries 1.5 β here: the root's way binds)."""
    n, p = 1 << 20, 4
    shared = parse(SourceFile("t.toml", "ranks_per_node = 64\nmemory_gbps = 1e6\nshared_node = true\n"
                                        "duplex = false\nbus_gbps = 1.5\n" + STEPS))
    assert seconds(SCATTER, p, shared, n) == pytest.approx(10e-6 + (p - 1) / p * n / 1e9)


OVERLAPPED = """program o
world 2
param n = 1024
tensor x: float32[n] = rank
tensor y: float32[n]
tensor z: float32[n] = 1
h = isend x to 1 - rank
r = irecv y from 1 - rank
z += x
wait h, r
"""


def test_without_overlap_a_ranks_local_op_and_its_messages_take_turns():
    """`overlap = false`: a rank's local op starts when the messages on its ways have moved and a message
    through them when the op has ended (a host with no core for Gloo's loop thread while the rank computes);
    by default the add runs while the message moves."""
    n = 1 << 20
    text = "ranks_per_node = 64\nmemory_gbps = 1\n{}[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"
    message, add = 10e-6 + n / 1e9, 2 * n / 1e9
    assert seconds(OVERLAPPED, 2, parse(SourceFile("t.toml", text.format(""))), n) == pytest.approx(max(message, add))
    turns = parse(SourceFile("t.toml", text.format("overlap = false\n")))
    assert not turns.overlap and "take turns" in turns.describe()
    assert seconds(OVERLAPPED, 2, turns, n) == pytest.approx(add + n / 1e9)  # its latency passed during the add


SKEWED = """program skew
world 4
param n = 1024
tensor x: float32[4, n] = rank
tensor y: float32[13, n]
on rank == 0:
    all_to_all x into y splits [4, 0, 0, 0], [4, 3, 3, 3]
on rank == 1:
    all_to_all x into y[0:1] splits [3, 1, 0, 0], [0, 1, 0, 0]
on rank == 2:
    all_to_all x into y[0:1] splits [3, 0, 1, 0], [0, 0, 1, 0]
on rank == 3:
    all_to_all x into y[0:1] splits [3, 0, 0, 1], [0, 0, 0, 1]
"""


def test_an_uneven_all_to_all_costs_its_busiest_members_bytes():
    """Every member's messages go at once (gloo/alltoallv.cc), so an uneven call takes as long as its busiest
    member's way, or the bus all the sends cross: here ranks 1-3 each send 3 rows to rank 0 and keep one,
    rank 0 keeps its own 4 — 9 rows into rank 0, none out. Priced as even it put 3/4 of the largest member's
    13 rows through every member's way (2.2x here without duplex; the MoE dispatch 1.8-2.5x the bench)."""
    base = "ranks_per_node = 64\nmemory_gbps = 1e6\nduplex = false\n"
    link = "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"
    one_way = parse(SourceFile("t.toml", base + link))
    got = predict_text(SKEWED, 4, one_way, 1 << 20).rows[0]
    row = got.value * 4  # bytes of one row of n float32
    assert got.time_us * 1e-6 == pytest.approx(10e-6 + 9 * row / 1e9, rel=1e-5)  # + its own block copied
    bus = parse(SourceFile("t.toml", base + "shared_node = true\nbus_gbps = 0.5\n" + link))
    assert seconds(SKEWED, 4, bus, 1 << 20) == pytest.approx(10e-6 + 9 * row / 0.5e9, rel=1e-5)  # the bus binds
    even = "program e\nworld 4\nparam n = 1024\ntensor x: float32[4, n] = rank\ntensor y: float32[4, n]\n"
    for t in (one_way, bus):  # even splits: the even form's price, bus or not
        assert seconds(even + "all_to_all x into y splits [1, 1, 1, 1], [1, 1, 1, 1]\n", 4, t, 1 << 20) == (
            pytest.approx(seconds(even + "all_to_all x into y\n", 4, t, 1 << 20), rel=1e-9)
        )


AG = """program ag
world 1..
param n = 1024
tensor x: float32[n // world] = rank
tensor y: float32[n // world * world]
all_gather x into y
expect y == i // (n // world)
"""

A2A = """program a2a
world 1..
param n = 1024
tensor x: float32[n // world * world] = 1
tensor y: float32[n // world * world]
all_to_all x into y
expect y == 1
"""


@pytest.mark.parametrize(("text", "copies"), [
    (AG, lambda p, n: 2 * n + 2 * n / p),  # the input primed into the flat temporary, that copied out
    (RS, lambda p, n: 2 * n + 2 * n / p + 2 * (p - 1) / p * n),  # the input cloned, this rank's block copied
    # out, and the all-reduce's sums
    (A2A, lambda p, n: 2 * n / p),  # Gloo's own block copied locally
], ids=["all_gather", "reduce_scatter", "all_to_all"])
def test_gloo_collectives_pay_torchs_copies_at_memory_speed(text, copies):
    """torch's Gloo backend copies around Gloo's algorithm (ProcessGroupGloo.cpp, gloo/alltoall.cc): those
    bytes, counted as a local op's (written + read), over memory bandwidth; NCCL's collectives pay none."""
    p, n, mem = 4, 1 << 20, 2e9
    extra = f'memory_gbps = {mem / 1e9}\n'
    gloo = parse(SourceFile("t.toml", f"ranks_per_node = 64\n{extra}[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"))
    nccl = parse(SourceFile("t.toml", f'ranks_per_node = 64\n{extra}backend = "nccl"\ntree = false\n'
                                       "[intra]\nalpha_us = 10\nbandwidth_gbps = 1\n"))
    assert seconds(text, p, gloo, n) - seconds(text, p, nccl, n) == pytest.approx(
        copies(p, n) / mem
        + ((p - 1) * 10e-6 + (p - 1) / p * n / 1e9 if text is RS else 0.0)
        - ((p - 2) * 10e-6 if text is A2A else 0.0)  # Gloo's all_to_all waits once, NCCL's ring p - 1 steps
    )

PAIRS_ALL_REDUCE = """program pairs
world 4
param n = 1024
group pair = split by rank // 2
tensor x: float32[n] = 1
all_reduce x in pair
expect x == 2
"""


def test_collectives_at_once_share_a_shared_bus():
    n = 1 << 20
    alone = 2 * 10e-6 + n / 1e9  # a ring of 2: 2 steps of latency, the buffer once over each link
    assert seconds(PAIRS_ALL_REDUCE, 4, topo(10, 1), n) == pytest.approx(alone)
    # one bus for the host: 2 members of each ring on it, and the two rings at once: a quarter each
    assert seconds(PAIRS_ALL_REDUCE, 4, topo(10, 1, extra="shared_node = true"), n) == pytest.approx(2 * 10e-6 + 4 * n / 1e9)


LOCAL = "program l\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n] = 2\nx += y\n"


def test_local_ops_on_a_shared_host_share_its_memory():
    """Every rank of a `shared_node` host adds at once: each gets its share of the memory bandwidth (1 GB/s
    here, the node's too unless `node_memory_gbps` says more; each rank still at most 1 GB/s); with a node per
    rank each has it all."""
    n = 1 << 20
    shared = parse(SourceFile("t.toml", "ranks_per_node = 4\nshared_node = true\nmemory_gbps = 1\n[intra]\n"
                                        "alpha_us = 1\nbandwidth_gbps = 1\n"))
    assert seconds(LOCAL, 4, shared, n) == pytest.approx(4 * 2 * n / 1e9)
    for node_gbps, each in ((2, 2), (8, 1)):
        more = parse(SourceFile("t.toml", f"ranks_per_node = 4\nshared_node = true\nmemory_gbps = 1\n"
                                          f"node_memory_gbps = {node_gbps}\n[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n"))
        assert more.memory_capacity == node_gbps
        assert seconds(LOCAL, 4, more, n) == pytest.approx(each * 2 * n / 1e9)
    alone = parse(SourceFile("t.toml", "ranks_per_node = 1\nmemory_gbps = 1\n[intra]\nalpha_us = 1\n"
                                       "bandwidth_gbps = 1\n"))
    assert seconds(LOCAL, 4, alone, n) == pytest.approx(2 * n / 1e9)


STAGGERED = (
    "program s\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n] = 2\n"
    "for s in 0 .. world - 1:\n    on rank == s:\n        x += y\n    barrier\n"
)


def test_a_shared_hosts_memory_is_a_port_a_lone_computing_rank_has_to_itself():
    """A pipeline's stages compute in turn: on a `shared_node` host the rank that computes while the others
    wait gets all of the memory bandwidth (four turns of 2n bytes at 1 GB/s), where ranks that add at once
    share it (above); the barriers cost only their latency here."""
    n = 1 << 20
    shared = parse(SourceFile("t.toml", "ranks_per_node = 4\nshared_node = true\nmemory_gbps = 1\n[intra]\n"
                                        "alpha_us = 0\nbandwidth_gbps = 1e6\n"))
    assert seconds(STAGGERED, 4, shared, n) == pytest.approx(4 * 2 * n / 1e9, rel=1e-3)
    assert seconds(LOCAL, 4, shared, n) == pytest.approx(4 * 2 * n / 1e9)  # one op, all four at once


APART = (
    "program a\nworld 2\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n] = 2\n"
    "on rank == 0:\n    x += y\non rank == 1:\n    x += y\n"
)


@pytest.mark.parametrize(("node_gbps", "adds"), [(None, 2), (1.5, 4 / 3), (2, 1), (8, 1)])
def test_a_shared_hosts_memory_runs_as_many_ops_at_once_as_it_has_room_for(node_gbps, adds):
    """Two ranks' adds written as two statements run at once as much as one statement on both does: a node
    memory with room for `capacity` adds at full speed queues the second only past that (one add's room: one
    after the other, as a port; 1.5: each at 3/4 of full speed; 2 or more: both at full speed). The 16-core
    host's pipeline at N = 2 was predicted 57 % slow when its memory (3.4 adds at once) queued every stage's
    add behind the other stage's (docs/predict-accuracy.md)."""
    n = 1 << 20
    extra = "" if node_gbps is None else f"node_memory_gbps = {node_gbps}\n"
    shared = parse(SourceFile("t.toml", f"ranks_per_node = 2\nshared_node = true\nmemory_gbps = 1\n{extra}[intra]\n"
                                        "alpha_us = 0\nbandwidth_gbps = 1e6\n"))
    assert seconds(APART, 2, shared, n) == pytest.approx(adds * 2 * n / 1e9, rel=1e-3)


@pytest.mark.parametrize(("statement", "sizes"), [
    ("x += y", []),  # torch's in-place add: one pass, nothing allocated
    ("x += 1", [4]),  # torch.add(x, 1), then copied into x
    ("x = y", [4]),  # cloned first (copy_ refuses overlapping views)
    ("x = y * 2 + rank", [4, 4]),  # y * 2, then + rank
    ("x = i", [8]),  # the index as int64
    ("b = x > y", [1]),  # a bool tensor
    ("x /= 2", [4]),
    ("x = 3", []),  # a fill
])
def test_the_temporaries_torch_allocates_for_a_local_op(statement, sizes):
    """Bytes per element of each temporary the runtime's `_compute` allocates (runtime/ops.py), as the model
    lists them and as torch's profiler sees the runtime's step free them (blocks of at least the tensor)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from commdsl.elementwise import temporaries
    from commdsl.expand import expand
    from commdsl.runtime import ops

    n = 100_000
    text = (f"program t\nworld 1\ntensor x: float32[{n}] = 1\ntensor y: float32[{n}] = 2\ntensor b: bool[{n}]\n"
            f"{statement}\n")
    s = expand(load_program(SourceFile("t.comm", text)), world=1)
    op = s.records[-1].at(0)
    assert temporaries(op.op, op.value, op.target, lambda v: s.infos[v.tensor].dtype) == sizes
    cpu = torch.device("cpu")
    specs = s.tensors[0]
    ctx = ops.Context(rank=0, backend="gloo", device=cpu, buffers=ops.allocate(specs, 0, 1, cpu),
                      dtypes={k: v.dtype for k, v in specs.items()}, groups=[None], emit=lambda kind, p: None)
    (step,) = ops.build_steps(s.ops[0], ctx)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    freed = [-e.cpu_memory_usage for e in prof.events() if e.name == "[memory]" and e.cpu_memory_usage <= -n]
    assert sorted(freed) == sorted(size * n for size in sizes)


def test_a_local_ops_temporaries_are_written_and_read_at_memory_speed():
    """`x += 1` computes `torch.add(x, 1)` into a new tensor and copies it into x: besides the n bytes the
    op counts, the temporary is written and read (2n); `x = y * 2 + rank` makes two (4n besides its 2n);
    `x += y` of a view runs in place and makes none."""
    n, mem = 1 << 20, 1e9
    alone = parse(SourceFile("t.toml", "ranks_per_node = 1\nmemory_gbps = 1\n[intra]\nalpha_us = 1\n"
                                       "bandwidth_gbps = 1\n"))
    one = "program l\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\nx += 1\n"
    two = "program l\nworld 1..\nparam n = 1024\ntensor x: float32[n]\ntensor y: float32[n] = 2\nx = y * 2 + rank\n"
    assert seconds(LOCAL, 2, alone, n) == pytest.approx(2 * n / mem)
    assert seconds(one, 2, alone, n) == pytest.approx(3 * n / mem)
    assert seconds(two, 2, alone, n) == pytest.approx(6 * n / mem)


def test_malloc_maps_a_tensor_from_its_padded_request():
    """glibc pads posix_memalign(64, n)'s request by about 112 bytes before comparing it with the mmap threshold:
    the MoE program's 33554424-byte tensor (32 MiB less 8) is mapped, one 256 bytes short is not."""
    from commdsl.predict.cost import mapped

    assert mapped(32 << 20, 32 << 20) and mapped((32 << 20) - 8, 32 << 20)
    assert not mapped((32 << 20) - 256, 32 << 20) and not mapped(16 << 20, 32 << 20)
    assert list(mapped(np.array([1 << 20, 64 << 20]), 32 << 20)) == [False, True]


PAGES = "page_fault_gbps = 2\n"
EXPR = "program e\nworld 1..\nparam n = 1024\ntensor x: float32[n] = 1\ntensor y: float32[n]\ny = x * 2 + rank\n"


@pytest.mark.parametrize("mib", [16, 64])
def test_temporaries_at_the_mmap_threshold_pay_fresh_pages(mib):
    """`y = x * 2 + rank` makes two temporaries of the target's size: at 64 MiB (at least glibc's 32 MiB mmap
    threshold) each is mapped anew on every call and costs its bytes at `page_fault_gbps`; at 16 MiB they
    reuse the heap's pages and cost nothing more. The same for a Gloo all-gather's flat temporary."""
    n = mib << 20  # bytes of x, y and each temporary
    plain, paged = topo(), topo(extra=PAGES)
    fresh = 2 * n / 2e9 if mib >= 32 else 0.0
    assert seconds(EXPR, 2, paged, n) - seconds(EXPR, 2, plain, n) == pytest.approx(fresh)
    assert seconds(AG, 2, paged, n) - seconds(AG, 2, plain, n) == pytest.approx(fresh / 2)
    lower = topo(extra=PAGES + "mmap_threshold_bytes = 1048576")  # malloc told to map from 1 MiB on
    assert seconds(EXPR, 2, lower, n) - seconds(EXPR, 2, plain, n) == pytest.approx(2 * n / 2e9)


def test_fresh_pages_are_not_shared_between_a_shared_hosts_ranks():
    """Each rank faults its pages on its own core: on a `shared_node` host the page cost is one rank's, while
    the copies share the memory bandwidth."""
    n = 64 << 20
    base = "ranks_per_node = 4\nshared_node = true\nmemory_gbps = 1e6\n{}[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n"
    plain, paged = (parse(SourceFile("t.toml", base.format(extra))) for extra in ("", PAGES))
    assert seconds(EXPR, 4, paged, n) - seconds(EXPR, 4, plain, n) == pytest.approx(2 * n / 2e9)


AG_IN_PAIRS = """program agp
world 2..
param n = 1024
tensor x: float32[n // 2] = rank
tensor y: float32[n // 2 * 2]
group pair = split by rank // 2
all_gather x into y in pair
"""


def test_a_collectives_fresh_pages_share_the_cores_when_its_members_outnumber_them():
    """Gloo's all_gather maps a flat temporary of the output on every member at once: each faults its pages on
    a core, so where more of a node's ranks do it at once than `cores_per_node`, they share the cores (plain
    torch on two cores, every rank's fresh 64 MiB filled and copied out: 29-31 ms at 2 ranks, 49-60 at 4).
    Two pair groups at once on one host of 4 ranks fault as 4."""
    n = 64 << 20
    base = "ranks_per_node = 4\nshared_node = true\nmemory_gbps = 1e6\n{}[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n"
    plain = parse(SourceFile("t.toml", base.format("")))
    cores = {c: parse(SourceFile("t.toml", base.format(PAGES + f"cores_per_node = {c}\n"))) for c in (1, 2, 4)}
    page = n / 2e9  # one rank's flat temporary at 2 GB/s
    for world, program in ((4, AG), (4, AG_IN_PAIRS)):
        got = {c: seconds(program, world, t, n) - seconds(program, world, plain, n) for c, t in cores.items()}
        assert got[4] == pytest.approx(page) and got[2] == pytest.approx(2 * page) and got[1] == pytest.approx(4 * page)
    assert seconds(AG, 2, cores[2], n) - seconds(AG, 2, plain, n) == pytest.approx(page)  # 2 ranks, 2 cores


ONE_STAGE = EXPR.replace("y = x * 2 + rank", "on rank == 0:\n    y = x * 2 + rank")


def test_a_local_ops_fresh_pages_share_the_cores_with_the_ranks_faulting_at_once():
    """`y = x * 2 + rank` on 64 MiB maps two 64 MiB temporaries anew on every call. Four ranks running it at
    once on a host of `cores_per_node` cores fault them in two at a time on two cores, four at a time on four,
    one at a time on one: the kernel zeroes each page on the faulting process's core. One rank computing alone
    (a pipeline stage while the others wait) has the cores to itself; without `cores_per_node` each rank
    keeps one rank's rate, as before the key was read for local ops."""
    n = 64 << 20
    base = "ranks_per_node = 4\nshared_node = true\nmemory_gbps = 1e6\n{}[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n"
    plain = parse(SourceFile("t.toml", base.format("")))
    one = 2 * n / 2e9  # one rank's two temporaries at 2 GB/s
    for extra, spmd in (("", one), ("cores_per_node = 4\n", one), ("cores_per_node = 2\n", 2 * one),
                        ("cores_per_node = 1\n", 4 * one)):
        paged = parse(SourceFile("t.toml", base.format(PAGES + extra)))
        assert seconds(EXPR, 4, paged, n) - seconds(EXPR, 4, plain, n) == pytest.approx(spmd), extra
        assert seconds(ONE_STAGE, 4, paged, n) - seconds(ONE_STAGE, 4, plain, n) == pytest.approx(one), extra


ADD_BESIDE_A_MESSAGE = """program s
world 3
param n = 1024
tensor x: float32[n] = rank
tensor y: float32[n]
on rank == 0:
    x += 1
on rank == 1:
    send x to 2
on rank == 2:
    recv y from 1
"""


def test_a_shared_hosts_cores_carry_one_ranks_add_and_other_ranks_messages():
    """On a `shared_node` host (Gloo over loopback: the kernel copies a message's bytes on the processes'
    cores) rank 0's add and a message between ranks 1 and 2 use the same cores: with room for one such work at
    a time (no `bus_gbps`, no `node_memory_gbps`) the two at once take as long as one after the other; with
    room for two, less than that but more than the longer; on a host whose ranks do not share a node's cores,
    the longer alone."""
    n = 64 << 20
    base = "ranks_per_node = 4\nshared_node = {}\nmemory_gbps = 2\n{}[intra]\nalpha_us = 1\nbandwidth_gbps = 1\n"
    shared, roomy, apart = (parse(SourceFile("t.toml", base.format(*f))) for f in
                            (("true", ""), ("true", "node_memory_gbps = 4\nbus_gbps = 2\n"), ("false", "")))
    add = seconds(ADD_BESIDE_A_MESSAGE.split("on rank == 1:")[0], 3, shared, n)
    message = seconds(ADD_BESIDE_A_MESSAGE.replace("on rank == 0:\n    x += 1\n", ""), 3, shared, n)
    assert message == pytest.approx(n / 1e9, rel=1e-3) and add > message  # 64 MiB at 1 GB/s; the add the longer
    assert seconds(ADD_BESIDE_A_MESSAGE, 3, shared, n) == pytest.approx(add + message, rel=1e-3)
    both = seconds(ADD_BESIDE_A_MESSAGE, 3, roomy, n)
    assert max(add, message) * 1.01 < both < (add + message) * 0.99
    assert seconds(ADD_BESIDE_A_MESSAGE, 3, apart, n) == pytest.approx(max(add, message), rel=1e-3)


def test_a_topology_without_the_page_rate_or_on_nccl_pays_no_fresh_pages():
    """No `page_fault_gbps`: temporaries cost their copies only, as before the key existed; on NCCL the tensors
    are on the GPU, whose caching allocator keeps its blocks."""
    n = 64 << 20
    t = topo()
    assert t.page_bps is None and t.mmap_threshold == 32 << 20
    assert seconds(EXPR, 2, t, n) == pytest.approx(6 * n / 1e15)  # 2n counted + 2 temporaries x 2n, at 1e6 GB/s
    nccl = 'backend = "nccl"\n'
    assert seconds(EXPR, 2, topo(extra=nccl + PAGES), n) == seconds(EXPR, 2, topo(extra=nccl), n)
    assert all(load(name)[0].page_bps is None for name in ("dgx-h100", "dgx-a100"))


def test_calibration_writes_the_page_rate_it_measures():
    from commdsl.predict import calibrate

    f = fit([1 << 20, 1 << 24], [300e-6, 4.3e-3])
    t = parse(SourceFile("h.toml", calibrate.topology_text(calibrate.Measured(f, 10e9, 2.5e9), 2, "gloo", "cmd")))
    assert t.page_bps == pytest.approx(2.5e9) and t.mmap_threshold == 32 << 20
    text = calibrate.topology_text(calibrate.Measured(f, 10e9, None), 2, "gloo", "cmd")
    assert "page_fault_gbps" not in text and parse(SourceFile("h.toml", text)).page_bps is None


def test_page_fault_bandwidth_times_fresh_pages_beyond_a_kept_tensor(monkeypatch):
    """A fresh 64 MiB tensor filled costs more than the same fill into a kept one (its pages are mapped anew):
    the rate is positive, or None when malloc keeps its memory; the thread count is put back."""
    import torch

    from commdsl.predict import calibrate

    before = torch.get_num_threads()
    rate = calibrate.page_fault_bandwidth(repeats=2, threads=1)
    assert rate is None or rate > 0
    assert torch.get_num_threads() == before


def test_mangled_topology_files_give_diagnostics_never_a_traceback():
    """200 random edits of a preset (bytes dropped, doubled, replaced): each parses or is N136 with a span."""
    rng = np.random.default_rng(17)
    text = PRESETS["dgx-h100"]
    alphabet = "[]=\"'#.\n 0123456789-+eE_abcxyzÿ\t{},"
    for _ in range(200):
        chars = list(text)
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(0, len(chars)))
            what = int(rng.integers(0, 3))
            if what == 0:
                del chars[at]
            elif what == 1:
                chars.insert(at, chars[at])
            else:
                chars[at] = alphabet[int(rng.integers(0, len(alphabet)))]
        source = SourceFile("m.toml", "".join(chars))
        try:
            parse(source)
        except CommdslError as e:
            assert e.diagnostics and all(d.code == "N136" and d.span is not None for d in e.diagnostics)


@pytest.mark.parametrize("key", ["memory_gbps", "page_fault_gbps", "bus_gbps", "exchange_gbps", "swap_gbps",
                                 "node_memory_gbps", "bandwidth_gbps", "alpha_us", "collective_alpha_us"])
def test_every_number_at_the_ends_of_its_range_predicts_finite_times_growing_with_size(tmp_path, key):
    """A topology the file's validation accepts gives finite times that grow with the size: a bandwidth of 1e300
    GB/s (then accepted) made bytes per second overflow to inf, and the prediction NaN or an internal error."""
    low, high = ("0", "1e9") if key.endswith("_us") else ("0.000001", "1e9")
    for value in (low, high):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", CALIBRATED)  # every such key: intra, inter, link
        path = tmp_path / "t.toml"
        path.write_text(text)
        out = tmp_path / "p.json"
        code = main(["predict", RING, "--world", "4", "--topology", str(path), "--sizes", "1K:64M", "--json", str(out),
                     "--links", "0"])
        assert code == 0, (key, value)
        times = [r["time_us"] for r in json.loads(out.read_text())["rows"]]
        assert all(math.isfinite(t) and t > 0 for t in times), (key, value, times)
        assert times == sorted(times), (key, value, times)


def test_the_world_1024_question_as_docs_predict_md_answers_it(capsys):
    """128 nodes of 8 H100s, 256 MiB: the built-in (tree) < hierarchical < the built-in ring < recursive doubling."""
    def time_us(*argv: str) -> float:
        code = main(["predict", *argv, "--world", "1024", "--topology", "dgx-h100", "--sizes", "256M", "--links", "0"])
        out, err = capsys.readouterr()
        assert code == 0, err
        (row,) = [line.split() for line in out.splitlines() if line.startswith("   268435456")]
        return float(row[5])

    auto = time_us("--collective", "all_reduce")
    ring = time_us("--collective", "all_reduce", "--algo", "ring")
    hier = time_us(str(ROOT / "programs" / "hierarchical_allreduce.comm"), "--set", "local=8")
    rd = time_us(str(ROOT / "programs" / "recursive_doubling_allreduce.comm"))
    assert auto < hier < ring < rd
    assert ring == pytest.approx(2 * 1023 * 6.6 + 2 * 1023 / 1024 * 268435456 / 400e9 * 1e6, rel=1e-3)


ASYNC_UNDER_ADD = (
    "program o\nworld 1..\nparam n = 1024\ntensor g: float32[n] = 1\ntensor x: float32[n] = 1\n"
    "tensor y: float32[n] = 2\nh = all_reduce g\nx += y\nwait h\n"
)
COLLECTIVE_THEN_ADD = (
    "program o\nworld 1..\nparam n = 1024\ntensor g: float32[n] = 1\ntensor x: float32[n] = 1\n"
    "tensor y: float32[n] = 2\nall_reduce g\nx += y\n"
)


def test_an_async_gloo_collective_shares_its_hosts_cores_with_the_ops_issued_while_it_runs():
    """On a `shared_node` host a Gloo collective's work (its messages' bytes, its sums and copies) is done by
    its members' cores: an add issued while an async `all_reduce` runs on every rank of the node ends when it
    would after a blocking one (the 2-core machine, 16 MiB: 53.5 ms against the blocking control's 53.2, where
    the model had the overlap save 43 %). Where the ranks do not share their cores (no `shared_node`) the add
    runs beside the collective: the row is the collective's time, which the add is shorter than; so on NCCL."""
    n = 1 << 20
    head = "shared_node = true\nmemory_gbps = 1\n"
    shared = parse(SourceFile("t.toml", f"ranks_per_node = 2\n{head}[intra]\nalpha_us = 0\nbandwidth_gbps = 1\n"))
    apart = parse(SourceFile("t.toml", "ranks_per_node = 2\nmemory_gbps = 4\n[intra]\nalpha_us = 0\nbandwidth_gbps = 1\n"))
    assert shared.backend == "gloo"
    together = seconds(ASYNC_UNDER_ADD, 2, shared, n)
    assert together == pytest.approx(seconds(COLLECTIVE_THEN_ADD, 2, shared, n))
    add_alone = seconds(LOCAL, 2, shared, n)
    assert together > seconds(COLLECTIVE_THEN_ADD.replace("x += y\n", ""), 2, shared, n) + 0.9 * add_alone
    collective = seconds(COLLECTIVE_THEN_ADD.replace("x += y\n", ""), 2, apart, n)
    assert collective > seconds(LOCAL, 2, apart, n)
    assert seconds(ASYNC_UNDER_ADD, 2, apart, n) == pytest.approx(collective)
    gpus = load("dgx-h100")[0]  # NCCL: the collective runs on the GPU's own engines, beside the rank's ops
    assert seconds(ASYNC_UNDER_ADD, 2, gpus, n) < seconds(COLLECTIVE_THEN_ADD, 2, gpus, n)


@pytest.mark.parametrize(("kind", "sent"), [
    ("all_reduce", 6.0),  # a ring: every member 2(p - 1)/p of the buffer
    ("all_gather", 3.0),  # every member (p - 1)/p of the output
    ("reduce_scatter", 3.0),
    ("all_to_all", 3.0),
    ("broadcast", 3.0),  # Gloo's binomial tree: every member but the root receives the buffer once
    ("gather", 0.75),  # Gloo direct: the other members' parts, once, to the root
    ("scatter", 0.75),
])
def test_what_a_gloo_collective_sends_in_all_is_its_algorithms(kind, sent):
    """The bytes all four members of a call send together on Gloo, in buffers of nccl-tests' size: what the
    host's cores move for it (`Clocks.cores_taken`). Charging every member a ring's share put a scatter's
    root's sends on each of its members (the language tour's fill after it: 0.55 → 9.6 ms)."""
    assert float(KINDS[kind].gloo_sent_bytes(4, 1.0)) == pytest.approx(sent)
