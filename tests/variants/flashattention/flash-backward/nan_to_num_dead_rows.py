# drill: flashattention/flash-backward
# variant: written as a PyTorch user would: P = exp(S - L) computed under a local np.errstate and the NaN of rows with L = -inf (and masked pairs) cleaned with np.nan_to_num, no stand-in for L; np.dot throughout, dQ_i kept local per Q block (Q outside)
"""Backward with NaN cleaned after the fact, as torch.nan_to_num code does.

A row that sees no key has L = -inf and every score -inf: exp(-inf - (-inf)) is NaN, which
np.nan_to_num turns into 0, so the row contributes nothing. The NaN is made under a local
np.errstate, so no warning escapes, and none reaches the result.
"""

import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1 / math.sqrt(d)
    dQ = np.zeros((sq, d))
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, V.shape[1]))
    D = np.sum(dO * O, axis=1)
    for r0 in range(0, sq, Br):
        r1 = min(r0 + Br, sq)
        q, do, lse = Q[r0:r1], dO[r0:r1], L[r0:r1]
        dq = np.zeros((r1 - r0, d))
        for c0 in range(0, sk, Bc):
            c1 = min(c0 + Bc, sk)
            k, v = K[c0:c1], V[c0:c1]
            s = np.dot(q, k.T) * scale
            if causal:
                s[np.arange(c0, c1)[None, :] > np.arange(r0, r1)[:, None] + (sk - sq)] = -np.inf
            with np.errstate(invalid="ignore"):
                p = np.nan_to_num(np.exp(s - lse[:, None]), nan=0.0)
            dV[c0:c1] += np.dot(p.T, do)
            ds = p * (np.dot(do, v.T) - D[r0:r1, None])
            dq += np.dot(ds, k)
            dK[c0:c1] += np.dot(ds.T, q)
        dQ[r0:r1] = dq * scale
    dK *= scale
    return dQ, dK, dV
