"""Fuzzing every offline command: hostile input gives a diagnostic, never an internal error, a hang or a blow-up.

Four sources of input:

* `grammar`: programs derived from the language's own grammar (grammar/commdsl.lark, compiled by Lark):
  random walks of its rules (`GrammarWalker`), with names and numbers from a small, partly hostile
  vocabulary so that many of them resolve and reach expansion, the simulator and the emitters;
  indentation is laid out afterwards (`layout`), since a context-free generator cannot count it.
  tests/test_fuzz.py draws statements from the same grammar with hypothesis's `from_lark` (which
  shrinks a failure to a minimal statement, but is too slow for volume).
* `bytes`: byte-level mutations of every shipped program (`programs/`, `programs/bad/`) and of the
  findings kept in `tests/fuzz_corpus/`: bit flips,
  deleted, inserted and duplicated runs, splices of two programs, truncations, and interesting bytes
  (NUL, a BOM, CR, invalid UTF-8, non-ASCII digits, a triple quote, 1e309, 2**63).
* `tokens`: token edits of the same seeds and random token streams (the fuzzer of before).
* `topology`: `commdsl predict`'s topology files (the presets and a calibrated host's, every key present),
  their values replaced by hostile ones (0, -1, 5e-324, 1e300, inf, nan, 2**63, a string, a table), lines
  dropped or doubled, bytes mutated; each parses to a topology or is N136, and a topology that parses predicts
  the ring at world 4 in finite times that grow with the size (1e300 GB/s once made them NaN).

Every program goes through the library calls behind `check`, `lint`, `sim`, `fmt` (formatted twice: it
must be a fixed point), `compile` (the script must parse) and `graph` (Mermaid and DOT), with its
diagnostics rendered in every format; every CLI_EVERY-th input also through `commdsl.cli.main` itself,
verb by verb, where exit 2 with "internal error" is a bug. Each (input, command) has HANG_S seconds
(SIGALRM); the process runs under an address-space limit, so a blow-up is a MemoryError, not a dead
machine. Anything but a diagnostic is saved under --save with its traceback, and the run exits 1.

    python tests/fuzzing.py --profile ci      # .ci/run: about 3,000 inputs, under 2 minutes
    python tests/fuzzing.py --profile long    # the figures in docs/reliability.md
    python tests/fuzzing.py --source bytes --count 20000 --seed 7
    python tests/fuzzing.py --source topology --count 5000

tests/test_fuzz.py runs a small share of the same inputs in the quick test loop.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import math
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commdsl.checker import CheckOptions, check_program, data_diagnostics, stall_diagnostics  # noqa: E402
from commdsl.diagnostics import CommdslError  # noqa: E402
from commdsl.diagnostics.render import emit  # noqa: E402
from commdsl.emit.fmt import format_source  # noqa: E402
from commdsl.emit.graph import DiagramTooLarge, build, to_dot, to_mermaid  # noqa: E402
from commdsl.emit.python import emit_python  # noqa: E402
from commdsl.expand import expand  # noqa: E402
from commdsl.files import MAX_PROGRAM_BYTES  # noqa: E402
from commdsl.limits import memory_problem  # noqa: E402
from commdsl.resolve import load  # noqa: E402
from commdsl.simulate import format_tensor, simulate  # noqa: E402
from commdsl.source import SourceFile  # noqa: E402

HANG_S = 10.0
"""Seconds one command may take on one input before it counts as a hang."""
MAX_WORLD = 8
"""World sizes above this are not expanded: `world 65536` taking minutes is a known expansion cost
(issue 14, owned by the core rewrite), not something a fuzzer should rediscover on every run."""
CLI_EVERY = 10
MEMORY_LIMIT = 6 << 30
VERBS = ("check", "lint", "sim", "fmt", "compile", "graph")
PROFILES = {"ci": {"grammar": 1300, "bytes": 1200, "tokens": 500, "topology": 150},
            "long": {"grammar": 40000, "bytes": 40000, "tokens": 20000, "topology": 5000}}

SEEDS = [p.read_bytes() for p in sorted((ROOT / "programs").rglob("*.comm"))
         + sorted((ROOT / "tests" / "fuzz_corpus").glob("*.comm"))]
"""The shipped programs and tests/fuzz_corpus/ (one file per finding of the issue 14 campaign): what gets mutated."""
VOCAB = ("program world backend param tensor group mesh let send recv isend irecv broadcast all_reduce reduce "
         "all_gather gather scatter reduce_scatter all_to_all barrier wait all batch for while in on else expect print "
         "to from into op tag split by splits rank world i x y h g m n float32 int64 bool bfloat16 sum max band "
         "chunk size rows rand min max log2 true false and or not 0 1 2 7 -1 1024 99999999999 0.5 1e9 ( ) [ ] , : . "
         ".. = += -= *= /= <<= >>= &= |= ^= == != < <= > >= + - * / // % ** << >> & | ^ # \n \n\n \n    \n        \t \\\n é 😀 \x00 $").split(" ")
INTERESTING = [b"\x00", b"\xff", b"\xef\xbb\xbf", b"\r", b"\r\n", b"\t", b"\\\n", b"#", "é".encode(), "٣".encode(),
               "３".encode(), b"\xed\xa0\x80", b"\xc0\xaf", b'"""', b"'", b"{", b"}", b"1e309", b"9223372036854775808",
               b"99999999999999999999999", b"-0", b"0.0", b"nan", b"inf", b"\x0c", b"\x85", "\u2028".encode(),
               b"    ", b"\n    ", b"rank", b"world", b"torch", b"r0", b"def", b"1" * 40]


