# drill: flashattention/ring-backward
"""Does NOT skip shards from later ranks in the causal case: every visiting shard is computed in
full and masked afterwards (the statement: "Skip a shard from a later rank (no work ...)").
Slipped past test_skips_future_shards, before it failed uncounted work,: its FLOP count comes from torch's FlopCounterMode, which
sees nothing when the block math runs in NumPy (flops = 0, and the check is skipped when the
plain case counted 0), and the NaN planted in the last shard's V is removed by masking dS with
np.where after the product (0 * NaN never reaches dq).
"""

import math

import numpy as np

import torch
import torch.distributed as dist


def _global(group, r):
    """Rank r of `group` as a global rank, which is what send/recv expect."""
    return r if group is None else dist.get_global_rank(group, r)


def _exchange(buf, send_to, recv_from, group, tag):
    """Post one hop of the ring: send `buf` on, receive the neighbour's into a fresh buffer.

    K/V and gradients are messages of the same shape between the same two ranks: distinct
    tags keep them from being matched the wrong way round."""
    incoming = torch.empty_like(buf)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, buf, send_to, group, tag),
        dist.P2POp(dist.irecv, incoming, recv_from, group, tag),
    ])
    return incoming, requests


def block_backward(q, k, v, do, lse, delta, mask=None):
    """One K/V block's share, computed in NumPy (FlopCounterMode sees no torch matmul) and masked
    AFTER the fact with np.where, which also drops the NaN a future shard's V brings in."""
    qn, kn, vn, don, lsen, dn = (t.detach().numpy() for t in (q, k, v, do, lse, delta))
    scale = 1.0 / math.sqrt(qn.shape[-1])
    s = (qn @ kn.T) * scale
    keep = np.ones(s.shape, dtype=bool) if mask is None else mask.numpy()
    with np.errstate(all="ignore"):
        p = np.where(keep, np.exp(np.where(keep, s, 0.0) - lsen[:, None]), 0.0)
        ds = np.where(keep, p * (don @ vn.T - dn[:, None]), 0.0)
        dv = p.T @ don
        dq = (ds @ kn) * scale
        dk = (ds.T @ qn) * scale
    return torch.from_numpy(dq), torch.from_numpy(dk), torch.from_numpy(dv)


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    """Gradients of 06's ring attention for this rank's shards."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    n = q.shape[0]

    delta = (do * o).sum(dim=-1)  # D = rowsum(dO ∘ O), from this rank's own rows: never travels
    dq = torch.zeros_like(q)
    # The visiting shard and the gradients accumulated for it travel together: [k, v, dk, dv].
    buf = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])
    for step in range(world):
        src = (rank - step) % world  # the rank this shard started on
        # K/V go on to the next rank; they are not needed after the last step.
        if step < world - 1:
            incoming, requests = _exchange(buf[:2].contiguous(), send_to, recv_from, group, tag=0)
        if True:  # NO skip: a future shard is computed in full and masked away afterwards
            if causal and src > rank:
                mask = torch.zeros(n, n, dtype=torch.bool)
            else:
                mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal and src == rank else None
            dq_blk, dk_blk, dv_blk = block_backward(q, buf[0], buf[1], do, lse, delta, mask)
            dq += dq_blk
            buf = torch.stack([buf[0], buf[1], buf[2] + dk_blk, buf[3] + dv_blk])
        # The gradients hop with their shard: after W hops they are home again.
        grads, grad_requests = _exchange(buf[2:].contiguous(), send_to, recv_from, group, tag=1)
        for request in (requests if step < world - 1 else []) + grad_requests:
            request.wait()
        buf = torch.cat([incoming, grads]) if step < world - 1 else torch.cat([buf[:2], grads])
    return dq, buf[2], buf[3]
