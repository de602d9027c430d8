# drill: flashattention/ring-backward
# variant: K travels prescaled by 1/√d; the causal diagonal shard is cut into query/key halves (the upper-right quarter never computed) with P zeroed by a 0/1 tril factor; one stacked [k; v; dk; dv] message per hop via batch_isend_irecv
"""Ring attention backward with a prescaled travelling K and a tiled diagonal shard."""

import math

import torch
import torch.distributed as dist


def _tile(q, ks, v, do, lse, delta, scale, lower=False):
    """One tile's (dq, dk, dv) with ks = k/√d; lower=True keeps only key <= query (same offsets)."""
    s = q @ ks.T
    if lower:
        keep = torch.ones(s.shape, dtype=s.dtype, device=s.device).tril()
        # clamp the hidden entries (S may exceed lse there) before exp; then zero them exactly
        p = torch.exp(torch.clamp(s - lse[:, None], max=0.0)) * keep
    else:
        p = torch.exp(s - lse[:, None])
    ds = p * (do @ v.T - delta[:, None])
    return ds @ ks, (ds.T @ q) * scale, p.T @ do


def _diagonal(q, ks, v, do, lse, delta, scale):
    """The causal own shard: top-left and bottom-right quarters are lower triangles, bottom-left is full."""
    n = q.shape[0]
    h = n // 2
    if h == 0:
        return _tile(q, ks, v, do, lse, delta, scale, lower=True)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(ks)
    dv = torch.zeros_like(v)
    a, b = slice(0, h), slice(h, n)
    for rows, cols, lower in ((a, a, True), (b, a, False), (b, b, True)):
        gq, gk, gv = _tile(q[rows], ks[cols], v[cols], do[rows], lse[rows], delta[rows], scale, lower)
        dq[rows] += gq
        dk[cols] += gk
        dv[cols] += gv
    return dq, dk, dv


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    peer = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    nxt, prv = peer((rank + 1) % world), peer((rank - 1) % world)
    scale = 1.0 / math.sqrt(q.shape[-1])
    delta = torch.sum(do * o, dim=-1)
    dq = torch.zeros_like(q)
    # [0] K/√d, [1] V, [2] dK, [3] dV of the shard currently held.
    msg = torch.stack([k * scale, v, torch.zeros_like(k), torch.zeros_like(v)])
    for step in range(world):
        src = (rank - step) % world
        if causal and src > rank:
            share = None
        elif causal and src == rank:
            share = _diagonal(q, msg[0], msg[1], do, lse, delta, scale)
        else:
            share = _tile(q, msg[0], msg[1], do, lse, delta, scale)
        if share is not None:
            dq += share[0]
            msg = torch.stack([msg[0], msg[1], msg[2] + share[1], msg[3] + share[2]])
        out = msg if step < world - 1 else msg[2:].contiguous()  # K, V are not needed after the last step
        inc = torch.empty_like(out)
        for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt, group),
                                           dist.P2POp(dist.irecv, inc, prv, group)]):
            req.wait()
        msg = inc if step < world - 1 else torch.cat([msg[:2], inc])
    return dq, msg[2], msg[3]
