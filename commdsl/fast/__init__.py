"""The fast path of `check`/`lint`: a vectorised expansion and engine that can only say "clean".

`proves_clean` answers True only when the precise pipeline (`expand` + `analyse_schedule`) would
report nothing at that world size; anything it does not model, or any doubt, answers False and
the caller runs the precise pipeline, which produces the real diagnostics. It never reports.
Built for scale (design.md §2): ring all-reduce at world 1024 has about 4 M ops.
"""

from __future__ import annotations

import numpy as np

from commdsl.diagnostics import CommdslError
from commdsl.expand import MAX_WORLD, resolve_params
from commdsl.fast.rounds import Machine
from commdsl.fast.spmd import Spmd
from commdsl.fast.values import Unknown
from commdsl.resolve import Program


def proves_clean(program: Program, world: int, params: dict, backends: tuple[str, ...], lints: bool,
                 with_data: bool, strict: bool = False) -> bool:
    """True if the program is proven free of every finding at `world` (with `lints` and `expect`s when
    asked); False means "unknown", never "wrong". An unexpected error inside the fast path also means
    "unknown" (it is only an optimisation), except with `strict`, which the tests use to see bugs."""
    if not program.accepts(world) or not 1 <= world <= MAX_WORLD:
        return False
    try:
        env = resolve_params(program, params)
        with np.errstate(all="raise"):
            spmd = Spmd(program, world, env, backends, lints)
            if "nccl" in backends and spmd.max_tag > 0:
                return False  # tags that NCCL ignores could reorder matches (P207)
            return Machine(spmd, with_data).run()
    except (Unknown, CommdslError, FloatingPointError, OverflowError, ZeroDivisionError):
        return False
    except Exception:
        if strict:
            raise
        return False
