# drill: flashattention/lse-merge
"""Attack: merge_partials is right, and so is merge_many for 1 or 2 parts, but with 3 or more
parts merge_many computes log(sum_k e^(L_k)) directly (the form the statement forbids), falling
back to the stable fold only where e^L would overflow. Once e^L is subnormal (L near -740) it
loses digits, in L and in O. Slipped past, before the checks were changed, test_extreme_lse:
its subnormal and near-overflow rows went to merge_many as 2 parts only, while its 3-part
problems had |L| of 1e3 to 1e4 (the fallback). Now caught by test_extreme_lse, which also merges
those rows as 3 parts (a third part halfway between the two)."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / ts[:, None]
    L = np.where(seen, shift + np.log(ts), -np.inf)
    return O, L


def _fold(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L


def merge_many(parts):
    if len(parts) < 3:
        return _fold(parts)
    O_s, L_s = _fold(parts)
    Ls = np.stack([L for _, L in parts])
    Os = np.stack([O for O, _ in parts])
    e = np.exp(np.minimum(Ls, 700.0))  # the forbidden log(sum(exp(L_k))), clipped so it cannot overflow
    tot = e.sum(axis=0)
    ok = (Ls.max(axis=0) < 700.0) & (tot > 0)
    ts = np.where(ok, tot, 1.0)
    O_n = np.einsum("kn,knd->nd", e, Os) / ts[:, None]
    L_n = np.log(ts)
    return np.where(ok[:, None], O_n, O_s), np.where(ok, L_n, L_s)
