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
