# drill: flashattention/lse-merge
# variant: parts turned back into unnormalised sums against one shared max, merge_many merges all parts at once
"""LSE merge through unnormalised numerators and denominators."""

import numpy as np


def _merge(Os, Ls):
    Ls = np.stack([np.asarray(L, dtype=np.float64) for L in Ls])  # [k, n]
    Os = np.stack([np.asarray(O, dtype=np.float64) for O in Os])  # [k, n, d]
    top = Ls.max(axis=0)  # [n]
    ref = np.where(np.isneginf(top), 0.0, top)
    mass = np.exp(Ls - ref)  # [k, n]: e^(L_k - ref), 0 for empty parts
    denom = mass.sum(axis=0)
    numer = (mass[:, :, None] * Os).sum(axis=0)
    has = denom > 0
    O = numer / np.where(has, denom, 1.0)[:, None]
    L = np.full(top.shape, -np.inf)
    L[has] = ref[has] + np.log(denom[has])
    return O, L


def merge_partials(O1, L1, O2, L2):
    return _merge([O1, O2], [L1, L2])


def merge_many(parts):
    parts = list(parts)
    return _merge([p[0] for p in parts], [p[1] for p in parts])