class Hang(BaseException):
    """Raised by SIGALRM inside a command that ran past HANG_S (a BaseException: nothing may swallow it)."""


class Bug(Exception):
    """A property the fuzzer checks itself failed (fmt is not a fixed point, a script does not parse)."""


# ---- sources ------------------------------------------------------------------------------------------------

def mutate(text: str, rng: random.Random) -> str:
    """Token-level edits (the fuzzer of before)."""
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        pos = rng.randrange(len(text) + 1)
        if kind == 0 and text:
            text = text[:pos] + text[pos + rng.randint(1, 12):]
        elif kind == 1:
            text = text[:pos] + " " + rng.choice(VOCAB) + " " + text[pos:]
        elif kind == 2 and text:
            words = text.split(" ")
            words[rng.randrange(len(words))] = rng.choice(VOCAB)
            text = " ".join(words)
        elif kind == 3:
            lines = text.split("\n")
            k = rng.randrange(len(lines))
            lines.insert(k, lines[k])
            text = "\n".join(lines)
        else:
            text = text[:pos] + chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x3000)])) + text[pos:]
    return text


def token_stream(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 60)))


def token_inputs(count: int, seed: int):
    rng = random.Random(seed)
    for k in range(count):
        yield (token_stream(rng) if k % 4 == 3 else mutate(rng.choice(SEEDS).decode("utf-8"), rng)).encode(
            "utf-8", "surrogatepass")


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    for _ in range(rng.randint(1, 6)):
        pos = rng.randrange(len(data) + 1)
        kind = rng.randrange(8)
        if kind == 0 and data:  # flip a bit
            at = rng.randrange(len(data))
            data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:]
        elif kind == 1 and data:  # delete a run
            data = data[:pos] + data[pos + rng.randint(1, 40):]
        elif kind == 2:  # random bytes
            data = data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[pos:]
        elif kind == 3:
            data = data[:pos] + rng.choice(INTERESTING) + data[pos:]
        elif kind == 4 and data:  # duplicate a run, sometimes many times
            end = min(len(data), pos + rng.randint(1, 200))
            data = data[:end] + data[pos:end] * rng.choice([1, 1, 2, 3, 50]) + data[end:]
        elif kind == 5:  # splice in part of another program
            other = rng.choice(SEEDS)
            a = rng.randrange(len(other) + 1)
            data = data[:pos] + other[a:a + rng.randint(1, 300)] + data[pos:]
        elif kind == 6:  # truncate
            data = data[:pos]
        else:  # swap two lines
            lines = data.split(b"\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            data = b"\n".join(lines)
    return data


def byte_inputs(count: int, seed: int):
    rng = random.Random(seed)
    extremes = [b"\n" * 30000, b"world 2\n" + b"(" * 5000 + b"\n", b"let k = " + b"1 + " * 50000 + b"1\n",
                b"world 2\ntensor x: float32[" + b", ".join([b"1"] * 65) + b"]\n", b"# " + b"x" * (MAX_PROGRAM_BYTES - 2),
                b"world 65536\ntensor x: float32[1]\nall_reduce x\n", b"\xef\xbb\xbf\xef\xbb\xbfworld 2\n"]
    for k in range(count):
        if k % 400 == 399:
            yield extremes[(k // 400) % len(extremes)]
        else:
            yield mutate_bytes(rng.choice(SEEDS), rng)


def layout(text: str) -> str:
    """Indentation for a grammar-generated program: `\\x01` (INDENT) and `\\x02` (DEDENT) markers, placed
    after the newline they follow, set the depth; each line then starts with four spaces per level."""
    depth, out = 0, []
    for line in text.split("\n"):
        body = line.lstrip(" \t\f")
        while body[:1] in ("\x01", "\x02"):
            depth = max(0, depth + (1 if body[0] == "\x01" else -1))
            body = body[1:].lstrip(" \t\f")
        out.append("    " * depth + body.replace("\x01", "").replace("\x02", "") if body else "")
    return "\n".join(out)


# terminals the grammar only describes by a pattern: drawn from small, partly hostile vocabularies, so that
# many programs resolve (names are declared in HEADERS) while literals probe the limits
NAMES = ["x", "y", "m", "g", "n", "rank", "world", "i"] * 5 + [
         "z", "h", "k", "s", "dp", "tp", "sum", "max", "min", "avg",
         "premul_sum", "float32", "int64", "bool", "bfloat16", "uint8", "gloo", "nccl", "chunk", "size", "rows",
         "rand", "randn", "abs", "torch", "r0", "def"]
INTS = ["0", "1", "2", "3", "4"] * 6 + ["7", "8", "16", "1024", "65536", "65537", "9223372036854775807",
                                        "9223372036854775808", "1" + "0" * 30]
FLOATS = ["0.5", "1.0", "1e309", "2.5e-3", "1e9", "0.0"]
NEWLINES = ["\n"] * 6 + ["\n\n", "  # note\n", "\n# x\n", "\r\n", " \\\n\n"]


def terminal_strategies():
    """hypothesis strategies for every terminal (`from_lark`'s `explicit`), from the same vocabularies."""
    from hypothesis import strategies as st

    pad = " {} ".format
    out = {name: st.sampled_from(words).map(pad) for name, words in _literals().items()}
    out.update({"NAME": st.sampled_from(NAMES).map(pad), "INT": st.sampled_from(INTS).map(pad),
                "FLOAT": st.sampled_from(FLOATS).map(pad), "_NL": st.sampled_from(NEWLINES),
                "_INDENT": st.just("\x01"), "_DEDENT": st.just("\x02"), "__IGNORE_0": st.just(" "),
                "__IGNORE_1": st.just(" ")})
    return out


def lark_grammar():
    """The language's grammar, compiled with `_stmt` as a second start symbol (no indenter: layout() indents)."""
    from lark import Lark

    from commdsl.syntax.parser import grammar_text

    return Lark(grammar_text(), parser="lalr", lexer="contextual", start=["start", "_stmt"])


def _literals() -> dict[str, list[str]]:
    """Terminal → its spellings, for the terminals that are a word or an alternation of words (`+=|-=`)."""
    out = {}
    for t in lark_grammar().terminals:
        if t.name.startswith("__IGNORE"):
            continue
        if t.pattern.type == "str":
            out[t.name] = [t.pattern.value]
            continue
        m = re.fullmatch(r"\(\?:(.*)\)", t.pattern.value)
        words = re.split(r"(?<!\\)\|", m.group(1)) if m else []  # `\|=` is a word, not a split
        if words and all(re.fullmatch(r"(?:\\.|[^\\()\[\]?*+.])+", w) for w in words):
            out[t.name] = [re.sub(r"\\(.)", r"\1", w) for w in words]
    return out


class GrammarWalker:
    """Random derivations of the grammar's rules, as `from_lark` draws them but a hundred times faster:
    hypothesis spends ~150 ms per statement here, most of it on draws that overrun its buffer in the deep
    expression rules. Past `depth` levels each rule takes its shortest alternative, so every walk ends."""

    def __init__(self, rng: random.Random, depth: int = 8):
        grammar = lark_grammar()
        self.rng, self.depth = rng, depth
        self.rules: dict[str, list[tuple]] = {}
        for r in grammar.rules:
            self.rules.setdefault(r.origin.name, []).append(tuple(r.expansion))
        self.literals = _literals()
        self.cost = self._costs()

    def _costs(self) -> dict[str, int]:
        """Fewest terminals each nonterminal derives (a fixed point), to pick the shortest way out."""
        cost = {name: 10 ** 9 for name in self.rules}
        changed = True
        while changed:
            changed = False
            for name, options in self.rules.items():
                best = min(sum(1 if s.is_term else cost[s.name] for s in option) for option in options)
                if best < cost[name]:
                    cost[name], changed = best, True
        return cost

    def terminal(self, name: str) -> str:
        rng = self.rng
        if name in self.literals:
            return f" {rng.choice(self.literals[name])} "
        draw = {"NAME": lambda: f" {rng.choice(NAMES)} ", "INT": lambda: f" {rng.choice(INTS)} ",
                "FLOAT": lambda: f" {rng.choice(FLOATS)} ", "_NL": lambda: rng.choice(NEWLINES),
                "_INDENT": lambda: "\x01", "_DEDENT": lambda: "\x02"}.get(name)
        if draw is None:
            raise ValueError(f"the grammar has a terminal the fuzzer cannot spell: {name}")
        return draw()

    def walk(self, name: str, level: int = 0) -> str:
        options = self.rules[name]
        if level >= self.depth:
            options = [min(options, key=lambda o: sum(1 if s.is_term else self.cost[s.name] for s in o))]
        option = self.rng.choice(options)
        return "".join(self.terminal(s.name) if s.is_term else self.walk(s.name, level + 1) for s in option)


def grammar_inputs(count: int, seed: int):
    """Programs from the grammar: a header (sometimes none) and 1 to 25 statements derived from `_stmt`, mostly
    few (about one random statement in four resolves after a header, so long programs rarely get past resolve)."""
    rng = random.Random(seed)
    walker = GrammarWalker(rng)
    for _ in range(count):
        body = "".join(walker.walk("_stmt") for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4, 6, 10, 25])))
        yield layout(rng.choice(HEADERS) + body).encode("utf-8")


