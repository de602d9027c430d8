# drill: flashattention/ring-backward
"""Ring attention backward: the gradients of 06's forward, across W processes.

Each of the W ranks of a torch.distributed process group holds one contiguous shard of the
sequence: rank r holds rows r*n ... r*n + n - 1 of q, k, v, the forward's output o, the
incoming gradient do (all [n, d]) and the forward's lse [n] (the logsumexp of each whole
row, as 06's ring_attention returned it). Return this rank's dq, dk and dv, each [n, d].

Because lse already covers the whole row, P = exp(S - lse) rebuilt from one K/V shard is
exactly that shard's slice of the softmax: the gradients of the shards simply add up.

    D  = rowsum(dO ∘ O)                       # per query, from this rank's own o: never travels
    S  = q kᵀ/√d,   P = exp(S - lse)          # one visiting shard at a time
    dV += Pᵀ dO,    dP = dO Vᵀ,   dS = P ∘ (dP - D)
    dQ += dS K/√d,  dK += dSᵀ q/√d

The queries (and dQ) stay put. The K/V shards travel round the ring as in 06, and the dK/dV
collected for a shard travel with it: each rank adds its queries' share and passes K, V, dK,
dV on to rank r+1. After the W-th step one more hop of dK/dV brings every shard's gradients
home. Point-to-point only (isend/irecv or dist.batch_isend_irecv): no collectives.
A rank holds only its own shards and those in flight, whatever W: wait for each hop's sends
before moving on (a request kept keeps its buffer alive), and keep no list of past shards.

Causal: global positions, as in 06. Skip a shard from a later rank (no work, but pass it and
its gradients on); your own shard takes the lower triangle.

Do the block maths on torch tensors with @ (matmuls): the checks count each rank's
matmul work with torch's FLOP counter to see that a causal rank skips future shards, and
that without a mask it is the block maths alone (at most twice the five n×n×d products
above for each shard it visits; with causal, at most 1¼ times them for each shard it does
not skip). Every product counts, in-place (addmm_) and matrix-vector ones too; products
broadcast and summed, or work handed to NumPy, fail.

Check your work:  drill check 12_ring_backward.py   (it starts W = 2, 3 and 4 ranks itself)
"""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    """Rank r of `group` as a global rank, which is what send/recv expect."""
    return r if group is None else dist.get_global_rank(group, r)


def block_backward(q, k, v, do, lse, delta, mask=None):
    """One K/V block's share of the gradients -> (dq [n, d], dk [m, d], dv [m, d]); mask True = visible."""
    # TODO: S = q kᵀ/√d with masked entries -inf; P = exp(S - lse[:, None]) (the row's global lse).
    # TODO: dV = Pᵀ dO; dS = P ∘ (dO Vᵀ - delta[:, None]); dQ = dS K/√d; dK = dSᵀ q/√d.
    raise NotImplementedError


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    """The gradients of this rank's shards.

    q, k, v, o, do  this rank's shards, [n, d] (float64 is fine); lse [n], natural log
    group           the process group (None: the default group); rank and size come from it
    causal          mask by global position, as in 06
    returns         (dq, dk, dv), each [n, d]: dk and dv of this rank's own K/V shard
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    # TODO: delta = rowsum(do ∘ o); dq = zeros; the travelling dk, dv start at zero with your k, v.
    for step in range(world):
        src = (rank - step) % world  # the rank the visiting shard started on
        # TODO: unless src is in the future (causal and src > rank), add this shard's share:
        #       dq += ..., its travelling dk, dv += ... (mask your own shard with the lower triangle).
        # TODO: pass K, V (not needed after the last step) and the travelling dk, dv on to send_to;
        #       receive the next ones from recv_from into fresh buffers, never into the caller's tensors.
        raise NotImplementedError
    # TODO: after W hops the dk, dv you hold are your own shard's.
    raise NotImplementedError
