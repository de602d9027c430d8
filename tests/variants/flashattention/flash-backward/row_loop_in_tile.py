# drill: flashattention/flash-backward
# variant: inside each [Br, Bc] tile an explicit Python loop over the query rows (each row's visible keys sliced, no mask array), K/V blocks outside
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dQ = np.zeros((sq, d))
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, V.shape[1]))
    D = (dO * O).sum(axis=1)
    for j0 in range(0, sk, Bc):
        Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
        dKj = np.zeros(Kj.shape)
        dVj = np.zeros(Vj.shape)
        for i0 in range(0, sq, Br):
            Qi, dOi = Q[i0:i0 + Br], dO[i0:i0 + Br]
            S = (Qi @ Kj.T) * scale
            dP = dOi @ Vj.T
            for r in range(len(Qi)):
                i = i0 + r
                if L[i] == -np.inf:
                    continue  # this row sees no key: nothing to add
                n = len(Kj) if not causal else min(len(Kj), i + (sk - sq) - j0 + 1)
                if n <= 0:
                    continue
                p = np.exp(S[r, :n] - L[i])  # [n]
                ds = p * (dP[r, :n] - D[i])
                dVj[:n] += np.outer(p, dOi[r])
                dQ[i] += scale * (ds @ Kj[:n])
                dKj[:n] += scale * np.outer(ds, Qi[r])
        dK[j0:j0 + Bc] = dKj
        dV[j0:j0 + Bc] = dVj
    return dQ, dK, dV
