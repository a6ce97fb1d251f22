"""What the diagnostics say (issue 12, items 5 and 7): each backend's own behaviour under `--backend gloo` and
`--backend nccl`, the notes of both when a program is checked for both, a citation of the backend model's
section, a kind's own words for a rooted collective, and no comments quoted from a batch."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from commdsl.checker import CheckOptions, check_program
from commdsl.dtypes import DTYPES
from commdsl.resolve import load
from commdsl.rules import BACKEND_DOC
from commdsl.rules.backend import reduction
from commdsl.rules.registry import RULES
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent


def check(text: str, *backends: str, lints: bool = False):
    program = load(SourceFile("t.comm", text))
    return check_program(program, CheckOptions(backends=backends or None, lints=lints))


def one(text: str, code: str, *backends: str):
    """The one finding of `code`, and its notes' texts."""
    [d] = [d for d in check(text, *backends) if d.code == code]
    return d, [n.message for n in d.notes]


HEAD = "world 2\ntensor x: float32[4] = rank\ntensor y: float32[8] = 0\n"


# ---- the backend model: one section per concept, cited once per finding -----------------------------------------

def test_every_cited_section_exists_and_every_citing_rule_has_backend_notes():
    doc = (ROOT / BACKEND_DOC).read_text()
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', doc))
    cited = {r.code: r.backend_doc for r in RULES if r.backend_doc}
    assert {a for a in cited.values()} <= anchors
    for rule in RULES:
        if rule.backend_doc:
            notes = rule.sections()["Backend notes"]
            assert notes.endswith(f"[{BACKEND_DOC}#{rule.backend_doc}](backend-support.md#{rule.backend_doc}).")
    # the rules the issue names cite it
    assert {"P201", "P205", "P209", "R501", "R503", "R504", "D401", "D402", "B601", "B602", "C303"} <= set(cited)


def test_a_finding_checked_on_both_backends_keeps_the_notes_of_each_and_cites_once():
    text = HEAD + "tensor z: float32[4] = 0\nsend x to 1 - rank\nrecv z from 1 - rank\n"
    _, notes = one(text, "D402", "gloo", "nccl")
    assert [n.split(" ")[1] for n in notes if n.startswith("on ")] == ["Gloo", "NCCL"]
    assert notes[-1] == "see docs/backend-support.md#p2p-completion"


def test_a_finding_cites_its_section_once_before_saying_on_which_backend():
    text = HEAD + "on rank == 0:\n    send x to 1\nelse:\n    recv y from 0\n"  # P205, both backends
    d, notes = one(text, "P205", "gloo", "nccl")
    assert notes == ["on Gloo the receive completes silently and its last elements keep their old values",
                     "NCCL requires equal counts and checks nothing: the receive may hang waiting for the rest, or "
                     "complete with its last elements unwritten",
                     "see docs/backend-support.md#message-mismatch"]
    text = HEAD + "tensor z: float32[4] = 0\nbatch:\n    send x to rank\n    recv z from rank\n"  # NCCL allows it
    [d, _] = [d for d in check(text, "gloo", "nccl") if d.code == "P209"]
    assert [n.message for n in d.notes][-2:] == ["see docs/backend-support.md#self-p2p",
                                                 "only on gloo (checked for gloo, nccl)"]


# ---- point-to-point ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("recv, backend, want", [
    ("recv y from 0", "gloo", "on Gloo the receive completes silently and its last elements keep their old values"),
    ("recv y[0:2] from 0", "gloo", "on Gloo the receiving process aborts (SIGABRT: `op.preamble.length <= op.nbytes`)"),
    ("recv y from 0", "nccl", "NCCL requires equal counts and checks nothing: the receive may hang waiting for the "
                              "rest, or complete with its last elements unwritten"),
    ("recv y[0:2] from 0", "nccl", "NCCL requires equal counts and checks nothing: the receive may complete without "
                                   "an error, holding part of the message"),
])
def test_p205_says_what_a_larger_or_smaller_receive_does(recv, backend, want):
    _, notes = one(HEAD + f"on rank == 0:\n    send x to 1\nelse:\n    {recv}\n", "P205", backend)
    assert notes[0] == want


def test_p206_per_backend():
    text = HEAD + "tensor z: int32[4] = 0\non rank == 0:\n    send x to 1\nelse:\n    recv z from 0\n"
    assert one(text, "P206", "gloo")[1][0].startswith("Gloo moves bytes")
    assert one(text, "P206", "nccl")[1][0].startswith("NCCL requires the same datatype")