HEADERS = ["", "world 2\n", "world 2..3\ntensor x: float32[4] = rank\ntensor y: float32[4]\ntensor m: int64[2, 2] = i\n"
           "group g = [0, 1]\nparam n = 4\n", "world 4\nmesh m = (dp=2, tp=2)\ntensor x: bfloat16[8] = rand(1)\n"
           "tensor y: float32[8]\ntensor z: bool[2]\n"]

TOPOLOGY_VALUES = ["0", "-1", "1e-300", "5e-324", "0.000001", "1e9", "1e300", "1.7976931348623157e308", "inf", "nan",
                   "-inf", "65536", "65537", "9223372036854775808", "true", '"x"', "[]", "{}", "[[1]]", "1", "2.5"]
"""Values a topology key is given: the ends of each range, just past them, and what TOML can say that is no number."""
CALIBRATED = """# the form `bench --calibrate` writes, with every key a topology file may hold
name = "host"
backend = "gloo"
ranks_per_node = 4
nics_per_node = 1
memory_gbps = 20
page_fault_gbps = 2
mmap_threshold_bytes = 33554432
send_buffer_bytes = 4194304
shared_node = true
bus_gbps = 3
exchange_gbps = 2
swap_gbps = 1.5
stream_gbps = 2
stream_bus_gbps = 2.5
node_memory_gbps = 30
duplex = false
overlap = false
tree = false
collective_call_us = 200
cores_per_node = 2
source = "fuzz"

[intra]
alpha_us = 40
bandwidth_gbps = 3
collective_alpha_us = 900
crowded_alpha_us = 1100

[inter]
alpha_us = 60
bandwidth_gbps = 1

[[link]]
src = 0
dst = 1
alpha_us = 20
bandwidth_gbps = 10
"""


