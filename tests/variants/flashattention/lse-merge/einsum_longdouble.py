# drill: flashattention/lse-merge
# variant: weights and sums in np.longdouble, all parts stacked and combined with one einsum, result cast back to float64; merge_partials called by keyword
"""LSE merge with extended-precision accumulation and einsum."""

import numpy as np


def _merge_stack(Os, Ls):
    Ls = np.asarray(Ls, dtype=np.longdouble)          # [k, n]
    Os = np.asarray(Os, dtype=np.longdouble)          # [k, n, d]
    top = Ls.max(axis=0)
    empty = np.isneginf(top)
    ref = np.where(empty, 0.0, top)
    w = np.exp(Ls - ref)                               # [k, n], each <= 1
    total = w.sum(axis=0)
    total[empty] = 1.0
    O = np.einsum("kn,knd->nd", w / total, Os)
    L = ref + np.log(total)
    L[empty] = -np.inf
    return O.astype(np.float64), L.astype(np.float64)


def merge_partials(O1, L1, O2, L2):
    return _merge_stack([O1, O2], [L1, L2])


def merge_many(parts):
    O, L = parts[0]
    for Ok, Lk in parts[1:]:
        O, L = merge_partials(O1=O, L1=L, O2=Ok, L2=Lk)
    return O, L
