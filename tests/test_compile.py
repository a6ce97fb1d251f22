"""`commdsl compile --emit python`: one rank-parametric script per program, short and readable, that runs as
torchrun starts it to the simulator's results at a second world size (test_differential runs it under torchrun
itself at the first)."""

from __future__ import annotations

import ast
import builtins
import keyword
import os
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.emit.python import _HELPERS, SCRIPT_NAMES, emit_python
from commdsl.expand import Expander
from commdsl.resolve import load
from commdsl.source import SourceFile
from processes import TOKEN_VAR

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").glob("*.comm"))


def compile_to(tmp_path: Path, program: str, *extra: str, name: str = "out.py") -> tuple[int, str]:
    out = tmp_path / name
    code = main(["compile", program, "-o", str(out), *extra])
    return code, out.read_text() if out.exists() else ""


def run_script(script: Path, nproc: int, token: str, *args: str, env=None) -> subprocess.CompletedProcess:
    """The script at `nproc` ranks as torchrun starts it, each rank forked from one torch import
    (tests/forked_ranks.py: 3.5 s a launch here where torchrun takes 8). A run that has not ended after 90 s
    (these programs end in seconds) is stopped, its whole process group, and run once more with a warning:
    Gloo's connectFullMesh on a loaded machine now and then stalls every rank of a run in
    `init_process_group` (seen in CI, and by others: sehoffmann/dmlcloud#47), which says nothing about the
    script; a script that hangs hangs twice."""
    env = dict(os.environ, **{TOKEN_VAR: token}, **(env or {}))
    argv = [sys.executable, str(Path(__file__).with_name("forked_ranks.py")), str(nproc), str(script), *args]
    for limit in (90, 150):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=script.parent, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=limit)
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ranks: the session it leads
            proc.communicate()
            warnings.warn(f"{script.name} at {nproc} ranks did not end in {limit} s: ran again", stacklevel=2)
    raise AssertionError(f"{script.name} at {nproc} ranks did not end, twice")


def printed(stdout: str) -> dict[tuple[int, str], str]:
    """(rank, label) → the text after `label = ` of each `rank R: label = ...` line (a repr may span lines)."""
    out, key = {}, None
    for line in stdout.splitlines():
        m = re.match(r"rank (\d+): (.+?) = (.*)$", line)
        if m:
            key = (int(m.group(1)), m.group(2))
            out[key] = m.group(3)
        elif key is not None and not line.startswith(("rank ", "[", "W1", "*")):
            out[key] += "\n" + line
        else:
            key = None
    return out


# ---- every shipped program's script equals the simulator ---------------------------------------------------------


def _sizes(path: Path) -> list[int]:
    """Two world sizes the program declares, small ones (the machine has few cores), or its only one."""
    sizes = [w for w in load(SourceFile.read(path)).world_sizes() if w >= 2]
    return sizes[:2]


def _second_size(path: Path) -> list[int]:
    """The world size this file runs a program's script at: a declared one that test_differential's four legs
    do not (they run every shipped program's script at 2, or 4 where 2 is refused, with every tensor of every
    rank pinned by an `expect`); none when the program declares only that one. A launch costs 3-18 s here,
    so each (program, world) runs once in the suite."""
    program = load(SourceFile.read(path))
    covered = next(w for w in (2, 4) if program.accepts(w))
    return [w for w in _sizes(path) if w != covered][:1]


CASES = [(p, w) for p in PROGRAMS for w in _second_size(p)]


def _compiled(path: Path, world: int, tmp: Path) -> tuple[Path, list[str]]:
    """The program with a `print` of every tensor at its end, compiled and checked at the world size it runs
    at (the script is the same for every size; checking zero_bubble_pipeline's 2..64 took 25 s)."""
    program = load(SourceFile.read(path))
    names = [t.name for t in program.tensors]
    prog = tmp / path.name
    prog.write_text(path.read_text() + "\nprint " + ", ".join(names) + "\n")
    code, _ = compile_to(tmp, str(prog), "--world", str(world), name=path.stem + ".py")
    assert code == 0
    return tmp / (path.stem + ".py"), names


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("compiled")