def topology_inputs(count: int, seed: int):
    """Topology files: a preset or CALIBRATED with values replaced (TOPOLOGY_VALUES), lines dropped or doubled,
    or (one input in four) bytes mutated."""
    from commdsl.predict.topology import PRESETS

    rng = random.Random(seed)
    bases = [*PRESETS.values(), CALIBRATED]
    for _ in range(count):
        text = rng.choice(bases)
        if rng.random() < 0.25:
            yield mutate_bytes(text.encode(), rng)
            continue
        lines = text.split("\n")
        for _ in range(rng.randint(1, 2)):
            keyed = [i for i, line in enumerate(lines) if re.match(r"\w+ *=", line) and '"' not in line]  # not a name
            i = rng.choice(keyed)
            key, _, value = lines[i].partition("=")
            number = re.match(r" *([0-9.e+-]+)", value)
            edit = rng.randrange(10)
            if edit == 0:
                del lines[i]
            elif edit == 1:
                lines.insert(i, lines[i])
            elif edit < 7 and number:  # the same number scaled: most such files parse, and reach the model
                old = number.group(1)
                scaled = float(old) * 10.0 ** rng.randint(-4, 4)
                lines[i] = f"{key}= {round(scaled) if old.isdigit() else scaled!r}"
            else:
                lines[i] = f"{key}= {rng.choice(TOPOLOGY_VALUES)}"
        yield "\n".join(lines).encode()


