"""`all_to_all x into y`: block j of member i's `x` becomes block i of member j's `y`.

Even form: `x` and `y` hold the same number of elements, split into `size` equal parts. Uneven form
(`splits [IN...], [OUT...]`, as `all_to_all_single`'s split sizes): member i sends in_splits[j] rows
(along dim 0) to member j and receives out_splits[j] rows from it, so member i's in_splits[j] must
equal member j's out_splits[i] (C312).
"""

from __future__ import annotations

import numpy as np

from commdsl.collectives import DATA, Call, Instance, Kind, Outputs, Problem, even_parts
from commdsl.rules import Rule
from commdsl.values import at


class AllToAllSplitsMismatch(Rule):
    """uneven all_to_all splits that disagree between ranks

    ## What it does

    Reports an uneven `all_to_all` whose `splits` disagree between ranks: rank *a* sends
    `in_splits[b]` rows to rank *b*, which must expect exactly that many, `out_splits[a]`.

    ## Why is this bad?

    Each rank computes its own splits and nothing checks them against the other side. A rank that
    expects fewer rows than arrive, or more, gets a crash or a partly written, silently wrong output.
    It is the typical bug of hand-rolled token routing in mixture-of-experts layers.

    ## Example

    ```comm
    program routing
    world 2
    tensor tokens: float32[4] = rank
    tensor routed: float32[4] = 0
    on rank == 0:
        all_to_all tokens into routed splits [1, 3], [1, 3]
    else:
        all_to_all tokens into routed splits [1, 3], [3, 1]
    ```

    ## Use instead

    ```comm
    program routing
    world 2
    tensor tokens: float32[4] = rank
    tensor routed: float32[4] = 0
    on rank == 0:
        all_to_all tokens into routed splits [1, 3], [1, 3]
    else:
        all_to_all tokens into routed splits [3, 1], [3, 1]
    ```

    ## Backend notes

    Gloo runs `all_to_all_single` with uneven splits (measured). Each rank passes only its own splits,
    so nothing compares them across ranks before the data moves.
    """

    code = "C312"
    name = "all-to-all-splits-mismatch"

    @classmethod
    def check(cls, ctx):
        from commdsl.rules.collectives import _findings

        yield from _findings(ctx, cls)


