# drill: flashattention/ring-attention
# variant: two preallocated K/V buffers used in turn (double buffering), K and V as separate
# isend/irecv requests; the block's softmax from torch.softmax and the merge through a stacked
# torch.logsumexp of the running lse and the block's.
import math

import torch
import torch.distributed as dist


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to_global = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    n = q.shape[0]
    buffers = [(k.clone(), v.clone()), (torch.empty_like(k), torch.empty_like(v))]
    o, lse = torch.zeros_like(q), torch.full((n,), -math.inf, dtype=q.dtype)
    for step in range(world):
        cur, nxt = buffers[step % 2], buffers[(step + 1) % 2]
        reqs = []
        if step + 1 < world:
            reqs = [dist.isend(cur[0], to_global((rank + 1) % world), group),
                    dist.isend(cur[1], to_global((rank + 1) % world), group),
                    dist.irecv(nxt[0], to_global((rank - 1) % world), group),
                    dist.irecv(nxt[1], to_global((rank - 1) % world), group)]
        src = (rank - step) % world
        if not (causal and src > rank):
            s = q @ cur[0].T / math.sqrt(q.shape[1])
            if causal and src == rank:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
            block_lse = torch.logsumexp(s, dim=1)
            block_o = torch.softmax(s, dim=1) @ cur[1]
            new = torch.logsumexp(torch.stack([lse, block_lse]), dim=0)
            o = torch.exp(lse - new)[:, None] * o + torch.exp(block_lse - new)[:, None] * block_o
            lse = new
        for r in reqs:
            r.wait()
    return o, lse
