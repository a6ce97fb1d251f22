"""Lint as ruff users expect it: `# commdsl: noqa`, settings files, directory discovery, CI output formats,
"did you mean", and the pre-commit hooks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from commdsl.checker import CheckOptions, check_program
from commdsl.cli.main import main
from commdsl.resolve import load
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "programs" / "bad"

DEADLOCK = """\
world 2
tensor x: float32[4] = rank
recv x from 1 - rank{comment}
send x to 1 - rank
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def codes(text: str, lints: bool = True) -> list[tuple[str, int]]:
    program = load(SourceFile("t.comm", text))
    return [(d.code, d.span.line) for d in check_program(program, CheckOptions(lints=lints))]


# ---- noqa ------------------------------------------------------------------------------------------------


def test_noqa_with_the_code_suppresses_the_finding_on_its_line():
    assert codes(DEADLOCK.format(comment="")) == [("D401", 3)]
    assert codes(DEADLOCK.format(comment="    # commdsl: noqa: D401")) == []
    assert codes(DEADLOCK.format(comment="    # commdsl: NOQA: d401, P201")) == [("L706", 3)]  # P201 unused
    assert codes(DEADLOCK.format(comment="  # commdsl: noqa")) == []
    assert codes(DEADLOCK.format(comment="  # commdsl: noqa: D401"), lints=False) == []


def test_noqa_for_another_code_keeps_the_finding_and_is_reported_unused():
    found = codes(DEADLOCK.format(comment="  # commdsl: noqa: D402"))
    assert ("D401", 3) in found and ("L706", 3) in found
    assert codes(DEADLOCK.format(comment="  # commdsl: noqa: D402"), lints=False) == [("D401", 3)]


def test_noqa_naming_no_code_or_an_unknown_one_suppresses_nothing():
    for comment in ("  # commdsl: noqa:", "  # commdsl: noqa: D41"):
        found = codes(DEADLOCK.format(comment=comment))
        assert ("D401", 3) in found and ("L706", 3) in found, comment


def test_an_unused_bare_noqa_is_reported_under_lint_only():
    text = "world 2\ntensor x: float32[4] = rank\nall_reduce x  # commdsl: noqa\n"
    assert codes(text) == [("L706", 3)]
    assert codes(text, lints=False) == []


def test_noqa_applies_to_a_statement_continued_over_lines():
    text = "world 2\ntensor x: float32[4] = rank\nrecv x \\\n    from 1 - rank  # commdsl: noqa: D401\nsend x to 1 - rank\n"
    assert codes(text) == []


def test_noqa_is_honoured_by_the_cli_and_shown_unused_in_every_format(capsys):
    code, out, _ = run(capsys, "lint", str(BAD / "unused_noqa.comm"), "--format", "json")
    assert code == 0  # warnings only
    assert [(d["code"], d["line"]) for d in json.loads(out)] == [("L706", 7), ("L706", 10)]


