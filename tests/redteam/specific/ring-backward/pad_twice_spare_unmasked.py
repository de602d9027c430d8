# drill: flashattention/ring-backward
"""Does NOT skip shards from later ranks: with causal=True a rank computes every visiting shard's share,
future ones included, with torch matmuls and masks them away (torch.where on dS), leaving out only the
last rank's shard (the one whose V is NaN). The unmasked call runs one spare block backward per shard
on a zeroed V, exactly twice the least work, which the unmasked bound still allows.
Slipped past test_skips_future_shards: causal work was judged only against the unmasked work
((rank + 1.5) / W of it), and doubling the unmasked side paid for every future shard but the last
one. Now caught by _check_causal_work, which holds each causal rank to 1.25 times the five n x n x d
products for each shard of ranks 0 to rank, counted from the least work, not from the unmasked run.
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
        if causal:  # every shard but the last rank's, the future ones included, computed and masked away
            mask = (src * n + torch.arange(n)[None, :]) <= (rank * n + torch.arange(n)[:, None])
        else:
            mask = None
            block_backward(q, buf[0], torch.zeros_like(buf[1]), do, lse, delta)  # spare: 2x the work
        if not (causal and src == world - 1 and rank < world - 1):
            dq_blk, dk_blk, dv_blk = block_backward(q, buf[0], buf[1], do, lse, delta, mask)
            dq += dq_blk
            buf = torch.stack([buf[0], buf[1], buf[2] + dk_blk, buf[3] + dv_blk])
        grads, grad_requests = _exchange(buf[2:].contiguous(), send_to, recv_from, group, tag=1)
        for request in (requests if step < world - 1 else []) + grad_requests:
            request.wait()
        buf = torch.cat([incoming, grads]) if step < world - 1 else torch.cat([buf[:2], grads])
    return dq, buf[2], buf[3]
