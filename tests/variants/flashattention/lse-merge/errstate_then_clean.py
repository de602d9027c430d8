# drill: flashattention/lse-merge
# variant: the textbook formula computed under np.errstate (the both-empty rows briefly give -inf - -inf = NaN inside), then cleaned with np.where / np.nan_to_num before anything is returned; merge_many with functools.reduce
"""LSE merge the quick NumPy way: compute, then repair the empty rows."""

import functools

import numpy as np


def merge_partials(O1, L1, O2, L2):
    with np.errstate(invalid="ignore"):
        m = np.maximum(L1, L2)
        L = m + np.log1p(np.exp(-np.abs(L1 - L2)))  # NaN where both are -inf
        w1 = np.exp(L1 - L)
        w2 = np.exp(L2 - L)
    empty = np.isneginf(m)
    L = np.where(empty, -np.inf, L)
    w1 = np.nan_to_num(w1, nan=0.0)
    w2 = np.nan_to_num(w2, nan=0.0)
    return w1[:, None] * O1 + w2[:, None] * O2, L


def merge_many(parts):
    return functools.reduce(lambda a, b: merge_partials(*a, *b), parts)
