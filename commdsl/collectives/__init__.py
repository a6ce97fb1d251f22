"""What each collective means, one module per kind, consulted by every stage.

A `Kind` holds everything about one collective that differs from the others: how its buffers must
be sized for a group (`fit`, used by the expansion: N131), what every member must agree on besides
kind, root, reduce op and dtype (`contribution`, used by the engine and C306), which of its buffers a
member reads, writes or leaves undefined (`roles`, used by the checker's access rules and the
simulator), what each member ends with (`apply`, the simulator), the torch call (`torch_call`, the
runtime, and `script_call`, `commdsl compile`) and nccl-tests' bus-bandwidth factor (`busbw_factor`,
`commdsl bench`). Everything common to all collectives (rendezvous, matching calls into instances,
the mismatch rules) lives in the engine and the checker, which look kinds up in `KINDS`.

To add a collective: a module here defining `KIND` (its `statement` maps the grammar rule's parts to the
syntax node), its rule `<name>_op` in `grammar/commdsl.lark`, and its entry in docs/language.md. The
modules are found by name (`_registry`); the transformer and every stage look the kind up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from commdsl.values import at, item

if TYPE_CHECKING:
    from commdsl.schedule import CollectiveRec, VView

REDUCE_OPS = ("sum", "product", "min", "max", "band", "bor", "bxor", "avg", "premul_sum")
DATA = "(rank + i) % 5 + 1"
"""The bench's data: small integers that differ by rank and element, exact in every dtype."""


@dataclass
class Call:
    """One collective statement as the ranks that call it see it (for the rules that hold per rank):
    `rec`'s fields are aligned with these ranks; `size` is each rank's group size and `me` its index
    in the group; `is_root` whether it is the root."""

    rec: CollectiveRec
    size: object
    me: object
    is_root: object
    count: int

    def numel(self, views, j: int = 0):
        return views[j].numel

    def rows(self, views, j: int = 0):
        v = views[j]
        return v.shape[0] if v.shape else 1


@dataclass
class Problem:
    """Ranks whose buffers do not fit (a mask over the call's ranks) and the message for one of them."""

    mask: np.ndarray
    message: Callable[[int], str]


@dataclass
class Instance:
    """The members' side of one complete collective, in group order: what `apply` computes on."""

    size: int
    root: int | None  # the root's index in the group
    redop: str | None
    scale: float | None
    inputs: list[list[np.ndarray]]  # per member, one flat array per input view
    input_shapes: list[list[tuple]]
    output_numel: list[list[int]]  # per member, the element count of each output view
    inputs_listed: list[bool] = field(default_factory=list)
    outputs_listed: list[bool] = field(default_factory=list)
    in_splits: list[tuple] = field(default_factory=list)
    out_splits: list[tuple] = field(default_factory=list)


Outputs = list[list]
"""Per member, one flat array per output view, or None where the member's output is left undefined."""