SOURCES = {"grammar": grammar_inputs, "bytes": byte_inputs, "tokens": token_inputs, "topology": topology_inputs}


# ---- commands -------------------------------------------------------------------------------------------------

def _alarm(signum, frame):
    raise Hang()


SLOWEST = {"seconds": 0.0, "verb": ""}  # the slowest single command so far


def _timed(fn, verb: str = ""):
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        dt = time.perf_counter() - t0
        if dt > SLOWEST["seconds"]:
            SLOWEST.update(seconds=dt, verb=verb)


def _render(diags, sources) -> None:
    from rich.console import Console

    for fmt in ("text", "concise", "json", "sarif"):
        emit(sorted(diags, key=lambda d: d.sort_key()), sources, fmt, Console(file=io.StringIO(), width=100))


def exercise(data: bytes | str) -> dict[str, str]:
    """verb → "ok" | "diagnostic", for one input; an internal error or a hang propagates (with the verb in
    its notes) for the caller to record."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:  # the CLI says "not UTF-8 text" and exits 2: a refusal, not a bug
        return {v: "diagnostic" for v in VERBS}
    source = SourceFile("fuzz.comm", text)
    sources = {"fuzz.comm": source}
    outcome: dict[str, str] = {}

    def step(verb, fn):
        try:
            _timed(fn, verb)
            outcome[verb] = "ok"
        except (CommdslError, DiagramTooLarge) as e:
            if isinstance(e, CommdslError):
                _render(e.diagnostics, sources)
            outcome[verb] = "diagnostic"
        except BaseException as e:
            e.add_note(f"fuzz command: {verb}")
            raise

    def fmt():
        once = format_source(source)
        twice = format_source(SourceFile("fuzz.comm", once))
        if twice != once:
            raise Bug("fmt is not a fixed point")

    step("fmt", fmt)
    loaded: list = []
    step("check", lambda: loaded.append(load(source)))
    if not loaded:
        for verb in VERBS:
            outcome.setdefault(verb, outcome["check"])
        return outcome
    program = loaded[0]
    worlds = [w for w in program.world_sizes(bound=4) if w <= MAX_WORLD][:2]
    if not worlds:
        return {**{v: "diagnostic" for v in VERBS}, "fmt": outcome["fmt"], "check": "ok"}

    def check(lints: bool):
        diags = check_program(program, CheckOptions(worlds=tuple(worlds), lints=lints, bound=4))
        _render(diags, sources)

    step("check", lambda: check(False))
    step("lint", lambda: check(True))
    schedules: list = []
    step("sim", lambda: _sim(program, worlds[0], schedules, sources))
    if not schedules:
        outcome.update({v: outcome["sim"] for v in ("compile", "graph")})
        return outcome
    schedule = schedules[0]
    step("compile", lambda: _compile(program))
    step("graph", lambda: (lambda d: (to_mermaid(d), to_dot(d)))(build(program, schedule)))
    return outcome


def _sim(program, world, schedules, sources):
    schedule = expand(program, world, {})
    too_big = memory_problem(schedule)
    if too_big is not None:
        raise CommdslError([too_big])
    schedules.append(schedule)
    result = simulate(schedule)
    for rank in range(schedule.world):
        for name, arr in result.tensors[rank].items():
            format_tensor(arr, schedule.tensors[rank][name].dtype)
    _render(stall_diagnostics(program, result.engine) + data_diagnostics(result), sources)


def _compile(program):
    script = emit_python(program, program.backends[0], "out.py")
    try:
        ast.parse(script)
    except SyntaxError as e:
        raise Bug(f"the compiled script does not parse: {e}") from None


RING = ROOT / "programs" / "ring_allreduce.comm"
PREDICTED_SIZES = [1 << 10, 1 << 16, 16 << 20]


@functools.cache
def _ring_variant():
    """What a topology input predicts: the ring at world 4, swept over `n` (loaded once per process)."""
    from commdsl.predict import variant_for

    return variant_for(load(SourceFile.read(str(RING))), 4, "n", {}, None)


def exercise_topology(data: bytes) -> dict[str, str]:
    """A topology file: "parse" (to a topology, or N136 diagnostics) and "predict" (the ring at world 4 on it, in
    finite times that grow with the size, or a refusal); an internal error or a hang propagates, as in `exercise`."""
    from commdsl.bench.identify import BenchError
    from commdsl.bench.plan import Refused
    from commdsl.predict import sweep
    from commdsl.predict.topology import parse

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # the CLI refuses it as not UTF-8 text, exit 2 (topology_through_cli runs that)
        return {"parse": "diagnostic", "predict": "diagnostic"}
    source = SourceFile("fuzz.toml", text)
    try:
        topo = _timed(lambda: parse(source), "topology")
    except CommdslError as e:
        _render(e.diagnostics, {"fuzz.toml": source})
        return {"parse": "diagnostic", "predict": "diagnostic"}
    except BaseException as e:
        e.add_note("fuzz command: topology")
        raise

    def predict():
        times = [row.time_us for row in sweep(_ring_variant(), 4, PREDICTED_SIZES, topo, paths=False).rows]
        if not all(math.isfinite(t) and t > 0 for t in times) or times != sorted(times):
            raise Bug(f"the ring at world 4 was predicted to take {times} us at {PREDICTED_SIZES} B")

    try:
        _timed(predict, "predict")
    except (CommdslError, BenchError, Refused):  # a topology too small for world 4, say
        return {"parse": "ok", "predict": "diagnostic"}
    except BaseException as e:
        e.add_note("fuzz command: predict")
        raise
    return {"parse": "ok", "predict": "ok"}


def topology_through_cli(data: bytes, workdir: str) -> dict[str, str]:
    """The topology through `commdsl predict`: exit 2 with "internal error" is a bug."""
    path = os.path.join(workdir, "fuzz.toml")
    with open(path, "wb") as f:
        f.write(data)
    argv = ["predict", str(RING), "--world", "4", "--topology", path, "--sizes", "1K:64K", "--color", "never"]
    return {"predict": _cli("predict", argv)}


def through_cli(data: bytes, workdir: str) -> dict[str, str]:
    """The same input through `commdsl.cli.main`, verb by verb: exit 2 with "internal error" is a bug."""
    path = os.path.join(workdir, "fuzz.comm")
    with open(path, "wb") as f:
        f.write(data)
    argvs = {"check": ["check", path, "--max-world", "4", "--world", "2"],
             "lint": ["lint", path, "--format", "json", "--world", "2"],
             "sim": ["sim", path, "--world", "2"], "fmt": ["fmt", "--diff", path],
             "compile": ["compile", path, "--world", "2", "-o", os.path.join(workdir, "out.py")],
             "graph": ["graph", path, "--world", "2", "--format", "dot", "-o", os.path.join(workdir, "out.dot")]}
    return {verb: _cli(verb, argv + ["--color", "never"] if verb != "fmt" else argv) for verb, argv in argvs.items()}


def _cli(verb: str, argv: list[str]) -> str:
    """"ok" or "diagnostic" for one `commdsl.cli.main` call under the hang timer; exit 2 with "internal error"
    (main()'s own words, not a quoted source line) is a Bug."""
    from commdsl.cli.main import main

    out, err = io.StringIO(), io.StringIO()

    def call():
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                return main(argv)
            except SystemExit as e:
                return e.code

    code = _timed(call, f"commdsl {verb}")
    if f"commdsl {verb}: internal error:" in err.getvalue():
        raise Bug(f"`commdsl {verb}` exited {code} with an internal error:\n{err.getvalue()}")
    return "ok" if code == 0 else "diagnostic"


# ---- driver -----------------------------------------------------------------------------------------------------

def _import_lazy_modules() -> None:
    """Import before any hang timer is armed what the commands import on first use (torch, for a bfloat16
    value in `format_tensor`). A cold torch import on a fresh machine can outlast HANG_S, and a SIGALRM
    inside an import leaves that module half-initialised for every later input: CI on 2026-11-28 saw one
    `Hang` in `import asyncio`, then a NameError in every later sim and a segfault at exit."""
    import torch  # noqa: F401


def run(plan: dict[str, int], seed: int, save: Path, cli_every: int = CLI_EVERY, jobs: int = 1) -> dict:
    """Fuzz `plan` (source → input count). Every input is generated once, here; with `jobs` > 1 each goes to
    the next free one of `jobs` forked processes (each under its own hang timer and the memory limit), in
    order, so the counts and kept failures are one process's. With one job SIGALRM is borrowed for the hang
    timer and handed back after (pytest-timeout's alarm, when under pytest, is re-armed with the time it had
    left)."""
    _import_lazy_modules()
    stats = {"inputs": 0, "cli": 0, "ok": 0, "diagnostic": 0, "bugs": [], "hangs": [], "slowest": (0.0, ""),
             "slowest_command": (0.0, "", "", 0), "by_source": {s: {"inputs": 0, "loaded": 0} for s in plan}}
    started = time.perf_counter()
    numbered = ((source, k, data) for source, count in plan.items()
                for k, data in enumerate(SOURCES[source](count, seed)))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="commdsl-fuzz-") as workdir:  # the CLI's files, gone after
        one = functools.partial(_fuzz_one, save=save, cli_every=cli_every, workdir=workdir)
        if jobs <= 1:
            with _hang_timer():
                for result in map(one, numbered):
                    _tally(stats, result)
        else:
            import multiprocessing

            fork = multiprocessing.get_context("fork")
            with fork.Pool(jobs, initializer=signal.signal, initargs=(signal.SIGALRM, _alarm)) as pool:
                for result in pool.imap(one, numbered, chunksize=4):
                    _tally(stats, result)
                pool.close()
                pool.join()  # reaped, so that their peak memory counts below
    stats["seconds"] = time.perf_counter() - started
    peaks = (resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    stats["peak_rss"] = max(peaks) * 1024
    return stats


@contextlib.contextmanager
def _hang_timer():
    previous = signal.signal(signal.SIGALRM, _alarm)
    pending, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, previous)
        if pending:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, pending - (time.monotonic() - started)))


