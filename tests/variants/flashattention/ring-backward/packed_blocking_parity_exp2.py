# drill: flashattention/ring-backward
# variant: K, V, dK, dV packed into one flat message per hop with blocking send/recv ordered by rank parity; P rebuilt in base 2
"""Ring attention backward with a single packed message per hop and blocking point-to-point."""

import math

import torch
import torch.distributed as dist

LOG2E = 1.0 / math.log(2.0)


def _pass_along(payload, me, world, to, frm, group):
    """Blocking hop round the ring: even ranks send first, odd ranks receive first (no deadlock)."""
    got = torch.empty_like(payload)
    if me % 2 == 0:
        dist.send(payload, to, group=group)
        dist.recv(got, frm, group=group)
    else:
        dist.recv(got, frm, group=group)
        dist.send(payload, to, group=group)
    return got


def _shard_grads(q, kk, vv, do, lse2, rowdot, scale, keep=None):
    """Contribution of one visiting shard: (dq, dk, dv). lse2 is the row lse in base 2."""
    t = (q @ kk.T) * (scale * LOG2E)  # scores in base-2 units
    if keep is not None:
        t = torch.where(keep, t, torch.tensor(float("-inf"), dtype=t.dtype, device=t.device))
    p = torch.exp2(t - lse2[:, None])  # exact softmax entries, since lse covers the whole row
    dp = do @ vv.T
    ds = p * (dp - rowdot[:, None])
    return (ds @ kk) * scale, (ds.T @ q) * scale, p.T @ do


def ring_attention_backward(q, k, v, o, lse, do, group=None, causal=False):
    me, world = dist.get_rank(group), dist.get_world_size(group)
    glob = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    to, frm = glob((me + 1) % world), glob((me - 1) % world)
    n, d = q.shape
    scale = d ** -0.5
    lse2 = lse * LOG2E
    rowdot = (do * o).sum(-1)
    dq = torch.zeros_like(q)

    # Layout of the travelling message: rows [0:n) K, [n:2n) V, [2n:3n) dK, [3n:4n) dV.
    packet = torch.cat([k, v, torch.zeros_like(k), torch.zeros_like(v)], dim=0).contiguous()
    tri = torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device)) if causal else None
    for step in range(world):
        owner = (me - step) % world
        if not causal or owner < me:
            gq, gk, gv = _shard_grads(q, packet[:n], packet[n:2 * n], do, lse2, rowdot, scale)
        elif owner == me:
            gq, gk, gv = _shard_grads(q, packet[:n], packet[n:2 * n], do, lse2, rowdot, scale, keep=tri)
        else:
            gq = None  # the shard lies wholly after our queries
        if gq is not None:
            dq += gq
            packet = torch.cat([packet[:2 * n], packet[2 * n:3 * n] + gk, packet[3 * n:] + gv], dim=0)
        if step < world - 1:
            packet = _pass_along(packet, me, world, to, frm, group)
        else:
            # Last hop: K and V are no longer needed, only the gradients go home.
            packet = _pass_along(packet[2 * n:].contiguous(), me, world, to, frm, group)
    return dq, packet[:n], packet[n:]
