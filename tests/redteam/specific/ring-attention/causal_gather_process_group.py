# drill: flashattention/ring-attention
"""Attack: an honest ring without the mask; with causal=True every K/V shard is all-gathered
through the C++ process-group object (which no Python wrapper records) while the real K/V
buffer still goes round the ring, so the point-to-point record, the neighbours and the bytes
sent look like ring attention. The rank then computes from its list of every shard, skipping
future ones: values, FLOPs and pointwise work are all right, and each rank holds all W shards.
Slipped past test_memory_per_rank: its only case was unmasked, so a rank could gather whenever
causal was set (12 had the same gap, closed by its causal memory case). A causal memory case
(rings of 4 and 8, shards of 2 MiB) now counts in each rank's peak.
"""
import math

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


def _peer(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def _attend(q, k, v, mask=None):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ v, lse


def _merge(o, lse, ob, lb):
    if o is None:
        return ob, lb
    new = torch.logaddexp(lse, lb)
    return torch.exp(lse - new)[:, None] * o + torch.exp(lb - new)[:, None] * ob, new


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to, frm = _peer(group, (rank + 1) % world), _peer(group, (rank - 1) % world)
    n = q.shape[0]
    shards = None
    if causal:
        pg = c10d._get_default_group() if group is None else group
        ks = [torch.empty_like(k) for _ in range(world)]
        vs = [torch.empty_like(v) for _ in range(world)]
        pg.allgather([ks], [k.contiguous()]).wait()
        pg.allgather([vs], [v.contiguous()]).wait()
        shards = list(zip(ks, vs))
    kv = torch.stack([k, v])
    o = lse = None
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming = torch.empty_like(kv)
            requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, to, group),
                                               dist.P2POp(dist.irecv, incoming, frm, group)])
        if not (causal and src > rank):
            ks_, vs_ = shards[src] if shards is not None else (kv[0], kv[1])
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
            o, lse = _merge(o, lse, *_attend(q, ks_, vs_, mask))
        if step < world - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return o, lse