@pytest.mark.parametrize("stmt, backend, want", [
    ("send x to rank", "gloo", "torch raises `ValueError: Invalid destination rank` on every backend"),
    ("send x to rank", "nccl", "torch raises `ValueError: Invalid destination rank` on every backend"),
    ("h = isend x to rank\nwait h", "gloo", "Gloo raises `RuntimeError: Pair is not connected`, inside a `batch` too"),
    ("h = isend x to rank\nwait h", "nccl", "NCCL raises `ncclInvalidUsage` (`Trying to send to self without a "
                                            "matching recv`): it allows P2P with self only as a send and a receive "
                                            "in one `batch`"),
    ("recv x from rank", "nccl", "NCCL raises `ncclInvalidUsage` (`Trying to recv to self without a matching send`): "
                                 "it allows P2P with self only as a send and a receive in one `batch`"),
])
def test_p209_says_what_each_backend_raises(stmt, backend, want):
    _, notes = one(HEAD + stmt + "\n", "P209", backend)
    assert notes[0] == want


def test_a_batched_send_to_self_is_fine_on_nccl_with_its_receive_and_p201_without():
    both = HEAD + "tensor z: float32[4] = 0\nbatch:\n    send x to rank\n    recv z from rank\n"
    assert [d.code for d in check(both, "nccl")] == []
    alone = HEAD + "batch:\n    send x to rank\n"
    d, notes = one(alone, "P201", "nccl")
    assert notes[1].startswith("NCCL raises `ncclInvalidUsage` (`Trying to send to self without a matching recv`)")


@pytest.mark.parametrize("stmt, backend, start", [
    ("send x to 1", "gloo", "on Gloo this `send` blocks until the process group's timeout (30 minutes"),
    ("h = isend x to 1\nwait h", "gloo", "on Gloo the `wait` of this `isend` blocks until"),
    ("send x to 1", "nccl", "on NCCL the call returns to Python, but its kernel never ends"),
])
def test_p201_says_how_the_backend_hangs(stmt, backend, start):
    _, notes = one(HEAD + "on rank == 0:\n    " + stmt.replace("\n", "\n    ") + "\n", "P201", backend)
    assert notes[1].startswith(start)


# ---- requests ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stmt, backend, start", [
    ("h = isend x to 1 - rank\nrecv x from 1 - rank", "gloo", "on Gloo the message is lost if the rank exits"),
    ("h = irecv y[0:4] from 1 - rank\nsend x to 1 - rank", "gloo", "on Gloo the receive goes on after the rank"),
    ("h = all_reduce x", "gloo", "on Gloo the collective runs on a worker thread"),
    ("on rank == 0:\n    h = isend x to 1\nelse:\n    recv x from 0", "nccl",
     "on NCCL the op runs on its stream whether waited"),
])
def test_r501_says_what_becomes_of_an_unwaited_op(stmt, backend, start):
    _, notes = one(HEAD + stmt + "\n", "R501", backend)
    assert notes[0].startswith(start)


def test_r503_says_why_it_is_a_race_and_names_a_batch_as_a_batch():
    text = HEAD + "h = isend x to 1 - rank\nx = 5\nrecv y[0:4] from 1 - rank\nwait h\n"
    assert one(text, "R503", "gloo")[1][0].startswith("on Gloo the transport reads or writes the buffer")
    assert one(text, "R503", "nccl")[1][0].startswith("on NCCL the op runs on its communicator's stream")
    batch = HEAD + "batch:\n    send x[0:2] to 1 - rank\n    recv x[1:3] from 1 - rank\n"
    d, notes = one(batch, "R503", "gloo")
    assert d.labels[0].message == "in the same batch" and notes[0].startswith("the ops of a batch run together")
    assert d.help == "use separate buffers for the ops of one batch"


IDLE = "world 2..4\ntensor x: float32[4] = rank\non rank == 0:\n    send x to 1\nelse on rank == 1:\n    recv x from 0\n"


