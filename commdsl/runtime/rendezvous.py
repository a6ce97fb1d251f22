"""Where a run listens and who may join it: commdsl's own rendezvous for torch's elastic agent.

torch's c10d rendezvous creates its TCPStore with a host name, and a TCPStore server listens on every
interface whatever that name is (`*:PORT`, IPv4 and IPv6); the agent then starts a second store for the
workers on a free port, also on every interface. Anyone who could reach the machine could read and
write either while a run was up. And when the endpoint's port was taken, torch fell back to being a
client of whatever held it: a second run on the same fixed endpoint joined the first one's store.

So commdsl binds the socket itself, to exactly the address the user named (127.0.0.1 when they named
nothing), hands it to the TCPStore (`master_listen_fd`), and gives torch's agent a rendezvous handler
(registered as the backend `commdsl`) over that one store, which the workers also use. The handler
needs none of torch's elastic machinery: a job's node count is fixed and it never restarts, so a node's
rank is the order in which it claimed a slot in the store. What a run may listen on, then:

* the store, on the named address only (one node: the loopback address);
* Gloo's pair sockets, which bind the address the host name resolves to, or the interface named by
  GLOO_SOCKET_IFNAME: a one-node run sets it to the loopback interface when the user has not.

One endpoint serves one job. The store's host records the job id; a node with another id, a node past
the job's count, or a second host on the same port is refused at once, naming the endpoint.
tests/test_network.py asks the kernel (/proc/net/tcp*) what a run's processes listen on.

What this needs of torch (`require_torch` says so before a run, instead of failing inside it): the
agent-store rendezvous API (`RendezvousInfo`, `RendezvousStoreInfo`, `RendezvousHandler.use_agent_store`,
torch 2.4) and `TCPStore(master_listen_fd=...)`. torch's libuv store backend, the default since 2.4,
did not serve a listening socket handed to it until pytorch#150215 (2025: it never called `uv_listen`),
so below torch 2.11, the oldest measured with libuv, the store runs on torch's older backend
(`use_libuv=False`), which always honoured it. Measured: torch 2.13 (CPU) with both backends, 2.11 (GPU
machine) with libuv; 2.4 to 2.10 were not available to test.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

BACKEND = "commdsl"
_PREFIX = "commdsl/"
LIBUV_LISTEN_FD = (2, 11)
"""The first torch whose default (libuv) store backend is known to serve a socket handed to it."""


class EndpointError(Exception):
    """The endpoint cannot be used (taken, not an address of this machine, serving another job): exit 2."""


@dataclass(frozen=True)
class Endpoint:
    host: str  # as the user wrote it, without IPv6 brackets
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        host, sep, port = text.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not port.isascii() or not 0 <= int(port) < 65536:
            raise EndpointError(f"--rdzv-endpoint expects HOST:PORT, got {text!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def listen(endpoint: Endpoint) -> socket.socket:
    """A TCP socket bound to the endpoint's address (never a wildcard the user did not write), listening.

    EndpointError when the port is taken; OSError with errno EADDRNOTAVAIL when the address is not one of
    this machine's (the caller then joins as a client)."""
    try:
        infos = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICSERV)
    except socket.gaierror as e:
        raise EndpointError(f"--rdzv-endpoint {endpoint}: cannot resolve {endpoint.host!r} ({e.strerror})") from None
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a finished run's TIME_WAIT, not a live one
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(1024)
            return sock
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                raise EndpointError(
                    f"--rdzv-endpoint {endpoint}: the port is not available here ({e.strerror}); "
                    "another run may be using it: pick a free port, or omit the flag for one"
                ) from None
            last = e
    raise last or OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))


