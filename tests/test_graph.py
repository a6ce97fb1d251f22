"""`commdsl graph` (the sequence-diagram model, its Mermaid and DOT forms, Graphviz rendering) and
`commdsl timeline` (Chrome trace → Gantt PNG)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from commdsl.cli.main import main
from commdsl.diagnostics import CommdslError
from commdsl.emit import graph
from commdsl.engine import run_engine
from commdsl.expand import expand
from commdsl.resolve import load
from commdsl.schedule import Collective, Send
from commdsl.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").glob("*.comm")) + sorted((ROOT / "programs" / "bad").glob("*.comm"))
HAS_DOT = shutil.which("dot") is not None
RED = graph.RED

# rank 0 → 1 → 2 by send/recv, then an all_reduce on everyone and a broadcast in a group of two
SMALL = """\
program small
world 3
tensor x: float32[4] = rank
group pair = [0, 2]
on rank == 0:
    send x to 1
else on rank == 1:
    recv x from 0
    send x to 2
else:
    recv x from 1
all_reduce x op max
on rank != 1:
    broadcast x from 2 in pair
"""

# both ranks send first: a head-to-head deadlock under Gloo's rendezvous sends
DEADLOCK = """\
program deadlock
world 2
tensor x: float32[4] = rank
tensor y: float32[4]
send x to 1 - rank
recv y from 1 - rank
"""


def diagram(text: str, world: int, name: str = "t.comm") -> graph.Diagram:
    program = load(SourceFile(name, text))
    return graph.build(program, expand(program, world))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def dot_statements(dot: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Node statements {name: attributes} and edges [(tail, head, attributes)] of our one-per-line DOT."""
    nodes, edges = {}, []
    for line in dot.splitlines():
        if m := re.fullmatch(r"  (\w+) -> (\w+)(?: \[(.*)\])?;", line):
            edges.append((m[1], m[2], m[3] or ""))
        elif m := re.fullmatch(r"  (\w+) \[(.*)\];", line):
            nodes[m[1]] = m[2]
    return nodes, edges


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# ---- the model ------------------------------------------------------------------------------------


def test_small_program_model():
    d = diagram(SMALL, 3)
    assert [lane.rank for lane in d.lanes] == [0, 1, 2] and all(lane.stuck_line is None for lane in d.lanes)
    assert [(m.send.rank, m.recv.rank) for m in d.messages] == [(0, 1), (1, 2)]
    first, second = d.messages
    assert first.send.row < first.recv.row <= second.send.row < second.recv.row
    reduce_, bcast = d.bands
    assert reduce_.label == "all_reduce · max · 4 × float32 = 16 B"
    assert bcast.label == "broadcast · root 2 · 4 × float32 = 16 B · in pair [0, 2]"
    assert [ev.rank for ev in bcast.calls] == [0, 2] and bcast.row > reduce_.row > second.recv.row
    assert {ev.row for ev in reduce_.calls} == {reduce_.row}
    assert [t for _, t in d.gutter[first.send.row]] == ["  6  send x to 1"]
    assert d.findings == [] and d.cycles == []


def test_deadlock_model_has_the_cycle():
    d = diagram(DEADLOCK, 2)
    [cycle] = d.cycles
    assert [(e.src.rank, e.dst.rank) for e in cycle] == [(0, 1), (1, 0)]
    assert all(e.src.status == "cycle" and type(e.src.op) is Send for e in cycle)
    assert [lane.stuck_line for lane in d.lanes] == [5, 5]
    assert [f.code for f in d.findings] == ["D402"]


def test_a_member_stuck_in_new_group_is_an_event_of_the_cycle():
    path = Path(__file__).resolve().parent.parent / "programs" / "bad" / "new_group_deadlock.comm"
    d = diagram(path.read_text(), 3)
    [cycle] = d.cycles
    assert [(e.src.rank, type(e.src.op).__name__, e.src.op.span.line) for e in cycle] == [
        (0, "NewGroup", 9),
        (1, "Recv", 12),
    ]
    assert cycle[0].src.note == "waits in `new_group` for rank 1"
    assert [lane.stuck_line for lane in d.lanes] == [9, 12, None]
    assert "r0--)r1: line 9: rank 0 waits for rank 1" in graph.to_mermaid(d)
    assert "waits in `new_group` for rank 1" in graph.to_dot(d)


