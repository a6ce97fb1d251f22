"""`reduce_scatter x into y op REDOP`: member j's `y` is the reduction of block j of every member's `x`.

In the list form (`reduce_scatter [a, b, ...] into y`), entry j goes to member j; the entries may differ in size
(a reduce-scatter-v), each the size of its member's `y`: torch's NCCL then runs one reduce per member
(`ProcessGroupNCCL::reduce_scatter` falls back to `_reduce_oop` in a coalesced group), and Gloo runs it too
(measured), requiring only the member's own entry to have `y`'s shape (C320).
"""

from __future__ import annotations

from commdsl.collectives import (
    DATA,
    Call,
    Instance,
    Kind,
    Outputs,
    Problem,
    even_parts,
    list_contribution,
    list_disagreement,
    parts_problem,
    reduce_arrays,
)


class ReduceScatter(Kind):
    name = "reduce_scatter"
    form = "reduce_scatter {ins} into {outs}{redop}"
    in_place = "output-block"
    gloo_copies = True  # clones its whole input before the all-reduce
    listed_copies = True
    listed_shapes = ("gloo",)  # measured: Gloo's `Check failed: outputs[0].sizes() == inputs[0][i].sizes()`,
    listed_shape_own_only = True  # for i the member's own entry only: Gloo runs a reduce-scatter-v (measured)
    bench = (
        "tensor x: {t}[n // world * world] = " + DATA + "\ntensor y: {t}[n // world]",
        "reduce_scatter x into y op {op}",
        "x",
    )
    # as nccl-tests' in-place: the output is this rank's own block of the input
    bench_in_place = (
        "tensor x: {t}[n // world * world] = " + DATA,
        "reduce_scatter x into x.chunk(rank, world) op {op}",
        "x",
    )
    reducing = True
    coalescable = True  # reduce_scatter_tensor

    def statement(self, src, dst, redop, group):
        ins, listed = src
        return {"inputs": ins, "inputs_listed": listed, "outputs": (dst,), "redop": redop, "group": group}

    def fit(self, call: Call) -> Problem | None:
        rec = call.rec
        return parts_problem(
            call, call.numel(rec.outputs), rec.inputs, rec.inputs_listed, "input", "output", uneven=True
        )

    def contribution(self, call: Call):
        return list_contribution(call, call.rec.inputs, call.rec.inputs_listed, call.numel(call.rec.outputs))

    def listed(self, rec):
        return (rec.outputs[0], rec.inputs, False) if rec.inputs_listed else None

    def members_disagree(self, inst: Instance) -> tuple[int, int] | None:
        lists = [tuple(x.size for x in xs) if listed else None for xs, listed in zip(inst.inputs, inst.inputs_listed)]
        return list_disagreement([n[0] for n in inst.output_numel], lists)

    def members_disagree_ops(self, ops: list) -> tuple[int, int] | None:
        lists = [tuple(v.numel for v in op.inputs) if op.inputs_listed else None for op in ops]
        return list_disagreement([op.outputs[0].numel for op in ops], lists)

    def disagreement(self, rank_a, a, rank_b, b, pair):
        j, m = pair
        if not b.inputs_listed:
            return (
                f"`reduce_scatter`: rank {rank_a} reduces a list of uneven buffers, rank {rank_b} one tensor",
                f"rank {rank_a}'s uneven list",
                f"rank {rank_b}'s one tensor",
                "reduce lists of the same sizes on every member",
            )
        return (
            f"`reduce_scatter`: rank {rank_a}'s output holds {a.outputs[0].numel} elements, "
            f"rank {rank_b}'s buffer for it {b.inputs[j].numel}",
            f"rank {rank_a}'s output",
            f"rank {rank_b}'s buffer for rank {rank_a}",
            "entry j of every member's list must hold member j's output",
        )

    def apply(self, inst: Instance) -> Outputs:
        per_rank = [x if listed else even_parts(x[0], inst.size) for x, listed in zip(inst.inputs, inst.inputs_listed)]
        return [
            [reduce_arrays([per_rank[r][j] for r in range(inst.size)], inst.redop, inst.scale)]
            for j in range(inst.size)
        ]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        if op.inputs_listed:
            return lambda a: dist.reduce_scatter(outs[0], ins, red, group=group, async_op=a)
        # torch 2.13 renamed reduce_scatter_tensor (now deprecated) to reduce_scatter_single
        single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        out, inp = outs[0].reshape(-1), ins[0].reshape(-1)
        return lambda a: single(out, inp, red, group=group, async_op=a)

    python_prelude = (  # one line: torch 2.13 renamed reduce_scatter_tensor (now deprecated) to reduce_scatter_single
        "reduce_scatter_single = getattr(dist, 'reduce_scatter_single', None) or dist.reduce_scatter_tensor"
    )

    def script_call(self, node, ins, outs, red, root, size, splits):
        if node.inputs_listed:
            return "dist.reduce_scatter", [outs[0], f"[{', '.join(ins)}]", red]
        return "reduce_scatter_single", [f"{outs[0]}.view(-1)", f"{ins[0]}.view(-1)", red]

    def busbw_factor(self, world: int) -> float:
        return (world - 1) / world

    def cost(self, world: int, size, alpha: float, beta: float, tree: bool = False, backend: str = "nccl"):
        """On Gloo, torch runs `reduce_scatter_tensor` as an all-reduce of the whole input, then copies
        this rank's block (`ProcessGroupGloo::reduce_scatter_tensor_coalesced`, torch/csrc/distributed/c10d/
        ProcessGroupGloo.cpp): it costs that all-reduce. Elsewhere the ring."""
        if backend == "gloo":
            from commdsl.collectives import KINDS

            return KINDS["all_reduce"].cost(world, size, alpha, beta, tree, backend)
        return super().cost(world, size, alpha, beta, tree, backend)

    def gloo_copy_bytes(self, world: int, size):
        """Around that all-reduce `reduce_scatter_tensor_coalesced` clones the whole input (`inputTensors[i]
        .clone()`: `size` bytes read and written) and copies this rank's block out of the clone (size / world)."""
        return 2.0 * size + 2.0 * size / world

    def gloo_temporaries(self, world: int, size) -> tuple:
        """The clone of the whole input."""
        return (size,)


KIND = ReduceScatter()