def require_torch() -> None:
    """EndpointError naming what is missing when this torch lacks what commdsl's rendezvous needs."""
    import torch
    import torch.distributed as dist

    missing = []
    try:
        from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo, RendezvousStoreInfo  # noqa: F401

        if not hasattr(RendezvousHandler, "use_agent_store"):
            missing.append("RendezvousHandler.use_agent_store")
    except ImportError:
        missing.append("torch.distributed.elastic.rendezvous.RendezvousInfo and RendezvousStoreInfo")
    if "master_listen_fd" not in (dist.TCPStore.__init__.__doc__ or ""):
        missing.append("TCPStore(master_listen_fd=...)")
    if missing:
        raise EndpointError(
            f"commdsl run needs torch 2.4 or later (this is torch {torch.__version__}): it lacks "
            f"{', '.join(missing)}; under torchrun, `commdsl run` without --nproc uses "
            "torchrun's store"
        )


def store_options(version=None) -> dict:
    """Keyword arguments for the store server on a handed-over socket: torch's older backend below
    LIBUV_LISTEN_FD, whose libuv backend did not serve such a socket."""
    import torch

    version = torch.__version__ if version is None else version
    release = tuple(int(x) for x in str(version).split("+")[0].split(".")[:2] if x.isdigit())
    return {"use_libuv": False} if release < LIBUV_LISTEN_FD else {}


def _server(sock: socket.socket, timeout: timedelta):
    """A TCPStore server on `sock` (which it then owns)."""
    import torch.distributed as dist

    host, port = sock.getsockname()[:2]
    fd = sock.detach()
    try:
        return dist.TCPStore(
            host, port, None, True, timeout, wait_for_workers=False, master_listen_fd=fd, **store_options()
        ), fd
    except BaseException:
        os.close(fd)
        raise


def _client(endpoint: Endpoint, timeout: timedelta):
    import torch.distributed as dist

    try:
        return dist.TCPStore(endpoint.host, endpoint.port, None, False, timeout)
    except (RuntimeError, ValueError) as e:
        raise EndpointError(
            f"--rdzv-endpoint {endpoint}: no rendezvous store answered there within "
            f"{timeout.total_seconds():g} s ({str(e).splitlines()[0]})"
        ) from None


@dataclass
class Joined:
    """This node's place in the job, and the store every agent and worker of the job uses."""

    store: object  # torch.distributed.TCPStore
    host: str  # the address workers connect to (MASTER_ADDR)
    port: int
    node_rank: int
    hosting: bool
    listen_fd: int | None = None  # the store's listening socket, which forked workers inherit and close


def join(
    endpoint: Endpoint,
    run_id: str,
    nnodes: int,
    node_rank: int | None,
    timeout_s: float,
    sock: socket.socket | None = None,
) -> Joined:
    """Host or reach the job's store and claim a node slot; wait until all `nnodes` nodes have.

    `node_rank` None: ranks go by arrival and the node whose machine has the endpoint's address hosts
    (`--rdzv-backend c10d`); a number: that node rank, and node 0 hosts (`static`). `sock`: already bound
    (a one-node run binds before any work, so a taken port is refused at once)."""
    timeout = timedelta(seconds=timeout_s)
    if sock is None and node_rank in (None, 0):
        try:
            sock = listen(endpoint)
        except EndpointError:  # the port is taken: static node 0 must host; under c10d, maybe a node of this job
            if node_rank == 0 or nnodes == 1:
                raise
        except OSError as e:
            if node_rank == 0 or e.errno != errno.EADDRNOTAVAIL:
                raise EndpointError(f"--rdzv-endpoint {endpoint}: cannot listen there ({e.strerror or e})") from None
            # not an address of this machine: another node hosts the store
    hosting, listen_fd = sock is not None, None
    if sock is not None:
        host, port = sock.getsockname()[:2]
        store, listen_fd = _server(sock, timeout)
        store.set(_PREFIX + "job", run_id)
    else:
        host, port = endpoint.host, endpoint.port
        store = _client(endpoint, timeout)
        try:
            store.wait([_PREFIX + "job"], timeout)
        except Exception:  # noqa: BLE001 - a store that is not a commdsl job's
            raise EndpointError(f"--rdzv-endpoint {endpoint}: the store there serves no commdsl job") from None
        other = store.get(_PREFIX + "job").decode("utf-8", "replace")
        if other != run_id:
            raise EndpointError(
                f"--rdzv-endpoint {endpoint}: the store there serves job {other!r}, not "
                f"{run_id!r}; every job needs its own endpoint"
            )
    job = f"{_PREFIX}{run_id}/"
    arrived = store.add(job + "nodes", 1)
    if arrived > nnodes:
        raise EndpointError(
            f"--rdzv-endpoint {endpoint}: job {run_id!r} already has its {nnodes} node"
            f"{'s' * (nnodes != 1)}; start a new job with a new --rdzv-id"
        )
    rank = arrived - 1 if node_rank is None else node_rank
    if node_rank is not None and store.add(f"{job}node/{node_rank}", 1) != 1:
        raise EndpointError(f"--rdzv-endpoint {endpoint}: node rank {node_rank} of job {run_id!r} has joined already")
    if arrived == nnodes:
        store.set(job + "complete", "1")
    try:
        store.wait([job + "complete"], timeout)
    except Exception:  # noqa: BLE001 - torch raises its own DistStoreError on timeout
        seen = store.add(job + "nodes", 0)
        raise EndpointError(
            f"--rdzv-endpoint {endpoint}: {seen} of {nnodes} nodes joined job {run_id!r} within {timeout_s:g} s"
        ) from None
    return Joined(store=store, host=host, port=port, node_rank=rank, hosting=hosting, listen_fd=listen_fd)


