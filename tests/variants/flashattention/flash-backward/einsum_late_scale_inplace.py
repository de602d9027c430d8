# drill: flashattention/flash-backward
# variant: einsum tiles written straight into dK/dV slices, D filled in per Q block during the first K/V block, dead rows masked explicitly, the scale applied to dQ and dK once at the end (in place)
"""K/V blocks outside, Q blocks inside; the scale of dQ and dK is factored out of the loops."""
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dQ = np.zeros(Q.shape)
    dK = np.zeros(K.shape)
    dV = np.zeros(V.shape)
    D = np.empty(sq)  # filled in lazily, block by block, on the first K/V block
    for j0 in range(0, sk, Bc):
        j1 = min(j0 + Bc, sk)
        Kj, Vj = K[j0:j1], V[j0:j1]
        for i0 in range(0, sq, Br):
            i1 = min(i0 + Br, sq)
            Qi, dOi, Li = Q[i0:i1], dO[i0:i1], L[i0:i1]
            if j0 == 0:
                D[i0:i1] = np.einsum("rd,rd->r", dOi, O[i0:i1])
            Di = D[i0:i1]
            S = np.einsum("rd,cd->rc", Qi, Kj) * scale
            dead = np.isneginf(Li)  # rows that see no key at all
            S[dead] = -np.inf
            if causal:
                S[np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None] + (sk - sq)] = -np.inf
            P = np.exp(S - np.where(dead, 0.0, Li)[:, None])
            dV[j0:j1] += np.einsum("rc,rd->cd", P, dOi)
            dS = P * (np.einsum("rd,cd->rc", dOi, Vj) - Di[:, None])
            dQ[i0:i1] += np.einsum("rc,cd->rd", dS, Kj)
            dK[j0:j1] += np.einsum("rc,rd->cd", dS, Qi)
    dQ *= scale
    dK *= scale
    return dQ, dK, dV
