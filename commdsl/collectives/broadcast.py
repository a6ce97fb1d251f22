"""`broadcast x from ROOT`: every member ends with the root's `x`.

Gloo broadcasts down a binomial tree over the members' positions relative to the root (gloo/broadcast.cc):
member v = (index - root) mod n receives from v - 2^msb(v) and sends to v + 2^j for every j > msb(v). It
returns once its parent's data has arrived and each of its children has called, so a leaf can leave long
before the last member arrives (measured: docs/backend-support.md).
"""

from __future__ import annotations

import math

import numpy as np

from commdsl.collectives import DATA, Instance, Kind, Outputs


class Broadcast(Kind):
    name = "broadcast"
    form = "broadcast {ins} from {root}"
    bench = ("tensor x: {t}[n] = " + DATA, "broadcast x from {root}", "x")
    rooted = True
    root_sends = True

    def statement(self, buf, root, group):
        return {"inputs": (buf,), "outputs": (buf,), "root": root, "group": group}

    def roles(self, is_root):
        return (True, False, False) if is_root else (False, True, False)

    def released(self, arrived, root):
        parent, children = _tree(arrived.size, root)
        ok = arrived.copy()  # every ancestor arrived: doubling along parent links
        up = parent.copy()
        for _ in range(max(1, int(arrived.size).bit_length())):
            ok &= ok[up]
            up = up[up]
        for c in children:
            ok &= np.where(c >= 0, arrived[np.maximum(c, 0)], True)
        ok[~arrived] = False
        return ok

    def needs(self, arrived, root, me):
        parent, children = _tree(arrived.size, root)
        chain, v = [], me
        while v != root:
            v = int(parent[v])
            chain.append(v)
        mine = chain + [int(c[me]) for c in children if c[me] >= 0]
        return np.array([m for m in mine if not arrived[m]], dtype=np.int64)

    def apply(self, inst: Instance) -> Outputs:
        return [[inst.inputs[inst.root][0].copy()] for _ in range(inst.size)]

    def torch_call(self, op, ins, outs, group, red, is_root, size, device_ids=None):
        import torch.distributed as dist

        return lambda a: dist.broadcast(ins[0], op.root, group=group, async_op=a)

    def script_call(self, node, ins, outs, red, root, size, splits):
        return "dist.broadcast", [ins[0], root]

    def lockstep(self, backend: str) -> bool:
        return backend != "gloo"  # Gloo: the binomial tree above

    def cost(self, world: int, size, alpha: float, beta: float, tree: bool = False, backend: str = "nccl"):
        """NCCL: the pipelined chain (`Kind.cost`). Gloo: the binomial tree, ⌈log2 p⌉ levels one after another,
        each the whole buffer (a member forwards only what it has received: `waitRecv` before its sends), so
        ⌈log2 p⌉ (α + n/β), the root sending the buffer once per level."""
        if backend != "gloo":
            return super().cost(world, size, alpha, beta, tree, backend)
        return math.ceil(math.log2(world)) * (alpha + np.asarray(size) / beta)

    def gloo_sent_bytes(self, world: int, size):
        """The binomial tree: every member but the root receives the buffer once."""
        return (world - 1) * np.asarray(size, dtype=np.float64)


KIND = Broadcast()


def _tree(n: int, root: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Gloo's binomial tree over n members: each member's parent (the root its own), and per level j its child
    v + 2^j where j > msb(v) (-1 where there is none); indices are group indices."""
    idx = np.arange(n)
    v = (idx - root) % n
    msb = np.where(v > 0, np.floor(np.log2(np.maximum(v, 1))).astype(np.int64), -1)
    parent_v = np.where(v > 0, v - (1 << np.maximum(msb, 0)), 0)
    parent = (parent_v + root) % n
    children = []
    for j in range(max(1, int(n - 1).bit_length())):
        c = v + (1 << j)
        has = (j > msb) & (c < n)
        children.append(np.where(has, (c + root) % n, -1))
    return parent, children
