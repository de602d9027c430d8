# drill: flashattention/ring-attention
# variant: K and V sent as two separate blocking messages, even ranks sending first and odd ranks
# receiving first (no deadlock without isend); the merge keeps a running max and sum like 01.
import math

import torch
import torch.distributed as dist


def _peer(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _peer(group, (rank + 1) % world), _peer(group, (rank - 1) % world)
    n = q.shape[0]
    scale = 1.0 / math.sqrt(q.shape[1])
    m = torch.full((n,), -math.inf, dtype=q.dtype)
    l = torch.zeros(n, dtype=q.dtype)
    acc = torch.zeros_like(q)
    k_cur, v_cur = k.clone(), v.clone()
    for step in range(world):
        src = (rank - step) % world
        if not (causal and src > rank):
            s = (q @ k_cur.T) * scale
            if causal and src == rank:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
            m_new = torch.maximum(m, s.max(dim=1).values)
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[:, None])
            l = l * alpha + p.sum(dim=1)
            acc = acc * alpha[:, None] + p @ v_cur
            m = m_new
        if step == world - 1:
            break
        k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
        if rank % 2 == 0:
            dist.send(k_cur, nxt, group)
            dist.send(v_cur, nxt, group)
            dist.recv(k_next, prv, group)
            dist.recv(v_next, prv, group)
        else:
            dist.recv(k_next, prv, group)
            dist.recv(v_next, prv, group)
            dist.send(k_cur, nxt, group)
            dist.send(v_cur, nxt, group)
        k_cur, v_cur = k_next, v_next
    return acc / l[:, None], m + torch.log(l)
