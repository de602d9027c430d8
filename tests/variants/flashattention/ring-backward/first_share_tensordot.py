# drill: flashattention/ring-backward
# variant: no zero-initialised accumulators (the own diagonal shard's share starts dq, dk, dv), torch.tensordot / torch.mm products, -inf bias added for the causal diagonal, a small Ring helper class
"""Ring attention backward whose accumulators start from the first (own) shard's share."""

import math

import torch
import torch.distributed as dist


class Ring:
    """Neighbours in the group's ring, named by global rank; one batched exchange per call."""

    def __init__(self, group):
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        glob = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
        self.next, self.prev = glob((self.rank + 1) % self.size), glob((self.rank - 1) % self.size)

    def shift(self, *tensors, tag=0):
        fresh = [torch.empty_like(t) for t in tensors]
        ops = []
        for j, (t, f) in enumerate(zip(tensors, fresh)):
            ops.append(dist.P2POp(dist.isend, t, self.next, self.group, tag + j))
            ops.append(dist.P2POp(dist.irecv, f, self.prev, self.group, tag + j))
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        return fresh


def block_backward(q, k, v, do, lse, delta, mask=None):
    scale = q.shape[-1] ** -0.5
    s = torch.tensordot(q, k, dims=([1], [1])) * scale
    if mask is not None:
        bias = torch.zeros_like(s).masked_fill(~mask, -math.inf)
        s = s + bias
    p = (s - lse[:, None]).exp()
    dv = torch.mm(p.t(), do)
    ds = p * (torch.mm(do, v.t()) - delta[:, None])
    return torch.mm(ds, k) * scale, torch.tensordot(ds, q, dims=([0], [0])) * scale, dv


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    ring = Ring(group)
    n = q.shape[0]
    delta = torch.sum(o * do, dim=1)
    # Step 0 is always this rank's own shard, which every query of the rank sees (its lower triangle if causal).
    own_mask = torch.ones(n, n, dtype=torch.bool).tril() if causal else None
    dq, dk, dv = block_backward(q, k, v, do, lse, delta, own_mask)
    kv = None
    for step in range(1, ring.size + 1):
        if step < ring.size:
            k_in, v_in = ring.shift(*(kv if kv else (k.contiguous(), v.contiguous())), tag=0)
            kv = (k_in, v_in)
        dk, dv = ring.shift(dk, dv, tag=2)  # the gradients follow their shard
        if step == ring.size:
            break
        src = (ring.rank - step) % ring.size
        if causal and src > ring.rank:
            continue
        a, b, c = block_backward(q, kv[0], kv[1], do, lse, delta)
        dq = dq + a
        dk, dv = dk + b, dv + c
    return dq, dk, dv
