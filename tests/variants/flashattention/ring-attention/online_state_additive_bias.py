# drill: flashattention/ring-attention
# variant: unnormalised online-softmax state (running max, sum, accumulator) rescaled on every step, a skipped future shard included (block max -inf); the causal mask an additive 0/-inf float bias from a broadcast comparison of global positions, added on every visible shard; blocking send/recv by rank parity
"""Ring attention: a running (m, l, acc) state updated once per hop, masks as additive biases."""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    n, d = q.shape
    scale = 1.0 / math.sqrt(d)
    q_pos = (rank * n + torch.arange(n, device=q.device)).to(q.dtype)
    m = torch.full((n,), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros(n, dtype=q.dtype, device=q.device)
    acc = torch.zeros_like(q)
    kv = torch.cat([k, v])  # [2n, d]: one message per hop
    for step in range(world):
        src = (rank - step) % world
        if causal and src > rank:
            m_blk = torch.full_like(m, float("-inf"))  # nothing visible: the state only keeps its scale
            m_new = torch.maximum(m, m_blk)
            alpha = torch.exp(m - m_new)
            l = l * alpha
            acc = acc * alpha[:, None]
            m = m_new
        else:
            s = (q @ kv[:n].T) * scale
            if causal:
                k_pos = (src * n + torch.arange(n, device=q.device)).to(q.dtype)
                bias = torch.where(k_pos[None, :] <= q_pos[:, None], 0.0, float("-inf")).to(q.dtype)
                s = s + bias
            m_new = torch.maximum(m, s.amax(dim=1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[:, None])
            l = l * alpha + p.sum(dim=1)
            acc = acc * alpha[:, None] + p @ kv[n:]
            m = m_new
        if step < world - 1:
            incoming = torch.empty_like(kv)
            if rank % 2 == 0:
                dist.send(kv, nxt, group=group)
                dist.recv(incoming, prv, group=group)
            else:
                dist.recv(incoming, prv, group=group)
                dist.send(kv, nxt, group=group)
            kv = incoming
    return acc / l[:, None], m + torch.log(l)
