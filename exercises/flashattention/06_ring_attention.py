# drill: flashattention/ring-attention
"""Ring attention: exact attention over a sequence split across W processes.

Each of the W ranks of a torch.distributed process group holds one contiguous shard
of the sequence: rank r holds rows r*n ... r*n + n - 1 of q, k and v (n = s/W rows,
tensors [n, d]). Queries stay where they are; the K/V shards travel around the ring.
At step t (t = 0 ... W-1) a rank holds the K/V shard that started on rank (r - t) mod W,
attends its queries to it, and merges the partial result into its running (o, lse):

    L = logaddexp(L1, L2)                      # log(e^L1 + e^L2), no overflow
    O = exp(L1 - L) * O1 + exp(L2 - L) * O2    # each weight is at most 1

Meanwhile it sends the shard it holds to rank r+1 and receives the next from rank r-1,
with point-to-point isend/irecv (or dist.batch_isend_irecv): collectives such as
all_gather would put every shard on every rank at once.

Causal: positions are global. A query at global position i sees keys at j <= i, so a
rank sees earlier ranks' shards in full, its own under the usual triangle, and later
ranks' shards not at all: skip those (no compute, but still pass them on).

Example with W = 2 and s = 4: rank 0 holds rows 0-1, rank 1 rows 2-3. Each runs
    o, lse = ring_attention(q_shard, k_shard, v_shard, causal=True)
and gets o [2, d] (its rows of softmax(Q Kᵀ/√d) V) and lse [2] (natural log).

Do the block maths on torch tensors with @ (matmuls): the checks count each rank's
matmul work with torch's FLOP counter to see that a causal rank skips future shards, so
products broadcast and summed, or work handed to NumPy, fail.

Check your work:  drill check 06_ring_attention.py   (it starts W = 2, 3 and 4 ranks itself)
"""

import math

import torch
import torch.distributed as dist


def _global(group, r):
    """Rank r of `group` as a global rank, which is what send/recv expect."""
    return r if group is None else dist.get_global_rank(group, r)


def block_attention(q, k, v, mask=None):
    """softmax(q kᵀ/√d) v over one K/V block -> (o [n, d], lse [n]); mask [n, m], True = visible."""
    # TODO: scores scaled by 1/√d; masked entries become -inf.
    # TODO: lse = logsumexp of each row (torch.logsumexp is stable); o = exp(s - lse) @ v.
    raise NotImplementedError


def merge(o1, lse1, o2, lse2):
    """Attention over the union of two disjoint key sets, from each part's (o, lse)."""
    # TODO: the merged lse, then each part weighted by exp(its lse - merged lse).
    raise NotImplementedError


def ring_attention(q, k, v, group=None, causal=False):
    """This rank's rows of attention over the whole sequence.

    q, k, v  this rank's shards, [n, d] (float64 is fine)
    group    the process group (None: the default group); rank and size come from it
    causal   mask by global position: a query sees keys at or before its own position
    returns  (o [n, d], lse [n]) for this rank's queries; lse in natural log
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)

    kv = torch.stack([k, v])  # [2, n, d]: one message per hop; never receive into k or v themselves
    o = lse = None
    for step in range(world):
        src = (rank - step) % world  # the rank this K/V shard started on
        # TODO: unless this is the last step, post the exchange for the next step now
        #       (isend kv to send_to, irecv into a fresh buffer from recv_from), so it overlaps the compute.
        # TODO: causal: skip a shard from a later rank; mask your own shard with the lower triangle.
        # TODO: attend q to this shard (kv[0], kv[1]) and merge into (o, lse).
        # TODO: wait for the exchange, then make the received buffer the current kv.
        raise NotImplementedError
    return o, lse
