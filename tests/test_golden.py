"""Golden verdicts: every shipped program's `lint --format json`, and its simulated tensors.

Pinned before the checker became one engine (issue 11), so a change to what any program means shows
up here as a diff: `pytest tests/test_golden.py --bless` rewrites the files under tests/golden/, and
the commit that does so names the fix that moved the verdict.

* `lint/<stem>.json`: `commdsl lint FILE --format json` at every declared world size (open ranges up
  to the default bound), for programs/ and programs/bad/.
* `sim/<stem>.json`: for programs/, the final tensors of every rank at each declared world size up to
  `SIM_MAX_WORLD`, with the elements a `reduce` left undefined as `null`.
* `predict/<stem>.json`: for programs/, `commdsl predict`'s times on a Gloo and an NCCL preset, or why it
  refused (pinned when predict took the checker's engine models: only four NCCL rows moved, to refusals).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.diagnostics.render import to_json
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.simulate import simulate
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
GOOD = sorted((ROOT / "programs").glob("*.comm"))
BAD = sorted((ROOT / "programs" / "bad").glob("*.comm"))
SIM_MAX_WORLD = 8


def _source(path: Path) -> SourceFile:
    return SourceFile(path.relative_to(ROOT).as_posix(), path.read_text())


def _compare(golden: Path, actual: str, bless: bool) -> None:
    if bless or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual)
    assert actual == golden.read_text(), f"{golden.relative_to(ROOT)} moved: run `pytest --bless` and review the diff"


def lint_json(path: Path) -> str:
    source = _source(path)
    diags = check_program(load(source), CheckOptions(lints=True))
    return json.dumps([to_json(d, {source.path: source}) for d in diags], indent=1) + "\n"


@pytest.mark.parametrize("path", GOOD + BAD, ids=lambda p: p.relative_to(ROOT / "programs").as_posix())
def test_lint_verdict_is_pinned(path: Path, bless: bool):
    """Also: a shipped program has no errors at any world size it declares (what `commdsl check programs/*.comm`
    says; test_cli runs that command on a few)."""
    name = path.stem if path.parent.name == "programs" else f"bad-{path.stem}"
    verdict = lint_json(path)
    _compare(GOLDEN / "lint" / f"{name}.json", verdict, bless)
    if path in GOOD:
        assert [d["code"] for d in json.loads(verdict) if d["severity"] == "error"] == []


def _values(values: np.ndarray, undefined: np.ndarray) -> list:
    flat = [None if u else (v.item() if not isinstance(v.item(), float) or np.isfinite(v) else repr(v.item()))
            for v, u in zip(values.reshape(-1), undefined.reshape(-1))]
    return flat


def sim_json(path: Path) -> str:
    program = load(_source(path))
    out = {}
    for world in program.world_sizes():
        if world > SIM_MAX_WORLD:
            break
        result = simulate(expand(program, world))
        out[str(world)] = {
            "completed": result.engine.completed,
            "expects": sorted([e.op.span.line, e.rank, e.ok] for e in result.expects),
            "tensors": [{name: _values(arr, result.undefined[r][name]) for name, arr in result.tensors[r].items()}
                        for r in range(world)],
        }
    return json.dumps(out, separators=(",", ":")) + "\n"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_simulated_tensors_are_pinned(path: Path, bless: bool):
    _compare(GOLDEN / "sim" / f"{path.stem}.json", sim_json(path), bless)


GENERATED = 400


def generated_verdicts() -> str:
    """Codes with their lines, and where each rank stopped, for the differential harness's programs."""
    import random

    from differential import generate

    from commdsl.engine import run_engine

    rng = random.Random(20261123)
    lines = []
    for k in range(GENERATED):
        world, text = generate(rng)
        program = load(SourceFile("gen.comm", text))
        diags = check_program(program, CheckOptions(worlds=(world,), lints=True))
        result = run_engine(expand(program, world))
        stuck = {r: result.schedule.records[result.head(r)[0]].span.line for r in result.stalled.tolist()}
        found = sorted({(d.code, d.span.line if d.span else 0) for d in diags})
        lines.append(json.dumps({"k": k, "world": world, "codes": found, "stuck": stuck}))
    return "\n".join(lines) + "\n"


def test_generated_program_verdicts_are_pinned(bless: bool):
    _compare(GOLDEN / "generated.jsonl", generated_verdicts(), bless)


SPMD = 600


def spmd_verdicts() -> str:
    import random

    from spmd_programs import generate
    from spmd_verdicts import verdict

    rng = random.Random(20261123)
    return "".join(json.dumps({"k": k, "world": w, **verdict(w, text)}) + "\n"
                   for k, (w, text) in enumerate(generate(rng) for _ in range(SPMD)))


def test_spmd_program_verdicts_are_pinned(bless: bool):
    """600 generated SPMD programs (tests/spmd_programs.py): findings and a digest of the final tensors."""
    _compare(GOLDEN / "spmd.jsonl", spmd_verdicts(), bless)


PREDICT_TOPOLOGIES = ("localhost-gloo", "dgx-h100")
PREDICT_SIZES = [64 << 10, 1 << 20, 16 << 20]
SIZE_PARAMS = {  # the param that sets the message size where it is not `n` (the others set loop counts too)
    "fsdp_step": "shard",
    "hsdp_step": "shard",
    "interleaved_1f1b": "width",
    "moe_all_to_all": "hidden",
    "moe_dispatch": "hidden",
    "pipeline_1f1b": "width",
    "ring_attention": "block",
    "ulysses_attention": "dim",
    "zero_bubble_pipeline": "width",
}


def predict_json(path: Path) -> str:
    """`commdsl predict`'s rows (times to the bit), or why it refused, on a Gloo and an NCCL preset at the
    program's smallest world size of at least 4 (else its largest)."""
    from commdsl.bench.identify import BenchError
    from commdsl.bench.plan import Refused
    from commdsl.predict import sweep, variant_for
    from commdsl.predict.topology import load as load_topology

    program = load(_source(path))
    worlds = program.world_sizes(8)
    world = next((w for w in worlds if w >= 4), worlds[-1])
    param = SIZE_PARAMS.get(path.stem, "n")
    out: dict[str, object] = {"world": world, "param": param}
    for name in PREDICT_TOPOLOGIES:
        topo, _ = load_topology(name)
        try:
            pred = sweep(variant_for(program, world, param, {}, None), world, PREDICT_SIZES, topo, paths=False)
            out[name] = [[r.size, r.time_us] for r in pred.rows]
        except BenchError as e:
            out[name] = f"BenchError: {e}"
        except Refused as e:  # the checker's errors, by code
            out[name] = "Refused: " + ", ".join(sorted({d.code for d in e.diagnostics}))
    return json.dumps(out, indent=1) + "\n"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_predicted_rows_are_pinned(path: Path, bless: bool):
    """The cost model's answer for every shipped program (issue 17): a change to the model shows up here as
    a diff of times, and a program it newly refuses (or times) as a changed entry."""
    _compare(GOLDEN / "predict" / f"{path.stem}.json", predict_json(path), bless)
