# drill: flashattention/lse-merge
# planted: the merged L is L1 + L2 (log of a product, not of a sum)
# expect-fail: Two halves of the keys
"""Planted mistake: the merged L is L1 + L2 (log of a product, not of a sum)."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    safe = np.where(total > 0, total, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / safe[:, None]
    return O, L1 + L2


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
