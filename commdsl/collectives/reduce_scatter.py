"""`reduce_scatter x into y op REDOP`: member j's `y` is the reduction of block j of every member's `x`.

In the list form (`reduce_scatter [a, b, ...] into y`), entry j goes to member j; the entries may differ in size
(a reduce-scatter-v), each the size of its member's `y`: torch's NCCL then runs one reduce per member
(`ProcessGroupNCCL::reduce_scatter` falls back to `_reduce_oop` in a coalesced group), and Gloo runs it too
(measured), requiring only the member's own entry to have `y`'s shape (C320).
"""

from __future__ import annotations

from commdsl.collectives import DATA, Instance, Outputs, UnevenList, even_parts, reduce_arrays


class ReduceScatter(UnevenList):
    name = "reduce_scatter"
    form = "reduce_scatter {ins} into {outs}{redop}"
    in_place = "output-block"
    gloo_copies = True  # clones its whole input before the all-reduce
    listed_copies = True
    listed_shapes = ("gloo",)  # measured: Gloo's `Check failed: outputs[0].sizes() == inputs[0][i].sizes()`,
    listed_shape_own_only = True  # for i the member's own entry only: Gloo runs a reduce-scatter-v (measured)
    flat_shapes = ("gloo",)  # measured: `Check failed: outputShape[0] * worldSize == inputShape[0]`, then dim by dim
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
    list_is_output = False
    verb = "reduces"

    def statement(self, src, dst, redop, group):
        ins, listed = src
        return {"inputs": ins, "inputs_listed": listed, "outputs": (dst,), "redop": redop, "group": group}

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
        out, inp = outs[0], ins[0]  # as declared: Gloo refuses shapes NCCL takes (C321), as torch by hand
        return lambda a: single(out, inp, red, group=group, async_op=a)

    python_prelude = (  # one line: torch 2.13 renamed reduce_scatter_tensor (now deprecated) to reduce_scatter_single
        "reduce_scatter_single = getattr(dist, 'reduce_scatter_single', None) or dist.reduce_scatter_tensor"
    )

    def script_call(self, node, ins, outs, red, root, size, splits):
        if node.inputs_listed:
            return "dist.reduce_scatter", [outs[0], f"[{', '.join(ins)}]", red]
        return "reduce_scatter_single", [outs[0], ins[0], red]

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

    def gloo_reduce_bytes(self, world: int, size):
        """That all-reduce's sums (`AllReduce.gloo_reduce_bytes`)."""
        from commdsl.collectives import KINDS

        return KINDS["all_reduce"].gloo_reduce_bytes(world, size)

    def gloo_copy_bytes(self, world: int, size):
        """Around that all-reduce `reduce_scatter_tensor_coalesced` clones the whole input (`inputTensors[i]
        .clone()`: `size` bytes read and written) and copies this rank's block out of the clone (size / world)."""
        return 2.0 * size + 2.0 * size / world

    def gloo_temporaries(self, world: int, size) -> tuple:
        """The clone of the whole input."""
        return (size,)


KIND = ReduceScatter()