@pytest.mark.gloo
@pytest.mark.timeout(300)
@pytest.mark.parametrize("path, world", CASES, ids=[f"{p.stem}-{w}" for p, w in CASES])
def test_every_programs_script_runs_to_the_simulators_tensors(path, world, module_tmp, capfd, no_orphans):
    from commdsl.expand import expand
    from commdsl.simulate import format_tensor, simulate

    script, names = _compiled(path, world, module_tmp)
    proc = run_script(script, world, no_orphans)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("every expect holds") == world
    got = printed(proc.stdout)
    sim = simulate(expand(load(SourceFile.read(path)), world))
    assert sim.ok
    for rank in range(world):
        for name in names:
            if sim.undefined[rank][name].any():  # a `reduce` left it undefined off the root
                continue
            spec = sim.schedule.tensors[rank][name]
            want = format_tensor(sim.tensors[rank][name].reshape(spec.shape), spec.dtype)
            assert got[(rank, name)] == want, (rank, name)


# ---- short, the same at every world size -----------------------------------------------------------------------------


def test_the_ring_is_one_short_script_whatever_the_world_size(tmp_path, capfd):
    prog = tmp_path / "ring.comm"
    prog.write_text((ROOT / "programs" / "ring_allreduce.comm").read_text().replace("world 1..16", "world [2, 4, 16, 1024]"))
    texts = set()
    for world in (2, 4, 16, 1024):
        code, text = compile_to(tmp_path, str(prog), "--world", str(world))
        assert code == 0
        texts.add(text)
    assert len(texts) == 1
    text = texts.pop()
    assert len(text.splitlines()) < 150
    assert "    for s in range(world - 1):  # reduce-scatter: chunk k accumulates around the ring" in text
    assert "        out = (rank - s) % world" in text
    assert "            dist.P2POp(dist.isend, x.tensor_split(world)[out], right),  # line 18" in text
    assert "    rank, world = dist.get_rank(), dist.get_world_size()" in text
    assert "    if world not in (2, 4, 16, 1024):" in text
    assert "commdsl" not in "\n".join(ln for ln in text.splitlines() if ln.startswith(("import", "from")))


def test_shipped_programs_compile_to_short_scripts(tmp_path, capfd):
    """A script is about as long as its program plus the template (imports, helpers, set-up: at most 120 lines),
    at any world size; docs/runtime.md lists the counts."""
    for path in PROGRAMS:
        code, text = compile_to(tmp_path, str(path), "--world", str(_sizes(path)[0]))
        assert code == 0 and len(text.splitlines()) <= len(path.read_text().splitlines()) + 120, path.name


# ---- run time: world, params, expects ------------------------------------------------------------------------------


