"""`commdsl run` takes torchrun's flags with torchrun's meaning: its spellings, `--standalone`,
`--master-addr/--master-port`, `PET_*` variables, and `--max-restarts`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from commdsl.cli.main import build_parser
from processes import TOKEN_VAR
from test_runtime import HANG, ROOT, run_cli, write

ALLREDUCE = str(ROOT / "programs" / "allreduce.comm")


def parse(argv: list[str], env: dict[str, str], monkeypatch):
    for k in list(os.environ):
        if k.startswith(("PET_", "COMMDSL_")) or k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from commdsl.cli.run import config_from_args

    return config_from_args(build_parser().parse_args(["run", ALLREDUCE, *argv]))


def test_torchruns_spellings_mean_the_same(monkeypatch):
    dashed = parse(["--nproc-per-node", "4", "--rdzv-endpoint", "h:1", "--rdzv-id", "j", "--nnodes", "2",
                    "--node-rank", "1", "--max-restarts", "3"], {}, monkeypatch)
    underscored = parse(["--nproc_per_node", "4", "--rdzv_endpoint", "h:1", "--rdzv_id", "j", "--nnodes", "2",
                         "--node_rank", "1", "--max_restarts", "3"], {}, monkeypatch)
    assert dashed == underscored and dashed.nproc == 4 and dashed.max_restarts == 3


def test_pet_variables_are_torchruns_defaults_and_flags_win(monkeypatch):
    cfg = parse([], {"PET_NPROC_PER_NODE": "3", "PET_MAX_RESTARTS": "2", "PET_STANDALONE": "1"}, monkeypatch)
    assert (cfg.nproc, cfg.max_restarts, cfg.rdzv_backend) == (3, 2, "c10d")
    assert parse(["--nproc", "2"], {"PET_NPROC_PER_NODE": "3"}, monkeypatch).nproc == 2
    assert parse([], {"PET_NPROC_PER_NODE": "3", "COMMDSL_NPROC": "4"}, monkeypatch).nproc == 4


def test_a_worker_of_a_launcher_ignores_pet_variables(monkeypatch):
    """torchrun's workers inherit the PET_NPROC_PER_NODE a user exported for torchrun: not a reason to launch."""
    env = {"PET_NPROC_PER_NODE": "3", "TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2"}
    assert parse([], env, monkeypatch).nproc is None


def test_master_addr_and_port_are_the_static_rendezvous(monkeypatch):
    cfg = parse(["--nproc", "2", "--master-addr", "10.0.0.1", "--master_port", "29600"], {}, monkeypatch)
    assert (cfg.rdzv_backend, cfg.rdzv_endpoint) == ("static", "10.0.0.1:29600")
    cfg = parse(["--nproc", "2"], {"PET_MASTER_ADDR": "10.0.0.2"}, monkeypatch)
    assert (cfg.rdzv_backend, cfg.rdzv_endpoint) == ("static", "10.0.0.2:29500")


@pytest.mark.parametrize("argv, words", [
    (["--standalone", "--nnodes", "2"], "--standalone is one node"),
    (["--master-addr", "h", "--rdzv-endpoint", "h:1"], "both name the rendezvous"),
    (["--master-port", "1", "--rdzv-backend", "c10d"], "static rendezvous"),
])
def test_contradicting_rendezvous_flags_are_refused(argv, words, monkeypatch):
    from commdsl.cli.common import UsageError

    with pytest.raises(UsageError, match=words):
        parse(["--nproc", "2", *argv], {}, monkeypatch)


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_torchrun_command_line_runs(no_orphans):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for argv in (["--standalone", "--nproc_per_node", "2"],
                 ["--nproc-per-node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port)]):
        code, out, err, _ = run_cli(["run", ALLREDUCE, *argv], no_orphans)
        assert code == 0 and "passed" in err, out + err


SLOW = """\
program slow
world 2
tensor x: float32[4194304] = 1
for s in 0 .. 39:
    all_reduce x op max
expect x == 1
"""


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_max_restarts_starts_the_workers_again_after_a_failure(tmp_path, no_orphans):
    environ = dict(os.environ, **{TOKEN_VAR: no_orphans})
    proc = subprocess.Popen([sys.executable, "-m", "commdsl", "run", write(tmp_path, "slow.comm", SLOW), "--nproc",
                             "2", "--max-restarts", "1", "--timeout", "60", "--verbose"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environ, cwd=ROOT, start_new_session=True)
    try:
        for line in proc.stderr:
            if line.startswith("commdsl: rank 1 is running as pid"):
                os.kill(int(line.split()[-1]), signal.SIGKILL)  # the first attempt's rank 1
                break
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out + err
    assert "every rank matches the simulator" in out and "passed" in err


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_a_hang_is_not_retried(tmp_path, no_orphans):
    code, out, err, elapsed = run_cli(["run", write(tmp_path, "hang.comm", HANG), "--nproc", "4", "--no-check",
                                       "--timeout", "3", "--max-restarts", "5"], no_orphans)
    assert code == 1 and "hang:" in out, out + err
    assert elapsed < 60
