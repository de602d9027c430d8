# drill: flashattention/lse-merge
# variant: early exits that hand back the other part's own arrays when a part is empty on every row, merge_many dropping wholly empty parts from a new list first; the general case shifts by the larger L with np.where and writes L through np.log1p
"""LSE merge with shortcuts for parts that hold no mass at all."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    if np.isneginf(L2).all():
        return O1, L1                 # part 2 holds no keys for any row: nothing to add
    if np.isneginf(L1).all():
        return O2, L2
    hi = np.maximum(L1, L2)
    lo = np.minimum(L1, L2)
    dead = np.isneginf(hi)
    hi_safe = np.where(dead, 0.0, hi)
    r = np.exp(lo - hi_safe)          # e^(lo - hi) in [0, 1]
    first_hi = L1 >= L2
    w1 = np.where(first_hi, 1.0, r) / (1.0 + r)
    w2 = np.where(first_hi, r, 1.0) / (1.0 + r)
    O = np.where(dead[:, None], 0.0, w1[:, None] * O1 + w2[:, None] * O2)
    L = np.where(dead, -np.inf, hi_safe + np.log1p(r))
    return O, L


def merge_many(parts):
    live = [p for p in parts if not np.isneginf(p[1]).all()]
    if not live:
        return parts[0]
    O, L = live[0]
    for Ok, Lk in live[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