class Kind:
    """One collective. Subclasses set the class attributes and override what differs."""

    name: str = ""
    form: str = ""  # how `commdsl fmt` writes it: {ins} {outs} {root} {redop} {splits} are filled in
    bench: tuple[str, str, str] | None = None  # `commdsl bench --collective`: declarations, statement, measured
    bench_in_place: tuple[str, str, str] | None = None  # the same in one buffer, where torch takes both forms
    python_prelude: str = ""  # what a generated script defines before calling `script_call`'s function
    rooted: bool = False  # has a root rank: `from ROOT` (it sends) or `to ROOT` (it receives)
    reducing: bool = False  # takes `op REDOP`
    coalescable: bool = False  # its one-tensor form is what torch's `_coalescing_manager` records, not runs
    root_sends: bool = False  # the root is the source (broadcast, scatter), not the destination
    # the overlap of a member's input and output that torch and the backends run in place (C318): "same" (one
    # buffer), "input-block" (the input is the member's own block of the output), "output-block" (the output
    # is its own block of the input), None (no overlap at all)
    in_place: str | None = "same"
    gloo_copies: bool = False  # torch's Gloo copies through a temporary: any overlap comes out right there
    listed_copies: bool = False  # its list form goes through a flat temporary on every backend (`newLikeFlat`)
    # the backends whose torch call compares the shape of every buffer of its list form with the one tensor's
    # and raises where one differs (C320), though the elements would fit
    listed_shapes: tuple[str, ...] = ()
    listed_shape_own_only: bool = False  # ... only the member's own entry of the list (the others may be any size)
    # ... every buffer of both lists against the first input (all_to_all's list form: traced scripts only, a
    # `.comm` program writes it with splits)
    listed_one_shape: bool = False
    # the backends whose torch call of the one-tensor form requires the whole buffer to be the members' parts
    # concatenated along dimension 0 ([size * a, b] for parts [a, b]) and raises on any other shape (C321)
    flat_shapes: tuple[str, ...] = ()

    # ---- syntax ---------------------------------------------------------------------------------
    def statement(self, *parts) -> dict:
        """The `syntax.nodes.Collective` fields of a statement, from the parts of its grammar rule
        `<name>_op` in order (a buffer view, `buffers` as (views, listed), a root, `redop`, `splits`,
        `group_ref`; an optional part absent is None)."""
        raise NotImplementedError  # pragma: no cover - every kind defines it

    # ---- buffers --------------------------------------------------------------------------------
    def fit(self, call: Call) -> Problem | None:
        """Which ranks' buffers cannot serve a group of their size (N131), or None."""
        return None

    def contribution(self, call: Call):
        """Elements each rank contributes per peer: every member must agree (C306). -1 on a rank whose sizes
        differ per peer (uneven splits or lists): the members are then compared one by one instead
        (`members_disagree`)."""
        return call.numel(call.rec.inputs) if call.rec.inputs else 0

    def listed(self, rec: CollectiveRec) -> tuple[VView, tuple[VView, ...], bool] | None:
        """(the one tensor, the buffers of the list, whether the list is the output) of a call in its list form,
        None in its one-tensor form or for a kind without one."""
        return None

    def flat(self, rec: CollectiveRec) -> tuple[VView, VView, bool] | None:
        """(a member's part, the whole buffer of every part, whether the whole is the output) of a call in its
        one-tensor form, None in its list form or for a kind without one."""
        return None

    def roles(self, is_root: bool) -> tuple[bool, bool, bool]:
        """(reads its inputs, writes its outputs, leaves its outputs undefined) for a member."""
        return True, True, False

    # ---- who waits for whom on Gloo --------------------------------------------------------------
    def released(self, arrived: np.ndarray, root: int | None) -> np.ndarray:
        """On Gloo, which members (group indices) may leave before every member has called: by default
        none — the call returns only when all have arrived (rings, all-to-all). Rooted kinds override it
        with the shape of Gloo's algorithm (docs/backend-support.md)."""
        return np.zeros(arrived.size, dtype=bool)

    def needs(self, arrived: np.ndarray, root: int | None, me: int) -> np.ndarray:
        """The members (group indices, not yet arrived) that member `me` waits for on Gloo."""
        return np.flatnonzero(~arrived)

    rule = None  # the Rule of this kind's own disagreement (`members_disagree`), if it has one; else C306 (sizes)

    def members_disagree(self, inst: Instance) -> tuple[int, int] | None:
        """Two members (indices) whose calls cannot meet for a reason of this kind's own (C312), or None."""
        return None

    def members_disagree_ops(self, ops: list) -> tuple[int, int] | None:
        """The same, from the members' concrete ops (the checker's view)."""
        return None

    def disagreement(self, rank_a: int, a, rank_b: int, b, pair) -> tuple[str, str, str, str]:
        """(message, label at a, label at b, help) of `rule` for two members that disagree."""
        raise NotImplementedError  # pragma: no cover - only kinds with a `rule` are asked

    # ---- data -----------------------------------------------------------------------------------
    def apply(self, inst: Instance) -> Outputs:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    # ---- torch ----------------------------------------------------------------------------------
    def torch_call(
        self, op, ins: list, outs: list, group, red, is_root: bool, size: int, device_ids: list[int] | None = None
    ) -> Callable[[bool], object]:
        """A function of `async_op` that issues this rank's call (`op` is the rank's concrete op;
        `device_ids`: NCCL's device of this rank, for the calls that take it)."""
        raise NotImplementedError  # pragma: no cover

    def script_call(self, node, ins: list[str], outs: list[str], red: str, root: str, size: str, splits):
        """(function, arguments) of the call in a generated script (`dist.broadcast`, ...). Everything comes as
        Python source read at run time: the views, the reduce op, the root (a global rank; `rank == root` is how
        a member knows it is the root), the group's size; `splits` is (in, out) lists of sizes, or None; `node`
        is the statement (its list forms)."""
        raise NotImplementedError  # pragma: no cover

    # ---- bench ----------------------------------------------------------------------------------
    def busbw_factor(self, world: int) -> float:
        """nccl-tests' busbw / algbw ratio (its doc/PERFORMANCE.md and the GetBw of each test)."""
        return 1.0

    def latency_steps(self, world: int) -> int:
        """Hops of latency one call pays in sequence: a ring's p - 1 steps (`commdsl predict`)."""
        return world - 1

    gloo_direct = False
    """Whether Gloo runs this kind as every member's message to or from the root at once (gloo/gather.cc,
    scatter.cc), not as a ring: one message's latency and the root's share of `size` through its one way."""

    gloo_posts_at_once = False
    """Whether Gloo posts every member's messages at once and waits for them all (gloo/alltoall.cc): one wait,
    in which the members on a node take turns for its cores when they outnumber them (`commdsl predict`)."""

    def lockstep(self, backend: str) -> bool:
        """Whether the backend runs this kind as a ring that moves every member a step at a time, each step
        waiting for its neighbour (`commdsl predict`: a step then costs the topology's `collective_alpha_us`,
        and every member sends and receives at once). False for a tree or direct sends from or to a root:
        each message costs a message's α and has its sender's and receiver's ways to itself."""
        return not (backend == "gloo" and self.gloo_direct)

    def latency_hops(self, world: int, backend: str) -> int:
        """Latencies one call pays one after another on `backend`: its `latency_steps`, or one where Gloo
        posts every message at once (`gloo_direct`, `gloo_posts_at_once`)."""
        at_once = self.gloo_direct or self.gloo_posts_at_once
        return 1 if backend == "gloo" and at_once else self.latency_steps(world)

    def cost(self, world: int, size, alpha: float, beta: float, tree: bool = False, backend: str = "nccl"):
        """Predicted seconds of one call at `world` members (`commdsl predict`, docs/predict.md): the ring
        NCCL runs and nccl-tests' busbw assumes, `latency_hops` of latency `alpha` (on Gloo one for a kind
        that posts every message at once) and `busbw_factor` × `size` bytes over each link at `beta` bytes/s.
        `size` is nccl-tests' size (the larger of a member's input and output), a number or an array; `tree`:
        the backend may also run a tree (NCCL), which a kind with one overrides; `backend`: for a kind a
        backend runs otherwise."""
        return self.latency_hops(world, backend) * alpha + self.busbw_factor(world) * size / beta

    def gloo_copy_bytes(self, world: int, size):
        """Bytes of memory traffic a member spends, on torch's Gloo backend, on copies outside the algorithm
        `cost` prices (temporaries torch allocates and copies through), counted as `commdsl predict` counts a
        local op: bytes written plus bytes read, so a copy of n bytes is 2n. `size` as in `cost`. None here."""
        return 0.0 * size

    def gloo_reduce_bytes(self, world: int, size):
        """Bytes of memory traffic a member spends, on Gloo, reducing what it receives into its own buffer
        (Gloo sums on the CPU between the messages `cost` prices; NCCL's kernels reduce as they move), counted
        as `commdsl predict` counts `x += y`: the target and the view read, 2n for n bytes reduced. `size` as
        in `cost`. None here: the kind does not reduce."""
        return 0.0 * size

    def gloo_sent_bytes(self, world: int, size):
        """Bytes all members of one call together send on torch's Gloo backend (`commdsl predict`: what the
        host's cores move for it, `Clocks.cores_taken`): `cost`'s ring, every member `busbw_factor` × `size`;
        a kind Gloo runs direct to or from its root (`gloo_direct`), the other members' parts once. `size` as
        in `cost`."""
        if self.gloo_direct:
            return (world - 1) / world * np.asarray(size, dtype=np.float64)
        return world * self.busbw_factor(world) * np.asarray(size, dtype=np.float64)

    gloo_root_copies = False
    """Whether only the root makes the copies `gloo_copy_bytes` counts (`commdsl predict`: it copies at the
    memory's full speed, not sharing it with the other members as when every member copies at once)."""

    def gloo_temporaries(self, world: int, size) -> tuple:
        """Bytes of each temporary tensor torch's Gloo backend allocates for one call of a member (`size` as in
        `cost`): `commdsl predict` charges fresh pages for those malloc maps anew on every call. None here."""
        return ()


