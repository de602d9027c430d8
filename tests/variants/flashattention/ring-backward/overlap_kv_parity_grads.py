# drill: flashattention/ring-backward
# variant: K/V hop posted with isend/irecv before the compute and waited after it (overlap); dK/dV hop by blocking send/recv ordered by group-rank parity; D recomputed per visit; P zeroed with masked_fill after exp
"""Ring attention backward that overlaps the K/V transfer with each step's gradient work."""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_backward(q, k, v, do, lse, delta, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.T * scale - lse[:, None])
    if mask is not None:
        p = p.masked_fill(~mask, 0.0)  # masked scores: probability 0 (any inf from exp is replaced)
    dp = do @ v.T
    ds = p * (dp - delta[:, None])
    return ds @ (k * scale), (ds.T @ q) * scale, p.T @ do


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to, frm = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    n = q.shape[0]
    dq = torch.zeros_like(q)
    k_cur, v_cur = k.contiguous(), v.contiguous()
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for step in range(world):
        src = (rank - step) % world
        pending = []
        if step < world - 1:  # start moving K/V on now; they are only read during this step's work
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            pending = [dist.isend(k_cur, to, group=group, tag=0), dist.isend(v_cur, to, group=group, tag=1),
                       dist.irecv(k_next, frm, group=group, tag=0), dist.irecv(v_next, frm, group=group, tag=1)]
        if not (causal and src > rank):
            delta = (do * o).sum(dim=1)  # this rank's own rows; cheap enough to redo
            mask = torch.tril(torch.ones(n, n, dtype=torch.bool)) if causal and src == rank else None
            a, b, c = block_backward(q, k_cur, v_cur, do, lse, delta, mask)
            dq.add_(a)
            dk, dv = dk + b, dv + c
        grads = torch.cat([dk, dv])
        incoming = torch.empty_like(grads)
        if rank % 2 == 0:
            dist.send(grads, to, group=group, tag=2)
            dist.recv(incoming, frm, group=group, tag=2)
        else:
            dist.recv(incoming, frm, group=group, tag=2)
            dist.send(grads, to, group=group, tag=2)
        dk, dv = incoming[:n], incoming[n:]
        for req in pending:
            req.wait()
        if step < world - 1:
            k_cur, v_cur = k_next, v_next
    return dq, dk, dv
