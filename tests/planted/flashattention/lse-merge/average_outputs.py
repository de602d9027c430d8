# drill: flashattention/lse-merge
# planted: O is the plain mean of O1 and O2, ignoring how much mass each part holds
# expect-fail: Two halves of the keys merge into attention over all of them
# expect-fail: Random splits into 2 to 8 parts, merged pair by pair, give full attention
# expect-fail: merge_many over random splits into 2 to 8 parts gives full attention
# expect-fail: |L| up to 1e4 merges without overflow and stays exact
# expect-fail: A part with L = -inf contributes nothing
# expect-fail: Both parts -inf give O = 0 and L = -inf, with no NaN and no warning
# expect-fail: merge_many gives the same result in any order of the parts
"""Planted mistake: O is the plain mean of O1 and O2, ignoring how much mass each part holds."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    total = np.exp(L1 - shift) + np.exp(L2 - shift)
    safe = np.where(total > 0, total, 1.0)
    return (O1 + O2) / 2, np.where(total > 0, shift + np.log(safe), -np.inf)


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O, L, Ok, Lk)
    return O, L