# ---- helpers the kinds share ----------------------------------------------------------------------


class UnevenList(Kind):
    """A kind whose list form may hold buffers of uneven sizes, entry j the size of member j's part (the
    all-gather-v, `all_gather`'s output list; the reduce-scatter-v, `reduce_scatter`'s input list): torch's
    NCCL runs it as one broadcast (reduce) per member. A member's own entry must hold its part (`fit`,
    N131); such calls contribute -1 and the members are compared one by one (`members_disagree`, C306)."""

    list_is_output: bool = True  # the list is the output (the one tensor, the part, is the input)
    verb: str = ""  # what a member does with its list, for the messages: "gathers into"

    def _sides(self, x) -> tuple:
        """(the one tensor's views, the list's views, whether the call is in its list form) of a record or op."""
        if self.list_is_output:
            return x.inputs, x.outputs, x.outputs_listed
        return x.outputs, x.inputs, x.inputs_listed

    def fit(self, call: Call) -> Problem | None:
        one, bufs, listed = self._sides(call.rec)
        part, whole = ("input", "output") if self.list_is_output else ("output", "input")
        return parts_problem(call, call.numel(one), bufs, listed, whole, part, uneven=True)

    def contribution(self, call: Call):
        one, bufs, listed = self._sides(call.rec)
        part = call.numel(one)
        if not listed or len(bufs) < 2:
            return part
        numels = np.stack([at(b.numel, None, call.count) for b in bufs])
        return np.where((numels != numels[0]).any(axis=0), -1, at(part, None, call.count))

    def listed(self, rec):
        one, bufs, listed = self._sides(rec)
        return (one[0], bufs, self.list_is_output) if listed else None

    def flat(self, rec):
        one, bufs, listed = self._sides(rec)
        return None if listed else (one[0], bufs[0], self.list_is_output)

    def members_disagree(self, inst: Instance) -> tuple[int, int] | None:
        if self.list_is_output:
            own = [x[0].size for x in inst.inputs]
            lists = [tuple(n) if listed else None for n, listed in zip(inst.output_numel, inst.outputs_listed)]
        else:
            own = [n[0] for n in inst.output_numel]
            lists = [
                tuple(x.size for x in xs) if listed else None for xs, listed in zip(inst.inputs, inst.inputs_listed)
            ]
        return _list_disagreement(own, lists)

    def members_disagree_ops(self, ops: list) -> tuple[int, int] | None:
        sides = [self._sides(op) for op in ops]
        lists = [tuple(v.numel for v in bufs) if listed else None for _, bufs, listed in sides]
        return _list_disagreement([one[0].numel for one, _, _ in sides], lists)

    def disagreement(self, rank_a, a, rank_b, b, pair):
        j, _ = pair
        one_a, _, _ = self._sides(a)
        _, bufs_b, listed_b = self._sides(b)
        part = "input" if self.list_is_output else "output"
        if not listed_b:
            return (
                f"`{self.name}`: rank {rank_a} {self.verb} a list of uneven buffers, rank {rank_b} one tensor",
                f"rank {rank_a}'s uneven list",
                f"rank {rank_b}'s one tensor",
                "use lists of the same sizes on every member",
            )
        n = one_a[0].numel
        return (
            f"`{self.name}`: rank {rank_a}'s {part} holds {n} element{'s' * (n != 1)}, "
            f"rank {rank_b}'s buffer for it {bufs_b[j].numel}",
            f"rank {rank_a}'s {part}",
            f"rank {rank_b}'s buffer for rank {rank_a}",
            f"entry j of every member's list must hold member j's {part}",
        )