BOUND = """\
program bound
world 2
tensor x: float32[4] = rank
tensor y: float32[2, 4]
tensor z: float32[4]
tensor w: float32[4]
b = batch:
    send x to 1 - rank
    recv z from 1 - rank
for k in 0 .. 1:
    on rank == 0:
        h[k] = isend x to 1 tag k
    else:
        recv y[k] from 0 tag k
w = 1
on rank == 0:
    wait h[1]
wait b
wait all h
batch:
    send x to 1 - rank tag 5
    recv z from 1 - rank tag 5
"""


def test_bound_batches_and_arrays_of_handles_complete_where_they_are_waited():
    """The engine's record of each request's wait times the events: a batch bound to a handle completes at
    `wait b` (both its ops), each slot of an array of handles at the wait that covers it, a plain batch at once."""
    d = diagram(BOUND, 2)
    assert d.findings == [] and d.cycles == []
    done = {(ev.rank, ev.op.span.line, ev.op.bindings): (ev.posted, ev.done) for ev in d.events}
    # rank 0: 0 `b = batch`, 1-2 isend h[0], h[1], 3 `w = 1`, 4 `wait h[1]`, 5 `wait b`, 6 `wait all h`, 7 batch
    assert done[(0, 8, ())] == done[(0, 9, ())] == (0, 5)
    assert done[(0, 12, (("k", 0),))] == (1, 6) and done[(0, 12, (("k", 1),))] == (2, 4)
    assert done[(0, 21, ())] == done[(0, 22, ())] == (7, 7)
    # rank 1: 0 `b = batch`, 1-2 blocking recvs, 3 `w = 1`, 4 `wait b`
    assert done[(1, 8, ())] == done[(1, 9, ())] == (0, 4)
    assert done[(1, 14, (("k", 0),))] == (1, 1)


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_program_draws_consistently(path):
    """Rows respect causality; nothing overlaps on a row; both text forms come out for every fixture."""
    source = SourceFile.read(path)
    try:
        program = load(source)
        world = program.world_sizes(4)[min(2, len(program.world_sizes(4)) - 1)]
        schedule = expand(program, world)
    except CommdslError:
        pytest.skip("does not expand (a syntax, name or shape fixture)")
    sends = len(run_engine(schedule, record_matches=True).matches[0])
    assert len(graph.build(program, schedule, None).messages) == sends
    d = graph.build(program, schedule, max_ranks=3)  # fold lanes too, where the program has more than 3 ranks
    folded = sum(type(ev.op) is Send for f in d.folds for ev in f.events)
    hidden = sum(int(c.split()[0]) for c in d.caption if "between ranks of one folded lane" in c)
    assert len(d.messages) + folded + hidden == sends
    for m in d.messages:
        assert m.send.row < m.recv.row
    for b in d.bands:
        assert len({ev.row for ev in b.calls}) == 1
    taken: dict[int, list[tuple[int, int]]] = {}
    for b in d.bands:
        lanes = [d.column[ev.rank] for ev in b.calls] + [d.column[r] for r, _ in b.missing]
        taken.setdefault(b.row, []).append((min(lanes), max(lanes)))
    for ev in d.events:
        if type(ev.op) is not Collective:
            taken.setdefault(ev.row, []).append((d.column[ev.rank], d.column[ev.rank]))
    for f in d.folds:
        taken.setdefault(f.row, []).append((f.lo, f.hi))
    for row, spans in taken.items():
        spans.sort()
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), f"overlap on row {row}"
    assert sorted({ev.row for ev in d.events} | {f.row for f in d.folds}) == list(range(d.rows))  # dense, from 0
    dot, mermaid = graph.to_dot(d), graph.to_mermaid(d)
    assert dot.startswith("digraph") and mermaid.startswith("sequenceDiagram")


