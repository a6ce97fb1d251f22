"""Topologies: where each rank sits and what a message between two ranks costs (α, β), from a small TOML file.

    name = "dgx-h100"
    backend = "nccl"            # the algorithms built-in collectives use: gloo (ring) or nccl (ring or tree)
    ranks_per_node = 8
    nics_per_node = 8           # NCCL runs one ring per NIC (its channels); rank r uses NIC r % nics
    memory_gbps = 3350          # local ops: bytes read and written over this bandwidth
    page_fault_gbps = 2.5       # optional: bytes per second of fresh pages (a temporary malloc maps anew,
                                # faulted in and zeroed by the kernel); absent: temporaries cost no pages
    mmap_threshold_bytes = 33554432  # a temporary of at least this many bytes is fresh pages on every call
                                # (glibc's malloc: DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit)
    send_buffer_bytes = 4194304 # optional, Gloo: an isend whose receive is already posted returns once this
                                # much of its message has moved (TCP takes it from the caller's thread: the
                                # socket's send buffer, Linux's net.ipv4.tcp_wmem maximum); absent: at once
    shared_node = false         # true: every message inside a node also crosses one bus of the node
                                # (Gloo over loopback: the copies go through the same cores), and local
                                # ops that run at once share the node's memory
    # bus_gbps = 900            # only with shared_node: the bus's bandwidth, all its messages together
                                # (each still at most its link's); default: [intra]'s (one at full speed)
    # exchange_gbps = 2.0       # only with shared_node: the bus's bandwidth when its ranks send and receive
                                # at once (a ring's step); default: bus_gbps
    # swap_gbps = 1.5           # only with shared_node: the same when only two of a node's ranks send and
                                # receive, to each other (a swap: a ring's step at 2 ranks, a pairwise
                                # step); default: exchange_gbps
    # stream_gbps = 1.5         # only with shared_node: a message of a one-way stream
                                # (between two ranks that never send the other way, none of the messages
                                # at once both sending and receiving: a tree's levels), its receiver not
                                # already waiting, moves at most this, at any world (Gloo's receiver polls
                                # harder then than in a ping-pong); default: its β
    # stream_bus_gbps = 2.3     # only with it: on a node with more ranks than cores, the bus for such
                                # messages at once, all together; default: bus_gbps
    # node_memory_gbps = 6700   # only with shared_node: the node's memory, all its ranks' local ops
                                # together (each still at most memory_gbps); default: memory_gbps
    duplex = true               # false: a rank's messages in and out of it share one way (Gloo over TCP:
                                # one thread per process moves both; a host with cores to spare)
    overlap = true              # false: a rank's local ops and the messages on its ways take turns (a host
                                # with no core to spare for Gloo's loop thread while the rank computes)
    # collective_call_us = 200  # optional: a built-in collective on a group of one, which sends nothing
                                # (Gloo: torch hands the call to its worker thread and waits for it; `bench
                                # --calibrate` measures it); default 0
    # cores_per_node = 2        # optional: the cores a node's ranks share; with more ranks on a node than
                                # this, messages at once on more ranks than cores take crowded_alpha_us,
                                # and a collective's members there share the cores for its fresh pages
    tree = true                 # built-in all_reduce may run a tree when faster (default: nccl yes, gloo no)
    source = "..."              # where the numbers come from

    [intra]                     # two ranks on one node
    alpha_us = 5.7
    bandwidth_gbps = 450
    # collective_alpha_us = 900 # optional: the latency of one step of a built-in collective's algorithm
                                # on this link (default: alpha_us; Gloo's steps each wait on torch's
                                # worker thread and its peers, measured by `bench --calibrate`)
    # crowded_alpha_us = 1100   # optional, with cores_per_node: a message's latency when the messages at once
                                # with it involve more of its node's ranks than the node has cores: each
                                # wake-up may wait for a core (default: alpha_us; measured by `bench
                                # --calibrate --nproc N` with N above the cores)

    [inter]                     # two ranks on different nodes (through the NICs)
    alpha_us = 6.6
    bandwidth_gbps = 50

    [[link]]                    # optional: one directed rank pair with its own numbers
    src = 0
    dst = 1
    alpha_us = 20
    bandwidth_gbps = 10

Rank r is on node r // ranks_per_node. GB/s are 10⁹ bytes per second, as nccl-tests counts them. The
file is validated with pydantic; every mistake in it is an N136 diagnostic pointing at the key in the file
(or at the file's first line when the key is missing), never a traceback. Presets (`PRESETS`) are TOML text
with a `source` that cites where each number comes from; `commdsl bench --calibrate` writes a file of
the same form, measured on this machine.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, replace
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)

from commdsl import tomlfile
from commdsl.diagnostics import CommdslError
from commdsl.files import FileError
from commdsl.resolve import MAX_WORLD
from commdsl.rules.sizes import InvalidTopology
from commdsl.source import SourceFile

MMAP_THRESHOLD_MAX = 32 << 20
"""glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (malloc/malloc.c, mallopt(3) `M_MMAP_THRESHOLD`): malloc raises
its mmap threshold to the size of each mapped chunk it frees, but never above this, so a block this large is
mapped on every malloc and unmapped on every free (its pages fresh each time), unless malloc is told to keep
its memory (`MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_`)."""


class _Model(BaseModel):
    """TOML's own types only (`alpha_us = "5"`, `shared_node = "yes"` or `ranks_per_node = true` are mistakes,
    not conversions; an integer is a number), and finite numbers."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


