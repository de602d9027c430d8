# drill: flashattention/ring-attention
# planted: gathers every K/V shard with dist.all_gather instead of passing them around the ring
# expect-fail: K/V shards travel by point-to-point
# expect-fail: No rank's peak memory grows
import math

import torch
import torch.distributed as dist


def block_attention(q, k, v, mask=None):
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ v, lse


def merge(o1, lse1, o2, lse2):
    lse = torch.logaddexp(lse1, lse2)
    return torch.exp(lse1 - lse)[:, None] * o1 + torch.exp(lse2 - lse)[:, None] * o2, lse


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    ks = [torch.empty_like(k) for _ in range(world)]
    vs = [torch.empty_like(v) for _ in range(world)]
    dist.all_gather(ks, k, group=group)
    dist.all_gather(vs, v, group=group)
    n = q.shape[0]
    mask = None
    if causal:
        i = torch.arange(n)[:, None] + rank * n
        j = torch.arange(n * world)[None, :]
        mask = j <= i
    return block_attention(q, torch.cat(ks), torch.cat(vs), mask)
