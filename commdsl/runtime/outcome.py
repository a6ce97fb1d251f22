"""The verdict on a real run: expects, tensors against the simulator, and who is to blame if it broke.

Inputs are what the ranks reported (records), what the launcher saw (exit codes, signals, progress
slots, the hang guard's snapshot) and the simulator's expected tensors. torch's agent picks its "root
cause" by error-file timestamps with one-second resolution, so when rank 2 raises it often blames
rank 0's "Connection closed by peer". Here the blame goes, in order, to a rank that died without a
word (a signal, an abort in C++), then to a rank whose own op raised, then to a timeout, and only
then to errors that merely report a peer's death, earliest first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from commdsl.runtime import progress
from commdsl.runtime.guard import waits_on_others
from commdsl.runtime.records import RankResult
from commdsl.schedule import Schedule
from commdsl.simulate import SimResult, close
from commdsl.source import statement_text

if TYPE_CHECKING:
    from commdsl.runtime.launch import LocalRun

# error text that only says a peer went away (the consequence of another rank's failure)
_PEER_WORDS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "socket closed",
    "econnreset",
    "epipe",
    "connection refused",
    "end of file",
    "remote process exited",
)


def classify(message: str) -> str:
    """`peer` (a consequence of another rank's failure), `timeout`, or `error` (this rank's own)."""
    m = message.lower()
    if any(w in m for w in _PEER_WORDS):
        return "peer"
    if "timed out" in m or "timeout" in m:
        return "timeout"
    return "error"


@dataclass(frozen=True)
class Where:
    """An op of one rank, for messages and tables."""

    rank: int
    index: int
    line: int | None
    text: str


def where(schedule: Schedule, source_text: str, rank: int, index: int, state: int | None = None) -> Where:
    if state == progress.INIT:  # its `op` field holds the set-up step it reached, not an op
        if 0 <= index < len(progress.SETUP_STEPS):
            return Where(rank, -1, None, f"setting up: {progress.SETUP_STEPS[index]}")
        return Where(rank, -1, None, "setting up (process group, groups, tensors)")
    ops = schedule.ops[rank] if 0 <= rank < len(schedule.ops) else []
    if 0 <= index < len(ops):
        span = ops[index].span
        return Where(rank, index, span.line, statement_text(source_text, span))
    if index < 0:
        return Where(rank, index, None, "setting up (process group, groups, tensors)")
    return Where(rank, index, None, "its teardown (all its ops done)")


@dataclass
class Failure:
    rank: int
    kind: str  # a key of _ORDER below
    cause: str
    at: Where
    pid: int = 0


@dataclass
class Mismatch:
    rank: int
    tensor: str
    count: int
    index: int
    actual: object
    expected: object


@dataclass
class Disagreement:
    """Two ranks that hold different values where the simulation gives them the same ones."""

    tensor: str
    ranks: tuple[int, int]  # the first rank of the group, and the first that differs from it
    count: int  # elements that differ between those two
    index: int
    values: tuple[object, object]
    more: int = 0  # further ranks of the group that differ from the first


@dataclass
class Verdict:
    expects: list[dict] = field(default_factory=list)  # {"rank", "line", "ok", "detail"}
    mismatches: list[Mismatch] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    compared: int = 0  # ranks whose tensors were compared
    order_dependent: int = 0  # elements compared across ranks only: their sum may differ with the order (V803)
    undefined: int = 0  # elements `reduce` left undefined on non-root ranks: not compared (R504)
    dtypes: tuple[str, ...] = ()  # the dtypes compared
    missing: list[int] = field(default_factory=list)  # ranks that never reported their tensors
    sim_complete: bool = True

    @property
    def ok(self) -> bool:
        return (
            not self.mismatches
            and not self.disagreements
            and not self.missing
            and self.sim_complete
            and all(e["ok"] for e in self.expects)
        )


def judge_results(
    schedule: Schedule, sim: SimResult | None, results: dict[int, RankResult], ranks: list[int]
) -> Verdict:
    """Expects as the ranks judged them, and every finished rank's tensors against the simulator's."""
    v = Verdict(sim_complete=sim is not None and sim.engine.completed)
    for rank in ranks:
        r = results.get(rank)
        if r is None:
            v.missing.append(rank)
            continue
        ops = schedule.ops[rank]
        for e in r.expects:
            v.expects.append({"rank": rank, "line": ops[e["index"]].span.line, "ok": e["ok"], "detail": e["detail"]})
        if not r.finished:
            v.missing.append(rank)
            continue
        if not v.sim_complete:
            continue
        v.compared += 1
        for name, spec in schedule.tensors[rank].items():
            actual = r.tensors[name].reshape(-1)
            expected = sim.tensors[rank][name].reshape(-1)
            undefined = sim.undefined[rank][name].reshape(-1)
            order = sim.order_dependent[rank][name].reshape(-1) & ~undefined
            v.undefined += int(undefined.sum())
            v.order_dependent += int(order.sum())
            count, first = 0, -1
            for start in range(0, len(actual), COMPARE_CHUNK):  # float64 temporaries a chunk long, not a tensor
                stop = start + COMPARE_CHUNK
                bad = (
                    ~close(actual[start:stop], expected[start:stop], spec.dtype)
                    & ~undefined[start:stop]
                    & ~order[start:stop]
                )
                if bad.any():
                    count += int(bad.sum())
                    first = start + int(np.argmax(bad)) if first < 0 else first
            if count:
                v.mismatches.append(Mismatch(rank, name, count, first, actual[first].item(), expected[first].item()))
    if v.sim_complete:
        finished = [rank for rank in ranks if rank in results and results[rank].finished]
        v.disagreements = _disagreements(schedule, sim, results, finished)
        v.dtypes = tuple(sorted({spec.dtype for rank in finished for spec in schedule.tensors[rank].values()}))
    return v


def _disagreements(
    schedule: Schedule, sim: SimResult, results: dict[int, RankResult], ranks: list[int]
) -> list[Disagreement]:
    """Ranks must hold bit-identical values wherever the simulation gives them identical ones (what one
    `all_reduce` or `broadcast` leaves on every member), whatever the tolerance: a value within a float's
    tolerance of the simulator's can still differ between ranks, which no backend does."""
    out = []
    for name in schedule.infos:
        found: dict[tuple, Disagreement | None] = {}
        first_of: dict[tuple, int] = {}  # (shape, simulated bytes, undefined bytes) → first rank with them
        for rank in ranks:
            sim_values = sim.tensors[rank][name]
            key = (sim_values.shape, sim_values.tobytes(), sim.undefined[rank][name].tobytes())
            other = first_of.setdefault(key, rank)
            if other == rank:
                continue
            defined = ~sim.undefined[rank][name].reshape(-1)
            a, b = results[other].tensors[name].reshape(-1), results[rank].tensors[name].reshape(-1)
            differ = ~((a == b) | (_nan(a) & _nan(b))) & defined
            if not differ.any():
                continue
            if found.get(key) is not None:
                found[key].more += 1
                continue
            k = int(np.argmax(differ))
            found[key] = Disagreement(name, (other, rank), int(differ.sum()), k, (a[k].item(), b[k].item()))
        out.extend(d for d in found.values() if d is not None)
    return out


