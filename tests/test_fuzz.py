"""A bounded share of the front-end fuzzer (tests/fuzzing.py) in every CI run."""

import pytest

from fuzzing import exercise, inputs


@pytest.mark.timeout(300)
def test_fuzzed_inputs_give_diagnostics_not_exceptions():
    outcomes = {"ok": 0, "diagnostic": 0}
    for text in inputs(1500, seed=20261122):
        outcomes[exercise(text)] += 1
    assert outcomes["diagnostic"] > 0 and sum(outcomes.values()) == 1500