def test_r506_names_the_idle_ranks_of_the_first_size_with_them_on_gloo_only():
    d, notes = one(IDLE, "R506", "gloo")
    assert d.message == "rank 2 takes part in no communication at world 3" and d.worlds == (3, 4)
    assert d.span.line == 1 and d.label == "at world 3, rank 2 only sets up and ends"  # the `world` line
    assert notes[0].startswith("on Gloo a rank that ends closes its connections")
    assert d.help.startswith("end the program with a `barrier`")
    assert "R506" not in {f.code for f in check(IDLE, "nccl")}  # NCCL connects at a communicator's first op
    assert "R506" not in {f.code for f in check(IDLE + "barrier\n", "gloo")}  # everyone stays for the barrier
    local = "world 4\ntensor x: float32[4] = rank\nx += 1\n"  # local ops alone: nobody is left out
    assert "R506" not in {f.code for f in check(local, "gloo")}


def test_r506_is_quiet_where_an_error_explains_the_idle_rank():
    """Rank 2 skips the all_reduce the others wait in (C307): that is the finding, not its idleness."""
    skips = "world 3\ntensor x: float32[4] = rank\non rank < 2:\n    all_reduce x\n"
    assert [f.code for f in check(skips, "gloo")] == ["C307"]


def test_r504_says_what_a_non_root_buffer_holds():
    text = HEAD + "reduce x to 0\ny[0:4] = x\n"
    assert one(text, "R504", "gloo")[1][0] == "Gloo uses the non-root buffers for its ring and leaves partial sums in them"
    assert one(text, "R504", "nccl")[1][0].startswith("on NCCL the non-root buffer keeps this rank's own input")


# ---- collectives ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stmt, message, label", [
    ("broadcast x from rank", "`broadcast` on `world`: members disagree on the source rank",
     "rank 0 names `from 0`; rank 1 names `from 1`"),
    ("reduce x to rank", "`reduce` on `world`: members disagree on the destination rank",
     "rank 0 names `to 0`; rank 1 names `to 1`"),
    ("gather x into y to rank", "`gather` on `world`: members disagree on the destination rank",
     "rank 0 names `to 0`; rank 1 names `to 1`"),
    ("scatter y into x from rank", "`scatter` on `world`: members disagree on the source rank",
     "rank 0 names `from 0`; rank 1 names `from 1`"),
])
def test_c303_speaks_of_the_kind_at_hand(stmt, message, label):
    for backend in ("gloo", "nccl"):
        d, notes = one(HEAD + stmt + "\n", "C303", backend)
        assert (d.message, d.label) == (message, label)
        kind = stmt.split()[0]
        assert all("broadcast" not in n for n in notes) or kind == "broadcast"


@pytest.mark.parametrize("code, body", [
    ("C301", "on rank == 0:\n    all_reduce x\nelse:\n    broadcast x from 0\n"),
    ("C304", "on rank == 0:\n    all_reduce x op sum\nelse:\n    all_reduce x op max\n"),
    ("C305", "tensor z: int32[4] = 0\non rank == 0:\n    all_reduce x\nelse:\n    all_reduce z\n"),
    ("C306", "on rank == 0:\n    all_reduce x\nelse:\n    all_reduce y\n"),
])
def test_collective_disagreements_say_what_each_backend_does(code, body):
    gloo = one(HEAD + body, code, "gloo")[1][0]
    nccl = one(HEAD + body, code, "nccl")[1][0]
    assert "Gloo" in gloo and "NCCL" in nccl and "NCCL" not in gloo


# ---- reduce ops and dtypes ----------------------------------------------------------------------------------------

def test_the_reduction_table():
    refused = {(b, op, dt) for b in ("gloo", "nccl") for op in ("sum", "product", "min", "max", "band", "bor", "bxor",
                                                                 "avg", "premul_sum")
               for dt in DTYPES if reduction(b, op, dt).refused}
    floats = {dt for dt in DTYPES if DTYPES[dt].is_float}
    ints = {dt for dt in DTYPES if DTYPES[dt].is_int}
    want = ({("gloo", "premul_sum", dt) for dt in DTYPES}
            | {("gloo", op, dt) for op in ("band", "bor", "bxor") for dt in floats}
            | {("gloo", "avg", dt) for dt in DTYPES if dt not in floats}
            | {("nccl", op, dt) for op in ("band", "bor", "bxor") for dt in DTYPES}
            | {("nccl", "premul_sum", dt) for dt in DTYPES if dt not in floats}
            | {("nccl", "avg", "bool")})
    assert refused == want
    assert {dt for dt in DTYPES if reduction("nccl", "avg", dt).truncates} == ints
    assert not any(reduction("gloo", op, dt).truncates for op in ("avg", "sum") for dt in DTYPES)


