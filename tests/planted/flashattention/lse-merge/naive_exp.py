# drill: flashattention/lse-merge
# planted: L = log(exp(L1) + exp(L2)) computed directly: overflows for L near 1e4
# expect-fail: |L| up to 1e4 merges without overflow and stays exact
# expect-fail: Both parts -inf give O = 0 and L = -inf, with no NaN and no warning
"""Planted mistake: L = log(exp(L1) + exp(L2)) computed directly: overflows for L near 1e4."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    e1, e2 = np.exp(L1), np.exp(L2)
    L = np.log(e1 + e2)
    O = (e1[:, None] * O1 + e2[:, None] * O2) / np.exp(L)[:, None]
    return O, L


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
