# drill: flashattention/ring-attention
# variant: every step merges, a shard wholly in the future included (as a zero o with lse = -inf, never computed); the causal mask is a broadcast comparison of global positions on every visible shard, applied with torch.where; NaN-safe merge weights
"""Ring attention: one merge per step, skipped shards merged as an empty (0, -inf) partial."""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def _block(q, k, v, visible):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if visible is not None:
        s = torch.where(visible, s, torch.full_like(s, float("-inf")))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ v, lse


def _empty(q):
    """The partial of a shard no query may see: contributes nothing to the merge."""
    return torch.zeros_like(q), torch.full((q.shape[0],), float("-inf"), dtype=q.dtype, device=q.device)


def _merge(o1, l1, o2, l2):
    lse = torch.logaddexp(l1, l2)
    w1 = torch.nan_to_num(torch.exp(l1 - lse), nan=0.0)  # -inf - -inf: neither part has mass
    w2 = torch.nan_to_num(torch.exp(l2 - lse), nan=0.0)
    return w1[:, None] * o1 + w2[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    n = q.shape[0]
    q_pos = rank * n + torch.arange(n, device=q.device)
    o, lse = _empty(q)
    ck, cv = k, v
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            nk, nv = torch.empty_like(ck), torch.empty_like(cv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, ck, nxt, group),
                                           dist.P2POp(dist.isend, cv, nxt, group),
                                           dist.P2POp(dist.irecv, nk, prv, group),
                                           dist.P2POp(dist.irecv, nv, prv, group)])
        if causal and src > rank:
            ob, lb = _empty(q)  # wholly in the future: nothing to compute
        else:
            visible = None
            if causal:
                k_pos = src * n + torch.arange(n, device=q.device)
                visible = q_pos[:, None] >= k_pos[None, :]
            ob, lb = _block(q, ck, cv, visible)
        o, lse = _merge(o, lse, ob, lb)
        if step < world - 1:
            for r in reqs:
                r.wait()
            ck, cv = nk, nv
    return o, lse