def _nan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, dtype=bool)


COMPARE_CHUNK = 1 << 20


@dataclass
class Evidence:
    """What the launcher learnt about how each rank ended, besides the rank's own records."""

    agent: dict[int, dict] = field(default_factory=dict)  # torch's agent: rank → {"exitcode", "signal", "pid"}
    exits: dict[int, str] = field(default_factory=dict)  # the hang guard's peek: rank → "SIGKILL", "exit code 1"
    crashes: dict[int, str] = field(default_factory=dict)  # rank → first line of its crash dump
    terminated: set[int] = field(default_factory=set)  # ranks that received SIGTERM
    slots: list[progress.Snapshot] = field(default_factory=list)


# blame order: a silent death or crash first, then a rank's own error, a timeout, a lost peer, a stop
_ORDER = {"crash": 0, "signal": 0, "exit": 0, "silent": 0, "error": 1, "timeout": 2, "peer": 3, "stopped": 4}


def blame(
    schedule: Schedule, source_text: str, results: dict[int, RankResult], ev: Evidence, ranks: list[int]
) -> list[Failure]:
    """Every rank among `ranks` that failed, the real culprit first."""
    by_rank = {s.rank: s for s in ev.slots if s.rank >= 0}
    done = [r for r in ranks if results.get(r) is not None and results[r].finished]
    ended = (
        f"; rank{'s' * (len(done) > 1)} {', '.join(map(str, done[:8]))} had finished the program and exited"
        if done
        else ""
    )
    found: list[tuple[tuple, Failure]] = []
    for rank in ranks:
        res, slot = results.get(rank), by_rank.get(rank)
        agent = ev.agent.get(rank, {})
        pid = slot.pid if slot else agent.get("pid", 0)
        if res is not None and res.error is not None:
            err = res.error
            kind = classify(err["message"])
            at = where(schedule, source_text, rank, err["index"])
            text = _error_text(err)
            cause = {
                "error": f"raised {text}",
                "timeout": f"timed out ({text})",
                "peer": f"lost its connection to a peer ({_first_sentence(text)}){ended}",
            }[kind]
            if kind == "peer" and done and err["index"] < 0:
                # a rank that ends closes its connections, also those a slower peer is still making in
                # init_process_group or new_group: Gloo fails that peer's set-up, in a plain torch script too
                cause += " while it was still connecting; a closing `barrier` keeps every rank until all are connected"
            found.append(((_ORDER[kind], err["time_ns"]), Failure(rank, kind, cause, at, pid)))
            continue
        if res is not None and res.finished:
            continue
        at = where(schedule, source_text, rank, slot.op if slot else -1, slot.state if slot else None)
        seen = ev.exits.get(rank) or (agent.get("signal") if agent.get("exitcode", 0) < 0 else None)
        if rank in ev.crashes:
            kind, cause = "crash", f"crashed ({ev.crashes[rank]})"
        elif seen == "SIGTERM" or (seen is None and rank in ev.terminated):
            kind, cause = "stopped", "was stopped by SIGTERM"
        elif seen and seen.startswith("SIG"):
            kind, cause = "signal", f"was killed by {seen}"
        elif agent.get("exitcode", 0) > 0 or (seen or "").startswith("exit code"):
            code = seen or f"exit code {agent['exitcode']}"
            kind, cause = "exit", f"exited with {code} without reporting an error"
        elif slot is not None and slot.pid > 0 and slot.state not in (progress.DONE, progress.FAILED):
            kind, cause = (
                "signal",
                ("died without a word (no error, no crash dump): most likely SIGKILL, from a user or the OOM killer"),
            )
        elif slot is None and res is None:
            kind, cause = "silent", "sent no report (its process died, or the launcher stopped it)"
        else:
            continue
        found.append(((_ORDER[kind], slot.since_ns if slot else 0), Failure(rank, kind, cause, at, pid)))
    found.sort(key=lambda f: f[0])
    return [f for _, f in found]