# ---- settings ----------------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory (a git repository) with one deadlock and one idiom warning, as the cwd."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "deadlock.comm").write_text(DEADLOCK.format(comment=""))
    (tmp_path / "src" / "fanout.comm").write_text((BAD / "fanout_should_broadcast.comm").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COMMDSL_MAX_WORLD", raising=False)
    return tmp_path


def test_pyproject_settings_select_and_format_apply_from_a_subdirectory(project, capsys, monkeypatch):
    (project / "pyproject.toml").write_text('[tool.commdsl]\nselect = ["L"]\noutput-format = "concise"\n')
    monkeypatch.chdir(project / "src")
    code, out, _ = run(capsys, "lint", ".")
    assert code == 0
    assert [line.split(": ")[1].split()[0] for line in out.splitlines()] == ["L701"]


def test_a_flag_wins_over_the_settings_file(project, capsys):
    (project / "commdsl.toml").write_text('select = ["L"]\n')
    code, out, _ = run(capsys, "lint", "src", "--select", "D", "--format", "concise")
    assert code == 1 and "D401" in out and "L701" not in out
    code, out, _ = run(capsys, "lint", "src", "--isolated", "--format", "concise")
    assert "D401" in out and "L701" in out


def test_commdsl_toml_wins_over_pyproject_in_one_directory(project, capsys):
    (project / "pyproject.toml").write_text('[tool.commdsl]\nselect = ["L"]\n')
    (project / "commdsl.toml").write_text('ignore = ["L"]\n')
    code, out, _ = run(capsys, "lint", "src", "--format", "concise")
    assert "D401" in out and "L701" not in out


def test_world_and_strict_from_the_settings(project, capsys):
    (project / "commdsl.toml").write_text('world = [2]\nstrict = true\nselect = ["L"]\n')
    (project / "src" / "deadlock.comm").unlink()
    code, out, _ = run(capsys, "lint", "src", "--format", "json")
    assert code == 0 and json.loads(out) == []  # L701 needs three ranks: none at world 2
    (project / "commdsl.toml").write_text('world = [4]\nstrict = true\nselect = ["L"]\n')
    code, out, _ = run(capsys, "lint", "src", "--format", "json")
    assert code == 1 and [d["code"] for d in json.loads(out)] == ["L701"]  # strict: a warning fails


def test_a_bad_settings_file_is_a_diagnostic_in_that_file_and_exit_2(project, capsys):
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.commdsl]\nselct = ["D"]\nmax-world = 0\n')
    code, _, err = run(capsys, "lint", "src", "--color", "never")
    assert code == 2
    assert "error[N137]" in err and "unknown key `selct`" in err and "did you mean `select`?" in err
    assert "pyproject.toml:5:1" in err and "pyproject.toml:6:1" in err and "greater than or equal to 1" in err
    (project / "pyproject.toml").write_text("[tool.commdsl\n")
    code, _, err = run(capsys, "lint", "src", "--color", "never")
    assert code == 2 and "not a TOML file" in err and "pyproject.toml:1:" in err


def test_config_names_a_settings_file(project, capsys, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "strict.toml"
    elsewhere.write_text('select = ["D401"]\n')
    code, out, _ = run(capsys, "lint", "src", "--config", str(elsewhere), "--format", "concise")
    assert code == 1 and "D401" in out and "L701" not in out


# ---- discovery ---------------------------------------------------------------------------------------------


def test_directories_are_searched_honouring_gitignore_hidden_and_exclude(project, capsys):
    (project / ".gitignore").write_text("generated/\n*.tmp.comm\n")
    for rel in ("generated/a.comm", "src/b.tmp.comm", ".hidden/c.comm", "src/deep/.gitignore", "src/deep/d.comm",
                "src/deep/keep.tmp.comm", "node_modules/e.comm", "vendor/f.comm"):
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("d.comm\n!keep.tmp.comm\n" if rel.endswith(".gitignore") else "world 2\ntensor x: float32[1]\n")
    (project / "commdsl.toml").write_text('exclude = ["vendor/"]\n')
    from commdsl.discover import comm_files

    found, empty = comm_files(["."], ["vendor/"])
    assert found == ["src/deadlock.comm", "src/deep/keep.tmp.comm", "src/fanout.comm"] and empty == []
    code, out, _ = run(capsys, "lint", ".", "--format", "json")
    assert sorted({Path(d["path"]).name for d in json.loads(out)}) == ["deadlock.comm", "fanout.comm"]


def test_a_named_file_is_taken_even_where_a_directory_search_would_skip_it(project, capsys):
    (project / ".gitignore").write_text("src/\n")
    code, out, err = run(capsys, "lint", ".")
    assert code == 0 and "no .comm files under ." in err
    code, out, _ = run(capsys, "lint", "src/deadlock.comm", "--format", "concise")
    assert code == 1 and "D401" in out


def test_fmt_searches_directories_too(project, capsys):
    code, _, err = run(capsys, "fmt", "--check", ".")
    assert "2 files" in err


# ---- CI output formats -------------------------------------------------------------------------------------


def test_github_format_writes_one_workflow_command_per_finding(capsys):
    code, out, _ = run(capsys, "lint", str(BAD / "head_to_head_send.comm"), str(BAD / "unused_noqa.comm"),
                       "--output-format", "github")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("::error file=") and ",line=8,col=5,endLine=8,endColumn=16," in lines[0]
    assert "title=commdsl D402 (" in lines[0] and "::" in lines[0][2:] and "D402 deadlock" in lines[0]
    assert all(line.startswith("::warning ") for line in lines[1:]) and len(lines) == 3


def test_junit_format_is_xml_with_a_failed_case_per_finding(capsys):
    code, out, _ = run(capsys, "lint", str(BAD / "head_to_head_send.comm"), str(BAD / "unused_noqa.comm"),
                       "--output-format", "junit")
    root = ElementTree.fromstring(out)
    assert root.tag == "testsuites" and root.get("failures") == "3"
    suites = {Path(s.get("name")).name: s for s in root.iter("testsuite")}
    assert sorted(suites) == ["head_to_head_send.comm", "unused_noqa.comm"]
    [case] = suites["head_to_head_send.comm"].iter("testcase")
    assert case.get("name") == "org.commdsl.D402" and case.get("line") == "8"
    assert "waits for rank 1" in case.find("failure").text


# ---- did you mean ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line, meant", [("brodcast x from 0", "broadcast"), ("all_reduce x opp sum", "op"),
                                         ("tensr y: float32[4]", "tensor"), ("all_reduce x op sum in wrld", None)])
