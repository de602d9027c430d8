# drill: flashattention/ring-backward
# variant: the ring turns the other way (shards travel to rank r-1, so rank r sees shard r+step), peers named by group rank through isend/irecv's group_dst/group_src, P from one addmm with the -lse bias then exp_, causal diagonal zeroed with tril_, gradients added with in-place addmm_
"""Ring attention backward with the shards travelling towards the lower rank.

Either direction is a ring: what matters is that K, V and the dK/dV gathered for them move
together, one neighbour per hop, and come home after the last hop. Peers are given as ranks
inside the group (group_dst / group_src), so no translation to global ranks is needed.
"""

import math

import torch
import torch.distributed as dist


def _hop(tensors, to, frm, group, tag):
    """Send each tensor to group rank `to`, receive same-shaped fresh ones from `frm`; wait for all."""
    incoming = [torch.empty_like(t) for t in tensors]
    requests = []
    for i, (out, into) in enumerate(zip(tensors, incoming)):
        requests.append(dist.isend(out, group=group, group_dst=to, tag=tag + i))
        requests.append(dist.irecv(into, group=group, group_src=frm, tag=tag + i))
    for request in requests:
        request.wait()
    return incoming


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to, frm = (rank - 1) % world, (rank + 1) % world
    scale = 1.0 / math.sqrt(q.shape[-1])
    delta = (do * o).sum(-1)

    dq = torch.zeros_like(q)
    kv_k, kv_v = k, v
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for step in range(world):
        src = (rank + step) % world  # shards arrive from above
        if not (causal and src > rank):
            p = torch.addmm(-lse[:, None], q, kv_k.t(), alpha=scale).exp_()
            if causal and src == rank:
                p.tril_()  # the own shard: key j visible to query i only when j <= i
            ds = p * (do @ kv_v.t() - delta[:, None])
            dq.addmm_(ds, kv_k, alpha=scale)
            dk = dk.addmm(ds.t(), q, alpha=scale)
            dv = dv.addmm(p.t(), do)
        if step < world - 1:
            kv_k, kv_v, dk, dv = _hop([kv_k, kv_v, dk, dv], to, frm, group, tag=0)
        else:  # the gradients' last hop brings each shard's home; K and V are done with
            dk, dv = _hop([dk, dv], to, frm, group, tag=2)
    return dq, dk, dv