@pytest.mark.parametrize("decl, stmt, backend, why, help", [
    ("int64", "all_reduce c op avg", "gloo", "Gloo's AVG fails on integer tensors", "reduce with `op sum`, then divide"),
    ("float32", "all_reduce c op band", "gloo", "Gloo applies `band` to integers and bool only", "reduce an integer copy"),
    ("float32", "all_reduce c op premul_sum(2)", "gloo", "Gloo has no PREMUL_SUM", "scale the tensor first"),
    ("int32", "all_reduce c op bor", "nccl", "NCCL has no bitwise reductions", "for bool or 0/1 flags `op max` is OR"),
    ("int32", "all_reduce c op bxor", "nccl", "NCCL has no bitwise reductions", "gather the values and combine"),
    ("int32", "all_reduce c op premul_sum(2)", "nccl", "NCCL's premul_sum takes floating point only", "scale and reduce"),
    ("bool", "all_reduce c op avg", "nccl", "NCCL refuses AVG on bool", "reduce an int or float copy"),
    ("bool", "reduce c to 0 op avg", "nccl", "NCCL refuses AVG on bool", "reduce an int or float copy"),
])
def test_b601_says_what_the_backend_raises_and_a_fix_that_works_there(decl, stmt, backend, why, help):
    d, notes = one(f"world 2\ntensor c: {decl}[4] = rank\n{stmt}\n", "B601", backend)
    assert d.message.endswith(f"is not supported by {backend}")
    assert notes[0].startswith(why) and d.help.startswith(help)
    assert "bitwise" not in d.help or "bor" in stmt or "bxor" in stmt


def test_b601_on_integer_avg_states_what_nccl_does_instead():
    d, notes = one("world 2\ntensor c: int64[4] = rank\nall_reduce c op avg\n", "B601", "gloo")
    assert "NCCL instead returns the integer sum divided by the group size, truncated toward zero" in notes[0]
    assert "bitwise" not in d.help and "band" not in d.help


def test_b601_names_every_checked_backend_that_refuses():
    d, notes = one("world 2\ntensor c: int64[4] = rank\nall_reduce c op premul_sum(2)\n", "B601", "gloo", "nccl")
    assert d.message == "`all_reduce` with `op premul_sum` on int64 is not supported by gloo or nccl"
    assert notes[0].startswith("Gloo has no PREMUL_SUM") and notes[1].startswith("NCCL's premul_sum")
    d, notes = one("world 2\ntensor c: int32[4] = rank\nall_reduce c op bor\n", "B601", "gloo", "nccl")
    assert d.message.endswith("is not supported by nccl") and not any(n.startswith("only on") for n in notes)


def test_b602_integer_avg_on_nccl_is_a_warning_and_gloo_refuses_it():
    text = "world 2\ntensor c: int32[4] = rank\nall_reduce c op avg\n"
    d, notes = one(text, "B602", "nccl")
    assert d.severity == "warning" and d.message == "`all_reduce` with `op avg` on int32 rounds the mean toward zero on nccl"
    assert [x.code for x in check(text, "gloo")] == ["B601"]
    assert [x.code for x in check(text.replace("int32", "float32"), "nccl")] == []


# ---- deadlocks and batches ----------------------------------------------------------------------------------------

def test_d402_says_what_each_backend_buffers_and_how_to_break_the_cycle_there():
    text = HEAD + "tensor z: float32[4] = 0\nsend x to 1 - rank\nrecv z from 1 - rank\n"
    d, notes = one(text, "D402", "gloo")
    assert notes[1].startswith("on Gloo a blocking `send` returns only once") and "use `isend`" in d.help
    d, notes = one(text, "D402", "nccl")
    assert notes[1].startswith("on NCCL a `send` can finish before its `recv` is posted")
    assert "use `isend`" not in d.help


def test_an_isend_does_not_break_a_send_cycle_on_nccl():
    # on NCCL the isend and the recv between one pair run in issue order: the isend waits for the peer's recv,
    # which waits behind the peer's isend
    text = HEAD + "tensor z: float32[4] = 0\nh = isend x to 1 - rank\nrecv z from 1 - rank\nwait h\n"
    assert [d.code for d in check(text, "gloo")] == []
    d, notes = one(text, "D402", "nccl")
    assert any(n.startswith("on NCCL a rank's point-to-point ops run one after another in issue order") for n in notes)
    assert d.help.startswith("post the exchange in a `batch:` block, or alternate")


