"""`commdsl trace`: real PyTorch scripts (tests/trace_scripts/) recorded under the fake backend and checked.

Nothing real is launched (except by the one `gloo`-marked test, which runs what `--emit comm` wrote):
every rank is a forked child of this process that runs the script against torch's `fake` process group.
Each trace has a per-rank time limit (`--timeout`), the test a hard one, and `no_orphans` checks that no
child outlives it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from commdsl.cli.main import main  # noqa: E402

SCRIPTS = Path(__file__).parent / "trace_scripts"
pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_orphans")]


def trace(capsys, script: str, *args: str) -> tuple[int, list[dict], str]:
    """Exit code, the diagnostics as JSON, and stderr."""
    code = main(["trace", str(SCRIPTS / script), "--format", "json", "--timeout", "90", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else []), err


def emitted(capsys, tmp_path: Path, script: str, world: str) -> str:
    """The program `trace --emit comm` writes for `script` at `world` (the trace must succeed)."""
    out = tmp_path / "emitted.comm"
    assert main(["trace", str(SCRIPTS / script), "--world", world, "--emit", "comm", "-o", str(out)]) == 0
    capsys.readouterr()
    return out.read_text()


def at(d: dict) -> tuple[str, int]:
    return Path(d["path"]).name, d["line"]


def labels(d: dict) -> list[tuple[str, int]]:
    """The other parties' lines (the JSON format lists labels as notes with a place)."""
    return [(Path(n["path"]).name, n["line"]) for n in d["notes"] if n["path"] and "may depend" not in n["message"]]


# ---- the recorder and the bridge -----------------------------------------------------------------------


def test_clean_ring_at_two_sizes(capsys):
    code, diags, err = trace(capsys, "ring.py", "--world", "3", "--world", "4")
    assert (code, diags) == (0, [])


def test_deadlock_points_at_the_send(capsys):
    code, diags, _ = trace(capsys, "deadlock.py", "--world", "2")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("D402", ("deadlock.py", 11))]
    assert "deadlock.py:11" in " ".join(n["message"] for n in diags[0]["notes"])  # `line N` of the program, moved


def test_mismatch_names_both_lines(capsys):
    code, diags, _ = trace(capsys, "mismatch.py", "--world", "3")
    assert code == 1
    found = {d["code"]: d for d in diags}
    assert at(found["C306"]) == ("mismatch.py", 12)
    assert at(found["C301"]) == ("mismatch.py", 14)
    assert labels(found["C301"]) == [("mismatch.py", 16)]
    assert labels(found["C306"]) == [("mismatch.py", 12)]  # both parties: rank 0's 4 elements, rank 1's 8


def test_emit_comm_is_a_program_the_checker_accepts(capsys, tmp_path):
    out = tmp_path / "ring.comm"
    code = main(["trace", str(SCRIPTS / "ring.py"), "--world", "4", "--emit", "comm", "-o", str(out)])
    capsys.readouterr()
    assert code == 0
    text = out.read_text()
    assert "for rep1 in 0 .. 2:" in text  # three steps folded into one loop
    assert "h0 = isend x to (rank + 1) % world" in text  # every rank in one block, peers relative
    assert "tensor x: float32[4 * n]  # ring.py:15" in text  # the script's own names for its buffers
    assert "on rank" not in text
    assert main(["lint", str(out)]) == 0
    assert main(["compile", str(out), "--world", "4", "-o", str(tmp_path / "ring.py")]) == 0
    assert main(["graph", str(out), "--world", "4", "-o", str(tmp_path / "ring.mmd")]) == 0
    assert main(["sim", str(out), "--world", "4"]) == 0
    assert "param n = 1" in text  # what `bench` sweeps
    capsys.readouterr()


def test_emit_needs_one_world(capsys):
    with pytest.raises(SystemExit) as e:
        main(["trace", str(SCRIPTS / "ring.py"), "--world", "2", "--world", "3", "--emit", "comm"])
    assert e.value.code == 2
    assert "one --world" in capsys.readouterr().err


