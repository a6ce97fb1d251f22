"""Issue 14: hostile or extreme input gives a coded diagnostic or a usage error, never an internal error.

Each test is one finding of the fuzzing and abuse campaign, named after what it guards.
"""

from __future__ import annotations

import pytest

from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.resolve import load
from commdsl.source import SourceFile


def codes(text: str) -> list[tuple[str, int, int]]:
    """(code, line, column) of the diagnostics loading `text` gives."""
    try:
        load(SourceFile("t.comm", text))
    except CommdslError as e:
        return [(d.code, d.span.line, d.span.column) for d in e.diagnostics]
    return []


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


# ---- literals ------------------------------------------------------------------------------------------------

def test_integer_literal_above_int64_is_n121():
    assert codes("world 2\ntensor x: int64[4] = 9223372036854775808\n") == [("N121", 2, 22)]
    assert codes("world 2\ntensor x: int64[4] = 9223372036854775807\n") == []
    assert codes("world 2\nlet k = " + "9" * 5000 + "\n") == [("N121", 2, 9)]  # past Python's int() digit limit


@pytest.mark.parametrize("digits", ["٣", "３", "३", "𝟛"])  # Arabic-Indic, fullwidth, Devanagari, mathematical
def test_unicode_digits_are_not_numbers(digits):
    assert codes(f"world 2\ntensor x: float32[{digits}] = 1\n") == [("S002", 2, 19)]
    assert codes(f"world {digits}\n") == [("S002", 1, 7)]


def test_negative_literal_seed_is_n121():
    assert codes("world 2\ntensor x: float32[4] = rand(-1)\n") == [("N121", 2, 29)]
    assert codes("world 2\ntensor x: float32[4] = randn(- -3)\n") == []  # minus minus three is three
    assert codes("world 2\ntensor x: float32[4] = rand(0)\n") == []


def test_65_dimensions_is_n128():
    dims = ", ".join(["1"] * 65)
    assert codes(f"world 2\ntensor x: float32[{dims}] = 1\n") == [("N128", 2, 211)]
    assert codes(f"world 2\ntensor x: float32[{', '.join(['1'] * 64)}] = 1\n") == []


@pytest.mark.parametrize("verb", [["check"], ["sim", "--world", "2"], ["compile", "--world", "2"]])
def test_65_dimensions_every_verb_gives_the_diagnostic(verb, tmp_path, capsys):
    path = tmp_path / "d.comm"
    path.write_text(f"world 2\ntensor x: float32[{', '.join(['1'] * 65)}] = 1\n")
    rc, out, err = run_cli([*verb[:1], str(path), *verb[1:], "--color", "never"], capsys)
    assert rc == 1 and "error[N128]" in out + err and "internal error" not in err


# ---- command-line numbers --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "text"), [
    (["run", "P", "--nproc", "2", "--timeout", "inf"], "argument --timeout: expected seconds above 0"),
    (["run", "P", "--nproc", "2", "--timeout", "nan"], "argument --timeout: expected seconds above 0"),
    (["run", "P", "--nproc", "2", "--timeout", "1e9"], "at most 604800"),
    (["bench", "--collective", "all_reduce", "--nproc", "2", "--timeout", "-inf"], "argument --timeout"),
    (["run", "P", "--nproc", "٢"], "argument --nproc/--nproc-per-node: expected an integer"),
    (["sim", "P", "--world", "٢"], "argument --world: expected an integer at least 1, got '٢'"),
    (["sim", "P", "--world", "1_000"], "argument --world: expected an integer"),
    (["sim", "P", "--world", "2", "--set", "n=٣"], "--set n=٣: the value is not an integer"),
    (["sim", "P", "--world", "2", "--set", "n=nan"], "--set n=nan: the value is not an integer"),
    (["sim", "P", "--world", "2", "--set", "n=9223372036854775808"], "does not fit in 64 bits"),
])
def test_bad_numbers_on_the_command_line_are_usage_errors(argv, text, capsys):
    from pathlib import Path

    prog = str(Path(__file__).resolve().parent.parent / "programs" / "allreduce.comm")
    rc, _, err = run_cli([prog if a == "P" else a for a in argv], capsys)
    assert rc == 2 and text in err and "internal error" not in err


def test_bad_environment_default_names_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("COMMDSL_MAX_WORLD", "abc")
    rc, _, err = run_cli(["check", "programs/allreduce.comm"], capsys)
    assert rc == 2
    assert "argument --max-world: expected an integer from 1 to 65536, got 'abc' (from COMMDSL_MAX_WORLD)" in err