def _fuzz_one(item: tuple[str, int, bytes], save: Path, cli_every: int, workdir: str) -> dict:
    """One numbered input through every command (and every `cli_every`-th through the CLI too, in a folder of
    this process's own): its outcome, or the kept file of the bug or hang it found."""
    source, k, data = item
    result: dict = {"source": source, "k": k}
    SLOWEST.update(seconds=0.0, verb="")
    t0 = time.perf_counter()
    topology = source == "topology"
    try:
        result["outcome"] = (exercise_topology if topology else exercise)(data)
        if cli_every and k % cli_every == 0:
            own = os.path.join(workdir, str(os.getpid()))
            os.makedirs(own, exist_ok=True)
            (topology_through_cli if topology else through_cli)(data, own)
            result["cli"] = True
    except Hang as e:
        return {**result, "hang": _keep(save, source, k, data, e)}
    except BaseException as e:  # noqa: BLE001 - every other exception is what we are looking for
        if isinstance(e, KeyboardInterrupt):
            raise
        return {**result, "bug": _keep(save, source, k, data, e)}
    result["seconds"] = time.perf_counter() - t0
    result["slowest_command"] = (SLOWEST["seconds"], SLOWEST["verb"], f"{source} {k}", len(data))
    return result


def _tally(stats: dict, result: dict) -> None:
    stats["inputs"] += 1
    tally = stats["by_source"][result["source"]]
    tally["inputs"] += 1
    if "hang" in result or "bug" in result:
        stats["hangs" if "hang" in result else "bugs"].append(result.get("hang") or result["bug"])
        return
    stats["cli"] += result.get("cli", False)
    stats["slowest"] = max(stats["slowest"], (result["seconds"], f"{result['source']} {result['k']}"))
    stats["slowest_command"] = max(stats["slowest_command"], result["slowest_command"], key=lambda c: c[0])
    outcome = result["outcome"]
    tally["loaded"] += outcome.get("check", outcome.get("parse")) == "ok"  # a program resolved, a topology parsed
    for got in outcome.values():
        stats[got] += 1


