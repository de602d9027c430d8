# drill: flashattention/ring-backward
# variant: FA-1 order inside a shard (query tiles of 3 rows, dq written by slice), fully masked diagonal tiles skipped, -inf fill on slices; isend + blocking recv, one tensor per message
"""Ring attention backward with the visiting shard processed tile by tile over its queries."""

import math

import torch
import torch.distributed as dist

TILE = 3


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_backward(q, k, v, do, lse, delta, mask=None):
    """Outer loop over query tiles; the K/V block's dk, dv accumulate across the tiles."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for i in range(0, q.shape[0], TILE):
        rows = slice(i, i + TILE)
        keep = None if mask is None else mask[rows]
        if keep is not None and not bool(keep.any()):
            continue  # every key of this tile is in its future
        s = torch.matmul(q[rows], k.transpose(0, 1)) * scale
        if keep is not None:
            s[~keep] = float("-inf")
        p = torch.exp(s - lse[rows, None])
        dv += torch.matmul(p.transpose(0, 1), do[rows])
        ds = p * (torch.matmul(do[rows], v.transpose(0, 1)) - delta[rows, None])
        dq[rows] = torch.matmul(ds, k) * scale
        dk += torch.matmul(ds.transpose(0, 1), q[rows]) * scale
    return dq, dk, dv


def _hop(tensors, to, frm, group, tag):
    """Send each tensor on and receive its successor (isend first, so the blocking recv cannot deadlock)."""
    out = []
    for j, t in enumerate(tensors):
        req = dist.isend(t.contiguous(), to, group=group, tag=tag + j)
        fresh = torch.empty_like(t)
        dist.recv(fresh, frm, group=group, tag=tag + j)
        req.wait()
        out.append(fresh)
    return out


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to, frm = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    delta = (do * o).sum(-1)
    dq = torch.zeros_like(q)
    kk, vv = k, v
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    diag = torch.tril(torch.ones(q.shape[0], k.shape[0], dtype=torch.bool))
    for step in range(world):
        src = (rank - step) % world
        if causal and src > rank:
            pass  # a future shard: no work, but it and its gradients still move on
        else:
            a, b, c = block_backward(q, kk, vv, do, lse, delta, diag if causal and src == rank else None)
            dq += a
            dk, dv = dk + b, dv + c
        dk, dv = _hop([dk, dv], to, frm, group, tag=10)
        if step < world - 1:
            kk, vv = _hop([kk, vv], to, frm, group, tag=0)
    return dq, dk, dv