def test_a_misspelt_keyword_gets_a_suggestion(tmp_path, capsys, line, meant):
    path = tmp_path / "t.comm"
    path.write_text(f"world 2\ntensor x: float32[4]\n{line}\n")
    code, out, _ = run(capsys, "lint", str(path), "--color", "never")
    assert code == 1
    if meant:
        assert f"did you mean `{meant}`?" in out
    else:
        assert "did you mean" not in out


def test_a_keyword_is_never_read_from_the_front_of_a_name(tmp_path, capsys):
    path = tmp_path / "t.comm"
    path.write_text("world 2\ntensor x: float32[4]\nall_reduce x opmax\n")  # was `op max`
    code, out, _ = run(capsys, "lint", str(path), "--color", "never")
    assert code == 1 and "found `opmax`" in out


def test_a_misspelt_option_or_verb_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["lint", "--slect", "D", str(BAD / "head_to_head_send.comm")])
    assert stop.value.code == 2 and "--slect: did you mean --select?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["lnt", "x.comm"])
    assert "did you mean 'lint'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["lint", "--output-format", "jsn", "x.comm"])
    assert "did you mean 'json'?" in capsys.readouterr().err


# ---- pre-commit ------------------------------------------------------------------------------------------------


def test_pre_commit_hooks_run_the_verbs_they_name(tmp_path):
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert sorted(hooks) == ["commdsl-fmt", "commdsl-lint"]
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["files"] == r"\.comm$"
    good = tmp_path / "good.comm"
    good.write_text((ROOT / "programs" / "p2p.comm").read_text())
    for hook, expected in (("commdsl-lint", 0), ("commdsl-fmt", 0)):
        argv = hooks[hook]["entry"].split()
        assert argv[0] == "commdsl"
        done = subprocess.run([sys.executable, "-m", "commdsl", *argv[1:], str(good)], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == expected, done.stderr
    bad = tmp_path / "bad.comm"
    bad.write_text(DEADLOCK.format(comment=""))
    done = subprocess.run([sys.executable, "-m", "commdsl", "lint", str(bad)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and "D401" in done.stdout


def test_a_reason_may_follow_the_codes():
    assert codes(DEADLOCK.format(comment="  # commdsl: noqa: D401 the peer sends first on NCCL")) == []
    found = codes(DEADLOCK.format(comment="  # commdsl: noqa: because"))  # no code: a list that is empty
    assert ("D401", 3) in found and ("L706", 3) in found


def test_settings_keep_the_bounds_of_their_flags(project, capsys):
    (project / "commdsl.toml").write_text("max-world = 100000000\nworld = [0]\nmax-time = 1e9\n")
    code, _, err = run(capsys, "lint", "src", "--color", "never")
    assert code == 2 and err.count("error[N137]") == 3
    assert "less than or equal to 65536" in err and "greater than or equal to 1" in err