Rank = Annotated[StrictInt, Field(ge=0, lt=MAX_WORLD)]
Ranks = Annotated[StrictInt, Field(ge=1, le=MAX_WORLD)]
# GB/s: at least 1 kB/s and at most 1 EB/s, so a time in seconds stays finite and a ratio of two bandwidths (a bus's
# capacity in messages) too: 1e300 GB/s made bytes per second overflow to inf, and a prediction NaN
Positive = Annotated[StrictFloat, Field(ge=1e-6, le=1e9)]
NonNegative = Annotated[StrictFloat, Field(ge=0, le=1e9)]  # µs: at most 1,000 s


class LinkClass(_Model):
    alpha_us: NonNegative
    bandwidth_gbps: Positive
    collective_alpha_us: NonNegative | None = None

    def alphas(self) -> tuple[float, float]:
        """Seconds of latency of a message and of one step of a built-in collective (default: a message's)."""
        step = self.alpha_us if self.collective_alpha_us is None else self.collective_alpha_us
        return self.alpha_us * 1e-6, step * 1e-6


class NodeLinks(LinkClass):
    """[intra] or [inter]: every link of its class, which may be crowded (`cores_per_node`)."""

    crowded_alpha_us: NonNegative | None = None

    def crowded_alphas(self) -> tuple[float, float]:
        """Seconds of a message's latency on a crowded node (default: its α) and of a built-in collective's step
        there (its `collective_alpha_us` when given, else a crowded message's, as `alphas` defaults it)."""
        message = (self.alpha_us if self.crowded_alpha_us is None else self.crowded_alpha_us) * 1e-6
        return message, message if self.collective_alpha_us is None else self.collective_alpha_us * 1e-6


class LinkOverride(LinkClass):
    src: Rank
    dst: Rank