# ---- scripts as users write them ----------------------------------------------------------------------


def test_spawn_sibling_module_and_cuda_shims(capsys):
    code, diags, err = trace(capsys, "spawn_allreduce.py", "--world", "2")
    assert (code, diags) == (0, [])
    assert "mp.spawn(nprocs=4) traced at --world 2" in err  # nprocs differs from --world: said
    assert "no GPU here" in err


def test_the_default_device_set_to_cuda_runs_on_the_cpu_without_gpus(capsys):
    """`torch.set_default_device("cuda")` (what `commdsl compile --backend nccl` writes) places tensors from
    below the recorder's function mode: traced without a GPU, the first tensor failed with "Torch not compiled
    with CUDA enabled". The default device is the CPU there too."""
    code, diags, err = trace(capsys, "default_device.py", "--world", "4")
    assert (code, diags) == (0, []), err
    assert "no GPU here" in err


def test_a_peer_outside_the_world_is_kept_not_wrapped(capsys):
    """`dist.send(x, rank + 1)` on the last rank names a rank that does not exist (P208, as `check` says of the
    same program); the recording wrote peers relative to the rank modulo the world, so it became a send to rank 0
    with no receive (P201), a different bug on a different line of the story."""
    code, diags, _ = trace(capsys, "peer_outside.py", "--world", "3", "--world", "4")
    assert code == 1 and [(d["code"], at(d)) for d in diags] == [("P208", ("peer_outside.py", 13))]
    assert "names rank 3, outside world 3" in diags[0]["message"] and diags[0]["worlds"] == [3]


def test_process_and_bug_in_sibling_module(capsys):
    code, diags, _ = trace(capsys, "process_bug.py", "--world", "2")
    assert code == 1
    c301 = next(d for d in diags if d["code"] == "C301")
    assert at(c301) == ("helpers.py", 15)  # the collective only rank 0 makes, in the imported module
    assert labels(c301) == [("process_bug.py", 15)]  # the other party: the barrier in the script


def test_objects_and_any_source(capsys):
    """`dist.recv(t)` with no source is `recv ... from any`: ranks 1 and 2 both send, so it races (P211)."""
    code, diags, _ = trace(capsys, "objects_anysource.py", "--world", "3")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("P211", ("objects_anysource.py", 15))]
    assert labels(diags[0]) == [("objects_anysource.py", 17)]
    assert "rank 1 (objects_anysource.py:17) or of rank 2" in diags[0]["message"]


def test_script_arguments_after_double_dash(capsys):
    assert trace(capsys, "args_script.py", "--world", "2")[:2] == (0, [])
    code, diags, _ = trace(capsys, "args_script.py", "--world", "2", "--", "--size", "8", "--uneven")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("C306", ("args_script.py", 14))]


def test_script_error_shows_only_its_frames(capsys):
    code, diags, err = trace(capsys, "script_error.py", "--world", "2")
    assert code == 2
    assert "traced as rank 1 of 2" in err
    assert "ValueError: bad config on rank 1" in err
    assert 'script_error.py", line 9, in setup' in err
    assert "commdsl" not in err.replace(str(SCRIPTS), "")  # none of our frames
    assert "site-packages" not in err


def test_data_dependent_verdict_names_the_read(capsys):
    code, diags, _ = trace(capsys, "data_dependent.py", "--world", "2")
    assert code == 1
    for d in diags:
        notes = [n for n in d["notes"] if "may depend on data" in n["message"]]
        assert notes, d["code"]
        assert (Path(notes[0]["path"]).name, notes[0]["line"]) == ("data_dependent.py", 12)


def test_findings_before_any_read_carry_no_data_note(capsys):
    code, diags, _ = trace(capsys, "mismatch.py", "--world", "2")
    assert diags and not any("may depend on data" in n["message"] for d in diags for n in d["notes"])


