# drill: flashattention/ring-attention
# variant: the ring turns the other way (send to rank-1, receive from rank+1, so step t holds rank (r+t)'s shard); scores and weighted sum with torch.einsum; own-shard mask from torch.triu filled with -inf
"""Ring attention with the shards travelling backwards round the ring."""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    s = torch.einsum("id,jd->ij", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.einsum("ij,jd->id", torch.exp(s - lse[:, None]), v)
    return o, lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return torch.exp(lse1 - lse)[:, None] * o1 + torch.exp(lse2 - lse)[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to_prev = _global(group, (rank - 1) % world)
    from_next = _global(group, (rank + 1) % world)
    n = q.shape[0]
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        src = (rank + step) % world            # shards arrive from higher ranks first
        if step + 1 < world:
            nxt = torch.empty_like(kv)
            reqs = [dist.isend(kv, to_prev, group=group), dist.irecv(nxt, from_next, group=group)]
        if not causal or src <= rank:
            mask = None
            if causal and src == rank:
                mask = ~torch.ones(n, n, dtype=torch.bool).triu(1)
            ob, lb = block_attention(q, kv[0], kv[1], mask)
            o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
        if step + 1 < world:
            for r in reqs:
                r.wait()
            kv = nxt
    return o, lse
