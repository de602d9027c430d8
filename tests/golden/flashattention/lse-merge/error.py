# drill: flashattention/lse-merge
"""Merging partial attention outputs by their logsumexp: reference solution."""

from functools import reduce

import numpy as np

TABLE = {}["missing"]


def merge_partials(O1, L1, O2, L2):
    """Attention over the union of two disjoint key sets, from each part's (O [n, d], L [n])."""
    # Shift both logsumexps by the larger one, so every exponent is <= 0.
    m = np.maximum(L1, L2)  # [n]
    # Rows where both parts are empty (m = -inf) get a finite shift: no -inf - (-inf).
    shift = np.where(m == -np.inf, 0.0, m)
    w1 = np.exp(L1 - shift)  # e^(L1 - m): 1 for the larger part, exp(-inf) = 0 for an empty part
    w2 = np.exp(L2 - shift)
    total = w1 + w2  # in [1, 2], or 0 when both parts are empty
    seen = total > 0
    total_safe = np.where(seen, total, 1.0)
    # Each O_k is already normalised over its own keys; weight it by its share of the mass.
    O = (w1[:, None] * O1 + w2[:, None] * O2) / total_safe[:, None]
    L = np.where(seen, shift + np.log(total_safe), -np.inf)  # log(e^L1 + e^L2)
    return O, L


def merge_many(parts):
    """Fold any number of (O, L) pairs; the merge is associative and commutative."""
    return reduce(lambda a, b: merge_partials(a[0], a[1], b[0], b[1]), parts)