# ---- the tutorials' scripts --------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["one_to_many.py", "p2p_process.py", "torchrun_allreduce.py", "spawn_allreduce.py"])
def test_seed_scripts_trace_clean(capsys, script):
    code, diags, _ = trace(capsys, f"seeds/{script}", "--world", "2")
    assert code == 0
    assert [d for d in diags if d["severity"] == "error"] == []


def test_seed_send_loop_is_the_broadcast_lint(capsys):
    code, diags, _ = trace(capsys, "seeds/one_to_many.py", "--world", "4")
    assert code == 0
    assert [(d["code"], at(d)) for d in diags] == [("L701", ("one_to_many.py", 26))]
    assert "`broadcast tensor_0 from 0`" in diags[0]["help"]  # the script's name, `tensor`, is a keyword here


# ---- DDP and FSDP2 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["ddp_train.py", "fsdp_train.py"])
def test_training_loops_clean(capsys, script):
    code, diags, _ = trace(capsys, script, "--world", "2", "--world", "4")
    assert (code, diags) == (0, [])


def test_a_ddp_comm_hook_hands_its_wait_to_ddp(capsys):
    """`work.get_future()` hands the wait to whoever holds the future (DDP's reducer, in C++): the request counts
    as waited there. Before, the hook's all-reduce was never waited to the trace (R501, and R503 where the next
    step's all-reduce read the same bucket)."""
    code, diags, err = trace(capsys, "ddp_comm_hook.py", "--world", "2")
    assert (code, diags) == (0, []), err


def test_ddp_uneven_steps_caught_at_backward(capsys):
    code, diags, _ = trace(capsys, "ddp_train.py", "--world", "2", "--world", "4", "--", "--uneven")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("C307", ("ddp_train.py", 29))]
    assert any("below torch.distributed's API" in n["message"] for n in diags[0]["notes"])


def test_fsdp_uneven_steps_caught_at_forward(capsys):
    code, diags, _ = trace(capsys, "fsdp_train.py", "--world", "2", "--world", "4", "--", "--uneven")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("C307", ("fsdp_train.py", 27))]


# ---- flight-recorder dumps ------------------------------------------------------------------------------

FLIGHT = SCRIPTS / "flight" / "gloo_mismatch"  # written by real Gloo (flight/make_gloo_dump.py), torch 2.13


def flight(capsys, directory) -> tuple[int, list[dict], str]:
    code = main(["trace", "--flight-recorder", str(directory), "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else []), err


def edited_dumps(tmp_path, edit, as_json: bool = False) -> Path:
    """The real Gloo dumps, changed by `edit(rank, dump)` and written back (pickle, or the JSON form)."""
    import pickle

    from commdsl.trace.flight import read_dump

    out = tmp_path / "dumps"
    out.mkdir()
    for rank in (0, 1):
        dump = read_dump(FLIGHT / f"rank_{rank}")
        edit(rank, dump)
        path = out / f"nccl_trace_rank_{rank}"
        path.write_bytes(json.dumps(dump).encode() if as_json else pickle.dumps(dump))
    return out


def test_flight_recorder_real_gloo_dump(capsys):
    code, diags, _ = flight(capsys, FLIGHT)
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("C301", ("make_gloo_dump.py", 26))]
    assert labels(diags[0]) == [("make_gloo_dump.py", 28)]  # rank 1's frame: the all_gather
    assert any("gloo call #3 on process group '0'" in n["message"] for n in diags[0]["notes"])


def test_flight_recorder_nccl_size_mismatch_json(capsys, tmp_path):
    def edit(rank, dump):
        for e in dump["entries"]:
            e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")
        dump["entries"] = dump["entries"][:2]  # the two calls that agree in kind
        if rank == 1:
            dump["entries"][0]["input_sizes"] = [[5]]

    code, diags, _ = flight(capsys, edited_dumps(tmp_path, edit, as_json=True))
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("C306", ("make_gloo_dump.py", 23))]
    assert any("nccl call #1" in n["message"] for n in diags[0]["notes"])