def _list_disagreement(own: list[int], lists: list[tuple[int, ...] | None]) -> tuple[int, int] | None:
    """The first (j, m) where member m's list entry j does not hold member j's own size `own[j]`, or a member
    m in the one-tensor form (`lists[m]` None: j is then a member with an uneven list), when some member's list
    is uneven; None otherwise (the members' contributions are then compared as for any collective)."""
    uneven = [m for m, sizes in enumerate(lists) if sizes is not None and len(set(sizes)) > 1]
    if not uneven:
        return None
    for m, sizes in enumerate(lists):
        if sizes is None:
            return uneven[0], m
        for j, (n, want) in enumerate(zip(sizes, own)):
            if n != want:
                return j, m
    return None


def parts_problem(
    call: Call, part, bufs, listed: bool, whole: str, each: str, where=None, uneven: bool = False
) -> Problem | None:
    """A buffer that holds `size` parts of `part` elements: one tensor of size × part, or a list of size
    tensors of part each. `where` limits the rule to some ranks (a root). `uneven`: the list's buffers may
    differ in size, one per member (torch's NCCL runs such a list as one broadcast or reduce per member), and
    only the member's own must hold `part`."""
    n = call.count
    size = at(call.size, None, n)
    part = at(part, None, n)
    if listed:
        count = len(bufs)
        bad = size != count
        numels = [at(b.numel, None, n) for b in bufs]
        wrong = np.zeros(n, dtype=bool)
        if uneven and count:
            own = np.stack(numels)[np.clip(at(call.me, None, n), 0, count - 1), np.arange(n)]
            wrong |= own != part
        else:
            for x in numels:
                wrong |= x != part
        mask = bad | wrong
        if where is not None:
            mask &= where

        def message(k: int) -> str:
            if bad[k]:
                return f"the {whole} list has {count} buffers for a group of {size[k]}"
            if uneven:
                me = int(at(call.me, None, n)[k])
                return (
                    f"the member's own {whole} buffer (entry {me}) must hold {part[k]} elements (the {each}), "
                    f"it holds {int(numels[me][k])}"
                )
            first = next(int(x[k]) for x in numels if x[k] != part[k])
            return f"each {whole} buffer must hold {part[k]} elements (the {each}), one holds {first}"

        return Problem(mask, message) if mask.any() else None
    total = at(bufs[0].numel, None, n)
    mask = total != size * part
    if where is not None:
        mask &= where
    if not mask.any():
        return None
    return Problem(
        mask,
        lambda k: f"the {whole} has {total[k]} elements; a group of {size[k]} × {part[k]} needs {size[k] * part[k]}",
    )


