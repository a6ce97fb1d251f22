"""Who am I in the job? Rank, world size and local rank from whichever launcher started this process.

Launchers describe a process in their own variables: torchrun sets RANK/WORLD_SIZE/LOCAL_RANK, Open MPI's
mpirun OMPI_COMM_WORLD_*, MPICH/Intel MPI PMI_RANK/PMI_SIZE, srun SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID.
The tutorials copy one set over the other, so a stale `RANK=0` exported in a job script silently makes
every process rank 0 and the job hangs. Here every set that is present must agree, or the run stops
with a message naming both — with two deliberate exceptions where nesting is normal:

* under torchrun (TORCHELASTIC_RUN_ID is set) torch's variables describe this worker, while any MPI or
  SLURM variables describe the agent that torchrun runs as (one task per node);
* mpirun inside a SLURM allocation: its ranks inherit the allocation's SLURM variables, so MPI wins.

This module reads `os.environ` only when asked and never imports torch, so `check` stays torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


class EnvError(Exception):
    """The environment does not describe one consistent process (a user error, exit 2)."""


@dataclass(frozen=True)
class Placement:
    """This process's place in the job, and where the job's TCP store lives."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    master_addr: str
    master_port: int
    source: str  # the launcher the values came from, e.g. "torchrun", "mpirun", "srun"


@dataclass(frozen=True)
class _Found:
    source: str
    names: tuple[str, str, str]  # the variables holding rank, world, local rank
    rank: int
    world: int
    local_rank: int | None
    local_world: int | None


_FIELDS = ("names", "rank", "world", "local_rank", "local_world")
_SETS = (
    # (source, rank var, world var, local rank var, local world var)
    ("environment", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    (
        "mpirun",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("mpiexec (PMI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None),
)


def _int(env: Mapping[str, str], name: str | None) -> int | None:
    if name is None or name not in env:
        return None
    text = env[name].strip()
    try:
        value = int(text)
    except ValueError:
        raise EnvError(f"{name}={env[name]!r} is not an integer") from None
    if value < 0:
        raise EnvError(f"{name}={value} is negative")
    return value


def _found(env: Mapping[str, str]) -> list[_Found]:
    out = []
    for source, r, w, lr, lw in _SETS:
        rank, world = _int(env, r), _int(env, w)
        if rank is None and world is None:
            continue
        if rank is None or world is None:
            missing = r if rank is None else w
            raise EnvError(f"{w if rank is None else r} is set but {missing} is not")
        if rank >= world:
            raise EnvError(f"{r}={rank} is not below {w}={world}")
        out.append(_Found(source, (r, w, lr or ""), rank, world, _int(env, lr), _int(env, lw)))
    return out


def launched_as_rank(env: Mapping[str, str]) -> bool:
    """Whether a launcher's variables say this process is one rank of a job (torchrun, mpirun, srun or a
    hand-set RANK/WORLD_SIZE)."""
    return "TORCHELASTIC_RUN_ID" in env or any(w in env for _, _, w, _, _ in _SETS)


def placement(env: Mapping[str, str] | None = None) -> Placement:
    """This process's rank and world from the launcher's variables; EnvError when they disagree."""
    env = os.environ if env is None else env
    found = _found(env)
    if not found:
        raise EnvError(
            "no launcher variables found (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID); "
            "run with `--nproc N`, or start one process per rank with torchrun, mpirun or srun"
        )
    by_source = {f.source: f for f in found}
    env_set = by_source.get("environment")
    if "TORCHELASTIC_RUN_ID" in env and env_set is not None:
        chosen, others = _Found("torchrun", *[getattr(env_set, k) for k in _FIELDS]), []
    else:
        launchers = [f for f in found if f.source != "environment"]
        mpi = [f for f in launchers if f.source != "srun"]
        launchers = mpi or launchers  # mpirun inside a SLURM allocation: ranks inherit the allocation's SLURM_*
        if launchers:
            chosen, others = launchers[0], launchers[1:] + ([env_set] if env_set else [])
        else:
            chosen, others = env_set, []
    for other in others:
        for what, a, b, name_a, name_b in (
            ("rank", chosen.rank, other.rank, chosen.names[0], other.names[0]),
            ("world size", chosen.world, other.world, chosen.names[1], other.names[1]),
            ("local rank", chosen.local_rank, other.local_rank, chosen.names[2], other.names[2]),
        ):
            if a is not None and b is not None and a != b:
                raise EnvError(
                    f"the launchers disagree on this process's {what}: {name_b}={b} ({other.source}) but "
                    f"{name_a}={a} ({chosen.source}); a script probably exported one set over the other: "
                    + (f"unset {name_b}" if other.source == "environment" else "start the job with one launcher")
                )
    local_rank = chosen.local_rank
    if local_rank is None:
        local_rank = _int(env, "LOCAL_RANK")
    local_world = chosen.local_world if chosen.local_world is not None else _int(env, "LOCAL_WORLD_SIZE")
    if chosen.source == "srun" and local_world is None:
        local_world = _slurm_tasks_on_node(env)
    addr = env.get("MASTER_ADDR", "").strip()
    port = _int(env, "MASTER_PORT")
    if not addr or port is None:
        how = {
            "torchrun": "torchrun sets them itself",
            "mpirun": "export them to every rank, e.g. `mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500 ...`",
            "mpiexec (PMI)": "export them to every rank, e.g. `mpiexec -genv MASTER_ADDR host0 ...`",
            "srun": "export them before srun, e.g. MASTER_ADDR=$(scontrol show hostnames | head -n1)",
        }.get(chosen.source, "set them to the address and a free port of the rank-0 host")
        raise EnvError(f"MASTER_ADDR and MASTER_PORT must name the rank-0 host and a free port: {how}")
    if not 0 < port < 65536:
        raise EnvError(f"MASTER_PORT={port} is not a TCP port")
    return Placement(
        rank=chosen.rank,
        world=chosen.world,
        local_rank=local_rank if local_rank is not None else 0,
        local_world=local_world if local_world is not None else 1,
        master_addr=addr,
        master_port=port,
        source=chosen.source,
    )


def _slurm_tasks_on_node(env: Mapping[str, str]) -> int | None:
    """SLURM_TASKS_PER_NODE looks like `4(x2),3`; this node's count is the one for SLURM_NODEID."""
    text, node = env.get("SLURM_TASKS_PER_NODE"), _int(env, "SLURM_NODEID")
    if not text or node is None:
        return None
    counts: list[int] = []
    for part in text.split(","):
        count, _, rep = part.partition("(x")
        try:
            counts.extend([int(count)] * (int(rep.rstrip(")")) if rep else 1))
        except ValueError:
            return None
    return counts[node] if node < len(counts) else None


def visible_gpus() -> int:
    """GPUs this process could use, counted through NVML so CUDA is never initialised (fork stays safe)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    if not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def choose_backend(requested: str, local_ranks: int) -> str:
    """`auto` → nccl when every local rank can have its own GPU, else gloo; nccl is refused without them."""
    if requested == "gloo":
        return "gloo"
    gpus = visible_gpus()
    if requested == "auto":
        return "nccl" if gpus >= local_ranks > 0 else "gloo"
    if gpus == 0:
        raise EnvError("--backend nccl needs CUDA GPUs, and none is visible on this node")
    if gpus < local_ranks:
        raise EnvError(
            f"--backend nccl runs one rank per GPU, but this node has {local_ranks} ranks and "
            f"{gpus} visible GPU{'s' * (gpus != 1)}; lower --nproc or use --backend gloo"
        )
    return "nccl"