class TopologyFile(_Model):
    name: StrictStr = "topology"
    backend: Literal["gloo", "nccl"] = "gloo"
    ranks_per_node: Ranks
    nics_per_node: Ranks = 1
    nodes: Ranks | None = None
    memory_gbps: Positive = 10.0
    page_fault_gbps: Positive | None = None
    mmap_threshold_bytes: Annotated[StrictInt, Field(ge=1, le=1 << 62)] = MMAP_THRESHOLD_MAX
    send_buffer_bytes: Annotated[StrictInt, Field(ge=0, le=1 << 62)] | None = None
    shared_node: StrictBool = False
    bus_gbps: Positive | None = None
    exchange_gbps: Positive | None = None
    swap_gbps: Positive | None = None
    stream_gbps: Positive | None = None
    stream_bus_gbps: Positive | None = None
    node_memory_gbps: Positive | None = None
    duplex: StrictBool = True
    overlap: StrictBool = True
    tree: StrictBool | None = None
    source: StrictStr = ""
    cores_per_node: Ranks | None = None
    collective_call_us: NonNegative | None = None
    intra: NodeLinks
    inter: NodeLinks | None = None
    link: tuple[LinkOverride, ...] = ()

    @field_validator("send_buffer_bytes")
    @classmethod
    def _only_gloo(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("backend") != "gloo":
            raise ValueError('needs `backend = "gloo"` (an NCCL isend returns once it is queued on its stream)')
        return value

    @field_validator("bus_gbps", "exchange_gbps", "swap_gbps", "stream_gbps", "stream_bus_gbps", "node_memory_gbps")
    @classmethod
    def _only_shared(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not info.data.get("shared_node"):
            raise ValueError("needs `shared_node = true` (it is what a node's ranks share)")
        return value


@dataclass(frozen=True)
class Topology:
    """A validated topology: α in seconds, β in bytes per second."""

    name: str
    backend: str
    ranks_per_node: int
    nics_per_node: int
    nodes: int | None
    memory_bps: float
    shared_node: bool
    tree: bool
    source: str
    intra_alpha: float
    intra_beta: float
    inter_alpha: float
    inter_beta: float
    overrides: dict[tuple[int, int], tuple[float, float, float]]  # (src, dst): α, β, a collective step's α
    path: str
    duplex: bool = True  # False: a rank's sends and receives inside its node share one port
    page_bps: float | None = None  # fresh pages, bytes per second (None: not counted)
    mmap_threshold: int = MMAP_THRESHOLD_MAX  # bytes from which a temporary is fresh pages on every call
    bus_bps: float | None = None  # shared_node: the node bus's bandwidth, its messages together (None: intra β)
    node_memory_bps: float | None = None  # shared_node: the node's memory, its ranks together (None: memory_bps)
    send_buffer: int | None = None  # Gloo: bytes an isend writes from its caller when its receive is posted
    overlap: bool = True  # False: a rank's local ops and the messages on its ways take turns
    intra_step_alpha: float = 0.0  # seconds of one step of a built-in collective's algorithm inside a node
    inter_step_alpha: float = 0.0  # ... between nodes
    cores_per_node: int | None = None  # the cores a node's ranks share (None: as many as it needs)
    crowded_alphas: tuple[float, float] | None = None  # (intra, inter) α on a node with more ranks than cores
    crowded_step_alphas: tuple[float, float] | None = None  # (intra, inter) a collective's step there
    crowded: bool = False  # `at_world` found more ranks on a node than its cores: messages may be crowded
    lone_call: float = 0.0  # seconds of a built-in collective on a group of one (torch's hand-off to the backend)
    exchange_bps: float | None = None  # shared_node: the bus when its ranks send and receive at once (None: bus_bps)
    swap_bps: float | None = None  # shared_node: the same when two ranks swap (None: exchange_bps)
    stream_bps: float | None = None  # a one-way stream's message at most, inside a node (None: its link's β)
    stream_bus_bps: float | None = None  # a crowded node: the bus for such messages at once (None: bus_bps)

    @property
    def bus_capacity(self) -> float:
        """How many intra-node messages the bus carries at once at full speed (its bandwidth over one
        message's): m at once each move at min(1, capacity / m) of full speed."""
        return 1.0 if self.bus_bps is None else self.bus_bps / self.intra_beta

    def bus_capacity_for(self, exchange: bool, swap: bool = False, stream: bool = False) -> float:
        """`bus_capacity`, or where the messages at once include a rank's way out and its way in (a ring's
        step) the capacity the bus has then (`exchange_bps`), and where only two ranks of the node send and
        receive, to each other (`swap`), that of a swap (`swap_bps`); where they are one-way streams
        (`stream`), in messages at a stream's pace, that of such streams on a crowded node (`stream_bus_bps`),
        elsewhere the bus's own: on the 2-core host, every one of 4 ranks sending and receiving at once moved
        0.6-1.4 messages at full speed in all, two ranks swapping 0.76-0.87, two ping-pong pairs one way each
        1.4-1.7, two pairs streaming one way 1.0-1.3."""
        if exchange and swap and self.swap_bps is not None:
            return self.swap_bps / self.intra_beta
        if exchange and self.exchange_bps is not None:
            return self.exchange_bps / self.intra_beta
        if stream and not exchange:
            bus = self.stream_bus_bps if self.crowded and self.stream_bus_bps is not None else self.bus_bandwidth
            return bus / (self.stream_bps or self.intra_beta)
        return self.bus_capacity

    @property
    def streams(self) -> bool:
        """Whether one-way streams are priced apart here: a stream's pace (`stream_bps`) holds at any world, as
        `bench --calibrate` times it with one pair of ranks busy and the others idle; the bus of such streams at
        once (`stream_bus_bps`) on a crowded node only."""
        return self.stream_bps is not None or (self.crowded and self.stream_bus_bps is not None)

    @property
    def bus_bandwidth(self) -> float:
        """Bytes per second the node's bus carries, all its messages together (default: one message's, intra β)."""
        return self.bus_bps or self.intra_beta

    @property
    def memory_capacity(self) -> float:
        """How many ranks' local ops the node's memory runs at once at full speed, as `bus_capacity`."""
        return 1.0 if self.node_memory_bps is None else self.node_memory_bps / self.memory_bps

    @classmethod
    def from_model(cls, m: TopologyFile, path: str) -> Topology:
        inter = m.inter or m.intra
        crowded = m.cores_per_node is not None and (m.intra.crowded_alpha_us, inter.crowded_alpha_us) != (None, None)
        intra_crowded, inter_crowded = m.intra.crowded_alphas(), inter.crowded_alphas()  # (message, step) each
        return cls(
            m.name,
            m.backend,
            m.ranks_per_node,
            m.nics_per_node,
            m.nodes,
            m.memory_gbps * 1e9,
            m.shared_node,
            m.backend == "nccl" if m.tree is None else m.tree,
            m.source,
            m.intra.alpha_us * 1e-6,
            m.intra.bandwidth_gbps * 1e9,
            inter.alpha_us * 1e-6,
            inter.bandwidth_gbps * 1e9,
            {(o.src, o.dst): (alpha, o.bandwidth_gbps * 1e9, step) for o in m.link for alpha, step in [o.alphas()]},
            path,
            m.duplex,
            None if m.page_fault_gbps is None else m.page_fault_gbps * 1e9,
            m.mmap_threshold_bytes,
            None if m.bus_gbps is None else m.bus_gbps * 1e9,
            None if m.node_memory_gbps is None else m.node_memory_gbps * 1e9,
            m.send_buffer_bytes,
            m.overlap,
            m.intra.alphas()[1],
            inter.alphas()[1],
            m.cores_per_node,
            (intra_crowded[0], inter_crowded[0]) if crowded else None,
            (intra_crowded[1], inter_crowded[1]) if crowded else None,
            lone_call=(m.collective_call_us or 0.0) * 1e-6,
            exchange_bps=None if m.exchange_gbps is None else m.exchange_gbps * 1e9,
            swap_bps=None if m.swap_gbps is None else m.swap_gbps * 1e9,
            stream_bps=None if m.stream_gbps is None else m.stream_gbps * 1e9,
            stream_bus_bps=None if m.stream_bus_gbps is None else m.stream_bus_gbps * 1e9,
        )

    def over_cores(self, world: int) -> bool:
        """Whether the fullest node at `world` ranks holds more ranks than `cores_per_node` (False: not given)."""
        return self.cores_per_node is not None and min(world, self.ranks_per_node) > self.cores_per_node

    def at_world(self, world: int) -> Topology:
        """The topology a prediction at `world` ranks runs on: `crowded` where the fullest node holds more ranks
        than `cores_per_node` and a crowded α is given; the clocks then give it to messages at once on more of
        a node's ranks than its cores (`cost.Clocks.crowds`)."""
        if self.crowded_alphas is None or not self.over_cores(world):
            return self
        return replace(self, crowded=True)

    def capacity(self) -> int | None:
        """The most ranks the topology holds (None: as many nodes as needed)."""
        return None if self.nodes is None else self.nodes * self.ranks_per_node

    def _exchanges(self) -> str:
        """`describe`'s note on the bus of ranks that send and receive at once (`bus_capacity_for`)."""
        if not self.shared_node:
            return ""
        got = [
            (self.exchange_bps, "where ranks send and receive at once"),
            (self.swap_bps, "where two ranks swap"),
            (self.stream_bps, "a one-way stream's message"),
            (self.stream_bus_bps, "where such streams run at once on a crowded node"),
        ]
        said = [f"{bps / 1e9:.3g} GB/s {where}" for bps, where in got if bps is not None]
        return f" ({', '.join(said)})" if said else ""

    def describe(self) -> str:
        inter = (
            f"inter-node α {self.inter_alpha * 1e6:.3g} µs, β {self.inter_beta / 1e9:.3g} GB/s "
            f"({self.nics_per_node} NIC{'s' * (self.nics_per_node != 1)} per node)"
        )
        return (
            f"{self.name}: {self.ranks_per_node} rank{'s' * (self.ranks_per_node != 1)} per node, intra-node "
            f"α {self.intra_alpha * 1e6:.3g} µs, β {self.intra_beta / 1e9:.3g} GB/s; {inter}; "
            f"memory {self.memory_bps / 1e9:.3g} GB/s; built-in collectives as {self.backend}"
            + ("; messages in a node share one bus" if self.shared_node else "")
            + (f" of {self.bus_bps / 1e9:.3g} GB/s" if self.shared_node and self.bus_bps is not None else "")
            + self._exchanges()
            + (
                f"; its ranks' local ops share {self.node_memory_bps / 1e9:.3g} GB/s of memory"
                if self.shared_node and self.node_memory_bps is not None
                else ""
            )
            + (
                f"; more ranks on a node than its {self.cores_per_node} cores: messages at once on more ranks than"
                f" cores, α {self.crowded_alphas[0] * 1e6:.3g} µs in a node, {self.crowded_alphas[1] * 1e6:.3g} µs"
                " between nodes"
                if self.crowded and self.crowded_alphas is not None
                else ""
            )
            + ("; a rank's messages in and out share one way" if not self.duplex else "")
            + ("; a rank's local ops and its messages take turns" if not self.overlap else "")
            + (
                f"; fresh pages {self.page_bps / 1e9:.3g} GB/s from {self.mmap_threshold} B"
                if self.page_bps is not None
                else ""
            )
            + (
                f"; an isend to a posted receive holds its caller for the first {self.send_buffer} B"
                if self.send_buffer is not None
                else ""
            )
            + (f"; a built-in collective on a group of one {self.lone_call * 1e6:.3g} µs" if self.lone_call else "")
            + (
                f"; a ring collective's step α {self.intra_step_alpha * 1e6:.3g} µs in a node,"
                f" {self.inter_step_alpha * 1e6:.3g} µs between nodes"
                if (self.intra_step_alpha, self.inter_step_alpha) != (self.intra_alpha, self.inter_alpha)
                else ""
            )
        )


def parse(source: SourceFile) -> Topology:
    """The topology in `source`; CommdslError with N136 diagnostics when it is not one."""
    model = tomlfile.parse(source, TopologyFile, InvalidTopology)
    problems = []
    first: dict[tuple[int, int], int] = {}
    for i, o in enumerate(model.link):
        span = tomlfile.key_span(source, ("link", i, "dst")) or tomlfile.line_span(source, 1)
        if o.src == o.dst:
            problems.append(
                InvalidTopology.diagnostic(
                    f"{source.path}: link {i + 1}: src and dst are the same rank ({o.src})",
                    span=span,
                    label="here",
                    help="a link joins two different ranks",
                )
            )
        elif (o.src, o.dst) in first:
            problems.append(
                InvalidTopology.diagnostic(
                    f"{source.path}: link {i + 1}: rank {o.src} to rank {o.dst} again (link {first[o.src, o.dst] + 1})",
                    span=span,
                    label="a second override",
                    help="give each ordered pair of ranks one [[link]]",
                )
            )
        else:
            first[o.src, o.dst] = i
    for name, links in (("intra", model.intra), ("inter", model.inter)):
        if links is not None and links.crowded_alpha_us is not None and model.cores_per_node is None:
            problems.append(
                InvalidTopology.diagnostic(
                    f"{source.path}: `{name}.crowded_alpha_us` needs `cores_per_node`",
                    span=tomlfile.key_span(source, (name, "crowded_alpha_us")) or tomlfile.line_span(source, 1),
                    label="crowded: more ranks on a node than it has cores",
                    help="give the cores a node's ranks share (`cores_per_node = 2`), or leave this out",
                )
            )
    if problems:
        raise CommdslError(problems)
    return Topology.from_model(model, source.path)


def source_of(name_or_path: str) -> SourceFile:
    """The text of a preset by name, else of the file at the path (FileError when it cannot be read; for a
    bare name that is no file, like a misspelt preset, the presets and the one it is closest to)."""
    if name_or_path in PRESETS and not os.path.exists(name_or_path):
        return SourceFile(f"<preset {name_or_path}>", PRESETS[name_or_path])
    if not os.path.lexists(name_or_path) and os.sep not in name_or_path and "." not in name_or_path:
        close = difflib.get_close_matches(name_or_path, PRESETS, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise FileError(f"cannot read {name_or_path}: no such file, and not a preset ({', '.join(PRESETS)}){hint}")
    return SourceFile.read(name_or_path)


def load(name_or_path: str) -> tuple[Topology, SourceFile]:
    """A preset by name, else the file at the path; FileError when it cannot be read, CommdslError (N136)
    when it is not a topology."""
    source = source_of(name_or_path)
    return parse(source), source


# ---- presets: each number cited ------------------------------------------------------------------------------

PRESETS: dict[str, str] = {
    "dgx-h100": """\
# NVIDIA DGX H100: 8 H100 SXM GPUs on NVLink 4 / NVSwitch, 8 ConnectX-7 400 Gb/s NICs (InfiniBand NDR or RoCE)
name = "dgx-h100"
backend = "nccl"
ranks_per_node = 8
nics_per_node = 8
memory_gbps = 3350     # H100 SXM HBM3, 3.35 TB/s (NVIDIA H100 Tensor Core GPU datasheet)
source = "NVIDIA DGX H100 datasheet (NVLink, NICs); NVIDIA H100 datasheet (HBM3); NCCL src/graph/tuning.cc (hwLat)"

[intra]
alpha_us = 5.7          # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
bandwidth_gbps = 450    # NVLink 4: 900 GB/s per GPU counting both directions, 450 GB/s each way

[inter]
alpha_us = 6.6          # NCCL tuning.cc hwLat[NET][Ring][Simple]
bandwidth_gbps = 50     # one ConnectX-7 400 Gb/s NIC per GPU: 50 GB/s each way
""",
    "dgx-a100": """\
# NVIDIA DGX A100: 8 A100 SXM GPUs on NVLink 3 / NVSwitch, 8 ConnectX-6 200 Gb/s HDR InfiniBand NICs
name = "dgx-a100"
backend = "nccl"
ranks_per_node = 8
nics_per_node = 8
memory_gbps = 2039     # A100 80GB SXM HBM2e, 2,039 GB/s (NVIDIA A100 datasheet)
source = "NVIDIA DGX A100 datasheet (NVLink, NICs); NVIDIA A100 datasheet (HBM2e); NCCL src/graph/tuning.cc (hwLat)"

[intra]
alpha_us = 5.7          # NCCL tuning.cc hwLat[NVLINK][Ring][Simple]
bandwidth_gbps = 300    # NVLink 3: 600 GB/s per GPU counting both directions, 300 GB/s each way

[inter]
alpha_us = 6.6          # NCCL tuning.cc hwLat[NET][Ring][Simple]
bandwidth_gbps = 25     # one ConnectX-6 HDR 200 Gb/s NIC per GPU: 25 GB/s each way
""",
    "localhost-gloo": """\
# Gloo over loopback TCP on the commdsl development machine (2 cores), one host: the median of five quiet calibrations
name = "localhost-gloo"
backend = "gloo"
ranks_per_node = 65536     # one host: every rank on one node
nics_per_node = 1
shared_node = true         # loopback copies share the same cores and memory
bus_gbps = 3.693           # its messages together: beta x 1.28 (seven pairs-at-once calibrations: x 1.11-1.49)
duplex = false             # a rank's messages in and out share its one Gloo loop thread
overlap = false            # a rank's adds and its messages take turns (five calibrations: 0-39 % of the shorter hidden)
memory_gbps = 23.54        # torch `x += y` on 64 MiB float32, 2 x 64 MiB counted (five calibrations: 21.8-25.5)
node_memory_gbps = 30.37   # its ranks' adds together: memory x 1.29 (six adds-at-once calibrations: x 1.04-1.78)
page_fault_gbps = 2.458    # a fresh 64 MiB tensor filled less a kept one (five calibrations: 2.00-2.49)
send_buffer_bytes = 4194304  # net.ipv4.tcp_wmem's maximum here: what an isend to a posted receive writes itself
cores_per_node = 2         # its cores: crowded α for messages at once on 3+ ranks; a collective's fresh pages shared
collective_call_us = 206   # an all_reduce on a group of one after one of every rank (2026-11-30, runs: 167-212)
source = "medians of five quiet `bench --calibrate`: 2026-11-25; the step, crowded α 2026-11-28; the call 2026-11-30"

[intra]
alpha_us = 205             # fitted to the median one-way time per size (the five fits alone: 106-226 us)
bandwidth_gbps = 2.885     # fitted again at 16-64 MiB, where bytes are 95 % of the time (2.607 over every size until
                           # 2026-11-29; the five fits alone: 1.97-3.82 GB/s)
collective_alpha_us = 998  # a built-in all_reduce's step at 4 ranks (five calibrations, 2026-11-28: 936-1087 us)
crowded_alpha_us = 1142    # 4 ranks' ring step of messages less its bytes (five calibrations, 2026-11-28: 928-1242)
""",
}
"""Named topologies for `--topology NAME`: two clusters from their datasheets and NCCL's own latency table,
and this development machine from the five quiet calibrations recorded in docs/predict-accuracy.md (benchmarks/figures/
predict-quiet-median.toml is their median, measurements included)."""
