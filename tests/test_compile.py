"""`commdsl compile --emit python`: the script is standalone, readable, and torchrun runs it to the same results."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commdsl.cli.main import main
from processes import TOKEN_VAR

ROOT = Path(__file__).resolve().parent.parent


def compile_to(tmp_path: Path, program: str, world: int, *extra: str) -> tuple[int, str]:
    out = tmp_path / "out.py"
    code = main(["compile", program, "--world", str(world), "-o", str(out), *extra])
    return code, out.read_text() if out.exists() else ""


def torchrun(script: Path, nproc: int, token: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{TOKEN_VAR: token})
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(nproc), str(script)], capture_output=True, text=True, env=env, timeout=150,
                          cwd=script.parent, start_new_session=True)


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_ring_allreduce_script_runs_under_torchrun(tmp_path, capfd, no_orphans):
    code, text = compile_to(tmp_path, str(ROOT / "programs" / "ring_allreduce.comm"), 4, "--set", "n=12")
    assert code == 0
    assert "commdsl" not in "\n".join(ln for ln in text.splitlines() if ln.startswith(("import", "from")))
    assert "# line 18: send x.chunk(out, world) to right" in text
    assert "def rank_3(groups, out, failures):" in text
    proc = torchrun(tmp_path / "out.py", 4, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every expect holds" in proc.stdout


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_collectives_script_prints_like_the_runtime(tmp_path, capfd, no_orphans):
    prog = tmp_path / "prog.comm"
    prog.write_text((ROOT / "programs" / "collectives.comm").read_text() + "print recvbuf\n")
    code, _ = compile_to(tmp_path, str(prog), 2)
    assert code == 0
    proc = torchrun(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("rank ") and "recvbuf" in ln)
    assert lines == ["rank 0: recvbuf = tensor([0, 2])", "rank 1: recvbuf = tensor([1, 3])"]


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


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_batches_bound_to_handles_compile_to_lists_of_works(tmp_path, capfd, no_orphans):
    prog = tmp_path / "prog.comm"
    prog.write_text(RING_OVERLAP)
    code, text = compile_to(tmp_path, str(prog), 4)
    assert code == 0
    assert re.search(r"^    r0 = dist\.batch_isend_irecv\(\[  # line 5: b\[s\] = batch:", text, re.M)
    assert "    for work in r0:  # line 8: wait b[1]\n        work.wait()\n    for work in r4:  # line 9: wait all b" in text
    proc = torchrun(tmp_path / "out.py", 4, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every expect holds" in proc.stdout


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_failing_expect_makes_the_script_exit_1(tmp_path, capfd, no_orphans):
    prog = tmp_path / "bad.comm"
    prog.write_text("program bad\nworld 2\ntensor x: int32[2] = rank\nall_reduce x\nexpect x == rank\n")
    code, _ = compile_to(tmp_path, str(prog), 2)
    assert code == 1  # the simulator already knows: refused
    code, text = compile_to(tmp_path, str(prog), 2, "--no-check")
    assert code == 0
    proc = torchrun(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode != 0
    assert "rank 0: expect at line 5 failed: element 0: got 1, expected == 0" in proc.stdout
    assert "1 expect(s) failed" in proc.stdout


def test_repeated_ops_fold_into_a_loop(tmp_path, capfd):
    prog = tmp_path / "loop.comm"
    prog.write_text("program loop\nworld 2\ntensor x: float32[4] = 1\nfor k in 0 .. 99:\n    all_reduce x op max\n"
                    "    x *= 1\n")
    code, text = compile_to(tmp_path, str(prog), 2)
    assert code == 0
    assert text.count("for _ in range(100):  # lines 5..6, 100 times") == 2  # once per rank
    assert text.count("dist.all_reduce(x, dist.ReduceOp.MAX)") == 2
    compile(text, "out.py", "exec")  # valid Python


@pytest.mark.timeout(60)  # before: 500 s and a 300 MB script
def test_a_script_too_large_to_use_is_refused_before_the_check_naming_the_limit(tmp_path, capfd):
    from commdsl.emit.python import MAX_SCRIPT_OPS

    prog = tmp_path / "wide.comm"
    prog.write_text("world 65536\ntensor x: float32[4] = rank\ntensor y: float32[4]\nfor k in 0 .. 14:\n"
                    "    h = isend x to (rank + k + 1) % world\n    recv y from (rank + world - k - 1) % world\n"
                    "    wait h\n")
    code, text = compile_to(tmp_path, str(prog), 65536)
    err = capfd.readouterr().err
    assert code == 2 and text == "" and not (tmp_path / "out.py").exists()
    assert "world size 65536 gives 2,949,120 ops over all ranks" in err and f"up to {MAX_SCRIPT_OPS:,}" in err


def test_folding_compares_each_op_once(monkeypatch):
    """`_repeat` looks at up to 8 periods from every op: the ops' keys are made once, not once per look
    (a script of 65536 ranks took 500 s, most of it remaking them)."""
    from commdsl.emit import python

    made = []
    key = python._key
    monkeypatch.setattr(python, "_key", lambda op: made.append(op) or key(op))
    text = "world 2\ntensor x: float32[4] = 1\nfor k in 0 .. 49:\n    all_reduce x op max\n    x *= 1\n"
    program = load(SourceFile("f.comm", text))
    schedule = expand(program, 2)
    assert "for _ in range(50):" in emit_python(schedule, program.source)
    assert len(made) == schedule.num_ops  # before: about 8 times as many per op


def test_deadlock_is_not_compiled(tmp_path, capfd):
    code, text = compile_to(tmp_path, str(ROOT / "programs" / "bad" / "head_to_head_send.comm"), 2)
    assert code == 1 and text == ""
    assert "error[D402]" in capfd.readouterr().out


# ---- nothing from the input becomes code (issue 14) ----------------------------------------------------------------

import ast  # noqa: E402
import builtins  # noqa: E402
import keyword  # noqa: E402

from hypothesis import HealthCheck, assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from commdsl.diagnostics import CommdslError  # noqa: E402
from commdsl.emit.python import SCRIPT_NAMES, emit_python  # noqa: E402
from commdsl.expand import expand  # noqa: E402
from commdsl.resolve import load  # noqa: E402
from commdsl.source import SourceFile  # noqa: E402

HOSTILE_PROGRAM = """\
program {prog}
world 2
tensor {a}: float32[4] = {num}
tensor {b}: float32[4] = rank + i * {num}
tensor {c}: int64[2] = 9223372036854775807
tensor {d}: float32[4] = rand(3)
h = isend {a} to 1 - rank
recv {b} from 1 - rank
wait h
{b}[0:2] += {a}[2:4]
all_reduce {d} op max
scatter {d} into {b}[0:2] from 0
print {a}, {b}[1:3]
expect {c} == 9223372036854775807
"""
HELPERS = ("flat", "minimum", "maximum", "fmt", "expect", "main", "say")
TOP_NAMES = {"WORLD_SIZE", "BACKEND", "TIMEOUT", "TOLERANCE", "DEVICE", "RANKS", "reduce_scatter_single"}
IMPORTS = {("import", "os", None), ("import", "sys", None), ("from", "datetime", "timedelta"),
           ("import", "torch", None), ("import", "torch.distributed", "dist"), ("import", "numpy", "np")}
# what a rank function may name besides its tensors and request handles
RANK_NAMES = {"torch", "dist", "np", "DEVICE", "groups", "out", "failures", "flat", "minimum", "maximum", "fmt",
              "expect", "abs", "range", "float", "reduce_scatter_single", "p", "work", "_"}
STRINGS = {"==", "!=", "<", "<=", ">", ">=", "inf", "-inf", "nan"}


def _script(text: str, path: str, script: str = "out.py") -> str:
    program = load(SourceFile(path, text))
    return emit_python(expand(program, 2), program.source, "gloo", script)


def _reference() -> ast.Module:
    return ast.parse(_script(HOSTILE_PROGRAM.format(prog="ref", a="a", b="b", c="c", d="d", num="1"), "ref.comm"))


def only_intended_statements(code: str, path: str, prints: set[str]) -> None:
    """The script is the template and per-rank torch calls, nothing else: the docstring holds the file name
    as text, the imports and helpers are the reference script's, and every name, call and string inside a rank
    function is one the emitter writes."""
    tree = ast.parse(code)
    assert path in ast.get_docstring(tree, clean=False)  # clean=True would expand tabs
    reference = {n.name: ast.dump(n) for n in _reference().body if isinstance(n, ast.FunctionDef)}
    body = tree.body[1:]
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if isinstance(node, ast.Import):
                    assert ("import", alias.name, alias.asname) in IMPORTS
                else:
                    assert ("from", node.module, alias.name) in IMPORTS and alias.asname is None
        elif isinstance(node, ast.Assign):
            assert [t.id for t in node.targets if isinstance(t, ast.Name)] and \
                all(isinstance(t, ast.Name) and t.id in TOP_NAMES for t in node.targets)
            assert not [c for c in ast.walk(node.value) if isinstance(c, ast.Call) and not (
                isinstance(c.func, ast.Attribute) and ast.unparse(c.func) in ("torch.device", "getattr")
                or isinstance(c.func, ast.Name) and c.func.id in ("timedelta", "getattr"))]
        elif isinstance(node, ast.FunctionDef) and node.name in HELPERS:
            assert ast.dump(node) == reference[node.name]
        elif isinstance(node, ast.FunctionDef) and node.name == "make_groups":
            assert all(ast.unparse(c.func) == "dist.new_group" for c in ast.walk(node) if isinstance(c, ast.Call))
        elif isinstance(node, ast.FunctionDef) and re.fullmatch(r"rank_[0-9]+", node.name):
            _rank_function(node, prints)
        elif isinstance(node, ast.If):
            assert ast.unparse(node) == "if __name__ == '__main__':\n    main()"
        else:
            raise AssertionError(f"unexpected statement: {ast.unparse(node)[:200]}")


def _rank_function(fn: ast.FunctionDef, prints: set[str]) -> None:
    tensors = {t.id for s in fn.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
               and not re.fullmatch(r"r[0-9]+", t.id)}
    assert not tensors & (RANK_NAMES | SCRIPT_NAMES | set(keyword.kwlist) | set(dir(builtins)))
    for node in (n for stmt in fn.body for n in ast.walk(stmt)):
        assert not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Lambda, ast.ClassDef,
                                     ast.Global, ast.Nonlocal, ast.Delete, ast.Try, ast.While, ast.With))
        if isinstance(node, ast.Name) and node.id not in ("groups", "out", "failures"):
            assert node.id in tensors | RANK_NAMES or re.fullmatch(r"r[0-9]+", node.id), node.id
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node is not fn.body[0].value:
            assert node.value in STRINGS | prints, node.value
        if isinstance(node, ast.Attribute):
            assert not node.attr.startswith("_") or node.attr == "_make_nccl_premul_sum", node.attr


SCRIPT_WORDS = sorted(SCRIPT_NAMES | {"r0", "r1", "r2", "rank_0", "rank_1", "torch_", "r0_", "def_", "print_"})
PY_WORDS = sorted(set(keyword.kwlist) | set(keyword.softkwlist) | {"range", "float", "abs", "len", "print", "exec"})
names = st.one_of(st.sampled_from(SCRIPT_WORDS + PY_WORDS), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True))
paths = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=()), min_size=1, max_size=40),
    st.lists(st.sampled_from(['"""', "'''", "\\", "\n", "\r", "\u2028", "\x85", "\x0c", "#", "{x}", "\udcff", "é",
                              "import os", ";", "x.comm"]), min_size=1, max_size=8).map("".join))
