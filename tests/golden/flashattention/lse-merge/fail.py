# drill: flashattention/lse-merge
# planted: O1 is weighted by e^(L2 - L) and O2 by e^(L1 - L)
# expect-fail: Two halves of the keys merge into attention over all of them
# expect-fail: Random splits into 2 to 8 parts, merged pair by pair, give full attention
# expect-fail: merge_many over random splits into 2 to 8 parts gives full attention
# expect-fail: |L| up to 1e4 merges without overflow and stays exact
# expect-fail: A part with L = -inf contributes nothing
# expect-fail: Both parts -inf give O = 0 and L = -inf, with no NaN and no warning
# expect-fail: merge_many gives the same result in any order of the parts
"""Planted mistake: O1 is weighted by e^(L2 - L) and O2 by e^(L1 - L)."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    total = w1 + w2
    seen = total > 0
    safe = np.where(seen, total, 1.0)
    O = (w2[:, None] * O1 + w1[:, None] * O2) / safe[:, None]
    return O, np.where(seen, shift + np.log(safe), -np.inf)


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
