"""A small share of the fuzzer (tests/fuzzing.py) in the quick test loop; .ci/run runs its CI profile.

The hypothesis test draws statements from the grammar with `from_lark` (slow, but it shrinks a failure to a
minimal statement); the others run a few hundred inputs of each source through every command.
"""

import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import fuzzing


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", sorted(fuzzing.SOURCES))
def test_fuzzed_inputs_give_diagnostics_not_internal_errors(source, tmp_path):
    stats = fuzzing.run({source: 150}, seed=20261122, save=tmp_path, cli_every=25)
    assert not stats["bugs"] and not stats["hangs"], fuzzing.report(stats, {source: 150}, 20261122)
    assert stats["diagnostic"] > 0 and stats["ok"] > 0


def test_fuzzing_over_two_processes_runs_the_inputs_of_one(tmp_path):
    """`--jobs 2` (.ci/run's two cores) hands the inputs out, not the seed: every count is one process's."""
    plan = {"grammar": 12, "bytes": 12, "tokens": 6}
    one = fuzzing.run(plan, seed=5, save=tmp_path / "one", cli_every=4)
    two = fuzzing.run(plan, seed=5, save=tmp_path / "two", cli_every=4, jobs=2)
    keys = ("inputs", "cli", "ok", "diagnostic", "by_source", "bugs", "hangs")
    assert {k: two[k] for k in keys} == {k: one[k] for k in keys}
    assert one["inputs"] == 30 and one["cli"] == 3 + 3 + 2 and one["ok"] > 0


def test_the_fuzzer_leaves_no_files_behind(tmp_path, monkeypatch):
    """Its CLI inputs and outputs go to a scratch folder of its own, removed when it ends (it once left one
    in /tmp per run)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    stats = fuzzing.run({"grammar": 4}, seed=1, save=tmp_path / "failures", cli_every=1)
    assert stats["cli"] == 4
    assert list(scratch.iterdir()) == []


def test_no_hang_timer_runs_while_torch_is_first_imported(tmp_path):
    """A fresh interpreter, as in CI: when the first hang timer is armed, torch is already imported (a cold
    import outlasted HANG_S there, and the alarm inside it left asyncio half-initialised)."""
    probe = textwrap.dedent(f"""
        import signal, sys
        import fuzzing
        armed = signal.setitimer
        seen = []
        def spy(which, seconds, *rest):
            if seconds and not seen:
                seen.append("torch" in sys.modules)
            return armed(which, seconds, *rest)
        signal.setitimer = spy
        fuzzing.run({{"grammar": 1}}, seed=1, save=__import__("pathlib").Path({str(tmp_path)!r}), cli_every=0)
        print(seen)
    """)
    tests = Path(__file__).parent
    out = subprocess.run([sys.executable, "-c", probe], cwd=tests, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True]"


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(header=st.sampled_from(fuzzing.HEADERS),
       statement=from_lark(fuzzing.lark_grammar(), start="_stmt", explicit=fuzzing.terminal_strategies()))
def test_statements_from_the_grammar_with_hypothesis(header, statement):
    fuzzing.exercise(fuzzing.layout(header + statement))  # raises on an internal error; hypothesis shrinks it


def test_the_grammar_walker_spells_every_terminal_and_ends():
    walker = fuzzing.GrammarWalker(random.Random(0), depth=3)
    for _ in range(200):
        assert walker.walk("_stmt").strip()


def test_layout_indents_by_the_markers():
    assert fuzzing.layout("for s in 0 .. 1 :\n\x01 barrier\n barrier\n\x02 barrier\n") == \
        "for s in 0 .. 1 :\n    barrier\n    barrier\nbarrier\n"
