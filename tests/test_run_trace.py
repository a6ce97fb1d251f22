"""`commdsl run --trace`: what the trace holds, also of a run that hung or lost a rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from processes import TOKEN_VAR
from test_runtime import HANG, ROOT, run_cli, write

STOPS = """\
program stops
world 2
tensor x: float32[4] = 1
for s in 0 .. 9:
    all_reduce x op max
recv x from 1 - rank
"""


def slices(trace: dict, rank: int, cat: str | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == rank and (cat is None or e.get("cat") == cat)]


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_a_hung_runs_trace_has_every_op_done_and_where_each_rank_stuck(tmp_path, no_orphans):
    trace_path = tmp_path / "t.json"
    code, out, err, _ = run_cli(["run", write(tmp_path, "hang.comm", HANG), "--nproc", "4", "--no-check",
                                 "--timeout", "3", "--trace", str(trace_path)], no_orphans)
    assert code == 1 and "hang:" in out, out + err
    trace = json.loads(trace_path.read_text())
    assert trace["otherData"]["complete"] is False
    for rank, line in ((0, 6), (1, 6), (2, 9), (3, 9)):
        assert slices(trace, rank, "setup"), rank
        [stuck] = slices(trace, rank, "stuck")
        assert stuck["args"]["line"] == line and stuck["args"]["state"] == "blocked" and stuck["dur"] >= 2.5e6
    png = tmp_path / "t.png"
    done = subprocess.run([sys.executable, "-m", "commdsl", "timeline", str(trace_path), "--png", str(png)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", done.stderr


@pytest.mark.gloo
@pytest.mark.timeout(90)
def test_messages_carry_what_they_move_and_arrows_join_sends_to_receives(tmp_path, no_orphans):
    trace_path = tmp_path / "t.json"
    code, out, err, _ = run_cli(["run", str(ROOT / "programs" / "p2p.comm"), "--nproc", "2", "--trace",
                                 str(trace_path)], no_orphans)
    assert code == 0, out + err
    trace = json.loads(trace_path.read_text())
    assert trace["otherData"]["complete"] is True
    sends = [e for r in (0, 1) for e in slices(trace, r, "send")]
    assert sends and all({"bytes", "dtype", "peer", "seq", "tag", "group"} <= set(e["args"]) for e in sends)
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert starts and sorted(starts) == sorted(finishes)
    for flow, s in starts.items():
        assert s["pid"] != finishes[flow]["pid"] and s["ts"] <= finishes[flow]["ts"]


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_a_killed_ranks_ops_before_its_death_stay_in_the_trace(tmp_path, no_orphans):
    trace_path = tmp_path / "t.json"
    environ = dict(os.environ, **{TOKEN_VAR: no_orphans})
    proc = subprocess.Popen([sys.executable, "-m", "commdsl", "run", write(tmp_path, "stops.comm", STOPS), "--nproc",
                             "2", "--no-check", "--timeout", "60", "--verbose", "--trace", str(trace_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=ROOT,
                            start_new_session=True)
    try:
        for line in proc.stderr:
            if line.startswith("commdsl: rank 1 is running as pid"):
                time.sleep(1.0)  # its all_reduces done, it waits for a message that never comes
                os.kill(int(line.split()[-1]), signal.SIGKILL)
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1 and "SIGKILL" in out, out + err
    trace = json.loads(trace_path.read_text())
    done = slices(trace, 1, "collective")
    assert [e["args"]["seq"] for e in done] == list(range(10))