@pytest.mark.gloo
@pytest.mark.timeout(300)
def test_world_and_params_are_read_at_run_time_and_checked(tmp_path, capfd, no_orphans):
    code, _ = compile_to(tmp_path, str(ROOT / "programs" / "ring_allreduce.comm"))
    assert code == 0
    proc = run_script(tmp_path / "out.py", 3, no_orphans, "--set", "n=10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("every expect holds") == 3
    assert "note: commdsl checked this program with {'n': 1024}, not these values" in proc.stderr
    proc = run_script(tmp_path / "out.py", 2, no_orphans, env={"PARAM_n": "x"})
    assert proc.returncode != 0 and "n=x: the params are n, each an integer, a number or true/false" in proc.stderr
    code, _ = compile_to(tmp_path, str(ROOT / "programs" / "p2p.comm"))
    proc = run_script(tmp_path / "out.py", 3, no_orphans)
    assert proc.returncode != 0 and "world size 3 is not one the program declares (2)" in proc.stderr


RING_OVERLAP = """\
world 4
tensor x: int64[4] = rank
tensor tmp: int64[3, 4]
for s in 1 .. 3:                         # three batches in flight, waited afterwards
    b[s] = batch:
        send x to (rank + s) % world tag s
        recv tmp[s - 1] from (rank - s) % world tag s
wait b[1]
wait all b
expect tmp == (rank - 1 - i // 4) % world
"""


BOUND_BATCHES = """\
world 2..4
tensor x: int64[4] = rank
tensor tmp: int64[4]
tensor y: int64[4]
b = batch:
    send x to (rank + 1) % world
    recv tmp from (rank - 1) % world
y = 5
wait b
c = batch:
    for s in 1 .. 1:
        send x to (rank + s) % world tag 3
        recv y from (rank - s) % world tag 3
h = isend x to (rank + 1) % world tag 4
recv tmp from (rank - 1) % world tag 4
wait c, h
expect y == (rank - 1) % world
"""


def test_bound_batches_without_wait_all_are_lists_of_works_waited_in_place():
    """Without `wait all` a batch bound to a handle is the list `dist.batch_isend_irecv` returns, waited
    where the program waits it, next to a plain request; and the script is only the intended statements."""
    for text in (BOUND_BATCHES, RING_OVERLAP):
        only_intended_statements(_script(text, "prog.comm"), "prog.comm", set())
    code = _script(BOUND_BATCHES, "prog.comm")
    assert "pending" not in code
    assert "    b = dist.batch_isend_irecv([  # line 5\n" in code
    assert "    y.fill_(5)\n    for work in b:  # line 9\n        work.wait()\n" in code
    assert "    c = dist.batch_isend_irecv(p2p_ops) if p2p_ops else []\n" in code
    assert "    for work in c:  # line 16\n        work.wait()\n    h.wait()\n" in code


@pytest.mark.gloo
@pytest.mark.timeout(300)
def test_batches_bound_to_handles_compile_to_lists_of_works(tmp_path, capfd, no_orphans):
    prog = tmp_path / "prog.comm"
    prog.write_text(RING_OVERLAP)
    code, text = compile_to(tmp_path, str(prog))
    assert code == 0
    assert "    b = {}  # an array of handles: slot → request\n" in text
    assert "        b[s] = post(dist.batch_isend_irecv([  # line 5\n" in text
    assert "    wait(b[1])  # line 8\n    wait(*b.values())  # line 9\n" in text
    proc = run_script(tmp_path / "out.py", 4, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every expect holds" in proc.stdout


HANDLES_IN_A_WHILE = """\
program handles_in_a_while
world 2
param n = 16

tensor x: float32[n] = rank + 1
tensor y: float32[n]

let k = 0
while k < 2:
    h[k] = isend x to 1 - rank
    r = irecv y from 1 - rank
    wait all
    k += 1

expect y == 2 - rank
"""


@pytest.mark.gloo
@pytest.mark.timeout(300)
def test_handles_bound_inside_a_while_loop_compile_and_run(tmp_path, capfd, no_orphans):
    """The handles a `while` body binds (an array `h[k]`, a plain `r`) and its `wait all` are the script's, as
    a `for` body's are: the script declared them only from the statements outside while loops, and `compile`
    stopped with an internal error (KeyError) on a program `run` ran."""
    prog = tmp_path / "prog.comm"
    prog.write_text(HANDLES_IN_A_WHILE)
    code, text = compile_to(tmp_path, str(prog))
    assert code == 0, capfd.readouterr().err
    assert "    h = {}  # an array of handles: slot → request\n" in text
    proc = run_script(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("every expect holds") == 2


@pytest.mark.gloo
@pytest.mark.timeout(300)
def test_failing_expect_makes_the_script_exit_1_naming_its_line(tmp_path, capfd, no_orphans):
    prog = tmp_path / "bad.comm"
    prog.write_text("program bad\nworld 2\ntensor x: int32[2] = rank\nall_reduce x\nexpect x == rank\n")
    code, _ = compile_to(tmp_path, str(prog))
    assert code == 1  # the simulator already knows: refused
    code, text = compile_to(tmp_path, str(prog), "--no-check")
    assert code == 0 and "`commdsl compile --no-check` wrote it" in text
    proc = run_script(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode != 0
    assert "rank 0: expect at line 5 failed: element 0: got 1, expected == 0" in proc.stdout
    assert "1 expect(s) failed" in proc.stdout


TRICKY = """\
program tricky
world [2, 3]
param n = 6
param half = n / 4                                 # 1.5: the language's `/` is exact only when it divides
tensor x: float32[n] = i - 2
tensor y: int64[n] = (rank - 3) % world - 7 // 2
tensor z: float32[n]
tensor b: bool[n] = i % 2 == 0
tensor q: int32[n] = 5
tensor r: int64[n]
tensor u: float32[world + (world + rank % 2) // 2]    # 1 row per peer, 2 per peer of the other parity
tensor v: float32[world + (world + rank % 2) // 2]
group low = [0, 1]
group odd = split by rank % 2
let k = 2
on rank == 0:
    let k = 5                                      # shadows the outer `k` in this block only
    z = k
else:
    z = -k ** 2 + 2 ** -1 + half
expect z == (rank == 0) * 5 + (rank != 0) * (-4 + 0.5 + 1.5)
let w = k * 10                                     # the outer `k` again
z = w + min(x, 1) - max(i, 3) + abs(x)
q += 0.75                                          # computed in float, stored truncated
q += 2                                             # in place: an integer literal into an integer tensor
z += half                                          # in place: a number into a float tensor
x[0:2] -= rank / 4
x[1:3] = x[0:2]                                    # overlapping views
y = y * (b + 1)
batch:
    for d in 1 .. world - 1:
        on d % 2 == 1:
            send x to (rank + d) % world tag d
            recv z from (rank - d + world) % world tag d
h = isend y to (rank + 1) % world
irecv r from (rank - 1 + world) % world
wait all
on rank < 2:
    all_reduce q op max in low
all_reduce x in odd
let bit = 1                                        # a `while` carrying a reassigned `let`
while bit < world and rank & bit == 0:
    bit <<= 1
k ^= bit
u = i + 10 * rank                                  # uneven all_to_all, its splits computed by expressions
all_to_all u into v splits [1 + (rank ^ j) % 2 for j in 0 .. world - 1], [1 + (j ^ rank) % 2 for j in 0 .. world - 1]
v[0:1] += k
print x, y, z, b, r, q[0:x.rows // 2], x[x.size - 1], v
"""


@pytest.mark.gloo
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_integer_semantics_scopes_and_views_match_the_simulator(tmp_path, capfd, no_orphans, world):
    import torch

    from commdsl.expand import expand
    from commdsl.simulate import simulate

    prog = tmp_path / "tricky.comm"
    prog.write_text(TRICKY)
    code, text = compile_to(tmp_path, str(prog))
    assert code == 0, capfd.readouterr()
    assert "    k_ = 5  # shadows the outer `k` in this block only" in text
    assert "    q.copy_(q + 0.75)  # computed in float, stored truncated" in text
    assert "    q += 2  # in place: an integer literal into an integer tensor" in text
    assert "    x[0:2].sub_(div(rank, 4))" in text
    proc = run_script(tmp_path / "out.py", world, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = printed(proc.stdout)
    program = load(SourceFile(str(prog), TRICKY))
    sim = simulate(expand(program, world))
    for rank, ops in enumerate(sim.prints):
        for op, arrays in ops:
            for label, values, view in zip(op.texts, arrays, op.views, strict=True):
                dtype = sim.schedule.tensors[rank][view.tensor].dtype
                want = torch.from_numpy(np.array(values)).reshape(view.shape).to(getattr(torch, dtype))
                assert got[(rank, label)] == repr(want), label  # as the runtime prints it (0-d views too)


# ---- expressions mean what the checker's evaluator says ------------------------------------------------------------

STATIC = [
    "(rank - 3) % world", "-7 // 2", "7 / 2", "6 / 3", "-6 / 4", "2 ** -1", "-2 ** 2", "(-2) ** 2", "2 ** 3 ** 2",
    "rank - world - 1", "rank - (world - 1)", "min(rank, 1) + max(world, 2) * abs(rank - 5)",
    "not rank == 0 or world > 2 and rank < 1", "(rank < 1) + (rank < 2)", "true + true", "world / 2 / 2",
    "10 % -3", "-10 % 3", "7.5 // 2", "2 ** 62 * 4 - 1", "(rank == 0) == (world == 3)",
    "rank ^ 1 << 1", "rank | 4 & 6 ^ 1", "(rank | 4) & 6", "1 << rank + 1", "12 >> rank - 1 + 1", "rank & 1 == 0",
    "log2(4) + log2(1 << rank)", "-5 >> 1", "rank ^ world | rank & world",
]  # fmt: skip


def _value_in_script(expr: str, rank: int, world: int):
    """What the script computes for a per-rank expression `expr` (the emitted text, with its helpers)."""
    program = load(SourceFile("e.comm", f"world 3\ntensor t: float32[1]\nlet v = {expr}\nall_reduce t\n"))
    text = emit_python(program, "gloo", "out.py")
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("v = "))
    scope = {"rank": rank, "world": world}
    for name in ("div", "log2"):
        exec(_HELPERS[name], scope)  # noqa: S102 - the test runs the script's own helper
    return eval(line[4:].split("  #")[0], scope)  # noqa: S307


@pytest.mark.parametrize("expr", STATIC)
def test_static_expressions_compute_what_the_checker_computes(expr):
    program = load(SourceFile("e.comm", f"world 3\nlet v = {expr}\n"))
    ex = Expander(program, 3, {})
    for rank in range(3):
        want = ex.value(program.body[0].value, np.array([rank]), {"rank": np.array([rank]), "world": 3})
        want = want.tolist()[0] if isinstance(want, np.ndarray) else want
        got = _value_in_script(expr, rank, 3)
        assert got == want and type(got) is type(want), (expr, rank, got, want)


def test_deadlock_is_not_compiled(tmp_path, capfd):
    code, text = compile_to(tmp_path, str(ROOT / "programs" / "bad" / "head_to_head_send.comm"))
    assert code == 1 and text == ""
    assert "error[D402]" in capfd.readouterr().out


# ---- nothing from the input becomes code (issue 14) ----------------------------------------------------------------

HOSTILE_PROGRAM = """\
program {prog}
world 2
param {p} = {num}
tensor {a}: float32[4] = {num}
tensor {b}: float32[4] = rank + i * {num}
tensor {c}: int64[2] = 9223372036854775807
tensor {d}: float32[4] = rand(3)
group {g} = split by rank
let {l} = 1 - rank
{h} = isend {a} to {l}
recv {b} from 1 - rank
wait {h}
{b}[0:2] += {a}[2:4]
all_reduce {d} op max in {g}
scatter {d} into {b}[0:2] from 0
print {a}, {b}[1:3]
expect {c} == 9223372036854775807
"""
IMPORTS = {("import", "argparse", None), ("import", "os", None), ("import", "re", None), ("import", "sys", None),
           ("import", "torch", None), ("import", "torch.distributed", "dist"), ("import", "numpy", "np"),
           ("from", "torch.distributed.device_mesh", "init_device_mesh")}
CONSTANTS = {"BACKEND", "PARAMS", "SET_HELP", "CHECKED", "TOLERANCE", "pending", "reduce_scatter_single"}
# what `main` may name besides the program's own names
MAIN_NAMES = {"torch", "dist", "np", "sys", "args", "arguments", "rank", "world", "printed", "failures", "work",
              "p2p_ops", "text", "verdict", "say", "fmt", "expect", "div", "power", "index_of", "minimum", "maximum",
              "random_values", "split", "post", "wait", "pending", "init_device_mesh", "BACKEND", "CHECKED", "len",
              "list", "min", "max", "abs", "range", "float", "print", "reduce_scatter_single", "_"}
MAIN_STRINGS = {"==", "!=", "<", "<=", ">", ">=", "inf", "-inf", "nan", "cpu", "every expect holds", "rank ", ": ",
                "world size ", " expect(s) failed", "note: commdsl checked this program with ", ", not these values"}
TEMPLATE_TARGETS = {"args", "rank", "world", "printed", "failures", "_", "work", "text", "verdict", "p2p_ops"}
RESERVED = MAIN_NAMES | SCRIPT_NAMES | set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins))


def _script(text: str, path: str, script: str = "out.py") -> str:
    return emit_python(load(SourceFile(path, text)), "gloo", script)


def only_intended_statements(code: str, path: str, strings: set[str]) -> None:
    """The script is the template and the program's torch calls, nothing else: the docstring holds the file name
    as text, imports and helpers are the emitter's own, constants are the template's, every name `main` binds
    for the program is free (no keyword, builtin or name of the script's), and every name and string inside
    `main` is one the emitter writes (`strings`: the program's print labels and param names)."""
    tree = ast.parse(code)
    assert path in ast.get_docstring(tree, clean=False)  # clean=True would expand tabs
    helpers: dict[str, set] = {}  # a helper may come in variants (`wait` for lists of works too)
    for f in (f for h in _HELPERS.values() for f in ast.parse(h).body):
        helpers.setdefault(f.name, set()).add(ast.dump(f))
    for node in tree.body[1:]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if isinstance(node, ast.Import):
                    assert ("import", alias.name, alias.asname) in IMPORTS
                else:
                    assert ("from", node.module, alias.name) in IMPORTS and alias.asname is None
        elif isinstance(node, ast.Assign):
            assert all(isinstance(t, ast.Name) and t.id in CONSTANTS for t in node.targets)
            for c in ast.walk(node.value):
                assert not isinstance(c, ast.Call) or ast.unparse(c.func) in ("getattr", "float"), ast.unparse(c)
        elif isinstance(node, ast.FunctionDef) and node.name == "main":
            _main_function(node, strings)
        elif isinstance(node, ast.FunctionDef) and node.name != "say":
            assert ast.dump(node) in helpers[node.name]
        elif isinstance(node, ast.FunctionDef):
            assert "sys.stdout.write" in ast.unparse(node) and len(node.body) == 3
        elif isinstance(node, ast.If):
            assert ast.unparse(node) == "if __name__ == '__main__':\n    main()"
        else:
            raise AssertionError(f"unexpected statement: {ast.unparse(node)[:200]}")


def _main_function(fn: ast.FunctionDef, strings: set[str]) -> None:
    bound = {t.id for node in ast.walk(fn) if isinstance(node, (ast.Assign, ast.For))
             for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
             for t in ast.walk(target) if isinstance(t, ast.Name)} - TEMPLATE_TARGETS
    assert not bound & RESERVED, bound & RESERVED
    in_fstrings = {id(c) for node in ast.walk(fn) if isinstance(node, ast.JoinedStr) for c in node.values}
    for node in (x for stmt in fn.body for x in ast.walk(stmt)):
        assert not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Global,
                                     ast.Nonlocal, ast.Delete, ast.Try, ast.While, ast.With))
        if isinstance(node, ast.Lambda):  # a split's key
            assert [a.arg for a in node.args.args] == ["rank"]
        if isinstance(node, ast.Name):
            assert node.id in bound | MAIN_NAMES, node.id
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            declares = id(node) in in_fstrings and re.fullmatch(r" is not one the program declares \([0-9., ]+\)",
                                                                 node.value)
            assert node.value in MAIN_STRINGS | strings or declares, node.value
        if isinstance(node, ast.Attribute):
            assert not node.attr.startswith("_") or node.attr == "_make_nccl_premul_sum", node.attr