def test_too_large_is_refused(monkeypatch):
    monkeypatch.setattr(graph, "MAX_EVENTS", 5)
    with pytest.raises(graph.DiagramTooLarge, match="world size 3 gives 9 .* after folding"):
        diagram(SMALL, 3)
    monkeypatch.setattr(graph, "MAX_EXPANSION", 5)
    with pytest.raises(graph.DiagramTooLarge, match="gives 9 .*; folding picks from at most 5"):
        diagram(SMALL, 3)


# ---- DOT and Mermaid ------------------------------------------------------------------------------


def test_dot_structure_of_small_program():
    d = diagram(SMALL, 3)
    nodes, edges = dot_statements(graph.to_dot(d))
    for r in range(3):
        assert 'label="rank %d"' % r in nodes[f"h{r}"] and f"f{r}" in nodes
        assert (f"h{r}", f"f{r}", f'arrowhead=none, color="{graph.GREY}"') in edges  # lifeline
    ids = {id(ev): f"e{i}" for i, ev in enumerate(d.events)}
    messages = [(t, h) for t, h, attrs in edges if t.startswith("e") and h.startswith("e") and not attrs]
    assert messages == [(ids[id(m.send)], ids[id(m.recv)]) for m in d.messages]
    bands = {name: attrs for name, attrs in nodes.items() if name.startswith("band")}
    assert len(bands) == 2
    assert any('label="all_reduce · max · 4 × float32 = 16 B"' in a for a in bands.values())
    assert any("broadcast · root 2" in a and "in pair [0, 2]" in a for a in bands.values())
    gutter = [attrs for name, attrs in nodes.items() if re.fullmatch(r"g\d+", name)]
    assert any("6  send x to 1" in a for a in gutter) and any("12  all_reduce x op max" in a for a in gutter)
    assert RED not in graph.to_dot(d)


def test_dot_draws_the_deadlock_cycle_in_red():
    d = diagram(DEADLOCK, 2)
    dot = graph.to_dot(d)
    assert "layout=neato" in dot  # positions are ours; dot -T… renders them unchanged
    nodes, edges = dot_statements(dot)
    red = [(t, h) for t, h, attrs in edges if f'color="{RED}"' in attrs]
    assert len(red) == 6  # two wait-for edges, each drawn as three segments
    ids = {id(ev): f"e{i}" for i, ev in enumerate(d.events)}
    for e in d.cycles[0]:
        assert any(t == ids[id(e.src)] for t, _ in red) and any(h == ids[id(e.dst)] for _, h in red)
    stuck = [ids[id(e.src)] for e in d.cycles[0]]
    assert all(f'fillcolor="{RED}"' in nodes[s] for s in stuck)
    assert any("rank 0 waits for rank 1" in a for a in nodes.values())
    assert any("error[D402]" in a for a in nodes.values())


def test_dot_marks_unmatched_ops():
    text = "program u\nworld 2\ntensor x: float32[1]\non rank == 1:\n    recv x from 0\n"
    d = diagram(text, 2)
    [ev] = [ev for ev in d.events if ev.status == "unmatched"]
    assert "rank 0 finishes without a matching `send`" in ev.note
    nodes, edges = dot_statements(graph.to_dot(d))
    i = f"e{d.events.index(ev)}"
    assert 'fillcolor="white"' in nodes[i] and f'color="{RED}"' in nodes[i]
    assert (f"s{i}", i) in [(t, h) for t, h, _ in edges]  # the dashed stub from the silent peer
    assert "unmatched: rank 0 finishes" in nodes[f"t{i}"]


def test_mermaid_structure():
    d = diagram(SMALL, 3)
    lines = graph.to_mermaid(d).splitlines()
    assert lines[0] == "sequenceDiagram"
    assert [x for x in lines if "participant" in x] == [f"    participant r{r} as rank {r}" for r in range(3)]
    assert [x.split(":")[0].strip() for x in lines if "->>" in x] == ["r0->>r1", "r1->>r2"]
    assert "line 6→8" in lines[[i for i, x in enumerate(lines) if "->>" in x][0]]
    notes = [x for x in lines if x.strip().startswith("Note over")]
    assert notes[0].startswith("    Note over r0,r2: all_reduce · max") and "in pair [0, 2]" in notes[1]
    assert "rect" not in "\n".join(lines)