_CPP_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\]\s*")


def _error_text(err: dict) -> str:
    """`Type: message` on one line, without the C++ source locations (`[…/pair.cc:553] `) that Gloo and
    c10d put into their messages, wherever they stand."""
    lines = []
    for ln in (err["message"] or "").splitlines():
        if ln.lstrip().startswith(("Exception raised from", "frame #")):  # c10's C++ backtrace follows
            break
        lines.append(ln)
    message = " ".join(_CPP_LOCATION.sub("", " ".join(lines)).split())
    return f"{err['type']}: {message}" if message else err["type"]


def _first_sentence(text: str) -> str:
    """Gloo appends advice ("This is typically caused by …") to its messages; keep the facts."""
    cut = text.find(". ")
    return text[:cut] if cut > 0 else text.rstrip(".")


def timeout_rows(schedule: Schedule, source_text: str, results: dict[int, RankResult], world: int) -> list[dict]:
    """The hang table under an external launcher, from what each rank recorded when its op timed out."""
    rows = []
    for rank in range(world):
        r = results.get(rank)
        if r is None:
            rows.append(
                {"rank": rank, "pid": 0, "state": "no report", "seconds": None, "line": None, "op": "", "stuck": False}
            )
            continue
        if r.error is None:
            rows.append(
                {
                    "rank": rank,
                    "pid": r.pid,
                    "state": "done" if r.finished else "unknown",
                    "seconds": None,
                    "line": None,
                    "op": "",
                    "stuck": False,
                }
            )
            continue
        at = where(schedule, source_text, rank, r.error["index"])
        kind = classify(r.error["message"])
        state = {"timeout": "timed out", "peer": "lost peer"}.get(kind, "failed")
        rows.append(
            {
                "rank": rank,
                "pid": r.pid,
                "state": state,
                "seconds": None,
                "line": at.line,
                "op": at.text,
                "stuck": kind == "timeout",
            }
        )
    return rows


