"""commdsl: describe, check, run and measure the communication patterns of distributed PyTorch.

The public API, one function per pipeline stage (imported lazily: `import commdsl` loads neither the
checker nor torch until they are used)::

    program = commdsl.load("programs/ring_allreduce.comm")     # parse + resolve
    schedule = commdsl.expand(program, world=4, params={"n": 16})
    findings = commdsl.check(program)                          # every declared world size
    result = commdsl.simulate(schedule)                        # expected tensors, expect verdicts
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["parse", "load", "expand", "check", "simulate", "CommdslError"]


def parse(text: str, path: str = "<string>"):
    """Parse and resolve program text into a Program; raises CommdslError with diagnostics."""
    from commdsl.resolve import load as _load
    from commdsl.source import SourceFile

    return _load(SourceFile(path, text))


def load(path):
    """Read, parse and resolve a `.comm` file."""
    from commdsl.resolve import load as _load
    from commdsl.source import SourceFile

    return _load(SourceFile.read(path))


def expand(program, world: int, params=None):
    """The per-rank Schedule of `program` at `world` ranks."""
    from commdsl.expand import expand as _expand

    return _expand(program, world, params)


def check(program, worlds=None, backends=None, params=None, lints: bool = False):
    """Every finding at every declared (or given) world size, as Diagnostics."""
    from commdsl.checker import CheckOptions, check_program

    options = CheckOptions(worlds=tuple(worlds) if worlds else None, backends=tuple(backends) if backends else None,
                           params=dict(params or {}), lints=lints)
    return check_program(program, options)


def simulate(schedule):
    """Run a Schedule with data (Gloo semantics): final tensors, undefined masks, expect verdicts."""
    from commdsl.simulate import simulate as _simulate

    return _simulate(schedule)


def __getattr__(name: str):
    if name == "CommdslError":
        from commdsl.diagnostics import CommdslError

        return CommdslError
    raise AttributeError(name)