def test_mermaid_deadlock_is_a_red_rect():
    text = graph.to_mermaid(diagram(DEADLOCK, 2))
    block = text[text.index("    rect rgb(255, 214, 214)"):]
    assert "Note over r0,r1: D402:" in block
    assert "r0--)r1: line 5: rank 0 waits for rank 1" in block and "r1--)r0: line 5: rank 1 waits for rank 0" in block
    assert "Note over r0: stuck at line 5, 1 op not reached" in text


def test_mermaid_escapes_what_it_would_misread():
    assert graph._mm("a; b # c <d>") == "a#59; b #35; c #lt;d#gt;"


# ---- the command ----------------------------------------------------------------------------------


def test_cli_mermaid_to_stdout_and_exit_codes(tmp_path, capsys):
    small = tmp_path / "small.comm"
    small.write_text(SMALL)
    code, out, _ = run(capsys, "graph", str(small))  # one declared size: --world may be left out
    assert code == 0 and out.startswith("sequenceDiagram")
    dead = tmp_path / "dead.comm"
    dead.write_text(DEADLOCK)
    code, out, err = run(capsys, "graph", str(dead), "--format", "dot")
    assert code == 1 and out.startswith("digraph") and "D402" in err


def test_cli_usage_errors(tmp_path, capsys):
    ring = str(ROOT / "programs" / "ring_allreduce.comm")
    with pytest.raises(SystemExit) as e:
        main(["graph", ring])
    assert e.value.code == 2 and "give --world" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["graph", ring, "--world", "2", "-o", str(tmp_path / "x.jpeg")])
    assert e.value.code == 2 and "cannot tell the format" in capsys.readouterr().err
    code, out, _ = run(capsys, "graph", ring, "--world", "99")
    assert code == 1 and "error[N124]" in out


def test_cli_world_too_large_for_a_picture(monkeypatch, capsys):
    monkeypatch.setattr(graph, "MAX_EVENTS", 10)
    code, _, err = run(capsys, "graph", str(ROOT / "programs" / "ring_allreduce.comm"), "--world", "4")
    assert code == 2 and "smaller --world" in err


