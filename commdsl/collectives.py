"""What each built-in collective means: how its buffers must be sized, and what each rank ends with.

`fit_problem` is the per-rank buffer rule (used by `expand`); `signature` is what every member must
agree on (used by the engine's rendezvous); `apply` is the data semantics (used by the simulator),
written against NumPy arrays in group-rank order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from commdsl.schedule import Collective, TensorSpec

ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCING = {"all_reduce", "reduce", "reduce_scatter"}


def fit_problem(op: Collective, me: int, tensors: Mapping[str, TensorSpec]) -> str | None:
    """Why this rank's buffers cannot serve `op` in a group of its size, or None if they fit."""
    size = len(op.group.ranks)
    is_root = op.root is not None and op.group.ranks.index(op.root) == me if op.root in op.group.ranks else False
    k = op.kind
    if k in ("all_gather", "gather") and (k == "all_gather" or is_root):
        return _fit_parts(op.inputs[0].numel, op.outputs, op.outputs_listed, size, "output", "input")
    if k == "scatter" and is_root:
        return _fit_parts(op.outputs[0].numel, op.inputs, op.inputs_listed, size, "input", "output")
    if k == "reduce_scatter":
        return _fit_parts(op.outputs[0].numel, op.inputs, op.inputs_listed, size, "input", "output")
    if k == "all_to_all":
        src, dst = op.inputs[0], op.outputs[0]
        if op.in_splits:
            if len(op.in_splits) != size:
                return f"`all_to_all` splits list {len(op.in_splits)} sizes for a group of {size}"
            if any(s < 0 for s in op.in_splits + op.out_splits):
                return "`all_to_all` split sizes must not be negative"
            rows_in = src.shape[0] if src.shape else 1
            rows_out = dst.shape[0] if dst.shape else 1
            if sum(op.in_splits) != rows_in or sum(op.out_splits) != rows_out:
                return (f"`all_to_all` splits sum to {sum(op.in_splits)} in / {sum(op.out_splits)} out rows, "
                        f"but the buffers have {rows_in} / {rows_out}")
            return None
        if src.numel != dst.numel:
            return f"`all_to_all` input has {src.numel} elements but output has {dst.numel}"
        if src.numel % size:
            return f"`all_to_all` moves {src.numel} elements, not divisible by the group size {size}"
    return None


def _fit_parts(part: int, bufs, listed: bool, size: int, whole: str, each: str) -> str | None:
    if listed:
        if len(bufs) != size:
            return f"the {whole} list has {len(bufs)} buffers for a group of {size}"
        bad = [b.numel for b in bufs if b.numel != part]
        if bad:
            return f"each {whole} buffer must hold {part} elements (the {each}), one holds {bad[0]}"
        return None
    if bufs[0].numel != size * part:
        return f"the {whole} has {bufs[0].numel} elements; a group of {size} × {part} needs {size * part}"
    return None


def signature(op: Collective) -> tuple:
    """What every member's call must agree on: kind, root, reduce op, dtype, async-ness."""
    return (op.kind, op.root, op.redop, op.scale, op.dtype, op.req is None)


def contribution(op: Collective) -> int:
    """Elements this rank contributes per peer, which must agree across the group."""
    k = op.kind
    if k in ("broadcast", "all_reduce", "reduce"):
        return op.inputs[0].numel
    if k in ("all_gather", "gather"):
        return op.inputs[0].numel
    if k in ("scatter", "reduce_scatter"):
        return op.outputs[0].numel
    if k == "all_to_all":
        return -1 if op.in_splits else op.inputs[0].numel // max(1, len(op.group.ranks))
    return 0


def split_disagreement(ops: list[Collective]) -> tuple[int, int] | None:
    """For uneven all_to_all: the first (sender, receiver) member pair whose split sizes disagree.

    Member a's in_splits[b] must equal member b's out_splits[a]; an even split on one side counts as
    disagreeing with explicit splits on the other.
    """
    if not any(op.in_splits for op in ops):
        return None
    for a, op_a in enumerate(ops):
        for b, op_b in enumerate(ops):
            if not op_a.in_splits or not op_b.out_splits or op_a.in_splits[b] != op_b.out_splits[a]:
                return a, b
    return None


