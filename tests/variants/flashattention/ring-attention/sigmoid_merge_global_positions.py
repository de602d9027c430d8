# drill: flashattention/ring-attention
# variant: the causal mask built from global positions for every visible shard (not a local triangle), merge written as o1 + sigmoid(L2 - L1)(o2 - o1) with a softplus lse; plain isend/irecv after the compute
"""Ring attention: global-position masks and a sigmoid-form merge of (o, lse)."""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _attend(q, k, v, visible):
    s = (q @ k.T) * (q.shape[1] ** -0.5)
    if visible is not None:
        s = torch.where(visible, s, s.new_tensor(float("-inf")))
    lse = torch.logsumexp(s, dim=1)
    return torch.softmax(s, dim=1) @ v, lse


def _combine(o1, l1, o2, l2):
    # Weight of part 2 in the union is e^L2 / (e^L1 + e^L2) = sigmoid(L2 - L1).
    w2 = torch.sigmoid(l2 - l1)
    o = o1 + w2[:, None] * (o2 - o1)
    hi = torch.maximum(l1, l2)
    lse = hi + F.softplus(-(l1 - l2).abs())  # log(e^L1 + e^L2) = max + log(1 + e^-|L1 - L2|)
    return o, lse


def ring_attention(q, k, v, group=None, causal=False):
    me, world = dist.get_rank(group), dist.get_world_size(group)

    def peer(r):
        r %= world
        return r if group is None else dist.get_global_rank(group, r)

    n = q.shape[0]
    q_pos = me * n + torch.arange(n, device=q.device)
    cur_k, cur_v = k, v
    o = lse = None
    for step in range(world):
        origin = (me - step) % world
        if not causal or origin <= me:  # a shard starting after our last query is never looked at
            visible = None
            if causal:
                k_pos = origin * n + torch.arange(n, device=q.device)
                visible = k_pos[None, :] <= q_pos[:, None]
            ob, lb = _attend(q, cur_k, cur_v, visible)
            if o is None:
                o, lse = ob, lb
            else:
                o, lse = _combine(o, lse, ob, lb)
        if step == world - 1:
            break
        nk, nv = torch.empty_like(cur_k), torch.empty_like(cur_v)
        reqs = [dist.isend(cur_k.contiguous(), peer(me + 1), group=group, tag=1),
                dist.isend(cur_v.contiguous(), peer(me + 1), group=group, tag=2),
                dist.irecv(nk, peer(me - 1), group=group, tag=1),
                dist.irecv(nv, peer(me - 1), group=group, tag=2)]
        for r in reqs:
            r.wait()
        cur_k, cur_v = nk, nv
    return o, lse
