# drill: flashattention/lse-merge
"""Attack: where the two logsumexps differ by more than 12, the smaller part is dropped (its
share e^-gap treated as 0): with L = (0, -19) and O = (1, 1001), O comes out 1.0, not 1.0000056.
Slipped past, before the checks were changed, every check: parts of random attention splits
differ by a few units of L, and the fixed rows of test_extreme_lse had gaps of 0 to 5 or 2e4
(where the small part is truly 0)."""

from functools import reduce

import numpy as np


def merge_partials(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    both = np.isfinite(L1) & np.isfinite(L2)
    gap = np.abs(np.where(both, L1, 0.0) - np.where(both, L2, 0.0))
    far = gap > 12.0
    w1 = np.where(far & (L1 < L2), 0.0, w1)
    w2 = np.where(far & (L2 < L1), 0.0, w2)
    total = w1 + w2
    seen = total > 0
    ts = np.where(seen, total, 1.0)
    O = (w1[:, None] * O1 + w2[:, None] * O2) / ts[:, None]
    L = np.where(seen, shift + np.log(ts), -np.inf)
    return O, L


def merge_many(parts):
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
