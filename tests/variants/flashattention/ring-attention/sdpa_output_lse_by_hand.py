# drill: flashattention/ring-attention
# variant: a PyTorch user's block: the output from F.scaled_dot_product_attention (boolean mask on the own shard), the logsumexp beside it from the q @ kᵀ scores; causal ranks count their visible shards (rank + 1) and stop computing after them while still forwarding; the running pair merged through a softmax over the stacked two lses
"""Ring attention with torch's fused attention for each block."""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _block(q, k, v, scale, mask=None):
    s = (q @ k.T) * scale
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, scale=scale)[0]
    return o, torch.logsumexp(s, dim=-1)


def _merge(o1, l1, o2, l2):
    lse = torch.stack([l1, l2])  # [2, n]; both finite here (every row sees its own key first)
    w = torch.softmax(lse, dim=0)
    return w[0, :, None] * o1 + w[1, :, None] * o2, torch.logsumexp(lse, dim=0)


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to = (rank + 1) % world if group is None else dist.get_global_rank(group, (rank + 1) % world)
    frm = (rank - 1) % world if group is None else dist.get_global_rank(group, (rank - 1) % world)
    scale = 1.0 / math.sqrt(q.shape[-1])
    visible = rank + 1 if causal else world  # shards rank, rank-1, ..., 0 arrive in that order
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        pending = None
        if step < world - 1:
            nxt = torch.empty_like(kv)
            pending = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, to, group),
                                              dist.P2POp(dist.irecv, nxt, frm, group)])
        if step < visible:
            mask = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril() if causal and step == 0 else None
            o_b, l_b = _block(q, kv[0], kv[1], scale, mask)
            o, lse = (o_b, l_b) if o is None else _merge(o, lse, o_b, l_b)
        if pending:
            for req in pending:
                req.wait()
            kv = nxt
    return o, lse