def test_cli_without_graphviz_says_how_it_drew(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "ring.svg"
    code, _, err = run(capsys, "graph", str(ROOT / "programs" / "ring_allreduce.comm"), "--world", "2", "-o", str(out))
    assert code == 0 and "<svg" in out.read_text()
    assert "drawn with matplotlib" in err and "`dot` program was not found" in err and "apt-get install graphviz" in err


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz `dot` is not installed")
def test_cli_png_of_ring_allreduce(tmp_path, capsys):
    out = tmp_path / "ring.png"
    code, _, _ = run(capsys, "graph", str(ROOT / "programs" / "ring_allreduce.comm"), "--world", "4", "-o", str(out))
    assert code == 0
    width, height = png_size(out.read_bytes())
    assert width > 800 and height > 500


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz `dot` is not installed")
def test_cli_svg_shows_the_cycle_in_red(tmp_path, capsys):
    path = ROOT / "programs" / "bad" / "head_to_head_send.comm"
    if not path.exists():
        path = tmp_path / "head_to_head.comm"
        path.write_text(DEADLOCK)
    code, out, _ = run(capsys, "graph", str(path), "--world", "2", "--format", "svg")
    assert code == 1
    svg = ET.fromstring(out)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    red_paths = [p for g in svg.iterfind(".//svg:g[@class='edge']", ns) for p in g.iterfind("svg:path", ns)
                 if p.get("stroke", "").lower() == RED]
    assert len(red_paths) == 6
    texts = " ".join(t.text or "" for t in svg.iterfind(".//svg:text", ns))
    assert "rank 0 waits for rank 1" in texts and "rank 1 waits for rank 0" in texts


# ---- timeline -------------------------------------------------------------------------------------


def chrome_trace(ranks: int = 4) -> dict:
    """What `commdsl run --trace` writes: a process per rank with metadata, `X` events in µs; plus one
    rank recorded with B/E pairs, as other tools write them."""
    events = []
    for r in range(ranks):
        events += [{"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}},
                   {"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}}]
        t = 100.0 * r
        for step in range(3):
            events.append({"name": f"18: send x to {(r + 1) % ranks}", "cat": "send", "ph": "X", "pid": r,
                           "tid": 0, "ts": t, "dur": 250.0})
            events.append({"name": "20: all_reduce x", "cat": "collective", "ph": "X", "pid": r, "tid": 0,
                           "ts": t + 300, "dur": 400.0 + 50 * r})
            t += 900
    events += [{"name": "outer", "ph": "B", "pid": "host", "tid": 7, "ts": 0},
               {"name": "inner", "ph": "B", "pid": "host", "tid": 7, "ts": 10},
               {"ph": "E", "pid": "host", "tid": 7, "ts": 20},
               {"ph": "E", "pid": "host", "tid": 7, "ts": 50},
               {"ph": "E", "pid": "host", "tid": 7, "ts": 60},  # no B for it: skipped
               {"name": "counter", "ph": "C", "pid": 0, "ts": 5, "args": {"v": 1}}]
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"program": "ring", "world": ranks}}


def test_load_trace_tracks_pairs_and_nesting():
    trace = graph.load_trace(json.dumps(chrome_trace()))
    assert trace.tracks == ["rank 0", "rank 1", "rank 2", "rank 3", "pid host"]
    assert trace.title == "ring — world 4" and trace.skipped == 1
    host = [s for s in trace.slices if s.track == 4]
    assert [(s.name, s.start, s.dur, s.depth) for s in host] == [("outer", 0.0, 50.0, 0), ("inner", 10.0, 10.0, 1)]
    assert {s.kind for s in trace.slices if s.track == 0} == {"send", "collective"}
    assert len([s for s in trace.slices if s.track < 4]) == 24


def test_load_trace_accepts_a_bare_array():
    events = [{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
              {"name": "b", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 2}]
    trace = graph.load_trace(json.dumps(events))
    assert trace.tracks == ["pid 1 / tid 1", "pid 1 / tid 2"]


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"),
    ('{"traceEvents": 3}', "traceEvents"),
    ('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0}]}', "no duration events"),
    ('[{"name": "a", "ph": "X", "ts": "soon", "dur": 1}]', "`ts` is not a number"),
    ("[1]", "event 0 is not an object"),
])
def test_load_trace_errors(text, message):
    with pytest.raises(graph.TraceError, match=message):
        graph.load_trace(text)


def test_cli_timeline_png(tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(chrome_trace()))
    out = tmp_path / "timeline.png"
    code, _, err = run(capsys, "timeline", str(path), "--png", str(out))
    assert code == 0 and "1 event(s) skipped" in err
    width, height = png_size(out.read_bytes())
    assert width > 1000 and height > 300


def test_cli_timeline_bad_input(tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_text("not json")
    code, _, err = run(capsys, "timeline", str(path), "--png", str(tmp_path / "t.png"))
    assert code == 2 and "not JSON" in err
    code, _, err = run(capsys, "timeline", str(tmp_path / "missing.json"), "--png", str(tmp_path / "t.png"))
    assert code == 2 and "cannot read" in err


@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml")])
def test_without_graphviz_the_picture_is_drawn_with_matplotlib(tmp_path, fmt, magic):
    """No `dot` on PATH (a machine without Graphviz): SVG and PNG still come out, with a note saying how."""
    import subprocess
    import sys

    out = tmp_path / f"d.{fmt}"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "commdsl", "graph", str(root / "programs" / "bad" /
                           "head_to_head_send.comm"), "-o", str(out)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PATH=str(tmp_path)), cwd=root)
    assert done.returncode == 1  # the diagram shows the deadlock
    assert "drawn with matplotlib" in done.stderr and out.read_bytes().startswith(magic)
    if fmt == "svg":
        assert "<svg" in out.read_text()


# ---- folding wide worlds and long loops -----------------------------------------------------------

RING = (ROOT / "programs" / "ring_allreduce.comm").read_text().replace("world 1..16", "world 1..256")

