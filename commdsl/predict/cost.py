"""The timing interpreter: the one engine, run once, with an `Observer` that keeps every rank's clock.

The engine decides what happens (which send meets which receive, which calls make a collective, who
waits for whom); this observer only says when. Each rank has a clock per predicted size (`T`, shape
world × sizes, seconds from a common start): a local op adds its bytes, and twice those of the temporaries
torch makes for it, over memory bandwidth (on a `shared_node` host the node's memory is a port as a link
is: the ranks that compute at once share it, a later op waits until it is free), and the fresh pages of
the temporaries malloc maps anew (`fresh_pages`); a send or
receive is posted at the poster's clock, a matched pair starts when both are posted (Gloo's and NCCL's
sends wait for their receive) and ends α + bytes/β later on the link it uses; a collective starts when
its last member calls and lasts what its kind's `cost` says (`collectives/<kind>.py`) on the group's
slowest ring hop. What a rank waits for (its blocking op, its batch, the requests of a `wait`) lands in
`D`, and the rank's clock catches up with it when it next does anything (`settle`): a blocked rank does
nothing until the engine releases it, so that is exactly when it resumes.

Links are shared. A rank has an egress and an ingress port inside its node (one port for both when it is
not duplex), a node has `nics_per_node` NICs each way and, on a `shared_node` host, a bus that every
message inside it crosses; a message uses its sender's egress, its receiver's ingress and its node's bus.
Messages the engine matches in one step that share a port share its bandwidth as processor sharing does
(two equal ones each get half: each takes 2·bytes/β; a bus carries `Topology.bus_capacity` messages at
full speed, `_shared`), a message is as slow as its busiest port, and a port stays busy until its last
message ends, so a later message on it waits (`free`). Collectives are costed by formula and do not take
part in the sharing.

All sizes run in one pass (the schedule's records must be the same at every size: `Bytes` checks),
so the world-4096 ring is one engine run, not eight, each step one messages × sizes array per clock
operation. What does not depend on the size is worked out once per message pattern (`Route`: links,
ports, and each index into the clocks as a slice or a permuted run where it is one, so most updates are
in place rather than gathered and scattered), and per-size constants are added as whole arrays (numpy
broadcasts a row of 8 sizes several times slower). A ring step is then about fifteen array operations.

The critical path is kept for one size, as a chain of nodes (one per op or matched pair, each pointing
at the node its start waited for), when the schedule has at most `PATH_MAX_OPS` ops; so is every rank's
profile, the bench's per-line times (`stepping`): a statement's time on a rank runs from when the rank
begins it to when it begins its next one, as the bench times each op from its call to its return.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, replace
from itertools import repeat

import numpy as np

from commdsl.collectives.all_to_all import KIND as ALL_TO_ALL
from commdsl.dtypes import DTYPES
from commdsl.elementwise import temporaries
from commdsl.engine import GLOO, NCCL, Calls, Observer, Outcome, Posts, call_streams, post_streams, run_engine
from commdsl.limits import Deadline
from commdsl.predict.topology import Topology
from commdsl.schedule import (
    UNTIMED_RECORDS,
    BatchRec,
    Coalesced,
    CollectiveRec,
    ComputeRec,
    P2PRec,
    ReadRec,
    Schedule,
    elem_at,
    split_table,
)
from commdsl.steady import moved_alike
from commdsl.values import at, distinct

PATH_MAX_OPS = 12_000_000
"""The most ops for which the critical path is kept (a node per op: about 24 bytes each)."""

PROFILED_RANKS = 64
"""Up to this many ranks, every rank's profile is kept (`--measured` compares the rank the bench found
slowest, which need not be the one predicted last); above it, the last rank's only."""

ROUTES = 64
"""The most message patterns (`Clocks.route`) kept at once."""

_MIX = np.random.default_rng(17)

FROM_COMMUNICATION = {CollectiveRec: True, P2PRec: True, BatchRec: True, ComputeRec: False, ReadRec: False}
"""Whether a rank that runs a record of this type comes from communication (a collective or a message) or from
work of its own (a local op, a data read) to its next collective; the other records (a wait, a check) leave it
as it was (`Clocks.arrivals`)."""

CACHE_VALUES = 16_000_000
"""The most byte counts (ops × sizes) `Bytes` keeps between calls (128 MB)."""


