"""Issue 14: what a run listens on, asked of the kernel, and who may join a run's rendezvous.

A one-node `commdsl run` listens on loopback only (the rendezvous store in the launcher, Gloo's pair sockets
in the workers); a node of a multi-node job binds only the address its endpoint names; one endpoint serves
one job. Each test polls /proc (with a deadline, not a sleep) until the run's processes are up, reads their
listening sockets (processes.listening), then stops the run and checks that nothing is left.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import TOKEN_VAR, carrying, listening, running

ROOT = Path(__file__).resolve().parent.parent
HANG = "world 2..4\ntensor x: float32[4] = rank\nrecv x from (rank + 1) % world\n"  # every rank waits: stable
LOOPBACK = {"127.0.0.1", "::1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], token: str) -> subprocess.Popen:
    env = dict(os.environ, **{TOKEN_VAR: token})
    return subprocess.Popen([sys.executable, "-m", "commdsl", *argv], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def wait_until_listening(token: str, launchers: list[subprocess.Popen], workers: int, deadline_s: float = 60):
    """Poll until every worker holds a listening socket (its process group is set up); return all sockets
    of the launchers and workers."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        ours = set(carrying(token))
        mine = {p.pid for p in launchers}
        found = listening(ours)
        holding = {pid for pid, _, _ in found} - mine
        if len(ours - mine) >= workers and len(holding) >= workers:
            return found
        if any(p.poll() is not None for p in launchers):
            break
        time.sleep(0.1)  # polling the kernel's tables, not synchronising with the run
    outs = [p.communicate(timeout=30) if p.poll() is not None else ("", "") for p in launchers]
    raise AssertionError(f"the run never came up: {outs}")


def stop(procs: list[subprocess.Popen], token: str) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
    for p in procs:
        p.communicate(timeout=60)
    assert not [p for p in carrying(token) if running(p)]


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_a_one_node_run_listens_on_loopback_only(tmp_path, no_orphans):
    prog = tmp_path / "hang.comm"
    prog.write_text(HANG)
    run = start(["run", str(prog), "--nproc", "3", "--no-check", "--timeout", "60"], no_orphans)
    try:
        found = wait_until_listening(no_orphans, [run], workers=3)
    finally:
        stop([run], no_orphans)
    addresses = {addr for _, addr, _ in found}
    assert addresses <= LOOPBACK, found  # before: the store on `*` (0.0.0.0 and ::), twice
    store = [s for s in found if s[0] == run.pid]
    assert len(store) == 1, found  # one store, in the launcher; the workers do not hold its socket
    assert not [s for s in found if s[0] != run.pid and s[2] == store[0][2]]


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_a_second_run_on_a_fixed_endpoint_is_refused_at_once(tmp_path, no_orphans):
    prog = tmp_path / "hang.comm"
    prog.write_text(HANG)
    endpoint = f"127.0.0.1:{_free_port()}"
    first = start(["run", str(prog), "--nproc", "2", "--no-check", "--timeout", "60", "--rdzv-endpoint", endpoint],
                  no_orphans)
    try:
        found = wait_until_listening(no_orphans, [first], workers=2)
        assert ("127.0.0.1", int(endpoint.split(":")[1])) in {(a, p) for pid, a, p in found if pid == first.pid}
        started = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "commdsl", "run", str(ROOT / "programs" / "allreduce.comm"),
                                 "--nproc", "2", "--rdzv-endpoint", endpoint], cwd=ROOT, capture_output=True,
                                text=True, timeout=60, env=dict(os.environ, **{TOKEN_VAR: no_orphans}))
        assert second.returncode == 2 and f"--rdzv-endpoint {endpoint}: the port is not available here" in second.stderr
        assert time.monotonic() - started < 30
        assert first.poll() is None  # and the first run goes on, untouched
    finally:
        stop([first], no_orphans)


