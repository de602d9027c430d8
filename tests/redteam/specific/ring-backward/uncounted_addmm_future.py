# drill: flashattention/ring-backward
"""Does NOT skip shards from later ranks: with causal=True each future shard's share is computed in
full and masked away with torch.where, but its five products are written as in-place addmm_ into
zeros, which torch's FlopCounterMode does not count (it knows mm, addmm, bmm, baddbmm, not their
in-place forms, mv, dot, addmv, addr, cdist, bilinear, sparse products or CPU attention). The count
then shows an honest skip, and no pointwise result is large.
Slipped past test_skips_future_shards; the ring harness (_ring_harness._uncounted_matmul_flops) now
adds the FLOPs of those products to each call's count, so the future-shard checks see the work.
"""
import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def _exchange(buf, send_to, recv_from, group, tag):
    incoming = torch.empty_like(buf)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, buf, send_to, group, tag),
        dist.P2POp(dist.irecv, incoming, recv_from, group, tag),
    ])
    return incoming, requests


def _mm(a, b):
    """a @ b written as an in-place addmm_ into zeros: the same product, which torch's FLOP counter misses."""
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype).addmm_(a, b)


def block_backward(q, k, v, do, lse, delta, mask=None, mm=torch.mm):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = mm(q, k.T) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse[:, None])
    dv = mm(p.T, do)
    ds = p * (mm(do, v.T) - delta[:, None])
    if mask is not None:
        ds = torch.where(mask, ds, torch.zeros_like(ds))
    return mm(ds, k) * scale, mm(ds.T, q) * scale, dv


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    n = q.shape[0]
    delta = (do * o).sum(dim=-1)
    dq = torch.zeros_like(q)
    buf = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming, requests = _exchange(buf[:2].contiguous(), send_to, recv_from, group, tag=0)
        mask = None
        if causal:
            mask = (src * n + torch.arange(n)[None, :]) <= (rank * n + torch.arange(n)[:, None])
        # a future shard is computed in full too, with the uncounted product, and masked away
        mm = _mm if causal and src > rank else torch.mm
        dq_blk, dk_blk, dv_blk = block_backward(q, buf[0], buf[1], do, lse, delta, mask, mm)
        dq += dq_blk
        buf = torch.stack([buf[0], buf[1], buf[2] + dk_blk, buf[3] + dv_blk])
        grads, grad_requests = _exchange(buf[2:].contiguous(), send_to, recv_from, group, tag=1)
        for request in (requests if step < world - 1 else []) + grad_requests:
            request.wait()
        buf = torch.cat([incoming, grads]) if step < world - 1 else torch.cat([buf[:2], grads])
    return dq, buf[2], buf[3]
