# drill: flashattention/ring-backward
"""Attack: honest ring without a mask, but with causal=True it is no ring backward at all: K/V
go round the ring with every rank keeping a copy of each (an all-gather by point-to-point), the
rank then computes its queries' share of every visible shard, holding a dK/dV partial for all W
shards, and those partials are summed by a ring reduce-scatter. Values, neighbours, point-to-point
and the FLOP ratio are all right; each rank's memory grows with W.
Slipped past test_memory_per_rank, before it added a causal case: the only memory case was
unmasked, so a rank could gather every shard whenever causal was set. The causal memory case
(rings of 4 and 8, shards of 2 MiB) now counts in each rank's peak.
"""
import math

import torch
import torch.distributed as dist


def _global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def _exchange(buf, send_to, recv_from, group, tag):
    incoming = torch.empty_like(buf)
    requests = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, buf, send_to, group, tag),
        dist.P2POp(dist.irecv, incoming, recv_from, group, tag),
    ])
    for r in requests:
        r.wait()
    return incoming


def block_backward(q, k, v, do, lse, delta, mask=None):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.T) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse[:, None])
    dv = p.T @ do
    ds = p * (do @ v.T - delta[:, None])
    return (ds @ k) * scale, (ds.T @ q) * scale, dv


def _honest(q, k, v, o, lse, do, rank, world, send_to, recv_from, group):
    delta = (do * o).sum(dim=-1)
    dq = torch.zeros_like(q)
    buf = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])
    for step in range(world):
        dq_blk, dk_blk, dv_blk = block_backward(q, buf[0], buf[1], do, lse, delta)
        dq += dq_blk
        buf = torch.stack([buf[0], buf[1], buf[2] + dk_blk, buf[3] + dv_blk])
        kv = _exchange(buf[:2].contiguous(), send_to, recv_from, group, 0) if step < world - 1 else buf[:2]
        grads = _exchange(buf[2:].contiguous(), send_to, recv_from, group, 1)
        buf = torch.cat([kv, grads])
    return dq, buf[2], buf[3]


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    send_to = _global(group, (rank + 1) % world)
    recv_from = _global(group, (rank - 1) % world)
    if not causal:
        return _honest(q, k, v, o, lse, do, rank, world, send_to, recv_from, group)
    n = q.shape[0]
    delta = (do * o).sum(dim=-1)
    kvs = {rank: torch.stack([k, v])}  # every shard kept: all-gather by ring
    cur = kvs[rank]
    for step in range(1, world):
        cur = _exchange(cur.contiguous(), send_to, recv_from, group, 0)
        kvs[(rank - step) % world] = cur
    dq = torch.zeros_like(q)
    partial = {}
    for src in range(world):
        if src > rank:
            partial[src] = torch.zeros(2, n, q.shape[1], dtype=q.dtype)
            continue
        mask = torch.ones(n, n, dtype=torch.bool).tril() if src == rank else None
        a, b, c = block_backward(q, kvs[src][0], kvs[src][1], do, lse, delta, mask)
        dq += a
        partial[src] = torch.stack([b, c])
    acc = partial[(rank - 1) % world]
    for t in range(world - 1):  # ring reduce-scatter of every shard's dK/dV
        got = _exchange(acc.contiguous(), send_to, recv_from, group, 1)
        acc = got + partial[(rank - 2 - t) % world]
    return dq, acc[0], acc[1]
