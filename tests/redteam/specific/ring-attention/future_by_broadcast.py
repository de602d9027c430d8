# drill: flashattention/ring-attention
"""Attack: does not skip future shards in the causal case. Past shards go through @ as they
should, so the FLOP count sees ordinary work; each future shard is computed in full with its
products broadcast and summed (q[:, None] * k[None], no matmul for torch's FLOP counter to see),
then merged with a logsumexp of -inf so it weighs nothing (the NaN planted in the last shard's V
is cleared by nan_to_num). Slipped past test_skips_future_shards, which counted matmul FLOPs only
and failed a rank only when none were counted; now caught by _ring_runs._check_work_is_matmuls,
which fails a pointwise result as large as a shard's scores times d.
"""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    """Rank r of `group` as a global rank, which is what send/recv expect."""
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    """softmax(q kᵀ/√d) v over one K/V block -> (o [n, d], lse [n]); mask [n, m] True = visible."""
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # stable: subtracts the row max inside
    return torch.exp(s - lse[:, None]) @ v, lse


def broadcast_block(q, k, v):
    """The same block maths with the products broadcast and summed: no matmul for the FLOP counter."""
    s = (q[:, None, :] * k[None, :, :]).sum(-1) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    o = (torch.exp(s - lse[:, None])[:, :, None] * v[None, :, :]).sum(1)
    return torch.nan_to_num(o), lse


def merge(o1, lse1, o2, lse2):
    """Attention over the union of two disjoint key sets, from each part's (o, lse)."""
    lse = torch.logaddexp(lse1, lse2)  # log(e^L1 + e^L2) without overflow
    # Each weight exp(L_i - L) is at most 1: the online-softmax rescale, one level up.
    o = torch.exp(lse1 - lse)[:, None] * o1 + torch.exp(lse2 - lse)[:, None] * o2
    return o, lse


def ring_attention(q, k, v, group=None, causal=False):
    """This rank's rows of softmax(Q Kᵀ/√d) V over the whole sequence, and their logsumexp."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    n = q.shape[0]

    # K and V travel together in one buffer; the caller's tensors are never overwritten.
    kv = torch.stack([k, v])  # [2, n, d]
    o = lse = None
    for step in range(world):
        # After `step` hops the buffer holds the shard that started on rank (rank - step).
        src = (rank - step) % world
        if step < world - 1:
            # Post the transfer for the next step first, so it overlaps this step's compute.
            incoming = torch.empty_like(kv)
            requests = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, send_to, group),
                dist.P2POp(dist.irecv, incoming, recv_from, group),
            ])
        if causal and src > rank:  # computed anyway, by broadcasting, then weighted by nothing
            o_blk, lse_blk = broadcast_block(q, kv[0], kv[1])
            o, lse = merge(o, lse, o_blk, torch.full_like(lse_blk, float("-inf")))
        else:
            mask = None
            if causal and src == rank:
                mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
            o_blk, lse_blk = block_attention(q, kv[0], kv[1], mask)
            o, lse = (o_blk, lse_blk) if o is None else merge(o, lse, o_blk, lse_blk)
        if step < world - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return o, lse
