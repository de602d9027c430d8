# drill: flashattention/flash-backward
# variant: base-2 P = exp2(S·log2e - L·log2e); D built block by block in a pre-pass; causal K/V blocks start the Q loop at the first Q block that sees them and mask only blocks crossing the diagonal
"""Backward with recomputation in base 2, K/V blocks outside, with a causal window per K/V block."""

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    offset = sk - sq  # query i sees key j when j <= i + offset

    # D and the base-2 logsumexp, one Q block at a time (O is read once, here only).
    D = np.empty(sq)
    L2 = np.empty(sq)
    for i in range(0, sq, Br):
        D[i:i + Br] = np.sum(dO[i:i + Br] * O[i:i + Br], axis=1)
        Li = L[i:i + Br] * LOG2E
        L2[i:i + Br] = np.where(np.isneginf(Li), np.inf, Li)  # no key seen: P = exp2(-inf) = 0

    dQ = np.zeros((sq, d))
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, d))
    s2 = scale * LOG2E
    for j in range(0, sk, Bc):
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        bc = Kj.shape[0]
        first = 0
        if causal:
            # Row i sees some key of this block iff i >= j - offset: earlier Q blocks are skipped.
            first = max(0, j - offset)
            if first >= sq:
                continue
            first -= first % Br  # keep the Q blocks aligned on multiples of Br
        cols = np.arange(j, j + bc)
        for i in range(first, sq, Br):
            Qi, dOi = Q[i:i + Br], dO[i:i + Br]
            br = Qi.shape[0]
            T = (Qi @ Kj.T) * s2  # scores in base-2 units
            if causal and j + bc - 1 > i + offset:  # the block crosses the diagonal
                rows = np.arange(i, i + br)
                T = np.where(cols[None, :] <= rows[:, None] + offset, T, -np.inf)
            P = np.exp2(T - L2[i:i + br, None])
            dV[j:j + bc] += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i:i + br, None])
            dQ[i:i + br] += scale * (dS @ Kj)
            dK[j:j + bc] += scale * (dS.T @ Qi)
    return dQ, dK, dV
