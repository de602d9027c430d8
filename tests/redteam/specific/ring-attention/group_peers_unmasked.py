# drill: flashattention/ring-attention
"""Attack: with causal=False the group's own ranks are used as global peers (rank + 1 instead of
dist.get_global_rank(group, rank + 1)); only the causal path names peers correctly. Slipped past
test_explicit_group, whose group cases were all causal, so the unmasked path never met a group.
Now caught by the "group_plain" case (no mask, group (0, 2, 3) with a gap): the ranks raise or
hang there, failing test_ranks_finish and test_explicit_group.
"""
import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.exp(s - lse[:, None]) @ v
    return torch.nan_to_num(o, nan=0.0), lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    w1 = torch.nan_to_num(torch.exp(lse1 - lse), nan=0.0)
    w2 = torch.nan_to_num(torch.exp(lse2 - lse), nan=0.0)
    return w1[:, None] * o1 + w2[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if causal:
        send_to = _global(group, (rank + 1) % world)
        recv_from = _global(group, (rank - 1) % world)
    else:  # group ranks used as global ranks
        send_to, recv_from = (rank + 1) % world, (rank - 1) % world
    n = q.shape[0]
    skip = True
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to, group),
                                           dist.P2POp(dist.irecv, incoming, recv_from, group)])
        if not (causal and src > rank and skip):
            mask = None
            if causal and src == rank:
                mask = torch.ones(n, n, dtype=torch.bool).tril()
            elif causal and src > rank:
                mask = torch.zeros(n, n, dtype=torch.bool)
            ob, lb = block_attention(q, kv[0], kv[1], mask)
            o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
        if step < world - 1:
            for r in reqs:
                r.wait()
            kv = incoming
    return o, lse
