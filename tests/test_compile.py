"""`commdsl compile --emit python`: the script is standalone, readable, and torchrun runs it to the same results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from commdsl.cli.main import main
from processes import TOKEN_VAR

ROOT = Path(__file__).resolve().parent.parent


def compile_to(tmp_path: Path, program: str, world: int, *extra: str) -> tuple[int, str]:
    out = tmp_path / "out.py"
    code = main(["compile", program, "--world", str(world), "-o", str(out), *extra])
    return code, out.read_text() if out.exists() else ""


def torchrun(script: Path, nproc: int, token: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{TOKEN_VAR: token})
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(nproc), str(script)], capture_output=True, text=True, env=env, timeout=150,
                          cwd=script.parent, start_new_session=True)


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_ring_allreduce_script_runs_under_torchrun(tmp_path, capfd, no_orphans):
    code, text = compile_to(tmp_path, str(ROOT / "programs" / "ring_allreduce.comm"), 4, "--set", "n=12")
    assert code == 0
    assert "commdsl" not in "\n".join(ln for ln in text.splitlines() if ln.startswith(("import", "from")))
    assert "# line 18: send x.chunk(out, world) to right" in text
    assert "def rank_3(groups, out, failures):" in text
    proc = torchrun(tmp_path / "out.py", 4, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every expect holds" in proc.stdout


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_collectives_script_prints_like_the_runtime(tmp_path, capfd, no_orphans):
    prog = tmp_path / "prog.comm"
    prog.write_text((ROOT / "programs" / "collectives.comm").read_text() + "print recvbuf\n")
    code, _ = compile_to(tmp_path, str(prog), 2)
    assert code == 0
    proc = torchrun(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("rank ") and "recvbuf" in ln)
    assert lines == ["rank 0: recvbuf = tensor([0, 2])", "rank 1: recvbuf = tensor([1, 3])"]


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_failing_expect_makes_the_script_exit_1(tmp_path, capfd, no_orphans):
    prog = tmp_path / "bad.comm"
    prog.write_text("program bad\nworld 2\ntensor x: int32[2] = rank\nall_reduce x\nexpect x == rank\n")
    code, _ = compile_to(tmp_path, str(prog), 2)
    assert code == 1  # the simulator already knows: refused
    code, text = compile_to(tmp_path, str(prog), 2, "--no-check")
    assert code == 0
    proc = torchrun(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode != 0
    assert "rank 0: expect at line 5 failed: element 0: got 1, expected == 0" in proc.stdout
    assert "1 expect(s) failed" in proc.stdout


def test_repeated_ops_fold_into_a_loop(tmp_path, capfd):
    prog = tmp_path / "loop.comm"
    prog.write_text("program loop\nworld 2\ntensor x: float32[4] = 1\nfor k in 0 .. 99:\n    all_reduce x op max\n"
                    "    x *= 1\n")
    code, text = compile_to(tmp_path, str(prog), 2)
    assert code == 0
    assert text.count("for _ in range(100):  # lines 5..6, 100 times") == 2  # once per rank
    assert text.count("dist.all_reduce(x, dist.ReduceOp.MAX)") == 2
    compile(text, "out.py", "exec")  # valid Python


def test_deadlock_is_not_compiled(tmp_path, capfd):
    code, text = compile_to(tmp_path, str(ROOT / "programs" / "bad" / "head_to_head_send.comm"), 2)
    assert code == 1 and text == ""
    assert "error[D402]" in capfd.readouterr().out
