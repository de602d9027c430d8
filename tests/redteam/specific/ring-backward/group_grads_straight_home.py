# drill: flashattention/ring-backward
"""Attack: with an explicit process group the dK/dV never travel with their shard. K/V go round
the group's ring, each rank keeps its queries' share for every shard, and at the end it sends each
share straight to the shard's owner (W - 1 sends to as many peers) and sums what it receives. In
the default group it runs the proper ring, so the recorded sends look right there.
Slipped past test_ring_neighbours, before it looked at group cases: it inspected the default
group's cases only, and the group cases were judged on their values alone. It now checks that
each member of a group of three or more sends to one group neighbour and receives from the other.
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
    if group is None:
        if causal:
            return _causal(q, k, v, o, lse, do, rank, world, send_to, recv_from, group)
        return _honest(q, k, v, o, lse, do, rank, world, send_to, recv_from, group)
    n = q.shape[0]
    delta = (do * o).sum(dim=-1)
    dq = torch.zeros_like(q)
    cur = torch.stack([k, v])
    shares = {}
    for step in range(world):
        src = (rank - step) % world
        if not (causal and src > rank):
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal and src == rank else None
            a, b, c = block_backward(q, cur[0], cur[1], do, lse, delta, mask)
            dq += a
            shares[src] = torch.stack([b, c])
        else:
            shares[src] = torch.zeros(2, n, q.shape[1], dtype=q.dtype)
        if step < world - 1:
            cur = _exchange(cur.contiguous(), send_to, recv_from, group, 0)
    ops, inbox = [], []
    for other in range(world):  # no travelling: every share goes straight home
        if other == rank:
            continue
        ops.append(dist.P2POp(dist.isend, shares[other].contiguous(), _global(group, other), group, 2))
        box = torch.empty(2, n, q.shape[1], dtype=q.dtype)
        inbox.append(box)
        ops.append(dist.P2POp(dist.irecv, box, _global(group, other), group, 2))
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    total = shares[rank] + sum(inbox)
    return dq, total[0], total[1]


def _causal(q, k, v, o, lse, do, rank, world, send_to, recv_from, group):
    n = q.shape[0]
    delta = (do * o).sum(dim=-1)
    dq = torch.zeros_like(q)
    buf = torch.stack([k, v, torch.zeros_like(k), torch.zeros_like(v)])
    for step in range(world):
        src = (rank - step) % world
        if src <= rank:
            mask = torch.ones(n, n, dtype=torch.bool).tril() if src == rank else None
            a, b, c = block_backward(q, buf[0], buf[1], do, lse, delta, mask)
            dq += a
            buf = torch.stack([buf[0], buf[1], buf[2] + b, buf[3] + c])
        kv = _exchange(buf[:2].contiguous(), send_to, recv_from, group, 0) if step < world - 1 else buf[:2]
        grads = _exchange(buf[2:].contiguous(), send_to, recv_from, group, 1)
        buf = torch.cat([kv, grads])
    return dq, buf[2], buf[3]
