# drill: flashattention/ring-backward
"""Attack: ignores the lse it is given and rebuilds it with a forward ring of its own (K goes round
once more, folding each visible shard's scores into a running logsumexp), then runs the honest
ring backward with that lse. The contract rebuilds P from the saved lse; this redoes the forward.
Slipped past every check: the o and lse handed in were always exactly the forward's, so a
recomputed lse gave the same gradients, and the extra product per shard fits the work bounds
(6 of the 2 x 5 allowed unmasked, 6 of the 1.25 x 5 per visible shard when causal). A case whose
o and lse are perturbed (lse + 1, o nudged) now holds every rank to the contract's formulas with
the values given, as 05's test_uses_given_o_and_l does.
"""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    """Rank r of `group` as a global rank, which is what send/recv expect."""
    return r if group is None else dist.get_global_rank(group, r)


def _exchange(buf, send_to, recv_from, group, tag):
    """Post one hop of the ring: send `buf` on, receive the neighbour's into a fresh buffer.

    K/V and gradients are messages of the same shape between the same two ranks: distinct
    tags keep them from being matched the wrong way round."""
    incoming = torch.empty_like(buf)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, buf, send_to, group, tag),
        dist.P2POp(dist.irecv, incoming, recv_from, group, tag),
    ])
    return incoming, requests


def block_backward(q, k, v, do, lse, delta, mask=None):
    """One K/V block's share of the gradients -> (dq [n, d], dk [m, d], dv [m, d]).

    Probabilities are rebuilt from the global row lse, so they are the true softmax entries:
    P = exp(S - lse). Then dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP - D), dQ = dS K/√d, dK = dSᵀ Q/√d.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.T) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse[:, None])
    dv = p.T @ do
    ds = p * (do @ v.T - delta[:, None])
    return (ds @ k) * scale, (ds.T @ q) * scale, dv


def _own_lse(q, k, group, causal, rank, world, send_to, recv_from):
    """The row logsumexp rebuilt by a forward ring of its own: K goes round once and each visible
    shard's scores are folded into a running logsumexp (one [n, n, d] product per shard)."""
    n = q.shape[0]
    scale = 1.0 / math.sqrt(q.shape[-1])
    total = torch.full((n,), float("-inf"), dtype=q.dtype)
    kb = k.contiguous()
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            incoming, requests = _exchange(kb, send_to, recv_from, group, tag=2)
        if not (causal and src > rank):
            s = (q @ kb.T) * scale
            if causal and src == rank:
                s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
            total = torch.logaddexp(total, torch.logsumexp(s, dim=-1))
        if step < world - 1:
            for request in requests:
                request.wait()
            kb = incoming
    return total


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    """Gradients of 06's ring attention for this rank's shards."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    n = q.shape[0]
    lse = _own_lse(q, k, group, causal, rank, world, send_to, recv_from)  # the given lse is never read

    delta = (do * o).sum(dim=-1)  # D = rowsum(dO ∘ O), from this rank's own rows: never travels
    dq = torch.zeros_like(q)
    # The visiting shard and the gradients accumulated for it travel together: [k, v, dk, dv].
    buf = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])
    for step in range(world):
        src = (rank - step) % world  # the rank this shard started on
        # K/V go on to the next rank; they are not needed after the last step.
        if step < world - 1:
            incoming, requests = _exchange(buf[:2].contiguous(), send_to, recv_from, group, tag=0)
        if not (causal and src > rank):  # a shard wholly in the future gets no gradient from here
            mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal and src == rank else None
            dq_blk, dk_blk, dv_blk = block_backward(q, buf[0], buf[1], do, lse, delta, mask)
            dq += dq_blk
            buf = torch.stack([buf[0], buf[1], buf[2] + dk_blk, buf[3] + dv_blk])
        # The gradients hop with their shard: after W hops they are home again.
        grads, grad_requests = _exchange(buf[2:].contiguous(), send_to, recv_from, group, tag=1)
        for request in (requests if step < world - 1 else []) + grad_requests:
            request.wait()
        buf = torch.cat([incoming, grads]) if step < world - 1 else torch.cat([buf[:2], grads])
    return dq, buf[2], buf[3]
