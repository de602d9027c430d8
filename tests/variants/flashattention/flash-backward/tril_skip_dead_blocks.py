# drill: flashattention/flash-backward
# variant: scale folded into a copy of each K tile, causal tiles masked with np.tril(k=...) and skipped when hidden, Q blocks whose rows all see no key skipped, gradients added straight into the output slices
"""Scale folded into a K tile copy; np.tril mask only on diagonal tiles; tiles above the diagonal and Q blocks of dead rows skipped; += straight into dK/dV slices."""
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1 / math.sqrt(d)
    off = sk - sq
    dQ = np.zeros((sq, d))
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, V.shape[1]))
    D = np.sum(dO * O, axis=1)
    dead = np.isneginf(L)
    Lfix = np.where(dead, 0.0, L)
    for j0 in range(0, sk, Bc):
        Kj = K[j0:j0 + Bc]
        Vj = V[j0:j0 + Bc]
        Ks = Kj * scale  # scaled copy of this tile only
        bc = len(Kj)
        for i0 in range(0, sq, Br):
            Qi = Q[i0:i0 + Br]
            br = len(Qi)
            if causal and i0 + br - 1 + off < j0:
                continue  # no row of this block reaches key j0
            if dead[i0:i0 + br].all():
                continue  # rows with L = -inf add nothing
            S = Qi @ Ks.T
            S -= Lfix[i0:i0 + br, None]
            S[dead[i0:i0 + br]] = -np.inf
            if causal and j0 + bc - 1 > i0 + off:  # the tile crosses the diagonal
                S[~np.tril(np.ones((br, bc), dtype=bool), k=i0 + off - j0)] = -np.inf
            P = np.exp(S)
            dOi = dO[i0:i0 + br]
            dV[j0:j0 + bc] += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i0:i0 + br, None])
            dQ[i0:i0 + br] += dS @ Ks
            dK[j0:j0 + bc] += scale * (dS.T @ Qi)
    return dQ, dK, dV
