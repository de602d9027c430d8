# drill: flashattention/ring-attention
# variant: block maths batched with torch.bmm over a leading batch dim of 1, probabilities from torch.softmax and lse from torch.logsumexp separately; each hop an isend paired with a blocking dist.recv after the compute; the visible-shard steps counted in advance (causal: rank + 1 of them)
"""Ring attention with bmm-shaped blocks and an isend + blocking recv per hop."""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    s = torch.bmm(q[None], k[None].transpose(1, 2))[0] / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -math.inf)
    p = torch.softmax(s, dim=-1)
    return torch.bmm(p[None], v[None])[0], torch.logsumexp(s, dim=-1)


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    w1, w2 = torch.exp(lse1 - lse), torch.exp(lse2 - lse)
    return w1[:, None] * o1 + w2[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    n = q.shape[0]
    visible_steps = rank + 1 if causal else world   # steps 0..rank hold shards rank, rank-1, ..., 0
    kv = torch.stack((k, v))
    o = lse = None
    for step in range(world):
        send = dist.isend(kv, nxt, group=group) if step < world - 1 else None
        if step < visible_steps:
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and step == 0 else None
            ob, lb = block_attention(q, kv[0], kv[1], mask)
            o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
        if send is not None:
            buf = torch.empty_like(kv)
            dist.recv(buf, prv, group=group)
            send.wait()
            kv = buf
    return o, lse