class AllToAll(Kind):
    name = "all_to_all"
    form = "all_to_all {ins} into {outs}{splits}"
    in_place = None  # on Gloo, `all_to_all_single(x, x)` gives wrong blocks (measured)
    # a traced `dist.all_to_all(outputs, inputs)`: Gloo wants one shape for every tensor of both lists
    # (measured: `ProcessGroupGloo::alltoall: invalid tensor size at index 1`); PGNCCL sends each on its own
    listed_shapes = ("gloo",)
    listed_one_shape = True
    bench = (
        "tensor x: {t}[n // world * world] = " + DATA + "\ntensor y: {t}[n // world * world]",
        "all_to_all x into y",
        "x",
    )
    # no `bench_in_place`: see `in_place`

    def statement(self, src, dst, splits, group):
        fields = {"in_splits": splits[0], "out_splits": splits[1]} if splits is not None else {}
        return {"inputs": (src,), "outputs": (dst,), "group": group, **fields}

    def fit(self, call: Call) -> Problem | None:
        rec, n = call.rec, call.count
        size = at(call.size, None, n)
        if rec.in_splits:
            ins = np.stack([at(s, None, n) for s in rec.in_splits], axis=1)
            outs = np.stack([at(s, None, n) for s in rec.out_splits], axis=1)
            rows_in, rows_out = at(call.rows(rec.inputs), None, n), at(call.rows(rec.outputs), None, n)
            count_bad = size != ins.shape[1]
            negative = (ins < 0).any(axis=1) | (outs < 0).any(axis=1)
            sums = (ins.sum(axis=1) != rows_in) | (outs.sum(axis=1) != rows_out)
            mask = count_bad | negative | sums

            def message(k: int) -> str:
                if count_bad[k]:
                    return f"`all_to_all` splits list {ins.shape[1]} sizes for a group of {size[k]}"
                if negative[k]:
                    return "`all_to_all` split sizes must not be negative"
                return (
                    f"`all_to_all` splits sum to {ins[k].sum()} in / {outs[k].sum()} out rows, "
                    f"but the buffers have {rows_in[k]} / {rows_out[k]}"
                )

            return Problem(mask, message) if mask.any() else None
        src, dst = at(call.numel(rec.inputs), None, n), at(call.numel(rec.outputs), None, n)
        unequal = src != dst
        uneven = ~unequal & (src % size != 0)
        mask = unequal | uneven
        if not mask.any():
            return None
        return Problem(
            mask,
            lambda k: (
                f"`all_to_all` input has {src[k]} elements but output has {dst[k]}"
                if unequal[k]
                else f"`all_to_all` moves {src[k]} elements, not divisible by the group size {size[k]}"
            ),
        )

    def contribution(self, call: Call):
        if call.rec.in_splits:
            return -1  # uneven: the split sizes are compared member by member instead (C312)
        return call.numel(call.rec.inputs) // call.size

    rule = AllToAllSplitsMismatch

    def members_disagree(self, inst: Instance) -> tuple[int, int] | None:
        return split_disagreement(inst.in_splits, inst.out_splits)

    def members_disagree_ops(self, ops) -> tuple[int, int] | None:
        return split_disagreement([op.in_splits for op in ops], [op.out_splits for op in ops])

    def disagreement(self, rank_a, a, rank_b, b, pair):
        sent = a.in_splits[pair[1]] if a.in_splits else "an even share of"
        expected = b.out_splits[pair[0]] if b.out_splits else "an even share"
        return (
            f"`all_to_all`: rank {rank_a} sends {_rows(sent)} to rank {rank_b}, which expects {_rows(expected)}",
            f"rank {rank_a}'s in_splits",
            f"rank {rank_b}'s out_splits",
            "rank a's in_splits[b] must equal rank b's out_splits[a]",
        )

    def apply(self, inst: Instance) -> Outputs:
        """Member j's output: part j of every member's input, in member order. One gather over all inputs (a
        world of 1024 has a million parts), where the members' inputs share a dtype; part by part otherwise."""
        xs = [x[0] for x in inst.inputs]
        if len({x.dtype for x in xs}) == 1 and inst.size:
            sizes = np.zeros((inst.size, inst.size), dtype=np.int64)  # [sender, receiver] elements
            for r, (x, splits) in enumerate(zip(xs, inst.in_splits or [()] * inst.size)):
                if splits:
                    total = sum(splits)
                    sizes[r] = np.asarray(splits, dtype=np.int64) * (x.size // total if total else 0)
                else:
                    sizes[r] = x.size // inst.size
            flat = np.concatenate(xs)
            starts = (np.cumsum([x.size for x in xs]) - [x.size for x in xs])[:, None] + np.cumsum(sizes, 1) - sizes
            lengths = sizes.T.reshape(-1)  # receiver-major: receiver j's parts from each sender in order
            firsts = starts.T.reshape(-1)
            offsets = np.cumsum(lengths) - lengths
            index = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(offsets - firsts, lengths)
            per_receiver = sizes.sum(0)
            return [[part] for part in np.split(flat[index], np.cumsum(per_receiver)[:-1])]
        pieces = []
        for x, splits in zip(inst.inputs, inst.in_splits):
            if splits:
                total = sum(splits)
                row = x[0].size // total if total else 0
                bounds = np.cumsum([s * row for s in splits])[:-1]
                pieces.append(np.split(x[0], bounds))
            else:
                pieces.append(even_parts(x[0], inst.size))
        return [[np.concatenate([pieces[r][j] for r in range(inst.size)])] for j in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        if op.in_splits:  # uneven: split sizes count rows along dim 0, as torch's do
            out, inp, osp, isp = outs[0], ins[0], list(op.out_splits), list(op.in_splits)
        else:  # even: the simulator splits the flat elements into group-size parts
            out, inp, osp, isp = outs[0].reshape(-1), ins[0].reshape(-1), None, None
        return lambda a: dist.all_to_all_single(out, inp, osp, isp, group=group, async_op=a)

    def script_call(self, node, ins, outs, red, root, size, splits):
        if splits is not None:
            return "dist.all_to_all_single", [outs[0], ins[0], f"[{', '.join(splits[1])}]", f"[{', '.join(splits[0])}]"]
        return "dist.all_to_all_single", [f"{outs[0]}.view(-1)", f"{ins[0]}.view(-1)"]

    def busbw_factor(self, world: int) -> float:
        return (world - 1) / world

    gloo_posts_at_once = True
    """Gloo posts every send and receive at once and then waits for them all (gloo/alltoall.cc, alltoallv.cc):
    one wait (`latency_hops`), for its peers' wake-ups through torch's worker thread as a ring's step waits,
    so a collective step's α (`lockstep`), taken in turns where the members outnumber their node's cores.
    Priced as p - 1 messages' α (2026-11-28 to -29), the built-in all_to_all at N = 4 and 1-4 MiB was over in
    all five campaigns of the 2-core machine (+21..+154 %) and under at N = 2 (docs/predict-accuracy.md, "Gloo's
    all-to-all waits once"); as p - 1 ring steps before that, 38-47 % over."""

    def busiest_way(self, sent, received, duplex: bool):
        """Bytes through the busiest member's way in an uneven call (`commdsl predict`): both backends post
        every member's messages at once (gloo/alltoallv.cc; NCCL's grouped sends and receives), so a member's
        way carries what it sends to and receives from the others (`sent`, `received`: per member × size, its
        own block left out), both at once unless `duplex` (then the larger). With even splits, what the even
        form's `cost` puts through each member's way: (p - 1)/p of the size each way."""
        sent, received = np.asarray(sent, dtype=np.float64), np.asarray(received, dtype=np.float64)
        return (np.maximum(sent, received) if duplex else sent + received).max(axis=0)

    def gloo_copy_bytes(self, world: int, size):
        """Gloo's alltoall (gloo/alltoall.cc, which torch's `alltoall_base` runs on the tensors themselves,
        with no temporary) memcpy's a member's own block from input to output before it posts the others'
        sends and receives: size / world bytes read and written."""
        return 2.0 * size / world


def _rows(n) -> str:
    return f"{n} row{'s' * (n != 1)}" if isinstance(n, int) else str(n)


def split_disagreement(in_splits: list[tuple], out_splits: list[tuple]) -> tuple[int, int] | None:
    """The first (sender, receiver) member pair whose split sizes disagree, or None.

    Member a's in_splits[b] must equal member b's out_splits[a]; an even split on one side disagrees
    with explicit splits on the other."""
    if not any(in_splits):
        return None
    for a, ia in enumerate(in_splits):
        for b, ob in enumerate(out_splits):
            if not ia or not ob or ia[b] != ob[a]:
                return a, b
    return None


KIND = AllToAll()