def hang_rows(
    schedule: Schedule,
    source_text: str,
    slots: list[progress.Snapshot],
    at_ns: int,
    stuck: list[int],
    stopped: list[int] = (),
) -> list[dict]:
    """One row per local rank of the guard's snapshot: where it was and for how long; a stopped process
    (SIGSTOP, SIGTSTP) is the culprit (`"stopped": True`), whatever op it was in."""
    rows = []
    for s in slots:
        if s.rank < 0:
            rows.append(
                {
                    "rank": None,
                    "pid": s.pid,
                    "state": "not started",
                    "seconds": None,
                    "line": None,
                    "op": "",
                    "stuck": False,
                }
            )
            continue
        at = where(schedule, source_text, s.rank, s.op, s.state)
        if s.local_rank in stopped:
            state = "stopped"
        elif s.state == progress.RUNNING:
            state = "blocked" if waits_on_others(schedule, s) else "computing"
        else:
            state = {
                progress.INIT: "setting up",
                progress.FINISHING: "finished",
                progress.DONE: "done",
                progress.FAILED: "failed",
            }.get(s.state, progress.STATE_NAMES[s.state])
        rows.append(
            {
                "rank": s.rank,
                "pid": s.pid,
                "state": state,
                "seconds": round(s.seconds_in_state(at_ns), 3),
                "line": at.line,
                "op": at.text,
                "stuck": s.local_rank in stuck,
                "stopped": s.local_rank in stopped,
                "index": s.op if s.state == progress.RUNNING else -1,  # the op it was in (for --trace)
                "since_ns": s.since_ns,
            }
        )
    return rows


@dataclass
class Judged:
    """A local run judged: what the CLI shows and the Python API returns."""

    run: LocalRun
    ranks: list[int]  # the ranks this node ran
    verdict: Verdict
    failures: list[Failure]
    hang: list | None  # `hang_rows` when the hang guard stopped the run

    @property
    def ok(self) -> bool:
        return passed(self.verdict, self.failures, self.hang, self.run.interrupted)

    @property
    def tensors(self) -> dict[int, dict[str, np.ndarray]]:
        """Each finished rank's tensors at the end of the run, as torch left them."""
        return {
            rank: {name: np.asarray(t) for name, t in r.tensors.items()}
            for rank, r in sorted(self.run.results.items())
            if r.finished
        }


def passed(verdict: Verdict, failures: list[Failure], hang, interrupted: bool) -> bool:
    """A run passes when every expect held and every tensor matched, and nothing failed, hung or was
    interrupted."""
    return verdict.ok and not failures and not hang and not interrupted


def judge_run(schedule: Schedule, source_text: str, sim: SimResult | None, run: LocalRun, one_node: bool) -> Judged:
    """The verdict on a finished local run, and the blame when it broke (a hang, else failed ranks)."""
    ranks = sorted(s.rank for s in run.evidence.slots if s.rank >= 0)
    if one_node:
        ranks = list(range(schedule.world))
    hang = None
    if run.hang is not None:
        hang = hang_rows(schedule, source_text, run.hang.slots, run.hang.at_ns, run.hang.stuck, run.hang.stopped)
    failures = [] if hang or run.interrupted else blame(schedule, source_text, run.results, run.evidence, ranks)
    return Judged(run, ranks, judge_results(schedule, sim, run.results, ranks), failures, hang)
