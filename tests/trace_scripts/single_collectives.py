"""torch 2.13's `all_gather_single` and `reduce_scatter_single` (the `*_into_tensor` / `*_tensor` names they
replace now warn), async, with a handle waited later: recorded as the collectives they are, on the script's
own tensors."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()
grads = torch.ones(4 * world)
shard = torch.empty(4)
if hasattr(dist, "reduce_scatter_single"):
    done = dist.reduce_scatter_single(shard, grads, async_op=True)
    done.wait()
    params = torch.empty(4 * world)
    gathered = dist.all_gather_single(params, shard, async_op=True)
    gathered.wait()
else:  # torch before 2.13: the names they replace
    done = dist.reduce_scatter_tensor(shard, grads, async_op=True)
    done.wait()
    params = torch.empty(4 * world)
    gathered = dist.all_gather_into_tensor(params, shard, async_op=True)
    gathered.wait()
dist.destroy_process_group()
