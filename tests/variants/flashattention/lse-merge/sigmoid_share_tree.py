# drill: flashattention/lse-merge
# variant: part 2's share written as a stable sigmoid of L2 - L1 and O = O1 + share·(O2 - O1), L via log1p; merge_many reduces as a balanced tree
"""LSE merge through the logistic share of the second part."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    L1 = np.asarray(L1, dtype=float)
    L2 = np.asarray(L2, dtype=float)
    empty = np.isneginf(L1) & np.isneginf(L2)
    # Rows where both parts are empty get stand-in values so that no -inf - (-inf) is ever formed.
    a = np.where(empty, 0.0, L1)
    b = np.where(empty, 0.0, L2)
    gap = b - a                       # ±inf when exactly one part is empty
    e = np.exp(-np.abs(gap))          # in [0, 1]: never overflows
    share2 = np.where(gap >= 0, 1.0 / (1.0 + e), e / (1.0 + e))  # sigmoid(L2 - L1) = e^L2 / (e^L1 + e^L2)
    share2 = np.where(empty, 0.0, share2)
    O = O1 + share2[:, None] * (O2 - O1)
    O = np.where(empty[:, None], 0.0, O)
    L = np.where(empty, -np.inf, np.maximum(a, b) + np.log1p(e))
    return O, L


def merge_many(parts):
    level = list(parts)
    while len(level) > 1:
        nxt = [merge_partials(*level[i], *level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    O, L = level[0]
    return O, L
