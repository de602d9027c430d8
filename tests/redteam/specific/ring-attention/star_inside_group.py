# drill: flashattention/ring-attention
"""Attack: an honest ring on the default group, but inside an explicit process group every member
sends its K/V shard straight to every other member (point-to-point isend/irecv, so no collective is
recorded) and holds all the shards at once before attending to them one by one, future ones skipped.
Slipped past test_ring_neighbours, which looked at the default-group cases only, and the memory
check, which measures the default group alone; now caught by test_ring_neighbours's group pass
(_group_neighbours): a member of a group of 3 or more may send to one group neighbour and receive
from the other only.
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
    return torch.exp(s - lse[:, None]) @ v, lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return torch.exp(lse1 - lse)[:, None] * o1 + torch.exp(lse2 - lse)[:, None] * o2, lse


def _ring(q, k, v, group, causal, rank, world):
    send_to, recv_from = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    n = q.shape[0]
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to, group),
                                           dist.P2POp(dist.irecv, incoming, recv_from, group)])
        if not (causal and src > rank):
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
            ob, lb = block_attention(q, kv[0], kv[1], mask)
            o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
        if step < world - 1:
            for r in reqs:
                r.wait()
            kv = incoming
    return o, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if group is None:
        return _ring(q, k, v, group, causal, rank, world)
    # Inside a group: every member sends its shard straight to every other member (an
    # all-gather by point-to-point messages) and holds all of them at once.
    mine = torch.stack([k, v])
    held = [None] * world
    held[rank] = mine
    ops = []
    for other in range(world):
        if other != rank:
            held[other] = torch.empty_like(mine)
            ops.append(dist.P2POp(dist.isend, mine, _global(group, other), group))
            ops.append(dist.P2POp(dist.irecv, held[other], _global(group, other), group))
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    n = q.shape[0]
    o = lse = None
    for src in range(world):
        if causal and src > rank:
            continue
        mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
        ob, lb = block_attention(q, held[src][0], held[src][1], mask)
        o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
    return o, lse