# everyone all-reduces, then ranks 5 and 9 send to each other first: a deadlock of two ranks in sixteen
PARTIAL_DEADLOCK = """\
program partial_deadlock
world 16
tensor x: float32[4] = rank
tensor y: float32[4]
all_reduce x
on rank == 5:
    send x to 9
    recv y from 9
else on rank == 9:
    send x to 5
    recv y from 5
"""

# rank 1 skips the receive of iteration 6: from there every message crosses iterations, the last is unmatched
LOOP_BUG = """\
program loop_bug
world 2
tensor x: float32[1]
for s in 0 .. 9:
    on rank == 0:
        send x to 1
    else on s != 6:
        recv x from 0
"""


@pytest.mark.parametrize("world", [16, 64])
def test_ring_folds_ranks_and_iterations(world):
    d = diagram(RING, world, "ring.comm")
    assert len(d.lanes) <= graph.MAX_RANKS
    [folded] = [lane for lane in d.lanes if lane.folded]
    assert folded.label == f"ranks 4–{world - 4} ({world - 7} ranks, folded)"
    assert [lane.rank for lane in d.lanes if not lane.folded] == [0, 1, 2, 3, world - 3, world - 2, world - 1]
    assert [(f.line, f.values[0], f.values[-1], f.like) for f in d.folds] == [
        (14, 2, world - 2, [0, 1]),
        (21, 2, world - 2, [0, 1]),
    ]
    assert d.folds[0].label == f"× {world - 3} more iterations of the loop at line 14 (s = 2…{world - 2}), folded"
    assert f"ranks 4–{world - 4} folded into one lane" in d.caption
    assert f"{world - 3} iterations of the loop at line 21 folded, each like the ones kept before it" in d.caption
    # what is drawn is two iterations of each loop, on every lane: messages leaving the folded lane included
    assert {m.send.op.bindings for m in d.messages} == {(("s", 0),), (("s", 1),)}
    assert len(d.messages) == 2 * 2 * len(d.lanes)
    for m in d.messages:
        assert m.send.row < m.recv.row
    # causal rows survive folding: both iterations of the first loop come before its fold, the second loop after
    first, second = d.folds
    assert all(m.recv.row < first.row for m in d.messages if m.send.op.span.line == 18)
    assert all(first.row < m.send.row and m.recv.row < second.row for m in d.messages if m.send.op.span.line == 23)


def test_a_deadlock_in_a_wide_world_keeps_its_ranks_and_red_edges():
    d = diagram(PARTIAL_DEADLOCK, 16)
    shown = [lane.rank for lane in d.lanes if not lane.folded]
    assert 5 in shown and 9 in shown and len(d.lanes) <= graph.MAX_RANKS
    [cycle] = d.cycles
    assert sorted((e.src.rank, e.dst.rank) for e in cycle) == [(5, 9), (9, 5)]
    assert all(e.src in d.events and e.src.status == "cycle" for e in cycle)
    nodes, edges = dot_statements(graph.to_dot(d))
    red = [(t, h) for t, h, attrs in edges if f'color="{RED}"' in attrs]
    assert len(red) == 6  # two wait-for edges, three segments each
    ids = {id(ev): f"e{i}" for i, ev in enumerate(d.events)}
    assert {ids[id(e.src)] for e in cycle} <= {t for t, _ in red}
    assert "label=\"rank 5\"" in nodes["h5"] and "label=\"rank 9\"" in nodes["h9"]
    mermaid = graph.to_mermaid(d)
    assert "r5--)r9: line 7: rank 5 waits for rank 9" in mermaid and "participant r5 as rank 5" in mermaid


def test_an_iteration_with_a_finding_is_never_folded():
    d = diagram(LOOP_BUG, 2)
    [fold] = d.folds
    assert fold.values == [2, 3, 4, 5] and fold.like == [0, 1]  # 6.. have messages crossing iterations
    [bad] = [ev for ev in d.events if ev.status == "unmatched"]
    assert bad.op.bindings == (("s", 9),) and bad not in fold.events
    assert {m.send.op.bindings[0][1] for m in d.messages} == {0, 1, 6, 7, 8}


