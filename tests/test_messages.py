"""What the diagnostics say (issue 12, items 5 and 7): a citation of the backend model's section."""

from __future__ import annotations

import re
from pathlib import Path

from commdsl.checker import CheckOptions, check_program
from commdsl.resolve import load
from commdsl.rules import BACKEND_DOC
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
    assert {"P201", "P205", "P209", "R501", "R504", "D402", "B601", "C303"} <= set(cited)


def test_a_finding_checked_on_both_backends_keeps_the_notes_of_each_and_cites_once():
    text = HEAD + "tensor z: float32[4] = 0\nsend x to 1 - rank\nrecv z from 1 - rank\n"
    _, notes = one(text, "D402", "gloo", "nccl")
    assert [n.split(" ")[1] for n in notes if n.startswith("on ")] == ["Gloo", "NCCL"]
    assert notes[-1] == "see docs/backend-support.md#p2p-completion"
