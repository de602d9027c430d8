# drill: flashattention/ring-backward
# variant: scores built key-major (Sᵀ = K qᵀ) over query tiles of 2 rows with in-place addmm_ accumulators; one batch_isend_irecv of all messages per step
"""Ring attention backward: transposed (key-major) block math, tiled over queries, one batched hop per step."""

import math

import torch
import torch.distributed as dist

QUERY_TILE = 2


def _accumulate(q, kk, vv, do, lse, delta, dq, dk, dv, scale, diagonal):
    """Add one visiting shard's share into dq (this rank's) and dk, dv (the shard's), tile by tile."""
    n = q.shape[0]
    for a in range(0, n, QUERY_TILE):
        b = min(a + QUERY_TILE, n)
        qi, doi = q[a:b], do[a:b]
        st = (kk @ qi.T) * scale  # [m, tile]: keys down, queries across
        if diagonal:
            keys = torch.arange(kk.shape[0], device=q.device)[:, None]
            queries = torch.arange(a, b, device=q.device)[None, :]
            st = st.masked_fill(keys > queries, float("-inf"))
        pt = torch.exp(st - lse[a:b][None, :])
        dpt = vv @ doi.T  # (dO Vᵀ)ᵀ
        dst = pt * (dpt - delta[a:b][None, :])
        dv.addmm_(pt, doi)
        dk.addmm_(dst, qi, alpha=scale)
        dq[a:b].addmm_(dst.T, kk, alpha=scale)


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    me, world = dist.get_rank(group), dist.get_world_size(group)
    right = me + 1 if me + 1 < world else 0
    left = me - 1 if me > 0 else world - 1
    if group is not None:
        right, left = dist.get_global_rank(group, right), dist.get_global_rank(group, left)
    scale = 1.0 / math.sqrt(q.shape[1])
    delta = torch.einsum("nd,nd->n", o, do)

    dq = torch.zeros_like(q)
    cur_k, cur_v = k, v
    cur_dk, cur_dv = torch.zeros_like(k), torch.zeros_like(v)
    for step in range(world):
        origin = (me - step) % world
        if not causal or origin <= me:
            _accumulate(q, cur_k, cur_v, do, lse, delta, dq, cur_dk, cur_dv, scale,
                        diagonal=causal and origin == me)
        # Tags 0, 1 for K, V and 2, 3 for their gradients; K/V stay behind on the last step.
        tags = (2, 3) if step == world - 1 else (0, 1, 2, 3)
        outgoing = [cur_dk, cur_dv] if step == world - 1 else [cur_k, cur_v, cur_dk, cur_dv]
        incoming = [torch.empty_like(t) for t in outgoing]
        ops = []
        for tag, out, inc in zip(tags, outgoing, incoming):
            ops.append(dist.P2POp(dist.isend, out.contiguous(), right, group, tag))
            ops.append(dist.P2POp(dist.irecv, inc, left, group, tag))
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        if step == world - 1:
            cur_dk, cur_dv = incoming
        else:
            cur_k, cur_v, cur_dk, cur_dv = incoming
    return dq, cur_dk, cur_dv
