# drill: flashattention/flash-backward
# variant: a generator yields the (rows, cols) tiles in K/V-outer order; P rebuilt in base 2 (exp2 with log2e-scaled scores and L); dS expanded as P∘dP - P∘D; tensordot
import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def _tiles(sq, sk, Br, Bc):
    for j0 in range(0, sk, Bc):
        for i0 in range(0, sq, Br):
            yield slice(i0, min(i0 + Br, sq)), slice(j0, min(j0 + Bc, sk))


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    D = np.einsum("ij,ij->i", dO, O)
    L2 = np.where(np.isneginf(L), np.inf, L * LOG2E)  # L in base-2 units; dead rows give exp2(-inf) = 0
    dQ = np.zeros((sq, d))
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, V.shape[1]))
    for r, c in _tiles(sq, sk, Br, Bc):
        Qi, Kj, Vj, dOi = Q[r], K[c], V[c], dO[r]
        S2 = np.tensordot(Qi, Kj, axes=(1, 1)) * (scale * LOG2E)
        if causal:
            rows = np.arange(r.start, r.stop)[:, None]
            cols = np.arange(c.start, c.stop)[None, :]
            S2 = np.where(cols - rows <= sk - sq, S2, -np.inf)
        P = np.exp2(S2 - L2[r, None])
        dP = np.tensordot(dOi, Vj, axes=(1, 1))
        dS = P * dP - P * D[r, None]
        dV[c] += np.tensordot(P, dOi, axes=(0, 0))
        dQ[r] += np.tensordot(dS, Kj, axes=(1, 0)) * scale
        dK[c] += np.tensordot(dS, Qi, axes=(0, 0)) * scale
    return dQ, dK, dV
