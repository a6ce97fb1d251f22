"""commdsl: describe, check, run and measure the communication patterns of distributed PyTorch.

The public API, one function per pipeline stage (torch is imported only by `run`), documented with
examples in docs/api.md::

    program = commdsl.load("programs/ring_allreduce.comm")     # parse + resolve
    schedule = commdsl.expand(program, world=4, params={"n": 16})
    findings = commdsl.check(program)                          # every declared world size
    result = commdsl.simulate(schedule)                        # expected tensors, expect verdicts
    script = commdsl.compile(program, world=4)                 # the torch.distributed script
    outcome = commdsl.run(program, nproc=4)                    # real processes, judged

`Program` has the same verbs as methods: `program.check()`, `.simulate(world)`, `.compile()`, `.run(nproc)`.
"""

from __future__ import annotations

__version__ = "0.1.0"

# Imported before the functions below are bound: a submodule import rebinds its package attribute,
# so `commdsl.expand` must be bound to the function only after `commdsl.expand` the module is loaded.
from commdsl.checker import CheckOptions, check_program  # noqa: E402
from commdsl.diagnostics import CommdslError  # noqa: E402
from commdsl.expand import expand  # noqa: E402
from commdsl.resolve import load as _load_source  # noqa: E402
from commdsl.simulate import simulate  # noqa: E402
from commdsl.source import SourceFile  # noqa: E402

__all__ = ["parse", "load", "expand", "check", "simulate", "compile", "run", "CommdslError"]


def parse(text: str, path: str = "<string>"):
    """Parse and resolve program text into a Program; raises CommdslError with diagnostics."""
    return _load_source(SourceFile(path, text))


def load(path):
    """Read, parse and resolve a `.comm` file."""
    return _load_source(SourceFile.read(path))


def check(program, worlds=None, backends=None, params=None, lints: bool = False):
    """Every finding at every declared (or given) world size, as Diagnostics."""
    options = CheckOptions(
        worlds=tuple(worlds) if worlds else None,
        backends=tuple(backends) if backends else None,
        params=dict(params or {}),
        lints=lints,
    )
    return check_program(program, options)


def compile(program, world: int | None = None, params=None, backend: str | None = None, check: bool = True) -> str:
    """The standalone torch.distributed script of `program` (what `commdsl compile` writes): one script for every
    world size it declares, which reads `rank`, `world` and the params at run time. CommdslError when the checks
    find errors (at `world`, else at every declared size) and `check` is set, or a param is wrong."""
    from commdsl.emit.python import emit_python

    backend = backend or program.backends[0]
    if check:
        worlds = (world,) if world else None
        found = check_program(program, CheckOptions(worlds=worlds, backends=(backend,), params=dict(params or {})))
        errors = [d for d in found if d.severity == "error"]
        if errors:
            raise CommdslError(errors)
    return emit_python(program, backend, "out.py", check, params)


def run(program, nproc: int, params=None, backend: str = "auto", timeout: float = 60.0, check: bool = True):
    """Run `program` on `nproc` local torch.distributed processes (what `commdsl run --nproc` does) and judge
    it: `.ok`, `.verdict` (expects, comparison with the simulator), `.failures`, `.hang`, `.tensors` (each
    rank's tensors as torch left them). CommdslError when the checks find errors (unless `check=False`);
    `commdsl.runtime.launch.LaunchError` when the workers cannot be started."""
    from commdsl.runtime.launch import run_program

    return run_program(program, nproc, params, backend, timeout, check)
