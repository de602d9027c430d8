# drill: flashattention/ring-attention
# variant: FlashAttention-style state (running max, sum, unnormalised output) preallocated and updated in place (mul_/add_/copy_), each K/V shard visited in query tiles of 2 rows with torch.matmul; K and V as two P2POps in one batch_isend_irecv
"""Ring attention with an in-place online-softmax state and query tiles inside each shard."""

import math

import torch
import torch.distributed as dist

Q_TILE = 2


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    s = torch.matmul(q, k.transpose(0, 1)) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = torch.where(mask, s, torch.full_like(s, float("-inf")))
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v), lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return torch.exp(lse1 - lse).unsqueeze(-1) * o1 + torch.exp(lse2 - lse).unsqueeze(-1) * o2, lse


def _absorb(acc, m, l, q, k, v, causal_diag):
    """Fold one K/V shard into the state, Q_TILE query rows at a time."""
    n, scale = q.shape[0], 1.0 / math.sqrt(q.shape[-1])
    for a in range(0, n, Q_TILE):
        b = min(a + Q_TILE, n)
        s = torch.matmul(q[a:b], k.T) * scale
        if causal_diag:
            rows = torch.arange(a, b).unsqueeze(1)
            s = s.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > rows, float("-inf"))
        m_new = torch.maximum(m[a:b], s.max(dim=1).values)     # finite: each row sees >= 1 key here
        alpha = torch.exp(m[a:b] - m_new)                       # m = -inf at first: alpha = 0
        p = torch.exp(s - m_new.unsqueeze(1))
        l[a:b].mul_(alpha).add_(p.sum(dim=1))
        acc[a:b].mul_(alpha.unsqueeze(1)).add_(torch.matmul(p, v))
        m[a:b].copy_(m_new)


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    dst, src_rank = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    acc = torch.zeros_like(q)
    m = torch.full((q.shape[0],), float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[0], dtype=q.dtype)
    k_cur, v_cur = k, v
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            k_in, v_in = torch.empty_like(k), torch.empty_like(v)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, k_cur.contiguous(), dst, group),
                dist.P2POp(dist.isend, v_cur.contiguous(), dst, group),
                dist.P2POp(dist.irecv, k_in, src_rank, group),
                dist.P2POp(dist.irecv, v_in, src_rank, group),
            ])
        if not (causal and src > rank):
            _absorb(acc, m, l, q, k_cur, v_cur, causal and src == rank)
        if step < world - 1:
            for r in reqs:
                r.wait()
            k_cur, v_cur = k_in, v_in
    return acc / l.unsqueeze(1), m + torch.log(l)