def test_nested_loops_fold_from_the_outside_in():
    text = """\
program nested
world 2..64
tensor x: float32[4] = rank
for epoch in 0 .. 5:
    for s in 0 .. 5:
        batch:
            send x to (rank + 1) % world
            recv x from (rank - 1) % world
    all_reduce x
"""
    d = diagram(text, 32)
    assert [(f.line, f.prefix, f.values) for f in d.folds] == [
        (4, (), [2, 3, 4, 5]),
        (5, (("epoch", 0),), [2, 3, 4, 5]),
        (5, (("epoch", 1),), [2, 3, 4, 5]),
    ]
    assert d.folds[2].label == "× 4 more iterations of the loop at line 5 (epoch=1, s = 2…5), folded"
    assert [b.calls[0].op.bindings for b in d.bands] == [(("epoch", 0),), (("epoch", 1),)]
    assert {m.send.op.bindings for m in d.messages} == {(("epoch", e), ("s", s)) for e in (0, 1) for s in (0, 1)}
    rows = [f.row for f in d.folds]
    assert rows[1] < d.bands[0].row < rows[2] < d.bands[1].row < rows[0] == d.rows - 1


def test_no_fold_and_max_ranks(capsys):
    d = graph.build(load(SourceFile("ring.comm", RING)), expand(load(SourceFile("ring.comm", RING)), 16), None)
    assert [lane.rank for lane in d.lanes] == list(range(16)) and not d.folds and not d.caption
    assert len(d.messages) == 2 * 15 * 16
    path = str(ROOT / "programs" / "ring_allreduce.comm")
    code, out, _ = run(capsys, "graph", path, "--world", "16", "--no-fold")
    assert code == 0 and out.count("participant") == 16 and "folded" not in out
    code, out, _ = run(capsys, "graph", path, "--world", "16", "--max-ranks", "5")
    assert code == 0 and out.count("participant") == 5 and "participant r2 as ranks 2–13 (12 ranks, folded)" in out
    with pytest.raises(SystemExit) as e:
        main(["graph", path, "--world", "16", "--max-ranks", "2"])
    assert e.value.code == 2 and "--max-ranks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["graph", "--help"])
    assert f"(default: {graph.MAX_RANKS}," in capsys.readouterr().out


def test_every_format_states_what_it_folded(tmp_path, monkeypatch, capsys):
    path = str(ROOT / "programs" / "ring_allreduce.comm")
    caption = "ranks 4–12 folded into one lane"
    for fmt in ("mermaid", "dot"):
        code, out, _ = run(capsys, "graph", path, "--world", "16", "--format", fmt)
        assert code == 0 and caption in out and "× 13 more iterations of the loop at line 14" in out
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no Graphviz: SVG and PNG are drawn with matplotlib
    svg = tmp_path / "ring.svg"
    code, _, err = run(capsys, "graph", path, "--world", "16", "-o", str(svg))
    assert code == 0 and "drawn with matplotlib" in err
    assert "<svg" in svg.read_text()
    from matplotlib.axes import Axes

    drawn: list[str] = []
    text = Axes.text
    monkeypatch.setattr(Axes, "text", lambda self, x, y, s, *a, **k: drawn.append(s) or text(self, x, y, s, *a, **k))
    png = tmp_path / "ring.png"
    code, _, _ = run(capsys, "graph", path, "--world", "16", "-o", str(png))
    assert code == 0 and png.read_bytes().startswith(b"\x89PNG")
    assert caption in drawn and "ranks 4–12\n(9 ranks, folded)" in drawn
    assert any(s.startswith("× 13 more iterations of the loop at line 21") for s in drawn)


def test_the_picture_stays_the_same_size_as_the_world_grows():
    program = load(SourceFile("ring.comm", RING))
    nodes = {w: dot_statements(graph.to_dot(graph.build(program, expand(program, w))))[0] for w in (16, 256)}
    everything = dot_statements(graph.to_dot(graph.build(program, expand(program, 16), None)))[0]
    assert len(nodes[16]) == len(nodes[256]) < len(everything) / 10  # 159 nodes, against 2,015 unfolded at 16
