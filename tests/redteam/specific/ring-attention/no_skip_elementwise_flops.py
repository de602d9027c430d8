# drill: flashattention/ring-attention
"""Attack: causal ring attention WITHOUT skipping future shards: every rank attends to every shard
it receives, the ones wholly in its future included, under a global-position mask, and hides the
result with torch.where (a fully masked block gets lse = -inf, and its o, NaN when that shard's V is
NaN, is replaced by 0 before the merge). All arithmetic is elementwise (mul + sum for q kᵀ and p v,
no matmul), so torch's FlopCounterMode counts 0 FLOPs.

Slipped past test_skips_future_shards, before it failed uncounted work,: the NaN in the last shard's V never reaches o (torch.where), and
the FLOP comparison `if plain and causal ... > plain * 1.5 / world` is skipped entirely when the
plain case counts 0 FLOPs (and FlopCounterMode never sees elementwise work anyway). The rank still
does the full, unskipped work the check exists to forbid.
"""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    s = (q[:, None, :] * k[None, :, :]).sum(-1) / math.sqrt(q.shape[1])     # no matmul: 0 FLOPs counted
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.exp(s - safe[:, None])
    o = (p[:, :, None] * v[None, :, :]).sum(1)
    o = torch.where(torch.isfinite(lse)[:, None], o, torch.zeros_like(o))     # hides NaN of a masked-out V
    return o, lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    w1, w2 = torch.exp(lse1 - safe), torch.exp(lse2 - safe)
    o = w1[:, None] * o1 + torch.where(w2[:, None] > 0, w2[:, None] * o2, torch.zeros_like(o2))
    return o, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    n = q.shape[0]
    kv = torch.stack([k, v])
    o = lse = None
    qpos = rank * n + torch.arange(n)
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming = torch.empty_like(kv)
            requests = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, send_to, group),
                dist.P2POp(dist.irecv, incoming, recv_from, group),
            ])
        mask = None
        if causal:                      # every shard computed, the future ones masked away entirely
            kpos = src * n + torch.arange(n)
            mask = kpos[None, :] <= qpos[:, None]
        o_blk, lse_blk = block_attention(q, kv[0], kv[1], mask)
        o, lse = (o_blk, lse_blk) if o is None else merge(o, lse, o_blk, lse_blk)
        if step < world - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return o, lse
