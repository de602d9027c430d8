# drill: flashattention/ring-attention
# planted: causal mask built from positions inside the shard, applied to every shard
# expect-fail: Causal: each query sees
import math

import torch
import torch.distributed as dist


def block_attention(q, k, v, mask=None):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ v, lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return torch.exp(lse1 - lse)[:, None] * o1 + torch.exp(lse2 - lse)[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    n = q.shape[0]
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, (rank + 1) % world),
                                           dist.P2POp(dist.irecv, incoming, (rank - 1) % world)])
        mask = torch.ones(n, n, dtype=torch.bool).tril() if causal else None
        ob, lb = block_attention(q, kv[0], kv[1], mask)
        o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
        if step < world - 1:
            for r in reqs:
                r.wait()
            kv = incoming
    return o, lse