def test_flight_recorder_agreeing_prefix_is_clean(capsys, tmp_path):
    def edit(rank, dump):
        dump["entries"] = dump["entries"][:2]

    assert flight(capsys, edited_dumps(tmp_path, edit))[:2] == (0, [])


def test_flight_recorder_refuses_code_in_a_pickle(capsys, tmp_path):
    import pickle

    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": [], "x": Path("x")}))  # a class reference
    code, _, err = flight(capsys, tmp_path)
    assert code == 2
    assert "not a flight-recorder dump" in err


def test_flight_recorder_fields_of_the_wrong_type_are_named(capsys, tmp_path):
    """A dump whose fields hold the wrong type (a size that is a string, frames that are a number, a group's
    ranks that are no list) is an error naming the field; each was an internal error (TypeError,
    AttributeError) in the code that read it, found by mutating the Gloo dump's fields (26 in 400 inputs)."""
    from commdsl.trace.flight import read_dump

    fields = [*read_dump(FLIGHT / "rank_0")["entries"][0], "frames.line", "frames.filename", "pg_config"]
    internal = []
    for k, (field, value) in enumerate((f, v) for f in fields for v in (None, "x", -1, [], {}, 1.5, [["a"]], 2**70)):

        def edit(rank, dump, field=field, value=value):
            entry = dump["entries"][0]
            if field == "pg_config":
                dump["pg_config"] = {"": {"ranks": value}}
            elif field.startswith("frames."):
                entry["frames"][0][field.split(".")[1]] = value
            else:
                entry[field] = value

        (tmp_path / str(k)).mkdir()
        code, _, err = flight(capsys, edited_dumps(tmp_path / str(k), edit))
        if "internal error" in err or code not in (0, 1, 2):
            internal.append((field, value, code))
    assert internal == []

    def strings(rank, dump):
        dump["entries"][0]["input_sizes"] = [["four"]]

    code, _, err = flight(capsys, edited_dumps(tmp_path, strings))
    assert code == 2 and "nccl_trace_rank_0: `entries[0].input_sizes[0][0]`: input should be" in err, err


# ---- the 1F1B pipeline (the benchmark's script) --------------------------------------------------------


def test_pipeline_clean_and_folded(capsys, tmp_path):
    assert trace(capsys, "pipeline_1f1b.py", "--world", "2", "--world", "8")[:2] == (0, [])
    out = tmp_path / "p.comm"
    assert main(["trace", str(SCRIPTS / "pipeline_1f1b.py"), "--world", "8", "--emit", "comm", "-o", str(out)]) == 0
    capsys.readouterr()
    assert "for rep1 in" in out.read_text()  # the steady state's repeated exchanges are one loop


def test_pipeline_dropped_gradient(capsys):
    code, diags, _ = trace(capsys, "pipeline_1f1b.py", "--world", "4", "--", "--drop-grad")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("P202", ("pipeline_1f1b.py", 41))]


