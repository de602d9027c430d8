# drill: flashattention/lse-merge
# variant: the larger part as the reference (weight 1) and the other weighted by e^(L_small - L_big); merge_many folds in a loop
"""LSE merge written around the larger of the two parts."""

import numpy as np


def merge_partials(O1, L1, O2, L2):
    O1, O2 = np.asarray(O1, dtype=np.float64), np.asarray(O2, dtype=np.float64)
    L1, L2 = np.asarray(L1, dtype=np.float64), np.asarray(L2, dtype=np.float64)
    first_big = L1 >= L2
    big = np.where(first_big, L1, L2)
    small = np.where(first_big, L2, L1)
    O_big = np.where(first_big[:, None], O1, O2)
    O_small = np.where(first_big[:, None], O2, O1)
    empty = big == -np.inf  # both parts empty
    with np.errstate(invalid="ignore"):
        ratio = np.where(empty, 0.0, np.exp(small - np.where(empty, 0.0, big)))  # in [0, 1]
    O = (O_big + ratio[:, None] * O_small) / (1.0 + ratio)[:, None]
    O = np.where(empty[:, None], 0.0, O)
    L = np.where(empty, -np.inf, big + np.log1p(ratio))
    return O, L


def merge_many(parts):
    parts = list(parts)
    O, L = parts[0]
    for O_next, L_next in parts[1:]:
        O, L = merge_partials(O, L, O_next, L_next)
    return np.asarray(O, dtype=np.float64), np.asarray(L, dtype=np.float64)