SCRIPT_WORDS = sorted(SCRIPT_NAMES | MAIN_NAMES | {"r0", "torch_", "def_", "print_", "printed_", "k_"})
PY_WORDS = sorted(set(keyword.kwlist) | set(keyword.softkwlist) | {"range", "float", "abs", "len", "print", "exec"})
names = st.one_of(st.sampled_from(SCRIPT_WORDS + PY_WORDS), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True))
paths = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=()), min_size=1, max_size=40),
    st.lists(st.sampled_from(['"""', "'''", "\\", "\n", "\r", "\u2028", "\x85", "\x0c", "#", "{x}", "\udcff", "é",
                              "import os", ";", "x.comm"]), min_size=1, max_size=8).map("".join))
numbers = st.sampled_from(["1e309", "1", "0.5", "9223372036854775807", "1e-320", "123456789.0e300",
                           "99999999999999999999999999999999"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(prog=names, user=st.lists(names, min_size=8, max_size=8, unique=True), path=paths, num=numbers)
@example(prog="BACKEND", user=["for", "printed", "e", "BACKEND", "rank_", "args", "lambda", "match"], path="\t",
         num="1e309")  # a tab in the file name: the docstring keeps it verbatim
def test_hostile_names_paths_and_numbers_give_only_the_intended_statements(prog, user, path, num):
    a, b, c, d, g, h, l, p = user
    text = HOSTILE_PROGRAM.format(prog=prog, a=a, b=b, c=c, d=d, g=g, h=h, l=l, p=p, num=num)
    try:
        code = _script(text, path)
    except CommdslError:  # a name the language itself reserves (`send`, `rank`, ...): not this test's subject
        assume(False)
    only_intended_statements(code, path, {f"{a} = ", f"{b}[1:3] = ", p})


def test_a_file_name_with_triple_quotes_stays_in_the_docstring(tmp_path, capsys):
    path = tmp_path / 'x"""; import os; os.system("echo PWNED"); """.comm'
    path.write_text((ROOT / "programs" / "allreduce.comm").read_text())
    out = tmp_path / "out.py"
    assert main(["compile", str(path), "-o", str(out)]) == 0
    code = out.read_text()
    only_intended_statements(code, str(path), {"x = "})
    assert "system" not in "".join(ast.unparse(n) for n in ast.parse(code).body[1:])


def test_comments_are_carried_as_comments_whatever_they_hold():
    text = 'world 2\ntensor x: float32[1]  # """ \\ \' \x85 end\nall_reduce x  # ok\n'
    code = _script(text, "c.comm")
    ast.parse(code)
    assert "x = torch.zeros(1, dtype=torch.float32)  # \"\"\" \\ ' \\x85 end" in code
    assert "dist.all_reduce(x, dist.ReduceOp.SUM)  # line 3: ok" in code


def test_numbers_that_python_cannot_write_literally():
    code = _script(HOSTILE_PROGRAM.format(prog="p", a="a", b="b", c="c", d="d", g="g", h="h", l="l", p="p",
                                          num="1e309"), "p.comm")
    assert 'torch.full((4,), float("inf"), dtype=torch.float32)' in code
    assert " inf," not in code


@pytest.mark.gloo
@pytest.mark.timeout(300)
def test_a_script_whose_names_are_its_own_names_runs(tmp_path, capfd, no_orphans):
    prog = tmp_path / "names.comm"
    prog.write_text("program torch\nworld 2\nparam args = 2\ntensor torch: float32[2] = rank + 1\n"
                    "tensor printed: float32[2]\ntensor def: float32[4] = i\ntensor range: float32[2] = 0\n"
                    "tensor dist: float32[2]\ngroup split = [0, 1]\nlet world_ = args\n"
                    "h = isend torch to 1 - rank\nrecv printed from 1 - rank\nwait h\nrange = printed + torch\n"
                    "scatter def into dist from 0 in split\nfor k in 0 .. 3:\n    let k_ = k\n    range += 1\n"
                    "expect range == 7\nexpect dist == i + 2 * rank + world_ - args\nprint def, range\n")
    code, text = compile_to(tmp_path, str(prog))
    assert code == 0, capfd.readouterr()
    only_intended_statements(text, str(prog), {"def = ", "range = ", "args"})
    assert "torch_ = torch.full((2,), rank + 1, dtype=torch.float32)" in text and "args_ = args.get(" in text
    proc = run_script(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every expect holds" in proc.stdout and "rank 0: def = tensor([0., 1., 2., 3.])" in proc.stdout


def test_a_new_group_step_is_dist_new_group_where_the_program_makes_it(tmp_path, capfd):
    code, text = compile_to(tmp_path, str(ROOT / "programs" / "new_groups.comm"))
    assert code == 0
    assert "    leaders = dist.new_group([0, half])  # line 11" in text
    assert "    for h in range(2):" in text
    assert "        g = dist.new_group([h * half + j for j in range(half)])  # line 26" in text
    assert text.index("leaders = dist.new_group") < text.index("dist.all_reduce(x, dist.ReduceOp.SUM, group=low)")


def test_a_wait_in_a_branch_no_rank_takes_compiles():
    """Found by the fuzzer: `wait x` where no rank binds `x` (its branch runs on no rank) is a valid program;
    the script names the handle there too, and the branch never runs."""
    program = load(SourceFile("w.comm", "world 2\non not 4 and not 1:\n    wait x, x\n"))
    text = emit_python(program, "gloo", "out.py")
    ast.parse(text)
    assert "        x.wait()  # line 3" in text