def test_dtensor_and_functional_collectives(capsys, tmp_path):
    out = tmp_path / "d.comm"
    assert main(["trace", str(SCRIPTS / "dtensor.py"), "--world", "2", "--emit", "comm", "-o", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text()
    assert re.search(r"all_gather \S+ into fout_f32  # dtensor.py:13", text)  # redistribute to Replicate
    assert re.search(r"all_reduce \S+\[0:4 \* n\]  # dtensor.py:14", text)  # funcol.all_reduce


def test_torch_version_is_one_tested():
    import torch

    from commdsl.trace.record import TESTED_TORCH

    assert torch.__version__.split("+")[0].rsplit(".", 1)[0] in TESTED_TORCH


@pytest.mark.parametrize("protocol", [0, 2, 3, 4, 5])  # torch's C++ pickler writes protocol 2
def test_pickle_opcode_reader_reads_plain_data(protocol):
    import pickle

    from commdsl.trace.flight import decode_pickle

    raw = [b"x"] if protocol >= 3 else []  # below 3, bytes are a call of _codecs.encode: refused, rightly
    value = {"entries": [{"a": (1, 2.5, None), "b": [True, False, *raw], "s": "\u00e9" * 300}] * 3, "n": 2**70}
    value["shared"] = value["entries"][0]  # memo references
    assert decode_pickle(pickle.dumps(value, protocol=protocol)) == value


def test_hanging_rank_is_stopped_with_what_it_started(capsys):
    code = main(["trace", str(SCRIPTS / "hangs.py"), "--world", "2", "--timeout", "3"])
    err = capsys.readouterr().err
    assert code == 2
    assert "rank 1 did not finish in 3 s" in err  # and no_orphans: its sleeping subprocess is gone too


def test_script_exit_status_quotes_its_stderr(capsys):
    code, _, err = trace(capsys, "bad_args.py", "--world", "2")
    assert code == 2
    assert "the script exited with status 2" in err
    assert "the following arguments are required: --data" in err


def test_deadlock_names_both_lines(capsys):
    code, diags, _ = trace(capsys, "recv_first.py", "--world", "2")
    assert code == 1
    assert [(d["code"], at(d), labels(d)) for d in diags] == [("D401", ("recv_first.py", 9), [("recv_first.py", 12)])]


def test_failure_after_an_object_collective_says_what_was_made_up(capsys):
    code, _, err = trace(capsys, "object_config.py", "--world", "2")
    assert code == 2
    assert "TypeError: 'NoneType' object is not subscriptable" in err
    assert "object_config.py:8:1: `broadcast` of objects (not executed" in err


def test_buffers_in_flight_keep_their_names(capsys, tmp_path):
    text = emitted(capsys, tmp_path, "dropped_buffers.py", "3")
    first, second = re.search(r"h0 = irecv (\S+) from", text), re.search(r"h2 = irecv (\S+) from", text)
    assert first and second and first.group(1) != second.group(1)  # two receives in flight, two buffers


def test_single_collectives_keep_their_tensors_and_handles(capsys, tmp_path):
    """Through the API wrappers, as every other collective: named after the script's tensors, with their
    handles (caught only at the c10d op, they were `b0`, `b1` and blocking)."""
    text = emitted(capsys, tmp_path, "single_collectives.py", "2")
    assert re.search(r"^h\d+ = reduce_scatter grads into shard", text, re.M), text
    assert re.search(r"^h\d+ = all_gather shard into params", text, re.M), text
    assert text.count("wait h") == 2


@pytest.mark.gloo
@pytest.mark.timeout(240)
def test_emitted_programs_run_and_bench_on_gloo(capsys, tmp_path, no_orphans):
    """The one test here that launches real processes: `run` and `bench` on what `--emit comm` wrote."""
    import os
    import subprocess
    import sys

    from processes import TOKEN_VAR

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), TOKEN_VAR: no_orphans}

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "commdsl", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            cwd=root,
            start_new_session=True,
        )

    pipeline, ring = tmp_path / "pipeline.comm", tmp_path / "ring.comm"
    for script, world, out in (("pipeline_1f1b.py", "4", pipeline), ("ring.py", "2", ring)):
        assert main(["trace", str(SCRIPTS / script), "--world", world, "--emit", "comm", "-o", str(out)]) == 0
    capsys.readouterr()
    done = cli("run", str(pipeline), "--nproc", "4", "--backend", "gloo", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every rank matches the simulator" in done.stdout + done.stderr
    done = cli("bench", str(ring), "--nproc", "2", "--backend", "gloo", "--sizes", "1K:64K", "--iters", "3")
    assert done.returncode == 0, done.stdout + done.stderr


def test_overlapping_slices_in_flight(capsys):
    code, diags, _ = trace(capsys, "overlap.py", "--world", "2")
    assert code == 1
    assert [(d["code"], at(d), labels(d)) for d in diags] == [("R503", ("overlap.py", 11), [("overlap.py", 10)])]


def test_emit_to_stdout_keeps_findings_off_it(capsys):
    code = main(["trace", str(SCRIPTS / "overlap.py"), "--world", "2", "--emit", "comm"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith("program overlap\n") and "R503" not in out
    assert "error[R503]" in err
    assert "isend buf[0:8 * n] to" in out and "irecv buf[4 * n:12 * n] from" in out  # one buffer, two views


def test_clean_verdict_that_read_data_says_so(capsys):
    code, diags, _ = trace(capsys, "bool_branch.py", "--world", "2")
    assert (code, diags) == (0, [])
    main(["trace", str(SCRIPTS / "bool_branch.py"), "--world", "2"])
    err = capsys.readouterr().err
    assert "All checks passed" in err
    assert "this verdict may depend on data: rank 1 read a value that came from communication" in err
    assert "bool_branch.py:13:4 (`bool()`)" in err


def test_device_mesh_groups(capsys):
    assert trace(capsys, "mesh_2d.py", "--world", "4")[:2] == (0, [])
    code, diags, _ = trace(capsys, "mesh_2d.py", "--world", "4", "--", "--swap")
    assert code == 1
    assert [(d["code"], at(d)) for d in diags] == [("C308", ("mesh_2d.py", 16))]
    assert ("mesh_2d.py", 19) in labels(diags[0])


def test_a_failure_of_the_recorder_is_never_the_scripts():
    """A wrapper's own bug surfaces as commdsl's (RecorderBug, past the script's `except Exception`); an
    error of the wrapped call itself stays the script's."""
    import torch.distributed as dist

    from commdsl.trace import record as rec
    from commdsl.trace.events import RankTrace

    broken = rec._p2p(True, True)  # a real handler, over a function whose arguments it does not know

    def honest(original, a, site):
        return original(**a)

    def target(x):
        raise ValueError(f"torch says no to {x}")

    saved = rec._STATE
    rec._STATE = rec._State(0, 1, RankTrace(0, 1), {}, set())
    try:
        with pytest.raises(rec.RecorderBug, match="could not record `target` at .*KeyError: 'tensor'"):
            rec._wrap_api("target", target, broken)(1)
        with pytest.raises(ValueError, match="torch says no to 1"):
            rec._wrap_api("target", target, honest)(1)
    finally:
        rec._STATE = saved
    assert dist.is_available()


def test_a_batch_waited_after_other_calls_is_bound_to_a_handle(capsys, tmp_path):
    out = tmp_path / "b.comm"
    assert main(["trace", str(SCRIPTS / "batch_overlap.py"), "--world", "3", "--emit", "comm", "-o", str(out)]) == 0
    text = out.read_text()
    # the works are waited after the all_reduce: a batch bound to a handle, waited where the last work is
    assert re.search(r"^h0 = batch:  # batch_overlap.py:14$", text, re.M)
    assert re.search(r"^wait h0  # batch_overlap.py:20$", text, re.M)
    assert trace(capsys, "batch_overlap.py", "--world", "3")[:2] == (0, [])
    code, diags, _ = trace(capsys, "batch_overlap.py", "--world", "3", "--", "--forget")
    # never waited, so `x.add_(y)` on rank 0 writes a buffer its isend still sends from (and reads y, still received)
    assert [(d["code"], at(d)) for d in diags] == [("R501", ("batch_overlap.py", 14)), ("R503", ("batch_overlap.py", 21))]


@pytest.mark.parametrize("flag, found", [
    ("", []),
    ("--write-send", [("R503", ("in_flight.py", 19), [("in_flight.py", 15)])]),
    ("--read-recv", [("R503", ("in_flight.py", 21), [("in_flight.py", 16)])]),
    ("--read-send", []),
])
def test_the_scripts_own_ops_on_a_buffer_in_flight_are_checked(flag, found, capsys):
    """`check` finds a program writing a buffer its isend sends from, or reading one its irecv receives into,
    before the wait (R503); the trace recorded communication only, so the same race in a script was clean.
    It now records the script's reads and writes of a buffer while an async call of its moves it (a view
    touches no data, and reading what is being sent is safe)."""
    code, diags, _ = trace(capsys, "in_flight.py", "--world", "3", *(["--", flag] if flag else []))
    assert [(d["code"], at(d), labels(d)) for d in diags] == found
    assert code == (1 if found else 0)


def test_aliased_calls_keep_their_tensors(capsys, tmp_path):
    """A collective called through an alias (`total = all_reduce`, `broadcast = dist.broadcast`, an
    object's attribute, a function's result) is still named after the script's tensors: the alias is looked
    up in the calling frame (before, only a call spelled with the function's own name was, and these were
    `b0`, `b1`...)."""
    text = emitted(capsys, tmp_path, "aliased_calls.py", "2")
    assert re.search(r"^all_reduce grads\b", text, re.M), text
    assert re.search(r"^broadcast grads from 0\b", text, re.M), text
    assert re.search(r"^all_gather shard into params\b", text, re.M), text
    assert re.search(r"^all_reduce shard\b", text, re.M), text  # `backend().all_reduce`: by its name
    assert not re.search(r"\bb\d+\b", text), text


def test_an_all_gather_v_traces_clean_on_nccl_and_is_c320_on_gloo(capsys):
    """torch's fake process group copies the input into every buffer of the list, which failed on uneven sizes
    (the script's own error, said the trace); the recorder now hands it buffers of the input's shape."""
    code, diags, err = trace(capsys, "all_gather_v.py", "--world", "3")
    assert code == 0 and diags == [], (diags, err)
    code, diags, err = trace(capsys, "all_gather_v.py", "--world", "3", "--backend", "gloo")
    assert code == 1 and [d["code"] for d in diags] == ["C320"], (diags, err)  # once per line, not once per rank
    assert at(diags[0])[1] == 11  # Gloo runs the reduce-scatter-v at 13 (measured)


def test_shapes_gloo_refuses_are_found_in_the_shapes_the_script_passed(capsys):
    """The emitted program's buffers are flat views, so the checker saw element counts only: torch's stacked
    all_gather_into_tensor output, a reduce_scatter_tensor input of rows of 2 for outputs of 4 and list entries
    of [2, 2] for a [4] input traced clean, and each raises on Gloo. The shapes are recorded now; NCCL runs
    each, and a [1, 4] view gathered into [world, 4] runs on both."""
    code, diags, err = trace(capsys, "shapes_gloo.py", "--world", "2")
    assert code == 1, (diags, err)
    assert [(d["code"], at(d)[1]) for d in diags] == [("C321", 13), ("C321", 16), ("C320", 18)], diags
    assert "the output `stacked` has shape [2, 4], the input `shard` [4]; Gloo needs [8]" in diags[0]["message"]
    code, diags, err = trace(capsys, "shapes_gloo.py", "--world", "2", "--backend", "nccl")
    assert code == 0 and diags == [], (diags, err)


def test_an_all_to_all_of_uneven_lists_traces_as_its_split_sizes(capsys, tmp_path):
    """The fake process group copies input j into output j of `all_to_all`'s lists, which failed on uneven
    sizes; the recorder hands it outputs shaped as the inputs, and the lists become one exchange's splits."""
    code, diags, err = trace(capsys, "all_to_all_v.py", "--world", "3")
    assert code == 0 and diags == [], (diags, err)
    # Gloo wants every buffer of both lists in the first input's shape (measured): the splits run there, the
    # lists do not
    code, diags, err = trace(capsys, "all_to_all_v.py", "--world", "3", "--backend", "gloo")
    assert code == 1 and [(d["code"], at(d)[1]) for d in diags] == [("C320", 10)], (diags, err)
    assert "buffer 1 of the output list, `received`, has shape [2], the first input" in diags[0]["message"]
    program = emitted(capsys, tmp_path, "all_to_all_v.py", "3")
    assert "splits [2 * n, 2 * n, 2 * n], [n, 2 * n, 3 * n]" in program, program
