# drill: flashattention/ring-attention
"""Attack: causal ring attention that does NOT skip future K/V shards: each one is attended under an
all-False mask and thrown away (nan_to_num clears the NaN of a poisoned V, its lse of -inf weighs
nothing in the merge), so the values are right. The future shard's q kᵀ and p v are broadcast
products summed, in two halves of d: each pointwise result is n·n·d/2 elements.
Slipped past test_skips_future_shards: torch's FLOP counter sees matmuls only, and the largest single
pointwise output stays under the n·n·d that _check_work_is_matmuls fails. Now caught there by the total
of pointwise outputs on the [64, 16] "long_plain"/"long_causal" pair: the halves add up to 2·n·n·d
products per future shard, far beyond the merges and masks an honest causal rank adds.
"""
import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def _by_hand(q, k, v):
    # q k^T and p v in two halves of d: each pointwise result is n x n x d/2, under the n·n·d cap
    n, d = q.shape
    h = d // 2
    s = sum((q[:, None, c:c + h] * k[None, :, c:c + h]).sum(-1) for c in (0, h)) / math.sqrt(d)
    s = s.masked_fill(torch.ones_like(s, dtype=torch.bool), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.nan_to_num(torch.exp(s - lse[:, None]), nan=0.0)
    o = torch.cat([(p[:, :, None] * v[None, :, c:c + h]).sum(1) for c in (0, h)], dim=1)
    return torch.nan_to_num(o, nan=0.0), lse


def block_attention(q, k, v, mask=None):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ v, lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    w1 = torch.nan_to_num(torch.exp(lse1 - lse), nan=0.0)
    w2 = torch.nan_to_num(torch.exp(lse2 - lse), nan=0.0)
    return w1[:, None] * o1 + w2[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    n = q.shape[0]
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to, group),
                                           dist.P2POp(dist.irecv, incoming, recv_from, group)])
        if causal and src > rank:
            ob, lb = _by_hand(q, kv[0], kv[1])  # the future shard, computed anyway
        else:
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
            ob, lb = block_attention(q, kv[0], kv[1], mask)
        o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
        if step < world - 1:
            for r in reqs:
                r.wait()
            kv = incoming
    return o, lse
