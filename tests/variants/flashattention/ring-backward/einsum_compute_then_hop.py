# drill: flashattention/ring-backward
# variant: block maths with torch.einsum and a torch.where mask on P; compute first, then one batch_isend_irecv per step carrying a [2, n, d] K|V and a [2, n, d] dK|dV message
"""Ring attention backward written with einsum, hopping only after each step's work."""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_backward(q, k, v, do, lse, delta, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("id,jd->ij", q, k) * scale
    p = torch.exp(s - lse.unsqueeze(1))
    if mask is not None:
        p = torch.where(mask, p, torch.zeros_like(p))  # masked scores give probability 0
    dv = torch.einsum("ij,id->jd", p, do)
    dp = torch.einsum("id,jd->ij", do, v)
    ds = p * (dp - delta.unsqueeze(1))
    dq = torch.einsum("ij,jd->id", ds, k) * scale
    dk = torch.einsum("ij,id->jd", ds, q) * scale
    return dq, dk, dv


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    n = q.shape[0]
    delta = torch.einsum("id,id->i", do, o)
    dq = torch.zeros_like(q)
    kv = torch.stack([k, v])  # a copy: the caller's k, v are never sent from or written
    grads = torch.zeros_like(kv)
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    for step in range(world):
        src = (rank - step) % world
        if not causal or src <= rank:
            d_q, d_k, d_v = block_backward(q, kv[0], kv[1], do, lse, delta, tril if causal and src == rank else None)
            dq += d_q
            grads = grads + torch.stack([d_k, d_v])
        ops = [dist.P2POp(dist.isend, grads, nxt, group, 1)]
        new_grads = torch.empty_like(grads)
        ops.append(dist.P2POp(dist.irecv, new_grads, prv, group, 1))
        if step < world - 1:
            new_kv = torch.empty_like(kv)
            ops += [dist.P2POp(dist.isend, kv, nxt, group, 0), dist.P2POp(dist.irecv, new_kv, prv, group, 0)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        grads = new_grads
        if step < world - 1:
            kv = new_kv
    return dq, grads[0], grads[1]
