# drill: flashattention/ring-backward
"""Attack: all-gather every rank's q, k, v and do, run full attention under autograd locally, and
keep this rank's slice of the gradients."""
import math

import torch
import torch.distributed as dist


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    world, me = dist.get_world_size(group), dist.get_rank(group)
    full = []
    for t in (q, k, v, do):
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous(), group=group)
        full.append(torch.cat(parts))
    Q, K, V, dO = (t.clone().requires_grad_(i < 3) for i, t in enumerate(full))
    s = Q @ K.T / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones_like(s, dtype=torch.bool).tril(), float("-inf"))
    out = torch.softmax(s, -1) @ V
    gq, gk, gv = torch.autograd.grad(out, (Q, K, V), dO)
    n = q.shape[0]
    rows = slice(me * n, (me + 1) * n)
    return gq[rows].detach(), gk[rows].detach(), gv[rows].detach()