def test_d401_suggests_isend_only_where_it_helps():
    text = HEAD + "tensor z: float32[4] = 0\nrecv z from 1 - rank\nsend x to 1 - rank\n"
    assert "isend" in one(text, "D401", "gloo")[0].help
    assert "isend" not in one(text, "D401", "nccl")[0].help
    assert "isend" not in one(text, "D401", "gloo", "nccl")[0].help  # the fix must work on every checked backend


def test_a_batch_is_quoted_without_its_comments():
    text = ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4] = 0\n"
            "batch:   # exchange with the peer\n    recv y from 1 - rank  # the data\n    # a comment line\n"
            "    recv x from 1 - rank\nsend x to 1 - rank\nsend y to 1 - rank\n")
    d, notes = one(text, "D401", "gloo")
    assert "`batch: recv y from 1 - rank; recv x from 1 - rank`" in notes[0]
    assert "#" not in notes[0] and "comment" not in notes[0] and "exchange" not in notes[0]


BATCH_WITH_COMMENTS = ("world 2\ntensor x: float32[4] = rank\ntensor y: float32[4] = 0\n"
                       "batch:   # exchange with the peer\n    recv y from 1 - rank  # the data\n    # a comment line\n"
                       "    recv x from 1 - rank\nsend x to 1 - rank\nsend y to 1 - rank\n")


def test_a_label_on_a_batch_marks_its_keyword_line_not_its_comments():
    from commdsl.diagnostics.render import render_text

    source = SourceFile("t.comm", BATCH_WITH_COMMENTS)
    [d] = [d for d in check_program(load(source), CheckOptions(backends=("gloo",))) if d.code == "D401"]
    assert d.span.line == 4 and d.span.end_line > d.span.line  # the span is still the whole statement
    text = render_text(d, {"t.comm": source}).plain
    assert "4 | batch:   # exchange with the peer\n  | ^^^^^^ rank 0 waits here" in text


def test_an_unmatched_send_in_a_commented_batch_points_at_the_send():
    from commdsl.diagnostics.render import render_text

    text = ("world 3\ntensor x: float32[4] = rank\ntensor y: float32[4]\nbatch:    # ring step\n"
            "    # every rank sends to its right neighbour\n    send x to (rank + 1) % world  # the data\n"
            "    # but forgets to receive from the left\n")
    source = SourceFile("t.comm", text)
    diags = check_program(load(source), CheckOptions())
    assert [(d.code, d.span.line) for d in diags] == [("P201", 6)]
    out = render_text(diags[0], {"t.comm": source}).plain
    assert "6 |     send x to (rank + 1) % world  # the data\n  |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^ " in out
    assert "neighbour" not in out and "forgets" not in out


def test_statement_text_drops_comments_blank_lines_and_continuations():
    from commdsl.source import statement_text

    text = "batch:   # c\n    send x \\\n      to 1  # d\n\n    # e\n    recv y from 1\n"
    source = SourceFile("t.comm", text)
    assert statement_text(text, source.span(0, len(text) - 1)) == "batch: send x to 1; recv y from 1"


def test_a_run_report_quotes_a_batch_without_its_comments():
    from commdsl.expand import expand
    from commdsl.runtime.outcome import where

    schedule = expand(load(SourceFile("t.comm", BATCH_WITH_COMMENTS)), 2, {})
    at = where(schedule, BATCH_WITH_COMMENTS, 0, 0)
    assert (at.line, at.text) == (4, "batch: recv y from 1 - rank; recv x from 1 - rank")


def test_a_rank_stuck_in_set_up_is_named_with_the_step_it_is_stuck_in():
    from commdsl.expand import expand
    from commdsl.runtime import progress
    from commdsl.runtime.outcome import where

    schedule = expand(load(SourceFile("t.comm", BATCH_WITH_COMMENTS)), 2, {})
    # in set-up, the slot's op field is the set-up step, never an op of the program
    at = where(schedule, BATCH_WITH_COMMENTS, 0, progress.SETUP_PROCESS_GROUP, progress.INIT)
    assert (at.index, at.line) == (-1, None)
    assert at.text == "setting up: init_process_group, connecting to every other rank"
    assert "rendezvous store" in where(schedule, BATCH_WITH_COMMENTS, 1, progress.SETUP_STORE, progress.INIT).text
    assert where(schedule, BATCH_WITH_COMMENTS, 1, -1, progress.INIT).text == "setting up (process group, groups, tensors)"


