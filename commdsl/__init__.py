"""commdsl: describe, check, run and measure the communication patterns of distributed PyTorch.

The public API, one function per pipeline stage (torch is never imported here)::

    program = commdsl.load("programs/ring_allreduce.comm")     # parse + resolve
    schedule = commdsl.expand(program, world=4, params={"n": 16})
    findings = commdsl.check(program)                          # every declared world size
    result = commdsl.simulate(schedule)                        # expected tensors, expect verdicts
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

__all__ = ["parse", "load", "expand", "check", "simulate", "CommdslError"]


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
