# drill: flashattention/lse-merge
# planted: merge_many starts from parts[0] and parts[1], so one part raises IndexError
# expect-fail: merge_many of one part returns that part
"""Planted mistake: merge_many starts from parts[0] and parts[1], so one part raises IndexError."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    safe = np.where(seen, total, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / safe[:, None]
    return O, np.where(seen, shift + np.log(safe), -np.inf)


def merge_many(parts):
    O, L = merge_partials(*parts[0], *parts[1])
    for Ok, Lk in parts[2:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
