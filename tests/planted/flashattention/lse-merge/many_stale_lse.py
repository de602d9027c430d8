# drill: flashattention/lse-merge
# planted: merge_many keeps the first part’s L instead of the running merged L
# expect-fail: merge_many over random splits into 2 to 8 parts gives full attention
# expect-fail: |L| up to 1e4 merges without overflow and stays exact
# expect-fail: merge_many gives the same result in any order of the parts
# expect-fail: merge_many equals repeated pairwise merges with merge_partials
"""Planted mistake: merge_many keeps the first part’s L instead of the running merged L."""

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
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, _ = merge_partials(O, L, Ok, Lk)  # L never updated
    return O, L
