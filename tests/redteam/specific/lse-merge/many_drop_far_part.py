# drill: flashattention/lse-merge
"""Attack: the planted drop-far-part bug moved into merge_many's path for 3 or more parts: a part
whose L lies more than 12 below the row's largest is given weight 0. merge_partials is exact, and
merge_many folds with it for 1 or 2 parts. Slipped past, before the checks were changed, every
check: the far parts with a large O (gaps 12.5 to 30) went to merge_many as 2 parts only, and
the many-part checks merge random attention splits whose L differ by a few units. Now caught by
test_extreme_lse, which also merges those rows as 3 parts."""

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


def merge_many(parts):
    if len(parts) < 3:
        O, L = parts[0]
        for Ok, Lk in parts[1:]:
            O, L = merge_partials(O, L, Ok, Lk)
        return O, L
    Ls = np.stack([L for _, L in parts])
    Os = np.stack([O for O, _ in parts])
    m = Ls.max(axis=0)
    shift = np.where(m == -np.inf, 0.0, m)
    gap = shift - np.where(np.isneginf(Ls), shift, Ls)
    w = np.where(gap > 12.0, 0.0, np.exp(Ls - shift))  # parts 12 below the top: dropped
    tot = w.sum(axis=0)
    seen = tot > 0
    ts = np.where(seen, tot, 1.0)
    O = np.einsum("kn,knd->nd", w, Os) / ts[:, None]
    return O, np.where(seen, shift + np.log(ts), -np.inf)
