# drill: flashattention/flash-backward
# planted: a first sweep stores every P block, a second sweep uses them: P is held whole and K/V read twice
# expect-fail: Score blocks are recomputed from Q and K in blocks, D from dO and O once
# expect-fail: Peak memory at sq = sk = 4096 (Br = Bc = 128) stays far below one score matrix
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    D = (dO * O).sum(axis=1)
    L = np.where(L == -np.inf, np.inf, L)
    stored = {}
    for j in range(0, sk, Bc):  # sweep 1: every P block, kept
        Kj = K[j:j + Bc]
        cols = np.arange(j, j + len(Kj))
        for i in range(0, sq, Br):
            S = (Q[i:i + Br] @ Kj.T) * scale
            if causal:
                rows = np.arange(i, i + len(S))
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            stored[i, j] = np.exp(S - L[i:i + Br, None])
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    for j in range(0, sk, Bc):  # sweep 2: gradients from the stored blocks
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        for i in range(0, sq, Br):
            P, dOi, Qi = stored[i, j], dO[i:i + Br], Q[i:i + Br]
            dV[j:j + Bc] += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i:i + Br, None])
            dQ[i:i + Br] += (dS @ Kj) * scale
            dK[j:j + Bc] += (dS.T @ Qi) * scale
    return dQ, dK, dV