def test_r501_names_a_loops_first_unwaited_requests_and_counts_the_rest():
    """An `isend` left unwaited at every iteration of a loop: one finding, the loop values of its first `LISTED`
    records, then how many more and the last (4,095 notes for a ring at world 4096, each merged in turn)."""
    text = HEAD + "for s in 0 .. 11:\n    h = isend x to 1 - rank\n    recv y[0:4] from 1 - rank\n"
    d, notes = one(text, "R501", "gloo")
    assert d.message == "the request of `isend` on rank 0 is never waited"
    posted = [n for n in notes if n.startswith(("the one posted", "and "))]
    assert posted == [f"the one posted at s = {k}" for k in range(8)] + ["and 4 more, the last posted at s = 11"]
    assert notes.index(posted[1]) == 2  # after the first and the backend's note, as a single finding reads


# ---- mismatched messages at scale: the engine keeps the first MISMATCHES_KEPT whole, then what the rules read ----

MISMATCHED = """\
world 2..8
tensor x: float32[2 * world] = rank
tensor y: float32[world] = 0
tensor z: float64[2] = 0
tensor w: float32[2] = 0
tensor v: float32[4] = 0
def swap(into):
    batch:
        send x.chunk(rank, world) to (rank + 1) % world
        recv into from (rank - 1) % world
for s in 0 .. 2:
    swap(z)                                        # P206: float32 sent, float64 received, 2 elements each
    swap(y)                                        # P205 at every size but 2: 2 elements sent, world received
    swap(w)
batch:
    send x[0 : 1 + rank % 2] to (rank + 1) % world     # P205 from every other rank only
    recv w[0 : 1] from (rank - 1) % world
for s in 0 .. 1:                                   # posted one by one, met in one step by `wait all`
    a = irecv z[s : s + 1] from (rank - 1) % world     # P206
    b = irecv v[2 * s : 2 * s + 2] from (rank - 1) % world     # P205
    c = isend x[0 : 1] to (rank + 1) % world
    d = isend x[0 : 1] to (rank + 1) % world
wait all
"""


def _rendered(diags) -> list[str]:
    return [f"{d.code} {d.span.start} {[lab.span.start for lab in d.labels]} {d.message} {d.notes}" for d in diags]


@pytest.mark.parametrize("kept", [0, 1, 5])
def test_mismatches_past_the_kept_ones_give_the_same_findings_and_ranks(kept, monkeypatch):
    import commdsl.engine as engine
    from commdsl.expand import expand

    program = load(SourceFile("m.comm", MISMATCHED))
    whole = check(MISMATCHED)
    outcomes = {}
    for world in (3, 4, 8):
        outcomes[world] = engine.run_engine(expand(program, world))
    assert {d.code for d in whole} >= {"P205", "P206"}
    monkeypatch.setattr(engine, "MISMATCHES_KEPT", kept)
    assert _rendered(check(MISMATCHED)) == _rendered(whole)
    for world, full in outcomes.items():
        capped = engine.run_engine(expand(program, world))
        sends, recvs = full.mismatched_messages
        every = np.zeros(world, dtype=bool)
        every[sends.rank] = every[recvs.rank] = True
        np.testing.assert_array_equal(capped.mismatched_ranks, every)
        np.testing.assert_array_equal(full.mismatched_ranks, every)
        assert len(capped.mismatched_messages[0]) < len(sends)  # it kept less


def test_a_statement_pair_reports_each_kind_of_mismatch_once():
    """The one `recv into` of `swap` receives float64 (P206) and, elsewhere, too few elements (P205): each rule
    reads its own kind's first message, not the statement pair's first of any kind."""
    found = [d for d in check(MISMATCHED) if d.code in ("P205", "P206")]
    by_code = {}
    for d in found:
        by_code.setdefault(d.code, []).append((d.span.start, tuple(lab.span.start for lab in d.labels)))
    assert len(by_code["P206"]) == 2
    assert len(by_code["P205"]) == 3  # the function's pair, the last batch's, the async ops'
    assert by_code["P206"][0] in by_code["P205"]  # the same two statements
    worlds = {(d.code, d.span.start): set(d.worlds) for d in found}
    assert worlds["P206", by_code["P206"][0][0]] == set(range(2, 9))  # each kind's first, at every size
    assert worlds["P205", by_code["P205"][0][0]] == set(range(3, 9))
