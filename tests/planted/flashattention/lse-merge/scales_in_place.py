# drill: flashattention/lse-merge
# planted: O1 and O2 are rescaled in place, changing the caller’s arrays
# expect-fail: The input arrays are not modified
"""Planted mistake: O1 and O2 are rescaled in place, changing the caller’s arrays."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    safe = np.where(seen, total, 1.0)
    O1 *= (w1 / safe)[:, None]
    O2 *= (w2 / safe)[:, None]
    return O1 + O2, np.where(seen, shift + np.log(safe), -np.inf)


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
