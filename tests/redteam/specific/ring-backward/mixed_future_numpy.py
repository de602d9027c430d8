# drill: flashattention/ring-backward
"""Attack: does not skip future shards in the causal case. Past shards go through torch's @, so
the FLOP count sees ordinary work and the ratio looks like a skip; each future shard is computed
in full in NumPy and masked with np.where after the products (the NaN planted in the last
shard's V never reaches the gradients). Slipped past test_skips_future_shards, which counted
matmul FLOPs only and failed a rank only when none were counted; now caught by
_ring_runs._check_work_is_matmuls, which fails tensors handed to NumPy during the call.
"""
import numpy as np
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


def block_backward(q, k, v, do, lse, delta, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.T) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse[:, None])
    dv = p.T @ do
    ds = p * (do @ v.T - delta[:, None])
    if mask is not None:
        ds = torch.where(mask, ds, torch.zeros_like(ds))
    return (ds @ k) * scale, (ds.T @ q) * scale, dv


def numpy_block(q, k, v, do, lse, delta, mask):
    qn, kn, vn, don, ln, dn, keep = (t.numpy() for t in (q, k, v, do, lse, delta, mask))
    scale = 1.0 / math.sqrt(qn.shape[-1])
    with np.errstate(all="ignore"):
        s = (qn @ kn.T) * scale
        p = np.where(keep, np.exp(np.where(keep, s, 0.0) - ln[:, None]), 0.0)
        ds = np.where(keep, p * (don @ vn.T - dn[:, None]), 0.0)
        out = ((ds @ kn) * scale, (ds.T @ qn) * scale, p.T @ don)
    return tuple(torch.from_numpy(x) for x in out)


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
        mask = (src * n + torch.arange(n)[None, :]) <= (rank * n + torch.arange(n)[:, None]) if causal else None
        if causal and src > rank:
            dq_blk, dk_blk, dv_blk = numpy_block(q, buf[0], buf[1], do, lse, delta, mask)
        else:
            dq_blk, dk_blk, dv_blk = block_backward(q, buf[0], buf[1], do, lse, delta, mask)
        dq += dq_blk
        buf = torch.stack([buf[0], buf[1], buf[2] + dk_blk, buf[3] + dv_blk])
        grads, grad_requests = _exchange(buf[2:].contiguous(), send_to, recv_from, group, tag=1)
        for request in (requests if step < world - 1 else []) + grad_requests:
            request.wait()
        buf = torch.cat([incoming, grads]) if step < world - 1 else torch.cat([buf[:2], grads])
    return dq, buf[2], buf[3]