numbers = st.sampled_from(["1e309", "1", "0.5", "9223372036854775807", "1e-320", "123456789.0e300"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(prog=names, tensors=st.lists(names, min_size=4, max_size=4, unique=True), path=paths, num=numbers)
@example(
    prog='BACKEND',
    tensors=['for', 'out', 'e', 'BACKEND'],
    path='\t',
    num='1e309',
)  # a tab in the file name: the docstring keeps it verbatim
def test_hostile_names_paths_and_numbers_give_only_the_intended_statements(prog, tensors, path, num):
    a, b, c, d = tensors
    text = HOSTILE_PROGRAM.format(prog=prog, a=a, b=b, c=c, d=d, num=num)
    try:
        code = _script(text, path)
    except CommdslError:  # a name the language itself reserves (`send`, `rank`, ...): not this test's subject
        assume(False)
    only_intended_statements(code, path, {f"{a} = ", f"{b}[1:3] = "})


def test_a_file_name_with_triple_quotes_stays_in_the_docstring(tmp_path, capsys):
    path = tmp_path / 'x"""; import os; os.system("echo PWNED"); """.comm'
    path.write_text((ROOT / "programs" / "allreduce.comm").read_text())
    out = tmp_path / "out.py"
    assert main(["compile", str(path), "--world", "2", "-o", str(out)]) == 0
    code = out.read_text()
    only_intended_statements(code, str(path), {"x = "})
    assert "system" not in "".join(ast.unparse(n) for n in ast.parse(code).body[1:])


def test_numbers_that_python_cannot_write_literally():
    code = _script(HOSTILE_PROGRAM.format(prog="p", a="a", b="b", c="c", d="d", num="1e309"), "p.comm")
    assert 'torch.full((4,), float("inf"), dtype=torch.float32' in code
    assert " inf," not in code


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_a_script_whose_tensors_are_named_like_its_own_names_runs(tmp_path, capfd, no_orphans):
    prog = tmp_path / "names.comm"
    prog.write_text("program torch\nworld 2\ntensor torch: float32[2] = rank + 1\ntensor r0: float32[2]\n"
                    "tensor def: float32[4] = i\ntensor range: float32[2] = 0\ntensor dist: float32[2]\n"
                    "h = isend torch to 1 - rank\nrecv r0 from 1 - rank\nwait h\nrange = r0 + torch\n"
                    "scatter def into dist from 0\nfor k in 0 .. 3:\n    range += 1\n"
                    "expect range == 7\nexpect dist == i + 2 * rank\nprint def, range\n")
    code, text = compile_to(tmp_path, str(prog), 2)
    assert code == 0
    only_intended_statements(text, str(prog), {"def = ", "range = "})
    proc = torchrun(tmp_path / "out.py", 2, no_orphans)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every expect holds" in proc.stdout and "rank 0: def = tensor([0., 1., 2., 3.])" in proc.stdout
