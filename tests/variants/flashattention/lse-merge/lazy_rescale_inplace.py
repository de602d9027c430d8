# drill: flashattention/lse-merge
# variant: merge_many keeps its own running (max, sum, unnormalised O) buffers updated in place, rescaling only rows whose max grew; merge_partials calls merge_many
"""LSE merge as online softmax over parts, with lazy rescaling."""

import numpy as np


def merge_many(parts):
    n, d = np.shape(parts[0][0])
    m = np.full(n, -np.inf)        # running max of the L_k seen so far
    l = np.zeros(n)                # running sum of e^(L_k - m)
    acc = np.zeros((n, d))         # running sum of e^(L_k - m) O_k
    for Ok, Lk in parts:
        grew = Lk > m
        if grew.any():
            # only rows whose max moved need their buffers rescaled
            scale = np.exp(m[grew] - Lk[grew])   # m may be -inf there: exp(-inf) = 0
            l[grew] *= scale
            acc[grew] *= scale[:, None]
            m[grew] = Lk[grew]
        live = np.isfinite(m) & np.isfinite(Lk)
        w = np.zeros(n)
        w[live] = np.exp(Lk[live] - m[live])
        l += w
        acc += w[:, None] * Ok
    O = np.zeros((n, d))
    L = np.full(n, -np.inf)
    seen = l > 0
    O[seen] = acc[seen] / l[seen, None]
    L[seen] = m[seen] + np.log(l[seen])
    return O, L


def merge_partials(O1, L1, O2, L2):
    return merge_many([(O1, L1), (O2, L2)])