class Bytes:
    """Bytes of every op at every predicted size: `of(rid)` → an array (sizes,) when every rank of the
    record moves the same bytes (a ring step: one number per size, broadcast over its messages), else
    (len(rec.ranks), sizes); `rows(rid, pos)` those of some of its ranks.

    From one expansion per size (`schedules`, whose records must correspond one to one), each size's
    bytes a weighted sum of theirs (`weights`: sizes × expansions; the identity when every size has its
    own expansion, a scale factor when the others are scaled from one)."""

    def __init__(self, schedules: list[Schedule], weights: np.ndarray):
        self.schedules = schedules
        self.weights = weights
        self.cache: dict[int, np.ndarray] = {}
        self.cached = 0
        self.weighed: dict[tuple[float, ...], np.ndarray] = {}  # bytes the same on every rank → per size
        first = schedules[0]
        for s in schedules[1:]:
            if len(s.records) != len(first.records) or any(
                type(a) is not type(b) or a.ranks.size != b.ranks.size for a, b in zip(s.records, first.records)
            ):
                raise ValueError("the program's statements differ between sizes")

    def of(self, rid: int) -> np.ndarray:
        got = self.cache.get(rid)
        if got is None:
            per = [_uniform(op_bytes(s.records[rid], s)) for s in self.schedules]
            if all(np.ndim(b) == 0 for b in per):
                key = tuple(float(b) for b in per)  # a ring's records move one of a few sizes: weighed once each
                got = self.weighed.get(key)
                if got is None:
                    got = self.weighed[key] = self.weights @ np.asarray(key, dtype=np.float64)
                    got.flags.writeable = False  # shared by the records that move these bytes
            else:
                shape = self.schedules[0].records[rid].ranks.shape
                per = [np.broadcast_to(np.asarray(b, dtype=np.float64), shape) for b in per]
                got = np.ascontiguousarray((self.weights @ np.stack(per)).T)
            if self.cached + got.size <= CACHE_VALUES:  # most records are met once: keep what fits
                self.cache[rid] = got
                self.cached += got.size
        return got

    def exchange(self, rid: int, pos: np.ndarray, me: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes each member of an uneven `all_to_all` (the record's ranks at positions `pos`, group indices
        `me`) sends to and receives from the others, its own block left out: (members, sizes) each. A split is
        rows along dim 0, so a row is the buffer's bytes over its split's rows."""
        sent: list[np.ndarray] = []
        received: list[np.ndarray] = []
        for s in self.schedules:
            rec = s.records[rid]
            assert isinstance(rec, CollectiveRec)
            item = DTYPES[rec.dtype].itemsize if rec.dtype in DTYPES else 4
            n = rec.ranks.size
            for splits, views, out in ((rec.in_splits, rec.inputs, sent), (rec.out_splits, rec.outputs, received)):
                table = split_table(splits, n)[:, pos].astype(np.float64)
                rows = table.sum(axis=0)
                numel = np.broadcast_to(np.asarray(sum((_numel(v.numel) for v in views), 0.0)), (n,))[pos]
                row_bytes = np.divide(numel * item, rows, out=np.zeros_like(rows), where=rows > 0)
                out.append((rows - table[me, np.arange(len(pos))]) * row_bytes)
        return (self.weights @ np.stack(sent)).T, (self.weights @ np.stack(received)).T

    def rows(self, rid: int, pos) -> np.ndarray:
        """Bytes of the record's ranks at positions `pos` (None: all): (sizes,) when uniform, else (len, sizes)."""
        b = self.of(rid)
        if b.ndim == 1 or pos is None:
            return b
        return _rows(b, _ix(pos))


def op_bytes(rec, schedule: Schedule):
    """Bytes one record moves per rank (a scalar or an array over its ranks): a message's payload, a
    collective's nccl-tests size (the larger of a member's input and output), a local op's bytes read and
    written; 0 for `expect` and `print`, which the bench does not time either."""
    if isinstance(rec, P2PRec):
        return _numel(rec.view.numel) * DTYPES[rec.dtype].itemsize
    if isinstance(rec, CollectiveRec):
        item = DTYPES[rec.dtype].itemsize if rec.dtype in DTYPES else 4
        ins = sum((_numel(v.numel) for v in rec.inputs), 0)
        outs = sum((_numel(v.numel) for v in rec.outputs), 0)
        return np.maximum(ins, outs) * item
    if isinstance(rec, ComputeRec):
        item = DTYPES[schedule.infos[rec.target.tensor].dtype].itemsize
        return _numel(rec.target.numel) * item * (1 + len(rec.reads))
    return 0


PAGE = mmap.PAGESIZE
"""Bytes of a page here: the fresh bytes as the page faults `commdsl bench` counts (`rank_page_faults`)."""


def mapped(nbytes, threshold: int):
    """Does glibc's malloc map a torch CPU tensor of `nbytes` anew (and unmap it when freed)? c10's `alloc_cpu`
    calls posix_memalign(64, n); glibc's `_int_memalign` asks `_int_malloc` for the padded size plus 64 + MINSIZE
    (32) bytes, each size padded as `request2size` does (8 bytes of header, a multiple of 16), and `sysmalloc`
    maps a request of at least the mmap threshold (malloc/malloc.c). So a tensor 8 bytes short of 32 MiB
    (a swept size rounded to the program's shape) is mapped too."""
    padded = np.floor((np.floor((np.asarray(nbytes, dtype=np.float64) + 23) / 16) * 16 + 96 + 23) / 16) * 16
    return padded >= threshold


def _uniform(b):
    """A per-rank byte count that is the same on every rank as one number."""
    if np.ndim(b) and b.size and bool((b == b.flat[0]).all()):
        return b.flat[0]
    return b


def _numel(n):
    return n.astype(np.float64) if isinstance(n, np.ndarray) else float(n)


@dataclass
class Timing:
    """What one predicted run gives: per size the time, per link the load, and the critical path."""

    seconds: np.ndarray  # per size: when the last rank finishes
    rank_seconds: np.ndarray  # world × sizes
    port_names: list[str]
    port_bytes: np.ndarray  # per port, at the path size
    port_busy: np.ndarray  # seconds each port moved data, at the path size
    path: list[dict] | None  # the critical path at the path size, in time order, one entry per run of one line
    path_size: int  # index of the size the path and the link figures are for
    outcome: Outcome
    profiles: dict[int, list[dict]] | None = None  # per rank, its time per source line at the path size
    # (`rank_profile`): every rank's up to PROFILED_RANKS ranks, else the last rank's only
    last_rank: int = 0  # the rank that finishes last at the path size: a row's `lines` are its profile
    fresh_bytes: np.ndarray | None = None  # world × sizes: the fresh pages each rank faults in (None: not counted)

    @property
    def profile(self) -> list[dict] | None:
        return None if self.profiles is None else self.profiles.get(self.last_rank)


@dataclass
class Index:
    """Distinct-or-not row indices into a clock array, prepared once: `ix` gathers them (a slice, so a view,
    when they are a run of consecutive rows); when they are a permutation of a run (`block`), `inv` lines
    values given in their order up with the run, so a scatter becomes a gather and an in-place update."""

    at: np.ndarray
    ix: np.ndarray | slice
    distinct: bool
    block: slice | None = None
    inv: np.ndarray | None = None


def _index(a: np.ndarray, n: int) -> Index:
    ix = _ix(a)
    if isinstance(ix, slice):
        return Index(a, ix, True, ix)
    distinct = _distinct(a, n)
    if distinct and a.size and int(a.max()) - int(a.min()) == a.size - 1:
        lo = int(a.min())
        return Index(a, a, True, slice(lo, lo + a.size), np.argsort(a))
    return Index(a, a, distinct)


@dataclass
class Settled:
    """The clocks' state at a boundary between two periods of a loop (`Clocks.snapshot`): copies of its times
    and of its running sums (the link figures, the fresh bytes, the profile), and what must stay the same for a
    fold (the patterns kept, the pattern whose ports are held, each rank's way to its next collective, the lines
    ranks ran and are in)."""

    times: list[np.ndarray]
    sums: list[np.ndarray]
    same: tuple
    path: tuple | None  # where the path graph stood: its node count, its chunks, `last`, `Dnode`, `streams`' nodes
    streams: np.ndarray | None = None  # NCCL: when each stream's last async request ended (`stream_last`, by stream)


@dataclass
class Shift:
    """How the clocks moved in each of a loop's last periods (`Clocks.settled`): per size the amount every moved
    time moved by, which times moved (one mask per `Clocks.time_arrays` array) and how much each running sum
    grew (as `Settled.sums`)."""

    delta: np.ndarray
    moved: list[np.ndarray]
    grew: list[np.ndarray]
    nodes: tuple | None = None  # where the path graph is kept: the last period's nodes (`Clocks.period_nodes`)
    streams: np.ndarray | None = None  # NCCL: which streams' last requests' ends moved (as `moved`)


@dataclass
class Route:
    """Messages src[j] → dst[j]: α and β (scalars when all alike, else a column), and their ports and
    ranks as prepared indices into the clocks."""

    src: np.ndarray
    dst: np.ndarray
    alpha: np.ndarray | float
    beta: np.ndarray | float
    beta_flat: np.ndarray | float
    e: Index  # the sender's way out
    i: Index  # the receiver's way in
    i_counted: np.ndarray  # the way in is not the way out (a shared bus is both: its load counted once)
    sender: Index
    receiver: Index
    load: np.ndarray | float = 0.0  # bytes each message of the pattern moved so far, at the path size
    busy: np.ndarray | float = 0.0  # seconds of it
    last: tuple[np.ndarray, np.ndarray] | None = None  # the last bytes per size every message moved, its times
    alphas: np.ndarray | None = None
    own: bool = False  # every message has its two ports to itself (`Clocks.held`)
    joint: bool = False  # a port is one message's way out and another's way in (a rank that is not duplex)
    capacity: float = 1.0  # messages at full speed their node's bus carries at once (`Clocks.bus_capacity`)
    crowded: bool = False  # they crowd their node's cores (`Clocks.crowds`): their α runs under their bytes
    bus: tuple[np.ndarray | slice, np.ndarray] | None = None  # the messages crossing their node's bus, its port
    one_way: bool = False  # may be one-way streams (`Clocks.one_way_streams`): at their pace if late (`paced`)
    streamed: Route | None = None  # the same messages at a stream's pace (`Clocks.streamed`)

    # Adding a row of sizes or a column of messages to a messages × sizes array is several times slower than
    # adding a whole one (numpy's inner loop runs over the few sizes): so both are made whole, once.
    def alpha_full(self, sizes: int) -> np.ndarray:
        if self.alphas is None:
            self.alphas = np.repeat(np.asarray(self.alpha, dtype=np.float64), sizes, axis=1)
        return self.alphas

    def duration(self, b: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """Seconds of each message when every one moves `b` bytes per size: kept while `b` repeats."""
        if self.last is None or not np.array_equal(self.last[0], b):
            self.last = (b.copy(), np.ascontiguousarray(np.broadcast_to(b / self.beta, shape)))
        return self.last[1]


class Clocks(Observer):
    def __init__(self, schedule: Schedule, topo: Topology, nbytes: Bytes, sizes: int, track: int | None):
        W = schedule.world
        self.s, self.topo, self.nbytes, self.W = schedule, topo, nbytes, W
        self.T = np.zeros((W, sizes))
        self.D = np.zeros((W, sizes))
        R = schedule.requests.count
        self.req_post = np.zeros((R, sizes))
        self.req_end = np.zeros((R, sizes))
        self.req_done = np.zeros(R, dtype=bool)
        parts = schedule.requests.parts
        self.req_left = parts.copy() if R and int(parts.max()) > 1 else None  # ops still to end, per request
        self.req_waiting = np.zeros(R, dtype=bool)
        self.early: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        rpn, nics = topo.ranks_per_node, topo.nics_per_node
        self.node = np.arange(W) // rpn
        nodes = int(self.node[-1]) + 1 if W else 0
        self.nic = self.node * nics + (np.arange(W) % rpn) % nics
        self.n_nics = nodes * nics
        self.memory_bps = topo.memory_bps  # a local op's; on a shared_node host, the node's memory port's
        self.copy_bps = topo.memory_bps  # torch's copies around a collective, whose members all copy at once
        # fresh pages: torch's CPU tensors (Gloo); NCCL's are on the GPU, whose caching allocator keeps its blocks.
        # Each rank's faults are its own core's work (2 processes at once on the 2-core machine each kept the rate
        # of one alone; docs/predict-accuracy.md, "Fresh pages, measured"), shared only by more ranks than cores
        self.page_bps = topo.page_bps if topo.backend == "gloo" else None
        self.fresh = np.zeros((W, sizes)) if self.page_bps is not None else None  # bytes of them, per rank
        # an isend whose receive is already posted writes the start of its message from the caller's thread
        # (`held_by_isend`); the engine then matches it before its rank goes on
        self.send_buffer = topo.send_buffer if topo.backend == "gloo" else None
        self.meets_isend_at_once = self.send_buffer is not None
        self.latest: Posts | None = None  # the rows posted last (`posted`, `receive_first`)
        # and an async collective its last member calls is timed before that member goes on (`cores_taken`)
        self.completes_async_at_once = topo.shared_node and topo.backend == "gloo"
        if topo.shared_node and W:
            self.copy_bps *= min(1.0, topo.memory_capacity / min(rpn, W))
        # per node, when its memory is free of the local ops already timed (shared_node: see `memory_share`)
        self.memory_free = np.zeros((nodes, sizes)) if topo.shared_node else None
        # per node, when its cores are through with the fresh pages of the local ops already timed (`fault_share`)
        sharing_cores = topo.shared_node and topo.cores_per_node is not None and self.page_bps is not None
        self.faults_free = np.zeros((nodes, sizes)) if sharing_cores else None
        self.temps: dict[int, list[int]] = {}  # per local op record: its temporaries' element sizes
        ports = 2 * W + 2 * self.n_nics + nodes
        self.free = np.zeros((ports, sizes))
        self.k = track if track is not None else sizes - 1
        self.port_bytes = np.zeros(ports)
        self.port_busy = np.zeros(ports)
        self.group_net: dict[tuple[int, int, bool], tuple[float, float]] = {}
        self.sent_pairs: np.ndarray | None = None  # src · W + dst of every send of the program (`one_way_streams`)
        self.hop_betas: dict[int, float] = {}  # per group: `hop_beta`
        self.group_nodes: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per group: `node_spread`
        self.track = track is not None
        self.last = np.full(W, -1, dtype=np.int64)  # per rank: its latest node on the path graph
        self.Dnode = np.full(W, -1, dtype=np.int64)
        # each request's path nodes (-1: none); untracked, never read, so left as the OS's zero pages (a ring of
        # isends at world 4096 has 33.5 million requests: two such arrays filled cost 0.75 s)
        nodes_of = (lambda: np.full(R, -1, dtype=np.int64)) if self.track else (lambda: np.zeros(R, dtype=np.int64))
        self.req_post_node = nodes_of()
        self.req_end_node = nodes_of()
        self.nodes: list[tuple[np.ndarray, ...]] = []  # (rec, rank, peer, pred, start, end) chunks
        self.count = 0
        self.routes: dict[tuple[int, ...], Route] = {}
        self.seen: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray | slice]] = {}
        self.last_members: tuple | None = None  # (read-only ranks, their members, index): see `members`
        self.mix = np.zeros(0, dtype=np.int64)  # random weights: a pattern's fingerprint
        self.row: tuple[np.ndarray, np.ndarray] | None = None
        self.recent: tuple[np.ndarray, np.ndarray, Route] | None = None  # see `remember`
        self.held: tuple[Route, np.ndarray] | None = None  # see `hold`
        # NCCL runs a rank's ops on one communicator in issue order (`engine.NCCL.streams`): per stream, the
        # async request issued on it last; an op issued after it starts no sooner than it ends (`follow`)
        self.streams = topo.backend == "nccl"
        self.stream_last: dict[int, int] = {}
        # Gloo runs a process group's collectives on two worker threads per process, taking them from one
        # queue in issue order (torch's ProcessGroupGloo: `threads = 2`; `on_threads`): per group its members'
        # rows (from `thread_base`, made when the group first calls) of when each thread is free, its path
        # node, and which thread the member's latest call took
        self.gloo_threads = topo.backend == "gloo"
        self.thread_base = np.full(len(schedule.groups), -1, dtype=np.int64)
        self.thread_free = np.zeros((0, 2, sizes))
        self.thread_node = np.zeros((0, 2), dtype=np.int64)
        self.thread_took = np.zeros((0, sizes), dtype=bool)
        self.thread_used = 0
        self.flat_bytes: dict[int, np.ndarray] = {}  # per group: its `coalesced:` block's bytes so far (`flattened`)
        # Gloo on a crowded node: per rank, whether it comes from communication (`FROM_COMMUNICATION`) to its next
        # collective, at first as from its last op (the bench loops the program); per collective record, its
        # ranks' arrivals so (`arrivals`, `steps_hidden`)
        hides_steps = topo.backend == "gloo" and topo.crowded and topo.cores_per_node is not None
        self.from_communication = _loops_from_communication(schedule) if hides_steps else None
        self.arrived: dict[int, np.ndarray] = {}
        if self.track:  # the profile at size k (`stepping`): per rank, its seconds in each source line so far,
            # and the record it is in and when it began it
            line = np.array(
                [-1 if isinstance(r, UNTIMED_RECORDS) else r.span.line for r in schedule.records], dtype=np.int64
            )
            timed = np.flatnonzero(line >= 0)
            width = np.array([r.span.end - r.span.start for r in schedule.records], dtype=np.int64)
            widest = timed[np.lexsort((-width[timed], line[timed]))]  # by line, its widest record first
            self.lines, first = np.unique(line[widest], return_index=True)
            self.line_rec = widest[first]  # each line's widest record names it: the statement, not a value it reads
            self.line_col = np.where(line >= 0, np.searchsorted(self.lines, line), -1)
            self.profile = np.zeros((W, self.lines.size))
            self.ran = np.zeros((W, self.lines.size), dtype=bool)
            self.in_rec = np.full(W, -1, dtype=np.int64)
            self.began = np.zeros(W)

    # ---- folding a loop's alike iterations (`commdsl.steady`) -------------------------------------------
    folds = True

    def cost_key(self, rec, value) -> tuple | None:
        """What a record's cost reads beyond the engine's plan: its elements per rank at every expanded size (by
        value) and its dtype, and a local op's statement (its temporaries), op and reads; where the profile and
        the path are kept, also the line its time goes to."""
        t = type(rec)
        expanded = self.nbytes.schedules
        line = (int(self.line_col[rec.id]),) if self.track else ()
        if t is BatchRec or t is P2PRec:
            ops = rec.ops if t is BatchRec else [rec]
            return tuple((op.dtype, *(value(s.records[op.id].view.numel) for s in expanded)) for op in ops) + line
        if t is ComputeRec:
            numel = (value(s.records[rec.id].target.numel) for s in expanded)
            return (id(rec.node), rec.op, len(rec.reads), *numel, *line)
        return (t, *line)  # a wait, a check, a print, a data read: the rank's clock only catches up

    def time_arrays(self) -> list[tuple[np.ndarray, slice | list[int]]]:
        """The clocks' times a fold shifts, each with the sizes it holds: the ranks', the ports' (those a ring step
        holds too), the nodes' memory and cores, and where the profile is kept when each rank began its record.
        A time the clocks come to keep that a loop's local ops or self-matched batches move belongs here (a
        running sum in `running_sums`, anything else they read in `snapshot`'s `same`), or a fold goes wrong."""
        out = [self.T, self.D, self.free] + ([self.held[1]] if self.held is not None else [])
        out += [a for a in (self.memory_free, self.faults_free) if a is not None]
        every = slice(None)
        return [(a, every) for a in out] + ([(self.began[:, None], [self.k])] if self.track else [])

    def running_sums(self) -> list[np.ndarray]:
        """What a fold adds to, besides the kept patterns' loads: the ports' figures, the ranks' fresh bytes and
        their time per line."""
        out = [self.port_bytes, self.port_busy] + ([self.fresh] if self.fresh is not None else [])
        return out + ([self.profile] if self.track else [])

    def kept_routes(self) -> list[Route]:
        routes = list(self.routes.values())
        return routes + [r.streamed for r in routes if r.streamed is not None]

    def snapshot(self, period: np.ndarray) -> Settled | None:
        routes = self.kept_routes()
        same: tuple = (
            None if self.held is None else id(self.held[0]),
            tuple(id(r) for r in routes),
            None if self.from_communication is None else self.from_communication.tobytes(),
        )
        path: tuple | None = None
        if self.track:  # the lines ranks ran and are in; where the path graph stands
            line = np.where(self.in_rec >= 0, self.line_col[self.in_rec], -1)
            same += (self.ran.tobytes(), line.tobytes())
            path = (self.count, len(self.nodes), self.last.copy(), self.Dnode.copy())
        streams = None
        if self.stream_last:  # NCCL: what a stream's next op follows: a request of the period's records (by how
            # many records back and its position), or one posted before them (by its id)
            keys, reqs = self.stream_lasts()
            if not self.req_done[reqs].all():
                return None
            back = int(period[-1]) - self.s.requests.record[reqs].astype(np.int64)
            which = np.where(back < period.size, back, -1 - reqs)
            same += (keys.tobytes(), which.tobytes(), self.s.requests.pos[reqs].tobytes())
            streams = self.req_end[reqs]
            if path is not None:
                path += (self.req_end_node[reqs],)
        return Settled(
            [a.copy() for a, _ in self.time_arrays()],
            [a.copy() for a in self.running_sums()] + [_load_and_busy(r) for r in routes],
            same,
            path,
            streams,
        )

    def settled(self, snaps: list) -> Shift | None:
        """The per-size amount the ranks' clocks moved by in each of the last periods, where every moved time
        moved by it and the rest never matters again (`steady.moved_alike`), the running sums grew alike and the
        same patterns were kept throughout; None otherwise. Where the path graph is kept, also the last period's
        nodes, which each folded period repeats (`repeat_nodes`)."""
        last = snaps[-1]
        if any(s.same != last.same or len(s.times) != len(last.times) for s in snaps):
            return None
        delta = (last.times[0] - snaps[-2].times[0]).max(axis=0)
        floor = snaps[0].times[0].min(axis=0)
        moved = []
        for states, (_, sizes) in zip(zip(*(s.times for s in snaps)), self.time_arrays()):
            m = moved_alike(list(states), delta[sizes], floor[sizes])
            if m is None:
                return None
            moved.append(m)
        if not moved[0][:, delta > 0].all():  # a rank whose clock stood still while the others' moved
            return None
        streams = None
        if last.streams is not None:
            streams = moved_alike([s.streams for s in snaps], delta, floor)
            if streams is None:
                return None
        grew = []
        for sums in zip(*(s.sums for s in snaps)):
            steps = [b - a for a, b in zip(sums, sums[1:])]
            if any(not np.allclose(d, steps[-1], rtol=1e-9, atol=0.0) for d in steps):
                return None
            grew.append(steps[-1])
        nodes = self.period_nodes([s.path for s in snaps]) if self.track else None
        if self.track and nodes is None:
            return None
        return Shift(delta, moved, grew, nodes, streams)

    def period_nodes(self, marks: list) -> tuple | None:
        """The last period's nodes of the path graph, for a fold to repeat (`Shift.nodes`: their count, their
        columns, and which of the ranks' latest nodes, `last` and `Dnode`, move on a period's nodes each period,
        the rest staying throughout), where every period added as many and each waited only for nodes of its own
        period or the one before; None otherwise."""
        counts = [m[0] for m in marks]
        n = counts[-1] - counts[-2]
        if counts[-2] - counts[-3] != n:
            return None
        moving = []
        for j, now in enumerate(marks[-1][2:], start=2):  # `last`, `Dnode` and the streams' last requests' nodes
            before, then = marks[0][j], marks[1][j]
            on = (then - before == n) & (now - then == n) & (now >= counts[-2] - n)
            if (~(on | (now == before) & (now == then))).any():
                return None
            moving.append(on)
        nodes = _node_columns(self.nodes[marks[-2][1] :]) if n else ()
        if n and ((nodes[3] >= 0) & (nodes[3] < counts[-2] - n)).any():
            return None
        return n, nodes, moving

    def fold(self, shift: Shift, periods: int, rids: np.ndarray) -> None:
        """The clocks as after `periods` more periods: each moved time that many shifts later, the running sums
        that many periods' growth larger, the path graph that many periods' nodes longer (`rids`: the records of
        the last period, row 0, and of each folded one)."""
        for (live, sizes), m in zip(self.time_arrays(), shift.moved):
            live += np.where(m, periods * shift.delta[sizes], 0.0)
        sums = self.running_sums()
        for live, g in zip(sums, shift.grew):
            live += periods * g
        for r, g in zip(self.kept_routes(), shift.grew[len(sums) :]):
            r.load = r.load + periods * g[0]
            r.busy = r.busy + periods * g[1]
        if shift.nodes is not None:
            self.repeat_nodes(shift.nodes, rids, shift.delta[self.k])
        if shift.streams is not None:
            self.follow_on(shift, periods, rids)

    def stream_lasts(self) -> tuple[np.ndarray, np.ndarray]:
        """NCCL: the streams with a last async request (`stream_last`), ascending, and those requests."""
        keys = np.fromiter(self.stream_last, dtype=np.int64, count=len(self.stream_last))
        reqs = np.fromiter(self.stream_last.values(), dtype=np.int64, count=keys.size)
        order = np.argsort(keys)
        return keys[order], reqs[order]

    def follow_on(self, shift: Shift, periods: int, rids: np.ndarray) -> None:
        """NCCL: each stream's last request as after the folded periods: where the last period posted it, the same
        request of the last folded period's record, ending that many shifts later (its path node that many
        periods' nodes on); one posted before the loop stays."""
        keys, old = self.stream_lasts()
        back = int(rids[0, -1]) - self.s.requests.record[old].astype(np.int64)
        inside = back < rids.shape[1]
        assert shift.streams is not None  # `fold` calls this only then
        keys, old, back, moved = keys[inside], old[inside], back[inside], shift.streams[inside]
        pos = self.s.requests.pos[old]
        new = np.empty_like(old)
        for b in distinct(back).tolist():
            sel = back == b
            rec = self.s.records[int(rids[-1, -1]) - b]
            new[sel] = at(rec.req, pos[sel], 0)
        self.req_end[new] = self.req_end[old] + np.where(moved, periods * shift.delta, 0.0)
        self.req_done[new] = True
        if shift.nodes is not None:
            n, _, moving = shift.nodes
            self.req_end_node[new] = self.req_end_node[old] + np.where(moving[2][inside], periods * n, 0)
        self.stream_last.update(zip(keys.tolist(), new.tolist()))

    def repeat_nodes(self, last_period: tuple, rids: np.ndarray, delta: float) -> None:
        """The path graph's nodes of the folded periods (`rids`: the records of the last period, row 0, and of each
        folded one), each the last period's shifted in time and in id, of its own period's records (a node that
        waited for one of its own or the previous period waits for the same one of its copy's)."""
        n, nodes, moving = last_period
        periods = rids.shape[0] - 1
        if not n:
            return
        rec, rank, peer, pred, start, end = nodes
        ids = np.array([self.period_ids(row) for row in rids.tolist()], dtype=np.int64)
        order = np.argsort(ids[0])
        place = order[np.searchsorted(ids[0], rec, sorter=order)]  # each node's record's place in its period
        assert np.array_equal(ids[0, place], rec), "a folded period's node names a record outside the period"
        copy = np.repeat(np.arange(1, periods + 1, dtype=np.int64), n)
        later = copy * delta
        waited = np.tile(pred, periods)
        self.nodes.append(
            (
                ids[1:, place].astype(np.int32).ravel(),
                np.tile(rank, periods),
                np.tile(peer, periods),
                np.where(waited >= 0, waited + copy * n, -1),
                np.tile(start, periods) + later,
                np.tile(end, periods) + later,
            )
        )
        self.count += periods * n
        for latest, on in zip((self.last, self.Dnode), moving):
            latest[on] += periods * n

    def period_ids(self, rids: list[int]) -> list[int]:
        """The ids a period's path nodes may name: each record's and, for a batch, its ops' (a message's node is
        its send's), in order."""
        out = []
        for rid in rids:
            out.append(rid)
            rec = self.s.records[rid]
            if type(rec) is BatchRec:
                out += [op.id for op in rec.ops]
        return out

    # ---- the path graph ------------------------------------------------------------------------------
    def add_nodes(self, rec, rank, peer, pred, start, end) -> np.ndarray:
        n = rank.size
        if not self.track:
            return np.full(n, -1, dtype=np.int64)
        ids = np.arange(self.count, self.count + n, dtype=np.int64)
        if n:
            self.count += n
            b = np.broadcast_to
            self.nodes.append(
                (
                    b(np.asarray(rec, dtype=np.int32), (n,)).copy(),
                    rank.astype(np.int32),
                    b(np.asarray(peer, dtype=np.int32), (n,)).copy(),
                    pred.astype(np.int64),
                    np.asarray(start, dtype=np.float64).copy(),
                    np.asarray(end, dtype=np.float64).copy(),
                )
            )
        return ids

    # ---- clocks --------------------------------------------------------------------------------------
    def settle(self, G: np.ndarray, ix=None) -> None:
        """Ranks G (distinct) act again: their clocks catch up with what they waited for."""
        ix = _ix(G) if ix is None else ix
        d, t = _rows(self.D, ix), _rows(self.T, ix)
        if self.track:
            later = d[:, self.k] > t[:, self.k]
            if later.any():
                self.last[G[later]] = self.Dnode[G[later]]
        np.maximum(t, d, out=t)  # in T itself when ix is a slice
        if not isinstance(ix, slice):
            _set_rows(self.T, ix, t)

    def wait_for(self, ranks: np.ndarray, end: np.ndarray, nodes: np.ndarray, who: Index | None = None, lined=None):
        """Ranks wait for things ending at `end` (len(ranks) × sizes); a rank may appear more than once
        (`who`: the ranks prepared as an index, when the caller has them)."""
        if not ranks.size:
            return
        who = _index(ranks, self.W) if who is None else who
        if who.distinct:
            if self.track:
                later = end[:, self.k] > self.D[who.ix, self.k]
            _max_into(self.D, who, end, {} if lined is None else lined)
        else:
            order = np.argsort(end[:, self.k], kind="stable")  # the latest last, so it wins the node below
            ranks, end, nodes = ranks[order], end[order], nodes[order]
            later = end[:, self.k] > self.D[ranks, self.k]
            np.maximum.at(self.D, ranks, end)
        if self.track:
            self.Dnode[ranks[later]] = nodes[later]

    def finish_requests(self, reqs: np.ndarray, end: np.ndarray, nodes: np.ndarray) -> None:
        if self.req_left is not None:  # a batch bound to a handle: its request ends with the last of its ops
            self.part_done(reqs, end, nodes)
            reqs = distinct(reqs[self.req_left[reqs] == 0])
            end, nodes = self.req_end[reqs], self.req_end_node[reqs]
        else:
            self.req_end[reqs] = end
            self.req_end_node[reqs] = nodes
        self.req_done[reqs] = True
        w = self.req_waiting[reqs]
        if w.any():
            self.req_waiting[reqs[w]] = False
            self.wait_for(self.s.requests.rank[reqs[w]], end[w], nodes[w])

    def part_done(self, reqs: np.ndarray, end: np.ndarray, nodes: np.ndarray) -> None:
        """One op of each of `reqs` ended at `end` (a request may appear more than once): the latest end so far."""
        assert self.req_left is not None  # only a schedule with a batch bound to a handle counts parts
        np.subtract.at(self.req_left, reqs, 1)
        for j in np.argsort(end[:, self.k], kind="stable").tolist():  # the latest last: it names the node
            q = int(reqs[j])
            if end[j, self.k] >= self.req_end[q, self.k]:
                self.req_end[q] = np.maximum(self.req_end[q], end[j])
                self.req_end_node[q] = nodes[j]

    # ---- the profile ---------------------------------------------------------------------------------
    def stepping(self, rec, G) -> None:
        """Ranks G begin `rec`: the record each was in ends for the profile now, at its clock caught up with
        what it waited for (what the hook for `rec` makes its clock, `settle`)."""
        if self.from_communication is not None and type(rec) is not CollectiveRec:
            came = FROM_COMMUNICATION.get(type(rec))
            if came is not None:
                self.from_communication[G] = came
        if not self.track:
            return
        ix = _ix(G)
        now = np.maximum(self.T[ix, self.k], self.D[ix, self.k])
        self.close(G, now)
        self.in_rec[G] = rec.id
        self.began[G] = now
        col = int(self.line_col[rec.id])
        if col >= 0:
            self.ran[G, col] = True

    def close(self, G: np.ndarray, now: np.ndarray) -> None:
        """The records ranks G (distinct) are in end at `now`: their time goes to their lines."""
        rid = self.in_rec[G]
        col = np.full(rid.shape, -1, dtype=np.int64)  # -1: in no record yet (a program of no ops has no lines)
        col[rid >= 0] = self.line_col[rid[rid >= 0]]
        timed = col >= 0
        self.profile[G[timed], col[timed]] += (now - self.began[G])[timed]

    def rank_profile(self, rank: int) -> list[dict] | None:
        """Where `rank`'s time goes at size k, as the bench's `lines` (its ops' time, call to return, summed
        per source line; `span`: a statement on the line): after the run, its last statement ending at its
        clock. None when not tracked."""
        if not self.track:
            return None
        self.close(np.array([rank]), self.T[[rank], self.k])
        self.in_rec[rank] = -1
        return [
            {
                "line": int(self.lines[c]),
                "span": self.s.records[self.line_rec[c]].span,
                "us": float(self.profile[rank, c]) * 1e6,
            }
            for c in np.flatnonzero(self.ran[rank]).tolist()
        ]

    # ---- observer hooks ------------------------------------------------------------------------------
    def local(self, rec, G, pos) -> None:
        ix = _ix(G, ascending=True)
        self.settle(G, ix)
        if not isinstance(rec, ComputeRec):
            return
        b = self.nbytes.rows(rec.id, pos)
        if self.track:
            start = self.T[ix, self.k].copy()
        temps = self.local_temporaries(rec, b)
        moved = b + 2 * sum(temps) if temps else b  # temporaries written once and read once, as a copy counts
        t = _rows(self.T, ix)  # a view of T when ix is a slice
        ways = None if self.topo.overlap else self.ways(G)
        if ways is not None:  # the rank's messages go first: its op starts when its ways are free
            self.put_back()
            t = np.maximum(t, self.free[ways].reshape(-1, *t.shape).max(axis=0))
        ready = t  # when the op may start: `cores_carry` below reads it before T's rows are written
        if self.memory_free is not None:
            t = self.memory_share(self.memory_free, G, t, moved)  # a new array
        else:
            took = moved / self.memory_bps
            t += self.whole(took, t.shape) if took.ndim == 1 else took
        if temps:
            faults = self.fresh_pages(temps, ranks=ix)
            if self.faults_free is not None:
                t = self.fault_share(G, t, np.broadcast_to(faults, t.shape))  # a new array
            else:
                t += faults
        if ways is not None:  # ... and its ways are busy until it ends
            np.maximum.at(self.free, ways.ravel(), np.tile(t, (ways.shape[0], 1)))
        if self.memory_free is not None:  # its bytes keep the node's cores from the messages crossing it
            work = np.broadcast_to(moved / self.memory_bps, t.shape)
            ports = self.bus_port(self.node[G])
            self.cores_carry(self.free, ports, np.broadcast_to(ready, t.shape), work, self.topo.memory_capacity)
        if not isinstance(ix, slice):
            _set_rows(self.T, ix, t)
        elif self.memory_free is not None or self.faults_free is not None or ways is not None:  # t: a new array
            self.T[ix] = t
        if self.track:
            self.last[G] = self.add_nodes(rec.id, G, -1, self.last[G], start, self.T[ix, self.k])

    def ways(self, G: np.ndarray) -> np.ndarray:
        """The ports of ranks G's ways inside their node (`overlap = false`): per way (out, and in unless it is
        the same one) a row of port indices. Gloo moves a process's messages on its loop thread; where the
        host has no core to spare for it while the rank computes (the 2-core machine, two ranks: an isend and
        irecv of 16 MiB beside six adds of it took their sum, not the longer, `bench --calibrate`), the op and
        the messages take turns: an op starts when the messages on its rank's ways have moved, and a message
        through them starts when the op has ended."""
        return np.stack([G]) if not self.topo.duplex else np.stack([G, self.W + G])

    def fault_share(self, G: np.ndarray, t: np.ndarray, faults: np.ndarray) -> np.ndarray:
        """The clocks `t` of ranks G after faulting in their op's fresh pages (`faults`: seconds at one rank's
        `page_fault_gbps`) on a shared_node host of `cores_per_node` cores. A fault is the kernel zeroing a page
        on the faulting process's core, so the node's ranks that fault at once share its cores as they share
        its memory (`memory_share`: processor sharing, each at most one rank's rate), and the cores also work
        off the faults timed before: four ranks of Ulysses or the MoE all-to-all faulting their 32-64 MiB
        temporaries in at once on two cores take twice one rank's time, while a pipeline stage that computes
        as the others wait has them to itself. Charged at one rank's rate whatever the others did, those rows
        were 20 % fast in ten campaigns of the 2-core machine; so priced, 2,459 rows of 3,060 came within
        ±25 % against 2,429 (docs/predict-accuracy.md, "A local op's fresh pages share the cores"). A
        collective's members, which fault at once by construction, share them in `fresh_pages`."""
        assert self.faults_free is not None and self.topo.cores_per_node is not None
        return self.through_node(self.faults_free, self.node[G], t, faults, 1.0, float(self.topo.cores_per_node))

    def through_node(self, free, node, t, work, rate: float, capacity: float) -> np.ndarray:
        """The clocks `t` of ranks on nodes `node` after each does `work` (rows like `t`) through a resource of
        its node that one rank uses at `rate` and that carries `capacity` ranks at that rate at once: the ranks
        doing it now share it fairly (`_shared`), and it also works off what was timed before at its whole
        rate, `free` holding per node when it will have (updated). The node's memory (`memory_share`) and its
        cores faulting fresh pages in (`fault_share`)."""
        eff = _shared(node, work, self.k, free.shape[0], capacity)
        queued = np.maximum(t, free[node]) + eff / (max(1.0, capacity) * rate)
        np.maximum.at(free, node, queued)
        return np.maximum(t + eff / rate, queued)

    def cores_carry(self, free: np.ndarray, at: np.ndarray, first: np.ndarray, work: np.ndarray, capacity: float):
        """On a `shared_node` host one node's cores both run its ranks' local ops and move their messages (Gloo
        over loopback TCP: the kernel copies a message's bytes on the sending and the receiving process's
        cores), so each of the two backlogs the clocks keep per node, its memory's (`memory_free`, which local
        ops queue on) and its bus's (`bus_port`, which messages wait for), also carries the other kind's work:
        `work` (rows × sizes: seconds at one rank's full speed), begun no sooner than `first`, keeps the rows
        `at` of `free` busy as long as its own resource takes for it, `capacity` such works at once (the bus's
        for messages, the memory's for ops): an SPMD step's ops, which queue behind their messages, are not
        delayed by them. A pipeline stage's adds slow the activations other stages exchange meanwhile, and
        those messages its adds: with the two kept apart the 1F1B pipeline at N = 4 and 16-64 MiB came out
        26-31 % fast over eleven campaigns of the 2-core machine (docs/predict-accuracy.md, "The cores carry
        both")."""
        rows, of = np.unique(at, return_inverse=True, return_counts=True)[:2]  # counts: see `values.distinct`
        total = np.zeros((rows.size, work.shape[1]))
        np.add.at(total, of, work)  # in row order at any number of sizes: the same bits for each
        begun = np.full((rows.size, first.shape[1]), np.inf)
        np.minimum.at(begun, of, first)
        free[rows] = np.maximum(free[rows], begun) + total / max(1.0, capacity)

    def memory_share(self, free: np.ndarray, G: np.ndarray, t: np.ndarray, moved: np.ndarray) -> np.ndarray:
        """The clocks `t` of ranks G (each row a rank's, per size) after moving `moved` bytes each through their
        node's memory on a shared_node host: the node's ranks that run this op at once share it as the ranks
        of a ring step all add at once (processor sharing, `_shared`: four equal ones take four times as long),
        and the node's memory also drains the local ops timed before it, at its whole bandwidth: an op ends no
        sooner than its own bytes at one rank's speed, nor than the memory's backlog and its own bytes at the
        node's. With room for one add (the 2-core machine) ops of different ranks queue as at a port; with
        room for 3.4 (the 16-core host) two pipeline stages' adds run side by side, and a stage that computes
        while the others wait has the memory to itself. `memory_gbps` is one rank's, `node_memory_gbps` all
        of them at once (`Topology.memory_capacity`; `bench --calibrate` times both). `free`: per node, when
        its memory has drained the ops timed so far."""
        node = self.node[G]
        capacity = self.topo.memory_capacity
        drain = max(1.0, capacity) * self.memory_bps
        if moved.ndim == 1 and (node == node[0]).all():  # one node, equal ops (an SPMD step): all share at once
            eff = moved * max(1.0, G.size / capacity)
            queued = np.maximum(t, free[node[0]]) + moved * (G.size / drain)
            free[node[0]] = queued.max(axis=0)
            return np.maximum(t + eff / self.memory_bps, queued)
        return self.through_node(free, node, t, np.broadcast_to(moved, t.shape), self.memory_bps, capacity)

    def posted(self, rows: Posts) -> None:
        ranks = rows.repeated("rank")
        self.settle(*self.members(rows.rank if ranks is None else ranks))
        self.latest = rows  # an isend the engine meets as it is posted met a receive posted before it
        if rows.const("req") == -1:  # none async
            if self.stream_last:
                self.follow(rows.rank, rows.column("req"), post_streams(rows))
            return
        q = rows.req
        a = q >= 0
        if a.any():
            self.req_post[q[a]] = self.T[rows.rank[a]]
            self.req_post_node[q[a]] = self.last[rows.rank[a]]
        if self.streams:
            self.follow(rows.rank, q, post_streams(rows))

    def post_time(self, rows: Posts, ix) -> tuple[np.ndarray, np.ndarray]:
        """When each row was posted (rows × sizes; a view of T when `ix`, the rows' ranks, is a slice and
        none is async) and the node it came after."""
        t = _rows(self.T, ix)
        node = self.last[rows.rank] if self.track else self.last[:0]
        if rows.const("req") == -1:  # none async
            return t, node
        a = rows.req >= 0
        if a.any():
            t = t.copy()
            t[a] = self.req_post[rows.req[a]]
            if self.track:  # else no node: the path is not kept
                node = node.copy()
                node[a] = self.req_post_node[rows.req[a]]
        return t, node

    def matched(self, sends: Posts, recvs: Posts) -> None:
        k = self.k
        way = self.route(sends.src, sends.dst)
        ts, ns = self.post_time(sends, way.sender.ix)
        tr, nr = self.post_time(recvs, way.receiver.ix)
        way = self.paced(way, ts, tr)
        pred = np.where(ts[:, k] >= tr[:, k], ns, nr) if self.track else ns
        isend = self.send_buffer is not None and sends.const("req") != -1
        recv_first = self.receive_first(sends, ts, tr) if isend else None  # before `start` may be written into tr
        start = np.maximum(ts, tr, out=None if isinstance(way.receiver.ix, slice) else tr)  # tr: a copy then
        r0 = sends.const("rec")
        if r0 is None and (sends.rec == sends.rec[0]).all():
            r0 = int(sends.rec[0])
        if r0 is not None:
            b = self.nbytes.rows(r0, sends.pos)
        else:
            b = np.empty_like(start)
            for rid in distinct(sends.rec).tolist():
                m = sends.rec == rid
                b[m] = self.nbytes.rows(rid, sends.pos[m])
        n_ports = self.free.shape[0]
        capacity = way.capacity  # the node's bus, for these messages at once
        if way.joint:  # a port shared by messages in and out: each message as slow as its busier port
            full = np.broadcast_to(b, start.shape)
            twice = None if np.ndim(way.beta) == 0 else np.concatenate([way.beta, way.beta])
            both = _shared(np.concatenate([way.e.at, way.i.at]), np.concatenate([full, full]), k, n_ports, rates=twice)
            eff = np.maximum(both[: full.shape[0]], both[full.shape[0] :])
        elif way.e.distinct and way.i.distinct:
            eff = b
        else:
            full = np.broadcast_to(b, start.shape)
            se = full if way.e.distinct else _shared(way.e.at, full, k, n_ports, rates=way.beta)
            si = full if way.i.distinct else _shared(way.i.at, full, k, n_ports, rates=way.beta)
            eff = se if si is full else si if se is full else np.maximum(se, si)
        if way.bus is not None:  # and their node's bus, shared by every message crossing it
            sel, bus = way.bus
            eff = np.array(np.broadcast_to(eff, start.shape))
            on_bus = _shared(bus, np.broadcast_to(b, start.shape)[sel], k, n_ports, capacity)
            eff[sel] = np.maximum(eff[sel], on_bus)
        start_k = start[:, k].copy() if self.track else start[:0, 0]
        begin = start  # a new array (np.maximum above): worked on in place from here
        bytes_from = start.copy() if way.crowded else None
        begin += way.alpha if np.ndim(way.alpha) == 0 else way.alpha_full(start.shape[1])
        held = self.held
        if held is not None and held[0] is way:  # its ports are free when this pattern's last messages ended
            busy = held[1]
        else:
            self.put_back()
            busy = _rows(self.free, way.e.ix)
            busy = np.maximum(busy, _rows(self.free, way.i.ix), out=None if isinstance(way.e.ix, slice) else busy)
            if way.bus is not None:
                sel, bus = way.bus
                busy[sel] = np.maximum(busy[sel], np.take(self.free, bus, axis=0))
        called = begin.copy() if recv_first is not None else None  # an isend's own writing starts here
        np.maximum(begin, busy, out=begin)
        took = way.duration(eff, start.shape) if eff.ndim == 1 else eff / way.beta
        end = _ended(begin, took, bytes_from, busy)
        lined: dict[int, np.ndarray] = {}  # end lined up with a permuted run, per permutation: gathered once
        if way.own:
            self.held = (way, end)
        else:
            self.put_back(end, way)
        if self.memory_free is not None and way.bus is not None:  # their bytes keep the cores from local ops
            sel, _ = way.bus
            beta = way.beta if np.ndim(way.beta) == 0 else np.broadcast_to(way.beta, end.shape)[sel]
            work = np.broadcast_to(b, end.shape)[sel] / beta
            first = (end - took)[sel]
            self.cores_carry(self.memory_free, self.node[sends.src[sel]], first, work, capacity)
        load = b[..., k]  # the link figures: summed per pattern, put on its ports at the end (`flush`)
        way.load = way.load + load
        way.busy = way.busy + load / way.beta_flat
        nodes = self.add_nodes(sends.rec if r0 is None else r0, sends.src, sends.dst, pred, start_k, end[:, k])
        if recv_first is not None:
            self.held_by_isend(sends, recv_first, called, end, b, way.beta, nodes)
        for rows, who in ((sends, way.sender), (recvs, way.receiver)):
            a = rows.req >= 0 if rows.const("req") != -1 else None  # None: none async
            if a is None or not a.any():
                self.wait_for(rows.rank, end, nodes, who, lined)
                continue
            self.finish_requests(rows.req[a], end[a], nodes[a])
            if (~a).any():
                self.wait_for(rows.rank[~a], end[~a], nodes[~a])

    def receive_first(self, sends: Posts, ts: np.ndarray, tr: np.ndarray) -> np.ndarray:
        """Whether each send's receive was posted before it (rows × sizes): earlier in time, or at the same time
        and met as the send was posted (`Observer.meets_isend_at_once`: the engine had it already). A halo
        exchange posts its irecvs, then its isends, none of which takes time in the model: each receive at
        its send's own time, where the hold was charged nothing (measured 3-4 ms an isend of 4 MiB)."""
        first = tr < ts
        latest = self.latest
        if latest is None or latest.const("req") == -1:
            return first
        now = (sends.req >= 0) & np.isin(sends.req, latest.req[latest.req >= 0])
        if now.any():
            first |= (tr == ts) & now[:, None]
        return first

    def held_by_isend(self, sends: Posts, recv_first, called, end, b, beta, nodes) -> None:
        """Gloo: an `isend` whose receive was posted before it returns only when it has written the first
        `send_buffer` bytes of its message: Gloo's TCP pair writes the message from the calling thread as far
        as the socket takes it, and the loop thread the rest (`gloo/transport/tcp/pair.cc`; measured with
        torch 2.13 on loopback, `benchmarks/gloo_queue_facts.py isend`: up to 4 MiB the call returned when the
        message had arrived, at 16 MiB after about a third of it; an isend posted before its receive, and a
        batch's, return at once). The caller writes from when both are posted, plus α (`called`), at its
        message's own speed (`beta`), whatever else its ways and the bus carry meanwhile (Gloo's loop thread
        moves those): in a halo exchange at N = 2, two isends of 4 MiB each after two irecvs returned in
        0.2-1.4 ms where their bytes, sharing the way with the two messages in, took 5-6 ms
        (docs/predict-accuracy.md, "Lines by kind, rank for rank"); never after the message ends. Its rank's
        next op starts no sooner (`D`, as a blocking op's end). Per size (`recv_first`: rows × sizes), as the
        clocks differ by size."""
        assert self.send_buffer is not None  # `matched` looks for receives first only where it is given
        mine = np.flatnonzero((sends.req >= 0) & (sends.via == sends.rec))  # unbatched async sends
        if not mine.size:
            return
        nbytes = np.broadcast_to(b, end.shape)[mine]
        written = np.minimum(nbytes, self.send_buffer) / np.broadcast_to(beta, end.shape)[mine]
        held = np.minimum(end[mine], called[mine] + written)
        held[~recv_first[mine]] = 0.0  # its receive came later: the call returned at once
        self.wait_for(sends.rank[mine], held, nodes[mine])

    def put_back(self, end: np.ndarray | None = None, way: Route | None = None) -> None:
        """Ports are free when their messages end (a port's message ends after the port is free: end ≥ busy).
        A pattern whose every message has its two ports to itself (`Route.own`: a ring step) is `held`
        instead: its ports' free times are its messages' ends, so when the same pattern comes next (the
        ring's next step) they are read from there, and they are written into `free` only when another
        pattern needs the ports (`put_back()`: what is held). The same numbers, without a gather and a
        scatter of both ports per step."""
        if way is None:
            if self.held is None:
                return
            way, end = self.held
            self.held = None
        assert end is not None  # given with its pattern
        for side in (way.e, way.i):
            if side.distinct and not way.joint:
                if isinstance(side.ix, slice):
                    self.free[side.ix] = end
                else:
                    _set_rows(self.free, side.ix, end)
            else:
                np.maximum.at(self.free, side.at, end)
        if way.bus is not None:
            sel, bus = way.bus
            np.maximum.at(self.free, bus, end[sel])

    def whole(self, row: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """`row` (one value per size) repeated for every rank: adding it whole is several times faster than
        broadcasting it (see `Route.duration`); kept while it repeats."""
        if self.row is None or self.row[1].shape != shape or not np.array_equal(self.row[0], row):
            self.row = (row.copy(), np.ascontiguousarray(np.broadcast_to(row, shape)))
        return self.row[1]

    def fingerprint(self, *arrays: np.ndarray) -> tuple[int, ...]:
        """Equal arrays give equal keys (random weights: different ones almost never do; callers compare)."""
        M = arrays[0].size
        if self.mix.size < M:
            self.mix = _MIX.integers(1, 1 << 40, size=max(M, 2 * self.mix.size), dtype=np.int64)
        return (M, *(int(a @ self.mix[:M]) for a in arrays))

    def members(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray | slice]:
        """The distinct ranks of `ranks`, ascending, and them as an index: found again for a repeated pattern."""
        last = self.last_members
        if last is not None and ranks is last[0]:  # read-only and its own: the same values as last time
            return last[1], last[2]
        key = self.fingerprint(ranks)
        got = self.seen.get(key)
        if got is None or not np.array_equal(got[0], ranks):
            G = _members(ranks, self.W)
            if len(self.seen) >= ROUTES:
                self.seen.clear()
            got = self.seen[key] = (ranks.copy(), G, _ix(G))
        if not ranks.flags.writeable and ranks.base is None:
            self.last_members = (ranks, got[1], got[2])
        return got[1], got[2]

    def route(self, src: np.ndarray, dst: np.ndarray) -> Route:
        """The links and ports of messages src → dst, prepared as indices into the clocks: worked out once
        per pattern (a ring's 8,190 steps are one pattern) and found again by a fingerprint."""
        recent = self.recent
        if recent is not None and recent[0] is src and recent[1] is dst:
            return recent[2]
        M = src.size
        key = self.fingerprint(src, dst)
        got = self.routes.get(key)
        if got is not None and np.array_equal(got.src, src) and np.array_equal(got.dst, dst):
            self.remember(src, dst, got)
            return got
        crowded = self.crowds(src, dst)
        alpha, beta, e, i, bus = self.links(src, dst, crowded=crowded)
        W, n_ports = self.W, self.free.shape[0]
        one = M > 0 and bool((alpha == alpha[0]).all() and (beta == beta[0]).all())
        ports = [_index(e, n_ports), _index(i, n_ports)]
        ranks = [_index(src.copy(), W), _index(dst.copy(), W)]
        for port, rank in zip(ports, ranks):  # a rank's own port permuted as the ranks are: line up once
            if port.inv is not None and rank.inv is not None and np.array_equal(port.inv, rank.inv):
                port.inv = rank.inv
        got = Route(
            src.copy(),
            dst.copy(),
            alpha[0] if one else alpha[:, None],
            beta[0] if one else beta[:, None],
            beta[0] if one else beta,
            ports[0],
            ports[1],
            i != e,
            ranks[0],
            ranks[1],
        )
        apart = _distinct(np.concatenate([e, i]), n_ports)
        if bus is not None and (bus >= 0).any():
            sel = slice(None) if (bus >= 0).all() else np.flatnonzero(bus >= 0)
            got.bus = (sel, bus[sel])
        got.own = ports[0].distinct and ports[1].distinct and apart and got.bus is None
        got.joint = not apart and bool((i != e).all())
        got.capacity = self.bus_capacity(src, dst)
        got.crowded = crowded
        got.one_way = self.one_way_streams(src, dst)
        if len(self.routes) >= ROUTES or key in self.routes:  # full, or another pattern with this key
            self.flush()
        self.routes[key] = got
        self.remember(src, dst, got)
        return got

    def remember(self, src: np.ndarray, dst: np.ndarray, way: Route) -> None:
        """Read-only arrays are the same values as long as they are the same objects (the engine gives a
        loop's steps one array for all ranks and one per peer array): the last such pattern is found again
        by identity, without a fingerprint."""
        self.recent = None if src.flags.writeable or dst.flags.writeable else (src, dst, way)

    def flush(self) -> None:
        """Put every kept pattern's load on its ports and forget the patterns."""
        bus_bps = self.topo.bus_bandwidth
        for way in self.routes.values():
            for side, counted in ((way.e, 1), (way.i, way.i_counted)):  # a way both in and out counts once
                n = side.at.shape
                np.add.at(self.port_bytes, side.at, np.broadcast_to(way.load * counted, n))
                np.add.at(self.port_busy, side.at, np.broadcast_to(way.busy * counted, n))
            if way.bus is not None:
                sel, bus = way.bus
                load = np.broadcast_to(way.load, way.src.shape)[sel]
                np.add.at(self.port_bytes, bus, load)
                np.add.at(self.port_busy, bus, load / bus_bps)
        self.routes.clear()
        self.recent = None

    def bus_port(self, node: np.ndarray) -> np.ndarray:
        """The port of each node's bus (`shared_node`): after every rank's two ways and every NIC's two."""
        return 2 * self.W + 2 * self.n_nics + node

    def links(self, src: np.ndarray, dst: np.ndarray, step: bool = False, crowded: bool = False):
        """α and β of each message (from its node pair and the overrides), its two ports, and the bus port of
        its node (shared_node, a message inside a node; else −1). `step`: α of a built-in collective's step
        on that link instead of a message's. `crowded` (`crowds`): its class's crowded α (`Topology.crowded_alphas`,
        `crowded_step_alphas`)."""
        topo, W = self.topo, self.W
        same = self.node[src] == self.node[dst]
        if step:
            pair = (topo.intra_step_alpha, topo.inter_step_alpha)
            crowded_pair = topo.crowded_step_alphas
        else:
            pair = (topo.intra_alpha, topo.inter_alpha)
            crowded_pair = topo.crowded_alphas
        alpha = np.where(same, *(crowded_pair if crowded and crowded_pair is not None else pair))
        beta = np.where(same, topo.intra_beta, topo.inter_beta)
        if topo.overrides:
            for (a, z), (al, be, step_al) in topo.overrides.items():
                m = (src == a) & (dst == z)
                alpha[m], beta[m] = step_al if step else al, be
        # a rank's way out and way in; one way for both when it is not duplex
        e = np.where(same, src, 2 * W + self.nic[src])
        i = np.where(same, dst if not topo.duplex else W + dst, 2 * W + self.n_nics + self.nic[dst])
        bus = np.where(same, self.bus_port(self.node[src]), -1) if topo.shared_node else None
        return alpha, beta, e, i, bus

    def called(self, rec, G, pos, me) -> None:
        self.settle(G)
        if self.from_communication is not None:
            self.arrivals(rec, G, pos)
        q = None
        if rec.req is not None:
            q = at(rec.req, pos, G.size).astype(np.int64)
            self.req_post[q] = self.T[G]
            self.req_post_node[q] = self.last[G]
        if self.streams and (q is not None or self.stream_last):
            reqs = np.full(G.size, -1, dtype=np.int64) if q is None else q
            self.follow(G, reqs, call_streams(at(rec.gid, pos, G.size), G))

    def arrivals(self, rec: CollectiveRec, G: np.ndarray, pos: np.ndarray) -> None:
        """Ranks G (at `pos` in `rec.ranks`) call `rec`: whether each comes to it from communication is kept
        for its instance's cost (`steps_hidden`), and from now on each comes from a collective."""
        ranks_from = self.from_communication
        assert ranks_from is not None  # called only where steps may hide (Gloo on a crowded node)
        came = self.arrived.get(rec.id)
        if came is None:
            came = self.arrived[rec.id] = np.zeros(rec.ranks.size, dtype=bool)
        came[pos] = ranks_from[G]
        ranks_from[G] = True

    def steps_hidden(self, calls: Calls, s: int, c: int, rec: CollectiveRec, gid: int) -> bool:
        """Whether instance calls[s : s + c] hides its steps' latency under its bytes, costing the longer of
        the two instead of their sum: on Gloo, a ring (`Kind.lockstep`, not the all_to_all's one wait) whose
        members outnumber their node's cores, unless as many of them on a node as its cores come to it from
        their own work (`arrivals`). Four ranks on the 2-core machine: an `all_reduce` right after itself (a
        loop of one collective) took 5-18 ms at 1-8 MiB where the same right after an add on every rank took
        7-22; after an add on one rank it took what it took after itself, on three what it took after four,
        on two mostly between (the latency is a member waiting for a core, which the others spend moving
        bytes; members computing on every core leave the ring's wake-ups none). Measured:
        `benchmarks/gloo_queue_facts.py after` and `adders`, docs/predict-accuracy.md, "A collective straight
        from communication"."""
        if self.from_communication is None or not rec.kind.lockstep("gloo") or rec.kind.gloo_posts_at_once:
            return False
        assert self.topo.cores_per_node is not None  # kept only on a crowded node, which has it
        if self.per_node(gid) <= self.topo.cores_per_node:
            return False
        recs, pos = calls.rec[s : s + c], calls.pos[s : s + c]
        came = np.empty(c, dtype=bool)
        for r in distinct(recs):
            mine = recs == r
            came[mine] = self.arrived[int(r)][pos[mine]]
        worked = self.node[calls.rank[s : s + c][~came]]
        return not worked.size or int(np.bincount(worked).max()) < self.topo.cores_per_node

    def call_time(self, calls: Calls) -> tuple[np.ndarray, np.ndarray]:
        t = np.take(self.T, calls.rank, axis=0)
        node = self.last[calls.rank].copy()
        a = calls.req >= 0
        if a.any():
            t[a] = self.req_post[calls.req[a]]
            node[a] = self.req_post_node[calls.req[a]]
        if self.early:
            for j in np.flatnonzero(calls.released).tolist():
                key = (int(calls.rec[j]), int(calls.pos[j]))
                if key in self.early:
                    t[j], node[j] = self.early[key]
        return t, node

    def released(self, calls: Calls, leaving) -> None:
        """Gloo lets some members of a rooted collective go before all have called: they pay the
        collective's cost from their own call (what they send or receive does not wait for the others)."""
        idx = np.flatnonzero(leaving)
        t, node = self.call_time(calls.take(idx))
        for j, k in enumerate(idx.tolist()):
            self.early[(int(calls.rec[k]), int(calls.pos[k]))] = (t[j].copy(), int(node[j]))
        dur = self.duration(calls, 0, len(calls))
        end = t + dur[None, :]
        nodes = self.add_nodes(calls.rec[idx], calls.rank[idx], -1, node, t[:, self.k], end[:, self.k])
        self.release(calls.take(idx), end, nodes)

    def release(self, calls: Calls, end: np.ndarray, nodes: np.ndarray) -> None:
        a = calls.req >= 0
        if a.any():
            self.finish_requests(calls.req[a], end[a], nodes[a])
        if (~a).any():
            self.wait_for(calls.rank[~a], end[~a], nodes[~a])

    def completed(self, calls: Calls, starts, counts) -> None:
        t, node = self.call_time(calls)
        first = np.repeat(np.arange(starts.size), counts)
        share = self.bus_share(calls, starts, first)
        dur = np.stack(
            [self.duration(calls, int(s), int(c), int(k), completes=True) for s, c, k in zip(starts, counts, share)]
        )
        carried = self.memory_free is not None and self.gloo_threads
        called = t.copy() if carried else t  # when each member called, before it waited for a thread
        if self.gloo_threads:
            self.on_threads(calls, starts, counts, t, node, dur)
        start = np.maximum.reduceat(t, starts, axis=0)
        latest = np.zeros(starts.size, dtype=np.int64)
        order = np.argsort(t[:, self.k], kind="stable")  # the latest caller of each instance: the path goes through it
        latest[first[order]] = order
        end = start + dur
        nodes = self.add_nodes(
            calls.rec[starts], calls.rank[latest], -1, node[latest], start[:, self.k], end[:, self.k]
        )
        if carried:
            self.cores_taken(calls, starts, counts, called)
        staying = calls.released == 0
        idx = np.flatnonzero(staying)
        self.release(calls.take(idx), end[first[idx]], nodes[first[idx]])

    def on_threads(self, calls: Calls, starts, counts, t, node, dur) -> None:
        """Gloo: a member runs its call on the first free of its two threads of the group and starts no
        sooner (`t`, `node`: the calls' times and path nodes, moved to the thread's where it frees later);
        the call holds the thread until its instance ends. So a third async collective waits for the first
        to end (measured: a 1-element `all_reduce` behind two of 256 MiB ended with the first). A `coalesced:`
        block is one call: its later collectives follow the first on its thread. A barrier starts once both
        threads are free (torch's Gloo barrier waits for every earlier collective of its group). Members
        that left a rooted collective early (`released`) are left out. Instances of one group are taken in
        issue order, a group's first of this batch with every other group's first (a wave), and so on."""
        k, sizes = self.k, self.T.shape[1]
        ids = self.count + np.arange(starts.size, dtype=np.int64) if self.track else np.full(starts.size, -1)
        records = [self.s.records[r] for r in calls.rec[starts].tolist()]
        follows = np.array([r.block is not None and r.block.index > 0 for r in records])
        barrier = np.array([r.kind.name == "barrier" for r in records])
        gids = calls.gid[starts]  # sorted by (group, seq): a group's instances are adjacent
        run = np.maximum.accumulate(np.where(np.r_[True, gids[1:] != gids[:-1]], np.arange(gids.size), 0))
        wave = np.arange(gids.size) - run
        everything = np.arange(sizes)
        for w in range(int(wave.max()) + 1):
            inst = np.flatnonzero(wave == w)
            c = counts[inst]
            row = np.repeat(starts[inst] - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))
            of = np.repeat(np.arange(inst.size), c)
            keep = calls.released[row] == 0
            r, i = row[keep], inst[of[keep]]
            th = self.thread_rows(calls.gid[r], calls.me[r])
            free = self.thread_free[th]
            took = np.where(follows[i][:, None], self.thread_took[th], free[:, 1] < free[:, 0])
            pick = took.astype(np.int64)
            ready = np.where(barrier[i][:, None], free.max(axis=1), np.take_along_axis(free, pick[:, None], 1)[:, 0])
            later = ready[:, k] > t[r, k]
            t[r] = np.maximum(t[r], ready)
            node[r] = np.where(later, self.thread_node[th, pick[:, k]], node[r])
            end = np.maximum.reduceat(t[row], np.cumsum(c) - c, axis=0)[of[keep]] + dur[i]
            self.thread_free[th[:, None], pick, everything] = end
            self.thread_node[th, pick[:, k]] = ids[i]
            self.thread_took[th] = took

    def cores_taken(self, calls: Calls, starts, counts, called: np.ndarray) -> None:
        """Gloo on a `shared_node` host: a collective's work is done by its members' cores (torch's worker
        thread sums and copies, the kernel copies its messages over loopback TCP), so their nodes' memory
        carries it as it carries a message's bytes (`cores_carry`): a local op issued while an async collective
        runs shares the cores with it instead of running beside it for free. The 2-core machine,
        `async_allreduce_overlap.comm` at 16 MiB: the adds issued under the collective took 1.5-2.2× their time
        and the row as long as its blocking control's (N = 2: 53.5 against 53.2 ms), where the model had the
        overlap save 43 % (docs/predict-accuracy.md, "An async collective shares the cores"). Per member, its
        share of what the call sends (`Kind.gloo_sent_bytes`; an uneven `all_to_all`'s member what its splits
        send) at its hop's β over the bus's room, and its sums and copies (the root's, shared, where only the
        root copies) at one rank's memory speed over the memory's room; a group of one moves nothing. From the
        members' calls (`called`, rows like `calls`'s), not from when the instance begins on its thread, which
        may be much later: the backlog keeps one free time per node, and work begun later pushes it over the
        ops issued meanwhile (an async `coalesced:` block's second collective, which follows the first on its
        thread, delayed the DDP step's division by the first's whole time)."""
        sent, moved, at, first = [], [], [], []
        for s, c in zip(starts.tolist(), counts.tolist()):
            rec = self.s.records[int(calls.rec[s])]
            assert isinstance(rec, CollectiveRec)
            gid = int(calls.gid[s])
            p = len(self.s.groups[gid].ranks)
            if p < 2:
                continue
            b = self.instance_bytes(calls, s, c)
            ranks = calls.rank[s : s + c]
            if rec.kind is ALL_TO_ALL and rec.in_splits:
                out = self.exchanged(calls, s, c)[0]
            else:
                out = rec.kind.gloo_sent_bytes(p, b) / p
            copies = rec.kind.gloo_copy_bytes(p, b) / (p if rec.kind.gloo_root_copies else 1)
            copied = np.asarray(copies + rec.kind.gloo_reduce_bytes(p, b), dtype=np.float64)
            sent.append(np.broadcast_to(out / self.hop_beta(gid), (c, b.size)))
            moved.append(np.broadcast_to(copied / self.topo.memory_bps, (c, b.size)))
            at.append(self.node[ranks])
            first.append(called[s : s + c])
        if not at:
            return
        assert self.memory_free is not None  # called on a shared_node host only
        nodes, begun = np.concatenate(at), np.concatenate(first)
        self.cores_carry(self.memory_free, nodes, begun, np.concatenate(sent), self.topo.bus_capacity)
        self.cores_carry(self.memory_free, nodes, begun, np.concatenate(moved), self.topo.memory_capacity)

    def instance_bytes(self, calls: Calls, s: int, c: int) -> np.ndarray:
        """A collective instance's (calls[s : s + c]) nccl-tests size per predicted size: its largest member's."""
        b = self.nbytes.of(int(calls.rec[s]))
        return b if b.ndim == 1 else b[calls.pos[s : s + c]].max(axis=0)

    def hop_beta(self, gid: int) -> float:
        """The β of a group's slowest hop in group order, undivided: one member's message at full speed."""
        got = self.hop_betas.get(gid)
        if got is None:
            ranks = np.asarray(self.s.groups[gid].ranks, dtype=np.int64)
            got = self.hop_betas[gid] = float(self.links(ranks, np.roll(ranks, -1))[1].min())
        return got

    def thread_rows(self, gid: np.ndarray, me: np.ndarray) -> np.ndarray:
        """The rows of members `me` of groups `gid` in the thread arrays, made for a group's first call (the
        arrays grow by doubling: a program may make many groups)."""
        new = distinct(gid[self.thread_base[gid] < 0])
        if new.size:
            size = np.array([len(self.s.groups[g].ranks) for g in new.tolist()], dtype=np.int64)
            self.thread_base[new] = self.thread_used + np.cumsum(size) - size
            self.thread_used += int(size.sum())
            if self.thread_used > len(self.thread_free):
                grow = max(self.thread_used, 2 * len(self.thread_free)) - len(self.thread_free)
                self.thread_free = np.concatenate([self.thread_free, np.zeros((grow, *self.thread_free.shape[1:]))])
                self.thread_node = np.concatenate([self.thread_node, np.full((grow, 2), -1, dtype=np.int64)])
                self.thread_took = np.concatenate([self.thread_took, np.zeros((grow, self.thread_took.shape[1]), bool)])
        return self.thread_base[gid] + me

    def bus_share(self, calls: Calls, starts: np.ndarray, first: np.ndarray) -> np.ndarray:
        """Per instance, how many of the instances completing together use one of its nodes' buses
        (`shared_node`: collectives that run at once on one host share its bus as messages do); 1 otherwise."""
        share = np.ones(starts.size, dtype=np.int64)
        if not self.topo.shared_node or starts.size < 2:
            return share
        pairs = distinct(np.stack([first, self.node[calls.rank]], axis=1), axis=0)  # (instance, node) once each
        per_node = np.bincount(pairs[:, 1])
        np.maximum.at(share, pairs[:, 0], per_node[pairs[:, 1]])
        return share

    def duration(self, calls: Calls, s: int, c: int, share: int = 1, completes: bool = False) -> np.ndarray:
        """Seconds of one collective instance (calls[s : s + c]) at every size; `share`: how many instances
        share its bus (`bus_share`). Its members' fresh pages are counted (`Timing.fresh_bytes`) where it
        `completes`, once, and not again for the members a rooted collective lets go early (`released`)."""
        rid = int(calls.rec[s])
        rec = self.s.records[rid]
        assert isinstance(rec, CollectiveRec)
        gid = int(calls.gid[s])
        p = len(self.s.groups[gid].ranks)
        b = self.instance_bytes(calls, s, c)
        backend = self.topo.backend
        alpha, beta = self.net(gid, share, rec.kind.lockstep(backend))
        if backend == "gloo" and rec.kind.gloo_posts_at_once:
            alpha *= self.turns(gid)
        if backend == "gloo" and rec.block is not None and rec.block.index > 0:
            alpha = 0.0  # Gloo flattens a `coalesced:` block into one call: one latency, every member's bytes
        load = b[self.k] * rec.kind.busbw_factor(p)  # what a ring puts on each member's outgoing link
        if p < 2:  # a group of one sends nothing (a broadcast's n/β would be a copy neither backend makes), but
            # the call is still handed to the backend and waited for (`collective_call_us`)
            dur = np.full_like(b, self.topo.lone_call, dtype=np.float64)
        elif rec.kind is ALL_TO_ALL and rec.in_splits:
            dur, sent = self.uneven(calls, s, c, alpha, share)
            load = sent[:, self.k]
        else:
            dur = np.asarray(rec.kind.cost(p, b, alpha, beta, tree=self.topo.tree, backend=backend), dtype=np.float64)
            if self.steps_hidden(calls, s, c, rec, gid):
                latency = rec.kind.cost(p, 0.0, alpha, beta, tree=self.topo.tree, backend=backend)
                dur = np.maximum(latency, dur - latency)
            if rec.kind is ALL_TO_ALL and self.node_spread(gid)[0].size > 1:  # every pair at once: node NICs bound
                latency = rec.kind.cost(p, 0.0, alpha, beta, tree=self.topo.tree, backend=backend)
                dur = np.maximum(dur, latency + b * self.through_nics(gid))
        ranks = calls.rank[s : s + c]
        counted = ranks if completes else None
        if backend == "gloo":  # torch's copies around Gloo's algorithm, at memory speed (a group of
            # one too: torch's all_gather of one still copies its input into a flat temporary and that out)
            copy_bps = self.topo.memory_bps if rec.kind.gloo_root_copies else self.copy_bps
            dur = dur + np.asarray(rec.kind.gloo_copy_bytes(p, b), dtype=np.float64) / copy_bps
            # and its sums, every member at once
            dur = dur + np.asarray(rec.kind.gloo_reduce_bytes(p, b), dtype=np.float64) / self.copy_bps
            # and the temporaries it copies through, faulted in by every member at once
            dur = dur + self.fresh_pages(rec.kind.gloo_temporaries(p, b), self.per_node(gid) * share, counted)
            if rec.block is not None and rec.kind.name == "all_reduce":
                dur = dur + self.flattened(gid, rec.block, b, counted)
        if p >= 2:
            self.collective_traffic(rec, gid, ranks, calls.me[s : s + c], load, b[self.k])
        return np.broadcast_to(dur, (self.T.shape[1],))

    def collective_traffic(self, rec: CollectiveRec, gid: int, ranks, me, load, size: float) -> None:
        """A built-in collective instance's bytes on the ports it uses, for the link figures (its time is its
        kind's formula, not these ports'): each member's `load` to the next member in group order, out of its
        way and into the next's and through their node's bus (`shared_node`), or between nodes out of and into
        the NICs of the rings NCCL runs side by side (`net`). An even `all_to_all` sends to every member at
        once instead: its share for its node's members through its own ways, the rest out of its node's NICs,
        and as much in (`through_nics`)."""
        group = np.asarray(self.s.groups[gid].ranks, dtype=np.int64)
        rings = self.rings_across(gid)
        if rec.kind is ALL_TO_ALL and not rec.in_splits:
            nodes, count = self.node_spread(gid)
            m = count[np.searchsorted(nodes, self.node[ranks])]
            self.on_ways(ranks, ranks, size * (m - 1) / group.size)  # to and from its node's other members
            away = np.broadcast_to(size * (group.size - m) / group.size, ranks.shape)
            self.on_nics(ranks, away, rings, out=True)
            self.on_nics(ranks, away, rings, out=False)
            return
        nxt = np.roll(group, -1)[me]
        load = np.broadcast_to(np.asarray(load, dtype=np.float64), ranks.shape)
        here = self.node[ranks] == self.node[nxt]
        self.on_ways(ranks[here], nxt[here], load[here])
        self.on_nics(ranks[~here], load[~here], rings, out=True)
        self.on_nics(nxt[~here], load[~here], rings, out=False)

    def on_ways(self, src: np.ndarray, dst: np.ndarray, load: np.ndarray) -> None:
        """`load` bytes from each src to its dst inside their node: out of the sender's way, into the
        receiver's (one way when not duplex), through the node's bus (`shared_node`). src == dst: a member's
        traffic with the others of its node, out and in."""
        _, beta, e, i, bus = self.links(src, dst)
        for port in (e, i):
            np.add.at(self.port_bytes, port, load)
            np.add.at(self.port_busy, port, load / beta)
        if bus is not None:
            np.add.at(self.port_bytes, bus, load)
            np.add.at(self.port_busy, bus, load / self.topo.bus_bandwidth)

    def on_nics(self, ranks: np.ndarray, load: np.ndarray, rings: int, out: bool) -> None:
        """`load` bytes of each rank leaving (`out`) or entering its node, spread over `rings` of its node's
        NICs from its own on."""
        nics = self.topo.nics_per_node
        own = self.nic[ranks]  # its node's first NIC plus its own among them
        base = 2 * self.W + (0 if out else self.n_nics) + own - own % nics
        for j in range(rings):
            port = base + (own % nics + j) % nics
            np.add.at(self.port_bytes, port, load / rings)
            np.add.at(self.port_busy, port, load / rings / self.topo.inter_beta)

    def node_spread(self, gid: int) -> tuple[np.ndarray, np.ndarray]:
        """The nodes group `gid` has members on, ascending, and how many on each."""
        got = self.group_nodes.get(gid)
        if got is None:
            ranks = np.asarray(self.s.groups[gid].ranks, dtype=np.int64)
            got = self.group_nodes[gid] = np.unique(self.node[ranks], return_counts=True)
        return got

    def nics_driven(self, gid: int) -> np.ndarray:
        """Per node of group `gid` (`node_spread`), the NICs its members drive at once between nodes: on NCCL
        one ring per NIC, as many as the node's NICs and its members; Gloo: one."""
        m = self.node_spread(gid)[1]
        return np.minimum(self.topo.nics_per_node, m) if self.topo.backend == "nccl" else np.ones_like(m)

    def rings_across(self, gid: int) -> int:
        """How many rings run side by side between nodes for group `gid`: as many as its emptiest node drives
        (a node holding one member drives one)."""
        return int(self.nics_driven(gid).min())

    def through_nics(self, gid: int) -> float:
        """Seconds per byte of an even `all_to_all` of group `gid` through the NICs of its busiest node: each
        of a node's m members sends (p - m)/p of its bytes to members elsewhere, all at once, through the
        NICs the node drives (`nics_driven`, at the inter-node β each), and receives as much."""
        m = self.node_spread(gid)[1]
        p = int(m.sum())
        return float((m * (p - m) / (p * self.nics_driven(gid) * self.topo.inter_beta)).max())

    def uneven(self, calls: Calls, s: int, c: int, alpha: float, share: int) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of an uneven `all_to_all` instance (calls[s : s + c]) at every size, and what each member
        sends to the others (members × sizes): its busiest member's way at the β of the group's slowest hop
        (`AllToAll.busiest_way`, `hop_beta`), or with `shared_node` the node's bus all its members' sends cross
        (its share of the `share` instances at once), whichever is longer, after the even form's latency. Priced as
        even, a call whose splits send most rows to one member put the largest member's bytes through every
        member's way: the MoE dispatch at N = 4 1.8-2.5× what the bench measured."""
        sent, received = self.exchanged(calls, s, c)
        seconds = ALL_TO_ALL.busiest_way(sent, received, self.topo.duplex) / self.hop_beta(int(calls.gid[s]))
        if self.topo.shared_node:
            node = self.node[calls.rank[s : s + c]]
            on_node = np.zeros((int(node.max()) + 1, sent.shape[1]))
            np.add.at(on_node, node, sent)
            bus = self.topo.bus_bandwidth / share
            seconds = np.maximum(seconds, on_node.max(axis=0) / bus)
        return ALL_TO_ALL.latency_hops(c, self.topo.backend) * alpha + seconds, sent

    def exchanged(self, calls: Calls, s: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """What each member of an uneven `all_to_all` instance (calls[s : s + c]) sends to the others and
        receives from them (members × sizes)."""
        recs, pos, me = calls.rec[s : s + c], calls.pos[s : s + c], calls.me[s : s + c]
        sent, received = np.zeros((c, self.T.shape[1])), np.zeros((c, self.T.shape[1]))
        for rid in distinct(recs):  # the members' calls may be different statements (`on rank == 0:` ...)
            mine = recs == rid
            sent[mine], received[mine] = self.nbytes.exchange(int(rid), pos[mine], me[mine])
        return sent, received

    def flattened(self, gid: int, block: Coalesced, b: np.ndarray, ranks: np.ndarray | None) -> np.ndarray:
        """Seconds Gloo's `allreduce_coalesced` adds for a block's member of `b` bytes: it copies the block's
        tensors into one new tensor and back after (`flattenDenseTensors`, then `copy_` per tensor), and that
        tensor's fresh pages when the block's bytes together are mapped (charged at its last member)."""
        total = b if block.index == 0 else self.flat_bytes[gid] + b
        self.flat_bytes[gid] = total
        seconds = 4 * b / self.copy_bps
        return seconds + self.fresh_pages([total], ranks=ranks) if block.last else seconds

    def fresh_pages(self, temporaries, at_once: int = 1, ranks=None) -> np.ndarray | float:
        """Seconds a rank spends on the fresh pages of temporaries of these bytes (each a number or an array
        like the op's bytes): those malloc maps (`mapped`) are new pages on every call, each faulted in and
        zeroed by the kernel and unmapped on free, at `page_fault_gbps`; smaller ones reuse the heap's pages.
        That is its own core's work: `at_once` ranks of one node faulting at the same time (a collective's
        members there) share its `cores_per_node` when they outnumber them. Plain torch on the 2-core
        machine, every rank's fresh 64 MiB filled and copied out at once: 29-31 ms a call at 2 ranks,
        49-60 ms at 4 (`benchmarks/gloo_queue_facts.py pages`). 0 when the topology does not give the rate.
        The bytes are counted for `ranks` (rows of `T`, as `_ix` gives them; None: not counted), in
        `Timing.fresh_bytes`."""
        if self.page_bps is None:
            return 0.0
        total: np.ndarray | float = 0.0
        for b in temporaries:
            total = total + np.where(mapped(b, self.topo.mmap_threshold), b, 0.0)
        if ranks is not None and self.fresh is not None:
            self.fresh[ranks] += total
        cores = self.topo.cores_per_node
        crowded = at_once / cores if cores is not None and at_once > cores else 1.0
        return total * crowded / self.page_bps

    def local_temporaries(self, rec: ComputeRec, b: np.ndarray) -> list[np.ndarray]:
        """Bytes of each temporary torch allocates for a local op whose bytes (as counted) are `b`: the target's
        elements times each temporary's element size (`elementwise.temporaries`, from the op on its first
        rank, kept per record)."""
        sizes = self.temps.get(rec.id)
        if sizes is None:  # the views on its first rank (not `rec.at(0)`, which makes its reads and loop values too)
            infos = self.s.infos
            sizes = self.temps[rec.id] = temporaries(
                rec.op, elem_at(rec.value, 0), rec.target.at(0), lambda v: infos[v.tensor].dtype
            )
        if not sizes:
            return []
        elements = b / (DTYPES[self.s.infos[rec.target.tensor].dtype].itemsize * (1 + len(rec.reads)))
        return [elements * size for size in sizes]

    def bus_capacity(self, src: np.ndarray, dst: np.ndarray) -> float:
        """Messages at full speed a node's bus carries at once for messages src → dst, which the engine matched
        together (`Topology.bus_capacity_for`): an exchange's where some rank both sends and receives among
        them (a ring's step), a swap's where at most two ranks of any node take part (a ring's step at 2
        ranks, a pairwise exchange's): on the 2-core host a swap moved 0.76-0.87 x β in all, 4 ranks' ring
        step 0.9-1.4 x β (docs/predict-accuracy.md, "A swap is not a crowd")."""
        exchange = bool(np.isin(src, dst).any())
        if not exchange or self.topo.swap_bps is None:
            return self.topo.bus_capacity_for(exchange)
        return self.topo.bus_capacity_for(exchange, swap=self.most_on_a_node(src, dst) <= 2)

    def one_way_streams(self, src: np.ndarray, dst: np.ndarray) -> bool:
        """Whether messages src → dst, which the engine matched together, may be one-way streams
        (`Topology.streams`): none of them a rank's way in and out at once (an exchange, priced by its own
        bus), each between two ranks that never send the other way anywhere in the program (a tree's levels),
        not back and forth as a ping-pong's, which the calibration's β and bus are (a bench loops the program,
        so such a pair's next message is always one of its own). `matched` prices them as streams (`streamed`)
        unless every receiver was already waiting when its message was sent, as a ping-pong's is: on the 2-core
        host with 4 ranks two streams' receivers burned 2-4 times their senders' CPU and a 16 MiB message took
        1.3-2.0 times a ping-pong pair's one way, while a tree broadcast's leaves, waiting, received at the
        ping-pong's pace (docs/predict-accuracy.md, "One-way streams on a crowded host"). The pace holds at
        any world: priced at the ping-pong's, a binomial reduce at 2 ranks of the 2-core host (one lone stream)
        came out 4-37 % fast in each of thirteen campaigns (the same, "A lone stream")."""
        if not self.topo.streams or np.isin(src, dst).any():
            return False
        if self.sent_pairs is None:
            W = self.W
            codes = [np.zeros(0, dtype=np.int64)]
            for rec in self.s.p2p_records():
                if rec.is_send:
                    ranks = rec.ranks.astype(np.int64)
                    peer = at(rec.peer, None, ranks.size).astype(np.int64)
                    ok = (peer >= 0) & (peer < W)
                    codes.append(ranks[ok] * W + peer[ok])
            self.sent_pairs = distinct(np.concatenate(codes))
        return not np.isin(dst.astype(np.int64) * self.W + src, self.sent_pairs).any()

    def paced(self, way: Route, ts: np.ndarray, tr: np.ndarray) -> Route:
        """`way`, or its messages at a stream's pace (`streamed`) where they may be one-way streams
        (`one_way_streams`) and some receive was not posted before its send (`ts`, `tr`: when each was, at
        the tracked size): a receiver already waiting takes its message as a ping-pong's does."""
        k = self.k
        return self.streamed(way) if way.one_way and not bool((tr[:, k] < ts[:, k]).all()) else way

    def streamed(self, way: Route) -> Route:
        """`way`'s messages at a one-way stream's pace (`one_way_streams`): each at most `stream_bps` inside its
        node, together on the bus of streams (`Topology.bus_capacity_for`). Kept beside `way` among the patterns,
        so that its load reaches the link figures (`flush`)."""
        if way.streamed is None:
            beta, flat = way.beta, way.beta_flat
            if self.topo.stream_bps is not None:  # inside a node; one β for all kept a scalar, as `route` keeps it
                inside = self.node[way.src] == self.node[way.dst]
                beta = np.where(inside[:, None], np.minimum(beta, self.topo.stream_bps), beta)
                flat = np.where(inside, np.minimum(flat, self.topo.stream_bps), flat)
                if (flat == flat[0]).all():
                    beta, flat = float(flat[0]), float(flat[0])
            way.streamed = replace(
                way,
                beta=beta,
                beta_flat=flat,
                load=0.0,
                busy=0.0,
                last=None,
                one_way=False,
                capacity=self.topo.bus_capacity_for(False, stream=True),
            )
            key = (*self.fingerprint(way.src, way.dst), -1)
            if len(self.routes) >= ROUTES or key in self.routes:
                self.flush()
            self.routes[key] = way.streamed
        return way.streamed

    def most_on_a_node(self, src: np.ndarray, dst: np.ndarray) -> int:
        """The most ranks of one node that messages src → dst involve, sending or receiving (0 for none)."""
        ranks = distinct(np.concatenate([src, dst]))
        return int(np.bincount(self.node[ranks]).max()) if ranks.size else 0

    def crowds(self, src: np.ndarray, dst: np.ndarray) -> bool:
        """Whether messages src → dst, which the engine matched together (they run at once), crowd their node
        (`Topology.at_world`): the ranks they involve, sending or receiving, outnumber some node's cores, so
        each wake-up of theirs may wait for a core. `bench --calibrate` times such a step for
        `crowded_alpha_us` (every rank sending to the next and receiving from the last); a chain's messages,
        matched one at a time, keep the ping-pong's α. A crowded step takes the longer of that α and its
        bytes, not their sum: while a rank waits for a core the others move their bytes (as a built-in ring's
        steps straight from communication do, `from_communication`). With the bus of an exchange (`exchange_gbps`) it
        scored 4,030 of 4,896 rows on sixteen campaigns where the sum scored 4,010 (docs/predict-accuracy.md,
        "A crowded exchange")."""
        cores = self.topo.cores_per_node
        if not self.topo.crowded or cores is None:
            return False
        return self.most_on_a_node(src, dst) > cores

    def turns(self, gid: int) -> int:
        """How many turns the members of group `gid` on its fullest node take for the node's `cores_per_node`
        (1 when not given, or enough): a Gloo all_to_all's members each wait for every peer's message, which
        comes when the peer gets a core. The 2-core machine's built-in all_to_all at N = 4 took about two
        collective steps at small sizes; at N = 2 it is priced one, where it took about a third of one on
        2026-11-29 (docs/predict-accuracy.md, "Gloo's all-to-all waits once" and "A sixth campaign")."""
        cores = self.topo.cores_per_node
        return 1 if cores is None else -(-self.per_node(gid) // cores)

    def per_node(self, gid: int) -> int:
        """The most members of group `gid` on one node."""
        count = self.node_spread(gid)[1]
        return int(count.max()) if count.size else 0

    def net(self, gid: int, share: int = 1, lockstep: bool = True) -> tuple[float, float]:
        """(α, β) of a group's ring in group order: the slowest hop's. `lockstep` (`Kind.lockstep`): a ring
        whose members all send and receive at every step, each step's α a ring collective's step, not a
        message's. A hop between nodes has the NIC's β times the rings NCCL runs side by side
        (one per NIC, as many as the group has members per node). A hop inside a node: half its link when a
        rank's sends and receives share one way (every member sends to the next and receives from the last at
        once); with `shared_node`, its share of the node's bus, which every member's hop crosses at once, with
        those of the `share` instances running at once (`bus_share`). Not `lockstep` (Gloo's trees and a root's
        direct sends): its link's β, with `shared_node` at most the bus's share of the `share` instances. A
        `lockstep` ring involves every member at every step: on a crowded node (`crowds`) its α is the crowded
        one; a tree's levels and a root's direct sends keep a message's."""
        got = self.group_net.get((gid, share, lockstep))
        if got is None:
            ranks = np.asarray(self.s.groups[gid].ranks, dtype=np.int64)
            ring = np.roll(ranks, -1)
            alpha, beta, _, _, _ = self.links(ranks, ring, lockstep, lockstep and self.crowds(ranks, ring))
            if ranks.size < 2:
                got = (0.0, float(self.topo.intra_beta))
            else:
                per_node = self.per_node(gid)
                inside = self.node[ranks] == self.node[ring]
                link = beta
                if not self.topo.duplex and lockstep:
                    beta = np.where(inside, link / 2, beta)
                if self.topo.shared_node:
                    bus = link * (self.topo.bus_capacity / ((per_node if lockstep else 1) * share))
                    beta = np.where(inside, np.minimum(beta, bus), beta)
                across = ~inside
                if self.topo.overrides:  # a [[link]] is its own β, not the NICs' side by side
                    across &= ~np.array([(a, z) in self.topo.overrides for a, z in zip(ranks.tolist(), ring.tolist())])
                beta = np.where(across, beta * self.rings_across(gid), beta)
                got = (float(alpha.max()), float(beta.min()))
            self.group_net[(gid, share, lockstep)] = got
        return got

    def waited(self, reqs) -> None:
        if not reqs.size:
            return
        ranks = self.s.requests.rank[reqs]
        self.settle(_members(ranks, self.W))
        done = self.req_done[reqs]
        if done.any():
            q = reqs[done]
            self.wait_for(ranks[done], self.req_end[q], self.req_end_node[q])
        self.req_waiting[reqs[~done]] = True

    def follow(self, ranks: np.ndarray, reqs: np.ndarray, streams: np.ndarray) -> None:
        """NCCL: ops just issued (their ranks, requests and streams) start no sooner than the async op issued
        before them on their stream ends, when it has (one still running holds its stream: the engine queues
        what comes after it and says when it starts, `started`); an async one is now its stream's last."""
        keys = streams.tolist()
        if len(set(keys)) == len(keys):  # one op a stream (a batch's share theirs): each follows the stream's last
            before = np.fromiter(map(self.stream_last.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
            a = reqs >= 0
            self.stream_last.update(zip(streams[a].tolist(), reqs[a].tolist()))
        else:
            before = np.empty(len(keys), dtype=np.int64)
            for j, (key, q) in enumerate(zip(keys, reqs.tolist())):
                before[j] = self.stream_last.get(key, -1)
                if q >= 0:
                    self.stream_last[key] = q
        behind = before >= 0
        behind[behind] = self.req_done[before[behind]]
        if behind.any():
            self.after(ranks[behind], reqs[behind], before[behind])

    def started(self, ops: Posts | Calls, after: int) -> None:
        self.after(ops.rank, ops.req, np.full(ops.rank.size, after, dtype=np.int64))

    def after(self, ranks: np.ndarray, reqs: np.ndarray, before: np.ndarray) -> None:
        """Ops (their ranks and requests) that wait on their stream for the async requests `before` (one per op)
        count from its end: an async op as if posted then, a blocking one's rank waits for it (it is blocked in
        the op). All at once: a ring of isends at world 256 is 390,000 of them."""
        end, node = self.req_end[before], self.req_end_node[before]
        a = reqs >= 0
        if a.any():
            q, e = reqs[a], end[a]
            if self.track:  # a request's latest end (the first of equal ones) names its node, if later than its post
                order = np.lexsort((np.arange(q.size), -e[:, self.k], q))
                first = order[np.r_[True, q[order][1:] != q[order][:-1]]]
                later = first[self.req_post[q[first], self.k] < e[first, self.k]]
                self.req_post_node[q[later]] = node[a][later]
            if q.size == distinct(q).size:  # one op a request (a batch's share theirs): no need of `at`, slow on rows
                self.req_post[q] = np.maximum(self.req_post[q], e)
            else:
                np.maximum.at(self.req_post, q, e)
        if not a.all():
            b = ~a
            self.wait_for(ranks[b], end[b], node[b])
            self.settle(_members(ranks[b], self.W))

    def met(self, members: np.ndarray, waiting: np.ndarray) -> None:
        """Gloo: a `new_group` returns to its members once the last of them has called it."""
        self.settle(members)
        last = int(members[np.argmax(self.T[members, self.k])])
        end = np.broadcast_to(self.T[last], (waiting.size, self.T.shape[1]))
        self.wait_for(waiting, end, np.full(waiting.size, self.last[last]))

    # ---- the end -------------------------------------------------------------------------------------
    def critical_path(self, rank: int) -> list[dict] | None:
        if not self.track:
            return None
        if not self.nodes:
            return []
        rec, rk, peer, pred, start, end = _node_columns(self.nodes)
        chain = []
        n = int(self.last[rank])
        while n >= 0:
            chain.append(n)
            n = int(pred[n])
        chain.reverse()
        out: list[dict] = []
        for n in chain:
            r = self.s.records[int(rec[n])]
            line = r.span.line
            took = float(end[n] - start[n])
            waited = float(start[n] - (end[out[-1]["_node"]] if out else 0.0))
            pair = (int(rk[n]), int(peer[n]))
            if out and out[-1]["line"] == line:
                e = out[-1]
                e["steps"] += 1
                e["us"] += took * 1e6
                e["_node"] = n
                e["ranks"].update(p for p in pair if p >= 0)
                continue
            out.append(
                {
                    "line": line,
                    "rid": int(rec[n]),
                    "steps": 1,
                    "us": took * 1e6,
                    "start_us": float(start[n]) * 1e6,
                    "idle_before_us": max(waited, 0.0) * 1e6,
                    "ranks": {p for p in pair if p >= 0},
                    "_node": n,
                }
            )
        for e in out:
            e.pop("_node")
            e["ranks"] = sorted(e["ranks"])
        return out


def _rows(a: np.ndarray, ix) -> np.ndarray:
    """Rows `ix` of `a`: a view for a slice, else a copy by `np.take` (several times faster than `a[ix]`
    for rows of a 2-d array)."""
    return a[ix] if isinstance(ix, slice) else np.take(a, ix, axis=0)


def _set_rows(a: np.ndarray, ix: np.ndarray, values: np.ndarray) -> None:
    """a[ix] = values for distinct row indices of a C-contiguous 2-d array, each row moved as one item (a
    void view: about twice as fast as assigning rows of floats)."""
    row = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    a.view(row).reshape(-1)[ix] = np.ascontiguousarray(values).view(row).reshape(-1)


def _node_columns(chunks: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """The path graph's chunks of nodes (`Clocks.add_nodes`) joined: (rec, rank, peer, pred, start, end)."""
    return tuple(np.concatenate([c[j] for c in chunks]) for j in range(6))


def _load_and_busy(way: Route) -> np.ndarray:
    """A pattern's running link figures as one array (each a number or one per message)."""
    return np.array(np.broadcast_arrays(np.asarray(way.load, dtype=float), np.asarray(way.busy, dtype=float)))


def _ix(a: np.ndarray, ascending: bool = False):
    """`a` as an index into n rows: a slice when it is a run of consecutive rows (a view, not a gather).
    `ascending`: `a` is known to be strictly ascending (the engine's ranks at one op), so its ends say it."""
    m = a.size
    if m and a[-1] - a[0] == m - 1 and (m < 3 or ascending or bool((np.diff(a) == 1).all())):
        return slice(int(a[0]), int(a[0]) + m)
    return a


def _max_into(a: np.ndarray, where: Index, values: np.ndarray, lined: dict[int, np.ndarray]) -> None:
    """a[where] = max(a[where], values) for distinct rows: in place on a run, through `inv` on a permuted
    run (values lined up once per permutation, kept in `lined`), else gathered and put back."""
    if where.block is not None:
        if where.inv is not None:
            got = lined.get(id(where.inv))
            if got is None:
                got = lined[id(where.inv)] = np.take(values, where.inv, axis=0)
            values = got
        np.maximum(a[where.block], values, out=a[where.block])
    else:
        got = np.take(a, where.at, axis=0)
        np.maximum(got, values, out=got)
        _set_rows(a, where.at, got)


def _distinct(a: np.ndarray, n: int) -> bool:
    """No value of `a` (integers in [0, n)) appears twice."""
    return a.size <= 1 or int(np.bincount(a, minlength=n).max()) <= 1


def _members(a: np.ndarray, n: int) -> np.ndarray:
    """The distinct values of `a` (integers in [0, n)), ascending."""
    return np.flatnonzero(np.bincount(a, minlength=n))


def _ended(begin: np.ndarray, took, bytes_from: np.ndarray | None, busy) -> np.ndarray:
    """Messages' ends, in `begin`'s array: `begin` (after their α, once their ports are free) plus the time their
    bytes take; where their step crowds the cores (`bytes_from`: their start, a copy), the longer of the α and the
    bytes instead of their sum (`Clocks.crowds`)."""
    if bytes_from is None:
        begin += took
        return begin
    np.maximum(bytes_from, busy, out=bytes_from)
    bytes_from += took
    return np.maximum(begin, bytes_from, out=begin)


def _shared(
    ports: np.ndarray, b: np.ndarray, k: int, n: int, capacity: float = 1.0, rates: np.ndarray | float | None = None
) -> np.ndarray:
    """Bytes each message effectively moves (at its full speed) when the messages on one port share it fairly
    from a common start. The port carries `capacity` messages at full speed at once: m at once each move at
    min(1, capacity / m) of it. With the port's messages sorted by size, message q finishes after
    Σ_{j≤q} (b_j − b_{j−1}) · max(1, m_j / capacity) bytes, m_j the messages still moving while the j-th
    smallest finishes (processor sharing; with capacity 1: Σ_{j<q} b_j + m_q·b_q). A message alone on a port
    of capacity ≥ 1 moves its own bytes. `rates`: each message's β (a scalar or a column), where a port's
    messages may differ (`_water_filled`)."""
    M = ports.size
    if _distinct(ports, n):
        return b if capacity >= 1 else b / capacity
    if rates is not None and np.ndim(rates) and capacity == 1:
        beta = np.asarray(rates, dtype=np.float64).reshape(-1)
        if not (beta == beta[0]).all():
            return _water_filled(ports, b, beta, _shared(ports, b, k, n))
    order = np.lexsort((b[:, k], ports))
    ps, bs = ports[order], b[order]
    new = np.r_[True, ps[1:] != ps[:-1]]
    idx = np.arange(M)
    gstart = np.maximum.accumulate(np.where(new, idx, 0))
    gnum = np.cumsum(new) - 1
    gend = gstart + np.bincount(gnum)[gnum]
    grown = bs - np.where(new[:, None], 0.0, np.roll(bs, 1, axis=0))  # b_j − b_{j−1} within a port's messages
    cs = np.cumsum(grown * np.maximum(1.0, (gend - idx) / capacity)[:, None], axis=0)
    base = np.where((gstart > 0)[:, None], cs[np.maximum(gstart - 1, 0)], 0.0)
    out = np.empty_like(b)
    out[order] = cs - base
    return out


def _water_filled(ports: np.ndarray, b: np.ndarray, beta: np.ndarray, alike: np.ndarray) -> np.ndarray:
    """`_shared` where messages of different β ([[link]] overrides) share a port: the port moves at most its
    fastest message's β, each message at most its own, the rest shared max-min fairly (a message its own
    link holds below its share leaves the difference to the others), re-divided as each one ends. Bytes at
    its own β that take as long (what `_shared` gives where every β is alike: `alike`). A slow link beside a
    fast one was charged half its own β for its whole transfer: twice its time alone."""
    out = alike.copy()
    order = np.argsort(ports, kind="stable")
    starts = np.flatnonzero(np.r_[True, ports[order][1:] != ports[order][:-1]])
    lo, hi = np.minimum.reduceat(beta[order], starts), np.maximum.reduceat(beta[order], starts)
    ends = np.r_[starts[1:], order.size]
    for g in np.flatnonzero(lo != hi):  # only the ports whose messages' β differ
        idx = order[starts[g] : ends[g]]
        caps = beta[idx]
        for c in range(b.shape[1]):
            out[idx, c] = _water_fill(b[idx, c], caps) * caps
    return out


def _water_fill(nbytes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Seconds until each message (`nbytes`, at most `caps` bytes/s each) ends on a port of the largest cap,
    shared max-min fairly from a common start."""
    left = nbytes.astype(np.float64).copy()
    end = np.zeros(left.size)
    active = left > 0
    now, port = 0.0, float(caps.max())
    while active.any():
        idx = np.flatnonzero(active)
        rate = np.empty(idx.size)
        spare, waiting = port, idx.size
        for j in np.argsort(caps[idx], kind="stable"):  # the slowest first: each takes its cap or an even share
            rate[j] = min(float(caps[idx[j]]), spare / waiting)
            spare -= rate[j]
            waiting -= 1
        step = float((left[idx] / rate).min())
        now += step
        left[idx] -= rate * step
        done = idx[left[idx] <= 1e-9 * np.maximum(nbytes[idx], 1.0)]
        end[done] = now
        active[done] = False
    return end


def _loops_from_communication(schedule: Schedule) -> np.ndarray:
    """Per rank, whether its last op that `FROM_COMMUNICATION` names is communication: what it comes from to its
    first collective when the program runs in a loop, as `commdsl bench` runs it (False for a rank with none)."""
    seq = schedule.sequences
    last = np.zeros(len(seq.starts) - 1, dtype=bool)
    for c in range(last.size):
        for i in range(int(seq.starts[c + 1]) - 1, int(seq.starts[c]) - 1, -1):
            came = FROM_COMMUNICATION.get(type(schedule.records[int(seq.flat[i])]))
            if came is not None:
                last[c] = came
                break
    return last[seq.cohort]


def predict(
    schedule: Schedule,
    topo: Topology,
    nbytes: Bytes,
    sizes: int,
    path_size: int | None = None,
    deadline: Deadline | None = None,
) -> Timing:
    """Run the engine once over `schedule` with clocks for `sizes` sizes (bytes from `nbytes`)."""
    k = sizes - 1 if path_size is None else path_size
    track = k if schedule.num_ops <= PATH_MAX_OPS else None
    clocks = Clocks(schedule, topo, nbytes, sizes, track)
    if track is None:
        clocks.k = k
    model = NCCL if topo.backend == "nccl" else GLOO  # the checker's: what completes, and who waits for whom
    outcome = run_engine(schedule, model, clocks, deadline=deadline)
    clocks.put_back()
    clocks.flush()
    clocks.settle(np.arange(schedule.world))
    seconds = clocks.T.max(axis=0) if schedule.world else np.zeros(sizes)
    last_rank = int(np.argmax(clocks.T[:, k])) if schedule.world else 0
    profiled = range(schedule.world) if schedule.world <= PROFILED_RANKS else [last_rank]
    names = port_names(schedule.world, clocks.n_nics, topo.nics_per_node, clocks.free.shape[0], topo.duplex)
    return Timing(
        seconds,
        clocks.T.copy(),
        names,
        clocks.port_bytes,
        clocks.port_busy,
        clocks.critical_path(last_rank),
        k,
        outcome,
        None if not clocks.track else {r: clocks.rank_profile(r) or [] for r in profiled},
        last_rank,
        clocks.fresh,
    )


def port_names(world: int, nics: int, per_node: int, ports: int, duplex: bool = True) -> list[str]:
    out = [f"rank {r} {'out' if duplex else 'in and out'} (in node)" for r in range(world)]
    out += [f"rank {r} in (in node)" for r in range(world)]
    out += [f"node {n // per_node} NIC {n % per_node} out" for n in range(nics)]
    out += [f"node {n // per_node} NIC {n % per_node} in" for n in range(nics)]
    out += [f"node {n} bus (in node, shared)" for n in range(ports - len(out))]
    return out
