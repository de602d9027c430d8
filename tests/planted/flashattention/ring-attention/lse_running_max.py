# drill: flashattention/ring-attention
# planted: returns the running max of the scores as lse, not m + log(l)
# expect-fail: Without a mask, every rank's o and lse
import math

import torch
import torch.distributed as dist


def block_attention(q, k, v, mask=None):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.max(dim=-1).values
    p = torch.exp(s - m[:, None])
    l = p.sum(dim=-1)
    return (p @ v) / l[:, None], m, l


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
        if not (causal and src > rank):
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
            ob, mb, lb = block_attention(q, kv[0], kv[1], mask)
            if o is None:
                o, m, l = ob, mb, lb
            else:
                m_new = torch.maximum(m, mb)
                a, b = l * torch.exp(m - m_new), lb * torch.exp(mb - m_new)
                o = (a[:, None] * o + b[:, None] * ob) / (a + b)[:, None]
                m, l = m_new, a + b
        if step < world - 1:
            for r in reqs:
                r.wait()
            kv = incoming
    return o, m
