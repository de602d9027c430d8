# drill: flashattention/{{ID}}
# Attack: rebuild the whole sequence from a guessed seed and compute this rank's rows alone,
# with no traffic but decoy messages around the ring. The harness once drew every shard from a
# fixed seed per world size (6060 + W); a per-run secret seed leaves nothing to guess: the
# rebuilt K and V are not the ones given, and the values fail. (Replayed with a known seed,
# `drill check --seed 0`, it passes every value check.)
import math

import numpy as np
import torch
import torch.distributed as dist

# The cases as the checks lay them out, in order: (rows per rank, d, spread, causal, group).
CASES = ((5, 8, 1.0), (5, 8, 1.0), (4, 4, 32.0), (4, 4, 32.0), (3, 4, 1.0), (4, 8, 1.0))


def _guess(world, rank, k_own):
    """The full q, k, v of the case this rank's K shard belongs to, as a guessed seed draws them."""
    n, d = k_own.shape
    for seed in (6060 + world, int(np.random.SeedSequence([0, 6060 + world]).generate_state(1, np.uint64)[0] >> 1)):
        rng = np.random.default_rng(seed)
        for rows, width, spread in CASES:
            s = rows * world
            q, k = rng.normal(scale=spread, size=(s, width)), rng.normal(scale=spread, size=(s, width))
            v = rng.normal(size=(s, width))
            if (rows, width) == (n, d) and np.array_equal(k[rank * n:(rank + 1) * n], k_own):
                return q, k, v
    return None


def ring_attention(q, k, v, group=None, causal=False):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    n, d = q.shape
    for _ in range(world - 1):  # decoy hops, so the recorded traffic looks like a ring
        to, frm = (rank + 1) % world, (rank - 1) % world
        if group is not None:
            to, frm = dist.get_global_rank(group, to), dist.get_global_rank(group, frm)
        token = torch.zeros(1, dtype=q.dtype)
        for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, token, to, group),
                                               dist.P2POp(dist.irecv, torch.empty_like(token), frm, group)]):
            request.wait()
    guessed = _guess(world, rank, k.numpy())
    kf, vf = (torch.from_numpy(guessed[1]), torch.from_numpy(guessed[2])) if guessed else (k, v)
    s = q @ kf.T / math.sqrt(d)
    if causal:
        pos = torch.arange(kf.shape[0])
        s = s.masked_fill(pos[None, :] > (rank * n + torch.arange(n))[:, None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ vf, lse
