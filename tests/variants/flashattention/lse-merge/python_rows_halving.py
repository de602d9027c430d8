# drill: flashattention/lse-merge
# variant: an explicit Python loop over rows with math.exp/math.log1p, -inf rows handled by hand; merge_many splits the list in halves recursively
"""LSE merge row by row, the way one would write it on paper."""

import math

import numpy as np


def _row(o1, l1, o2, l2):
    if l1 == -math.inf and l2 == -math.inf:
        return np.zeros_like(o1, dtype=float), -math.inf
    if l1 < l2:                                   # make part 1 the larger one
        o1, l1, o2, l2 = o2, l2, o1, l1
    if l2 == -math.inf:
        return np.array(o1, dtype=float), float(l1)
    r = math.exp(l2 - l1)                         # in (0, 1]
    o = (o1 + r * o2) / (1.0 + r)
    return o, l1 + math.log1p(r)


def merge_partials(O1, L1, O2, L2):
    n = len(L1)
    O = np.empty(np.shape(O1))
    L = np.empty(n)
    for i in range(n):
        O[i], L[i] = _row(O1[i], float(L1[i]), O2[i], float(L2[i]))
    return O, L


def merge_many(parts):
    if len(parts) == 1:
        return parts[0]
    half = len(parts) // 2
    Oa, La = merge_many(parts[:half])
    Ob, Lb = merge_many(parts[half:])
    return merge_partials(Oa, La, Ob, Lb)