def reduce_arrays(arrays: list[np.ndarray], redop: str, scale: float | None) -> np.ndarray:
    """Reduce equal-shaped arrays the way torch.distributed does for each ReduceOp."""
    with np.errstate(all="ignore"):  # integers wrap and floats overflow to inf quietly, as in torch
        return _reduce(np.stack(arrays), arrays[0].dtype, len(arrays), redop, scale)


def _reduce(stack: np.ndarray, dtype, count: int, redop: str, scale: float | None) -> np.ndarray:
    if redop == "sum":
        out = np.any(stack, axis=0) if dtype == np.bool_ else np.sum(stack, axis=0, dtype=dtype)
    elif redop == "product":
        out = np.all(stack, axis=0) if dtype == np.bool_ else np.prod(stack, axis=0, dtype=dtype)
    elif redop == "min":
        out = np.min(stack, axis=0)
    elif redop == "max":
        out = np.max(stack, axis=0)
    elif redop == "band":
        out = np.bitwise_and.reduce(stack, axis=0)
    elif redop == "bor":
        out = np.bitwise_or.reduce(stack, axis=0)
    elif redop == "bxor":
        out = np.bitwise_xor.reduce(stack, axis=0)
    elif redop == "avg" and np.dtype(dtype).kind in "iu":  # NCCL: integer sum, then C division (toward 0)
        total = np.sum(stack, axis=0, dtype=dtype)
        out = np.sign(total) * (np.abs(total) // count)
    elif redop == "avg":
        out = np.sum(stack, axis=0, dtype=dtype) / count
    elif redop == "premul_sum":
        out = np.sum(stack * np.asarray(scale, dtype=dtype), axis=0, dtype=dtype)
    else:
        raise ValueError(redop)
    return np.asarray(out, dtype=dtype)


def from_root(arrived: np.ndarray, root: int | None) -> np.ndarray:
    """Flat rooted algorithms (Gloo's gather and scatter): a member other than the root leaves once the root
    has called; the root waits for everyone."""
    out = np.zeros(arrived.size, dtype=bool)
    if root is not None and arrived[root]:
        out[:] = arrived
        out[root] = False
    return out


def even_parts(flat: np.ndarray, parts: int) -> list[np.ndarray]:
    return np.split(flat, parts)


def chunks(t, count: int, shape) -> list:
    """A torch tensor as `count` equal views, each reshaped to `shape` (the list a list-form call wants)."""
    return [p.view(shape) for p in t.reshape(-1).chunk(count)] if count else []


ORDER = (
    "broadcast",
    "all_reduce",
    "reduce",
    "all_gather",
    "gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "barrier",
)
"""The order of `KINDS`, which every list of the kinds follows; a kind not named here comes after, by name."""


def _registry() -> dict[str, Kind]:
    """Every module of this package defines one kind, `KIND`, named as the module."""
    import importlib
    import pkgutil

    kinds = [importlib.import_module(f"{__name__}.{m.name}").KIND for m in pkgutil.iter_modules(__path__)]
    kinds.sort(key=lambda k: (ORDER.index(k.name) if k.name in ORDER else len(ORDER), k.name))
    return {k.name: k for k in kinds}


KINDS: dict[str, Kind] = _registry()
ROOTED = frozenset(k.name for k in KINDS.values() if k.rooted)
REDUCING = frozenset(k.name for k in KINDS.values() if k.reducing)

__all__ = ["KINDS", "Kind", "Call", "Problem", "Instance", "ROOTED", "REDUCING", "reduce_arrays", "item"]
