# drill: flashattention/ring-backward
# variant: each shard's share comes from torch.autograd.grad of a surrogate loss sum(dO∘PV) - sum(D∘P) with P = exp(S - lse) and lse held fixed; K|V and dK|dV travel as two [n, 2d] messages, isend then blocking recv
"""Ring attention backward where autograd does the per-shard calculus.

With the row's lse held constant, P = exp(S - lse) depends on S entrywise (dP/dS = P), so
the gradient of  f = Σ dO ∘ (P V) - Σ_i D_i Σ_j P_ij  with respect to S is P ∘ (dO Vᵀ - D) = dS:
autograd through the forward matmuls gives exactly dQ, dK and dV of that shard.
"""

import math

import torch
import torch.distributed as dist


def _share(q, k, v, do, lse, delta, mask):
    """(dq, dk, dv) of one visiting shard, by differentiating the surrogate loss."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    with torch.enable_grad():
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        s = (qg @ kg.T) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.exp(s - lse.detach()[:, None])
        out = p @ vg
        f = (do.detach() * out).sum() - (delta.detach()[:, None] * p).sum()
        dq, dk, dv = torch.autograd.grad(f, (qg, kg, vg))
    return dq, dk, dv


def _hop(messages, to, frm, group):
    """Send each message on (non-blocking), then receive the neighbour's, in the same order."""
    sends = [dist.isend(m.contiguous(), to, group=group, tag=tag) for tag, m in enumerate(messages, start=1)]
    got = []
    for tag, m in enumerate(messages, start=1):
        buf = torch.empty_like(m)
        dist.recv(buf, frm, group=group, tag=tag)
        got.append(buf)
    for s in sends:
        s.wait()
    return got


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    glob = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    to, frm = glob((rank + 1) % world), glob((rank - 1) % world)
    n, d = q.shape
    delta = (do * o).sum(-1)
    dq = torch.zeros_like(q)
    kv = torch.cat([k, v], dim=1)  # [n, 2d]: K in the first d columns, V in the rest
    grads = torch.zeros_like(kv)  # [n, 2d]: dK | dV of the shard now held
    diag = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal else None
    for step in range(world):
        src = (rank - step) % world
        if not causal or src < rank:
            gq, gk, gv = _share(q, kv[:, :d], kv[:, d:], do, lse, delta, None)
        elif src == rank:
            gq, gk, gv = _share(q, kv[:, :d], kv[:, d:], do, lse, delta, diag)
        else:
            gq = None  # the whole shard lies after this rank's queries
        if gq is not None:
            dq = dq + gq
            grads = grads + torch.cat([gk, gv], dim=1)
        if step < world - 1:
            kv, grads = _hop([kv, grads], to, frm, group)
        else:
            (grads,) = _hop([grads], to, frm, group)  # the last hop brings each shard's gradients home
    return dq, grads[:, :d].contiguous(), grads[:, d:].contiguous()
