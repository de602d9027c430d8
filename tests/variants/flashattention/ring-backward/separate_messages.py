# drill: flashattention/ring-backward
# variant: K, V, dK and dV each travel as their own isend/irecv pair with its own tag; dK/dV hop after the K/V hop
"""Ring attention backward with one message per tensor and plain isend/irecv."""

import math

import torch
import torch.distributed as dist


def _hop(tensors, to, frm, group, tags):
    """Send each tensor on and receive the neighbour's, one tagged isend/irecv pair per tensor."""
    received = [torch.empty_like(t) for t in tensors]
    pending = []
    for t, r, tag in zip(tensors, received, tags):
        pending.append(dist.isend(t.contiguous(), to, group=group, tag=tag))
        pending.append(dist.irecv(r, frm, group=group, tag=tag))
    for req in pending:
        req.wait()
    return received


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    me, world = dist.get_rank(group), dist.get_world_size(group)
    peer = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    to, frm = peer((me + 1) % world), peer((me - 1) % world)
    scale = 1.0 / math.sqrt(q.shape[-1])
    n = q.shape[0]
    rowterm = torch.einsum("id,id->i", do, o)  # D_i, never leaves this rank
    dq = torch.zeros_like(q)
    kv = [k, v]
    grads = [torch.zeros_like(k), torch.zeros_like(v)]
    for step in range(world):
        owner = (me - step) % world
        if not (causal and owner > me):
            kk, vv = kv
            s = torch.einsum("id,jd->ij", q, kk) * scale
            if causal and owner == me:
                s = torch.where(torch.ones(n, n, dtype=torch.bool).tril(), s, torch.full_like(s, float("-inf")))
            p = torch.exp(s - lse.unsqueeze(1))
            ds = p * (torch.einsum("id,jd->ij", do, vv) - rowterm.unsqueeze(1))
            dq = dq + torch.einsum("ij,jd->id", ds, kk) * scale
            grads = [grads[0] + torch.einsum("ij,id->jd", ds, q) * scale,
                     grads[1] + torch.einsum("ij,id->jd", p, do)]
        if step < world - 1:
            kv = _hop(kv, to, frm, group, tags=(10, 11))
        grads = _hop(grads, to, frm, group, tags=(20, 21))
    return dq, grads[0], grads[1]