def _keep(save: Path, source: str, k: int, data: bytes, e: BaseException) -> str:
    save.mkdir(parents=True, exist_ok=True)
    stem = save / f"{source}-{k}"
    kept = stem.with_suffix(".toml" if source == "topology" else ".comm")
    kept.write_bytes(data)
    stem.with_suffix(".txt").write_text("".join(traceback.format_exception(e)))
    return str(kept)


def report(stats: dict, plan: dict, seed: int) -> str:
    runs = stats["ok"] + stats["diagnostic"]
    lines = [f"inputs: {stats['inputs']} ({', '.join(f'{s} {n}' for s, n in plan.items())}; seed {seed}) "
             f"in {stats['seconds']:.0f} s",
             "commands: check, lint, sim, fmt, compile, graph on each program, parse and predict on each topology; "
             f"every input's diagnostics rendered in 4 formats; {stats['cli']} inputs also through commdsl's CLI, "
             "verb by verb",
             "loaded (a program parsed and resolved, a topology parsed): " + ", ".join(f"{s} {t['loaded']} of {t['inputs']}"
                                                      for s, t in stats["by_source"].items()),
             f"command runs: {runs} ({stats['ok']} ok, {stats['diagnostic']} diagnostic)",
             f"internal errors: {len(stats['bugs'])}, hangs over {HANG_S:g} s: {len(stats['hangs'])}",
             f"slowest command: {stats['slowest_command'][0] * 1e3:.0f} ms ({stats['slowest_command'][1]} on "
             f"{stats['slowest_command'][2]}, {stats['slowest_command'][3]} bytes); slowest input, all commands: "
             f"{stats['slowest'][0] * 1e3:.0f} ms ({stats['slowest'][1]})",
             f"peak memory (max RSS of a fuzzing process): {stats['peak_rss'] / (1 << 20):.0f} MiB"]
    for path in stats["bugs"] + stats["hangs"]:
        lines.append(f"  kept: {path} (traceback beside it)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), help="a preset mix of sources and counts")
    ap.add_argument("--source", choices=sorted(SOURCES), action="append", help="only these sources (with --count)")
    ap.add_argument("--count", type=int, default=1000, help="inputs per source when no --profile is given")
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--cli-every", type=int, default=CLI_EVERY, help="every Nth input also through the CLI (0: never)")
    ap.add_argument("--save", type=Path, default=Path(tempfile.gettempdir()) / "commdsl-fuzz-failures")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="processes that run the inputs, each the next one free (default: the usable cores)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)  # a blow-up becomes a MemoryError (a bug), not a dead machine
    if soft == resource.RLIM_INFINITY or soft > MEMORY_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
    plan = dict(PROFILES[args.profile]) if args.profile else {s: args.count for s in (args.source or SOURCES)}
    stats = run(plan, args.seed, args.save, args.cli_every, args.jobs)
    print(report(stats, plan, args.seed))
    return 1 if stats["bugs"] or stats["hangs"] else 0


if __name__ == "__main__":
    sys.exit(main())
