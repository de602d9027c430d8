# drill: flashattention/flash-backward
# variant: causal tiles classified as hidden (skipped), fully visible (no mask) or diagonal (np.tri mask); L copied and its -inf replaced in place; np.matmul
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    off = sk - sq  # query i sees key j iff j <= i + off
    D = np.sum(dO * O, axis=1)
    Lp = L.copy()
    Lp[np.isneginf(Lp)] = np.inf  # exp(S - inf) = 0 for rows that see nothing
    dQ = np.zeros_like(Q, dtype=float)
    dK = np.zeros_like(K, dtype=float)
    dV = np.zeros_like(V, dtype=float)
    for j0 in range(0, sk, Bc):
        Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
        bc = len(Kj)
        dKj = np.zeros((bc, d))
        dVj = np.zeros((bc, V.shape[1]))
        for i0 in range(0, sq, Br):
            Qi = Q[i0:i0 + Br]
            br = len(Qi)
            if causal and j0 > i0 + br - 1 + off:
                continue  # no row of this Q block sees any key of the block
            S = np.matmul(Qi, Kj.T) * scale
            if causal and j0 + bc - 1 > i0 + off:  # the tile crosses the diagonal
                S[~np.tri(br, bc, k=i0 + off - j0, dtype=bool)] = -np.inf
            P = np.exp(S - Lp[i0:i0 + br, None])
            dOi = dO[i0:i0 + Br]
            dVj += np.matmul(P.T, dOi)
            dS = P * (np.matmul(dOi, Vj.T) - D[i0:i0 + br, None])
            dQ[i0:i0 + br] += scale * np.matmul(dS, Kj)
            dKj += scale * np.matmul(dS.T, Qi)
        dK[j0:j0 + bc] = dKj
        dV[j0:j0 + bc] = dVj
    return dQ, dK, dV
