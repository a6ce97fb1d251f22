"""The public Python API: the same pipeline as the CLI, without argv."""

import pytest

import commdsl


def test_pipeline_through_the_api():
    program = commdsl.parse("world 2..4\ntensor x: int64[2] = rank\nall_reduce x\nexpect x == world * (world - 1) / 2\n")
    assert commdsl.check(program) == []
    result = commdsl.simulate(commdsl.expand(program, world=3))
    assert result.ok and result.tensors[2]["x"].tolist() == [3, 3]


def test_api_errors_are_diagnostics():
    with pytest.raises(commdsl.CommdslError) as e:
        commdsl.parse("send x to 1\n")
    assert [d.code for d in e.value.diagnostics] == ["N101"]


def test_check_reports_findings_with_worlds():
    program = commdsl.load("programs/bad/odd_world_pairing.comm")
    found = commdsl.check(program)
    assert {d.code for d in found} == {"P208"} and all(d.worlds == (3, 5) for d in found)


@pytest.mark.gloo
@pytest.mark.timeout(180)
def test_the_api_page_examples_run(monkeypatch, no_orphans):
    """docs/api.md's examples are doctests: load, check, simulate, compile, and a real 2-rank Gloo run."""
    import doctest
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    failed, attempted = doctest.testfile(str(root / "docs" / "api.md"), module_relative=False,
                                         optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert attempted >= 15 and failed == 0


def test_program_methods_are_the_api_verbs():
    program = commdsl.load("programs/allreduce.comm")
    assert program.check() == commdsl.check(program) == []
    assert program.simulate(2).tensors[1]["x"].tolist() == [5.0, 7.0, 9.0]
    assert program.compile(2) == commdsl.compile(program, 2)
    bad = commdsl.load("programs/bad/head_to_head_send.comm")
    with pytest.raises(commdsl.CommdslError) as e:
        commdsl.compile(bad, 2)
    assert [d.code for d in e.value.diagnostics] == ["D402"]
    assert "dist.send" in commdsl.compile(bad, 2, check=False)
