"""The verdict of one generated SPMD program, as pinned in tests/golden/spmd.jsonl.

`lint` findings (code, line, message) at the program's world size, and a digest of every rank's final
tensors when the simulation completes. Kept free of anything but the public API, so the same function
computed the golden file on the pipeline that came before the one-engine checker.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

import commdsl
from commdsl.diagnostics import CommdslError


def verdict(world: int, text: str) -> dict:
    try:
        program = commdsl.parse(text, "gen.comm")
    except CommdslError as e:
        return {"parse": sorted({(d.code, d.span.line if d.span else 0) for d in e.diagnostics})}
    found = commdsl.check(program, worlds=[world], lints=True)
    out: dict = {"codes": sorted({(d.code, d.span.line if d.span else 0, d.message) for d in found})}
    try:
        schedule = commdsl.expand(program, world)
    except CommdslError:
        return out
    sim = commdsl.simulate(schedule)
    out["completed"] = bool(sim.engine.completed)
    if sim.engine.completed:
        digest = hashlib.sha256()
        for r in range(world):
            for name in sorted(sim.tensors[r]):
                values = np.asarray(sim.tensors[r][name], dtype=np.float64).reshape(-1)
                undefined = np.asarray(sim.undefined[r][name]).reshape(-1)
                values = np.where(undefined, np.nan, values)
                digest.update(name.encode() + values.tobytes())
        out["tensors"] = digest.hexdigest()[:16]
    return json.loads(json.dumps(out))