@pytest.mark.gloo
@pytest.mark.timeout(150)
def test_multi_node_binds_the_named_address_and_one_endpoint_serves_one_job(tmp_path, no_orphans):
    prog = tmp_path / "hang.comm"
    prog.write_text(HANG)
    port = _free_port()
    # both "nodes" share this host: on a machine with one GPU, the auto backend (NCCL, one GPU per local
    # rank) would put both on it, which NCCL refuses (seen on the H100 machine)
    node = ["run", str(prog), "--nproc", "1", "--nnodes", "2", "--backend", "gloo", "--no-check", "--timeout", "60",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id"]
    first = start(node + ["job-a"], no_orphans)
    nodes = [first]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and first.poll() is None and not [
                s for s in listening([first.pid]) if s[2] == port]:
            time.sleep(0.05)  # polling the kernel's tables until job-a hosts the store
        # another job on the same endpoint, while job-a waits for its second node: refused, naming both ids
        other = subprocess.run([sys.executable, "-m", "commdsl", *node, "job-b"], cwd=ROOT, capture_output=True,
                               text=True, timeout=60, env=dict(os.environ, **{TOKEN_VAR: no_orphans}))
        assert other.returncode == 2 and "serves job 'job-a', not 'job-b'" in other.stderr, other.stderr
        nodes.append(start(node + ["job-a"], no_orphans))
        found = wait_until_listening(no_orphans, nodes, workers=2)
        # a third node of a two-node job: refused at once
        late = subprocess.run([sys.executable, "-m", "commdsl", *node, "job-a"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, **{TOKEN_VAR: no_orphans}))
        assert late.returncode == 2 and "job 'job-a' already has its 2 nodes" in late.stderr, late.stderr
        assert all(p.poll() is None for p in nodes)
    finally:
        stop(nodes, no_orphans)
    assert {addr for _, addr, _ in found} <= LOOPBACK, found
    assert [p for p in found if p[2] == port] == [(first.pid, "127.0.0.1", port)]
    assert "--nnodes above 1 needs --rdzv-id" in subprocess.run(
        [sys.executable, "-m", "commdsl", *node[:-1]], cwd=ROOT, capture_output=True, text=True, timeout=60).stderr


@pytest.mark.gloo
@pytest.mark.timeout(120)
def test_rank_0_under_mpirun_hosts_the_store_on_master_addr_only(tmp_path, no_orphans):
    prog = tmp_path / "hang.comm"
    prog.write_text(HANG)
    port = _free_port()
    ranks = []
    for rank in range(2):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        ranks.append(subprocess.Popen([sys.executable, "-m", "commdsl", "run", str(prog), "--no-check", "--timeout",
                                       "60"], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=dict(os.environ, **env, **{TOKEN_VAR: no_orphans}),
                                      start_new_session=True))
    try:
        deadline = time.monotonic() + 60
        found: set = set()
        while time.monotonic() < deadline and len({pid for pid, _, p in found if p != port}) < 2:
            found = listening([p.pid for p in ranks])
            time.sleep(0.1)  # polling the kernel's tables
    finally:
        for p in ranks:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
    assert {addr for _, addr, _ in found} <= LOOPBACK, found
    assert [s for s in found if s[2] == port] == [(ranks[0].pid, "127.0.0.1", port)]


# ---- what the rendezvous needs of torch (pyproject says torch>=2.4; measured on 2.11 and 2.13) ------------------

def test_the_store_uses_torchs_older_backend_below_the_first_measured_libuv_one():
    from commdsl.runtime import rendezvous

    assert rendezvous.store_options("2.4.1+cpu") == {"use_libuv": False}
    assert rendezvous.store_options("2.10.0") == {"use_libuv": False}
    assert rendezvous.store_options("2.11.0+cu128") == {} and rendezvous.store_options("2.13.0+cpu") == {}


@pytest.mark.parametrize("backend", [{"use_libuv": False}, {}])
def test_both_store_backends_serve_the_socket_commdsl_binds(backend, monkeypatch):
    from datetime import timedelta

    import torch.distributed as dist

    from commdsl.runtime import rendezvous

    monkeypatch.setattr(rendezvous, "store_options", lambda version=None: backend)
    sock = rendezvous.listen(rendezvous.Endpoint("127.0.0.1", 0))
    store, _ = rendezvous._server(sock, timedelta(seconds=20))
    client = dist.TCPStore("127.0.0.1", store.port, None, False, timedelta(seconds=20))
    client.set("k", "v")
    assert store.get("k") == b"v"
    del client, store


def test_a_torch_without_the_agent_store_api_is_a_launch_error_not_a_traceback(monkeypatch):
    import torch.distributed.elastic.rendezvous as api

    from commdsl.runtime import launch
    from commdsl.runtime.config import RunConfig

    monkeypatch.delattr(api, "RendezvousStoreInfo")
    opts = RunConfig(path="p.comm", nproc=2, params={}, timeout=5.0)
    with pytest.raises(launch.LaunchError, match=r"commdsl run needs torch 2.4 or later \(this is torch .*\): it "
                                                 r"lacks torch.distributed.elastic.rendezvous.RendezvousInfo"):
        launch.run_local(None, "", "gloo", opts)
