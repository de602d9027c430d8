# drill: flashattention/ring-attention
# planted: sends its own shard straight to every other rank (an all-gather built from isend/irecv)
# expect-fail: Each rank sends to one ring neighbour
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
    mine = torch.stack([k, v])
    bufs = {r: torch.empty_like(mine) for r in range(world) if r != rank}
    ops = [dist.P2POp(dist.isend, mine, r) for r in bufs] + [dist.P2POp(dist.irecv, b, r) for r, b in bufs.items()]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    bufs[rank] = mine
    o = lse = None
    for src in range(world):
        if causal and src > rank:
            continue
        mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
        ob, lb = block_attention(q, bufs[src][0], bufs[src][1], mask)
        o, lse = (ob, lb) if o is None else merge(o, lse, ob, lb)
    return o, lse
