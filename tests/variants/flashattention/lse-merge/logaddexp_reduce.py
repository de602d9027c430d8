# drill: flashattention/lse-merge
# variant: L from np.logaddexp (and its .reduce across all parts in merge_many), each part then weighted by e^(L_k - L) directly, empty rows given a stand-in L of 0
"""LSE merge built on numpy's logaddexp ufunc."""

import numpy as np


def _weighted(Os, Ls, L):
    """Σ_k e^(L_k - L) O_k, with rows whose merged L is -inf left at 0."""
    dead = np.isneginf(L)
    L_ref = np.where(dead, 0.0, L)  # e^(-inf - 0) = 0 for every part of an empty row
    out = np.zeros(np.shape(Os[0]), dtype=float)
    for O_k, L_k in zip(Os, Ls):
        out = out + np.exp(L_k - L_ref)[:, None] * O_k
    return out


def merge_partials(O1, L1, O2, L2):
    L = np.logaddexp(L1, L2)  # stable, and -inf when both are -inf
    return _weighted([O1, O2], [L1, L2], L), L


def merge_many(parts):
    parts = list(parts)
    Ls = [np.asarray(L, dtype=float) for _, L in parts]
    L = np.logaddexp.reduce(np.stack(Ls), axis=0)
    return _weighted([O for O, _ in parts], Ls, L), L
