"""The one frozen description of a sweep that `commdsl bench` validates and the bench consumes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchConfig:
    path: str | None  # the program to sweep; None with --collective
    collectives: tuple[str, ...]  # built-ins to sweep (--collective), in order
    nproc: int
    sizes: tuple[int, ...]  # bytes of the measured tensor
    iters: int = 20
    warmup: int = 5
    dtype: str | None = None  # None: the program's own (float32 for built-ins)
    op: str = "sum"
    root: int = 0
    param: str = "n"
    params: dict[str, str] = field(default_factory=dict)
    check: bool = False
    compare: str | None = None  # "builtin" or a second program's path
    backend: str = "auto"
    timeout: float = 60.0
    json: str | None = None
    csv: str | None = None
    plot: str | None = None
    min_busbw: float | None = None  # GB/s
    verbose: bool = False
