# drill: flashattention/lse-merge
# planted: no guard when both parts are -inf: -inf - (-inf) gives NaN and a warning
# expect-fail: Both parts -inf give O = 0 and L = -inf, with no NaN and no warning
"""Planted mistake: no guard when both parts are -inf: -inf - (-inf) gives NaN and a warning."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    w1, w2 = np.exp(L1 - m), np.exp(L2 - m)
    total = w1 + w2
    O = (w1[:, None] * O1 + w2[:, None] * O2) / total[:, None]
    return O, m + np.log(total)


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