def handler_for(joined: Joined, run_id: str, nnodes: int):
    """A torch RendezvousHandler that hands the agent what `join` settled."""
    return _handler_class()(joined, run_id, nnodes)


@functools.lru_cache(maxsize=1)
def _handler_class():
    """The handler class, made once (torch is imported only when a run starts). One class for the whole
    process matters: a class made per run would hold its run's store in a reference cycle, and a forked
    worker's garbage collector could then destroy the launcher's store server inside the worker."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo, RendezvousStoreInfo

    class Settled(RendezvousHandler):
        def __init__(self, joined: Joined, run_id: str, nnodes: int):
            self._joined, self._run_id, self._nnodes, self._closed = joined, run_id, nnodes, False
            self._round = 0  # one per start of the workers (`--max-restarts`): each gets keys of its own

        def get_backend(self) -> str:
            return BACKEND

        @property
        def use_agent_store(self) -> bool:  # workers are the store's clients (TORCHELASTIC_USE_AGENT_STORE)
            return True

        def next_rendezvous(self):
            j = self._joined
            self._round += 1
            store = dist.PrefixStore(f"{_PREFIX}{self._run_id}/agents/{self._round}", j.store)
            return RendezvousInfo(store, j.node_rank, self._nnodes, RendezvousStoreInfo(j.host, j.port))

        def is_closed(self) -> bool:
            return self._closed

        def set_closed(self):
            self._closed = True

        def num_nodes_waiting(self) -> int:  # a job never grows: a late node is refused by `join`
            return 0

        def get_run_id(self) -> str:
            return self._run_id

        def shutdown(self) -> bool:
            return True

    return Settled


_SETTLED: dict[str, object] = {}


def _create(params):
    return _SETTLED.pop(params.run_id)


def register(run_id: str, handler) -> None:
    """Make `handler` what torch's agent gets for backend `commdsl` and this run id."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(BACKEND, _create)
    _SETTLED[run_id] = handler


def unregister(run_id: str) -> None:
    """Forget a run's handler if torch's agent never asked for it (the launch failed first)."""
    _SETTLED.pop(run_id, None)


def loopback_interface() -> str | None:
    """The name of the loopback interface (`lo` on Linux), for GLOO_SOCKET_IFNAME."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    for name in names:
        if name == "lo" or name.startswith("lo") and name[2:].isdigit():
            return name
    return None


def worker_store(rank: int, world: int, timeout: timedelta):
    """The store of one rank under mpirun or srun (MASTER_ADDR/MASTER_PORT, no agent): rank 0 hosts it
    bound to MASTER_ADDR's address only, the others connect. Under torchrun, its agent's store."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or rank != 0:
        store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=timeout))
        return store
    endpoint = Endpoint(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    return _server(listen(endpoint), timeout)[0]
