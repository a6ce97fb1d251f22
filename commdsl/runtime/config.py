"""The one frozen description of a run that the CLI validates and the runtime consumes (never a Namespace)."""

from __future__ import annotations

from dataclasses import dataclass, field

SUMMARY_ABOVE = 1024
"""A tensor with more elements is summarised in `--report` (shape, dtype, checksum, its first and last
elements) unless every value was asked for (`--report-values`): a 64 M-element tensor once made a 1.2 GB file."""


@dataclass(frozen=True)
class RunConfig:
    path: str
    nproc: int | None  # None: this process is one rank started by torchrun, mpirun or srun
    backend: str = "auto"  # "auto", "gloo" or "nccl"
    params: dict[str, str] = field(default_factory=dict)
    timeout: float = 60.0  # hang guard, seconds per op
    report: str | None = None
    report_values: bool = False  # every element in --report, however large
    trace: str | None = None
    check: bool = True
    nnodes: int = 1
    node_rank: int = 0
    rdzv_backend: str = "c10d"
    rdzv_endpoint: str = "127.0.0.1:0"
    rdzv_id: str | None = None
    start_method: str | None = None
    log_dir: str | None = None
    verbose: bool = False
    max_restarts: int = 0  # torch's agent starts every worker again after a failure, up to this many times

    @property
    def world(self) -> int | None:
        return None if self.nproc is None else self.nproc * self.nnodes