# ---- data semantics ------------------------------------------------------------------------------

def reduce_arrays(arrays: list[np.ndarray], redop: str, scale: float | None) -> np.ndarray:
    """Reduce equal-shaped arrays the way torch.distributed does for each ReduceOp."""
    stack = np.stack(arrays)
    dtype = arrays[0].dtype
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
    elif redop == "avg":
        out = np.sum(stack, axis=0, dtype=dtype) / len(arrays)
    elif redop == "premul_sum":
        out = np.sum(stack * np.asarray(scale, dtype=dtype), axis=0, dtype=dtype)
    else:
        raise ValueError(redop)
    return np.asarray(out, dtype=dtype)


def _split(flat: np.ndarray, parts: int) -> list[np.ndarray]:
    return np.split(flat, parts)


def apply(kind: str, ops: list[Collective], inputs: list[list[np.ndarray]]) -> list[list[np.ndarray | None]]:
    """Outputs per member (group-rank order), one array per output view; None means "left undefined".

    `inputs[j]` holds member j's input views as flat arrays; rows of uneven all_to_all are taken from
    each op's split sizes times the row size.
    """
    size = len(ops)
    op0 = ops[0]
    root = op0.group.ranks.index(op0.root) if op0.root is not None else None
    if kind == "barrier":
        return [[] for _ in ops]
    if kind == "broadcast":
        return [[inputs[root][0].copy()] for _ in ops]
    if kind == "all_reduce":
        total = reduce_arrays([x[0] for x in inputs], op0.redop, op0.scale)
        return [[total.copy()] for _ in ops]
    if kind == "reduce":
        total = reduce_arrays([x[0] for x in inputs], op0.redop, op0.scale)
        return [[total] if j == root else [None] for j in range(size)]
    if kind in ("all_gather", "gather"):
        parts = [x[0] for x in inputs]
        out = []
        for j, op in enumerate(ops):
            if kind == "gather" and j != root:
                out.append([None] * 0)
                continue
            out.append([p.copy() for p in parts] if op.outputs_listed else [np.concatenate(parts)])
        return out
    if kind == "scatter":
        src = inputs[root]
        parts = [p.copy() for p in src] if ops[root].inputs_listed else _split(src[0], size)
        return [[parts[j]] for j in range(size)]
    if kind == "reduce_scatter":
        per_rank = [x if op.inputs_listed else _split(x[0], size) for x, op in zip(inputs, ops)]
        return [[reduce_arrays([per_rank[r][j] for r in range(size)], op0.redop, op0.scale)] for j in range(size)]
    if kind == "all_to_all":
        pieces = []
        for x, op in zip(inputs, ops):
            if op.in_splits:
                row = op.inputs[0].numel // max(1, sum(op.in_splits)) if sum(op.in_splits) else 0
                bounds = np.cumsum([s * row for s in op.in_splits])[:-1]
                pieces.append(np.split(x[0], bounds))
            else:
                pieces.append(_split(x[0], size))
        return [[np.concatenate([pieces[r][j] for r in range(size)])] for j in range(size)]
    raise ValueError(kind)


def reads_writes(op: Collective, me: int) -> tuple[tuple, tuple, tuple]:
    """(views read, views written, views left undefined) by member `me` of the group."""
    k = op.kind
    root = op.group.ranks.index(op.root) if op.root is not None and op.root in op.group.ranks else None
    if k == "barrier":
        return (), (), ()
    if k == "broadcast":
        return (op.inputs, ()) + ((),) if me == root else ((), op.outputs, ())
    if k == "all_reduce":
        return op.inputs, op.outputs, ()
    if k == "reduce":
        return (op.inputs, op.outputs, ()) if me == root else (op.inputs, (), op.outputs)
    if k == "gather":
        return (op.inputs, op.outputs, ()) if me == root else (op.inputs, (), ())
    if k == "scatter":
        return (op.inputs, op.outputs, ()) if me == root else ((), op.outputs, ())
    return op.inputs, op.outputs, ()
