# drill: flashattention/ring-attention
# variant: base-2 running state (max, sum, unnormalised numerator) kept across the ring and normalised once at the end; K and V concatenated into one [2n, d] message posted before the compute
"""Ring attention with FA2-style deferred normalisation in base 2."""

import math

import torch
import torch.distributed as dist

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def ring_attention(q, k, v, group=None, causal=False):
    me, world = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = (me + 1) % world, (me - 1) % world
    if group is not None:
        nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
    n, d = q.shape
    q2 = q * (LOG2E / math.sqrt(d))  # fold 1/√d and the change of base into the queries (a new tensor)

    m2 = torch.full((n,), float("-inf"), dtype=q.dtype, device=q.device)  # running max, base-2 units
    den = torch.zeros(n, dtype=q.dtype, device=q.device)                  # running Σ 2^(t - m2)
    num = torch.zeros_like(q)                                              # running Σ 2^(t - m2) v

    held = torch.cat([k, v], dim=0)  # rows [0, n) are K, [n, 2n) are V
    upper = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    for step in range(world):
        origin = (me - step) % world
        pending = []
        if step + 1 < world:
            nxt_buf = torch.empty_like(held)
            pending = dist.batch_isend_irecv([dist.P2POp(dist.isend, held, nxt, group),
                                              dist.P2POp(dist.irecv, nxt_buf, prv, group)])
        if not (causal and origin > me):
            t = q2 @ held[:n].T
            if causal and origin == me:
                t = t.masked_fill(upper, float("-inf"))
            new_m2 = torch.maximum(m2, t.amax(dim=1))  # finite: every row sees at least one key
            shrink = torch.exp2(m2 - new_m2)            # 0 on the first visited shard (m2 = -inf)
            p = torch.exp2(t - new_m2[:, None])
            den = den * shrink + p.sum(dim=1)
            num = num * shrink[:, None] + p @ held[n:]
            m2 = new_m2
        for req in pending:
            req.wait()
        if pending:
            held = nxt_buf
    o = num / den[:, None]
    lse = (m2 + torch.log2(den)) * LN2
    return o, lse
