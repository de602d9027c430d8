# drill: flashattention/flash-backward
# variant: FA2's Triton layout: D first, then a dK/dV pass over K/V blocks, then a dQ pass over Q blocks
import math

import numpy as np


def _probabilities(Q, K, L, i0, i1, j0, j1, scale, causal, sq, sk):
    S = (Q[i0:i1] @ K[j0:j1].T) * scale
    if causal:
        S = np.where(np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None] + (sk - sq), S, -np.inf)
    rows = L[i0:i1]
    return np.exp(S - np.where(rows == -np.inf, np.inf, rows)[:, None])  # exp(-inf) = 0 on masked entries


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    D = np.einsum("ij,ij->i", dO, O)
    dK, dV = np.zeros_like(K), np.zeros_like(V)
    for j0 in range(0, sk, Bc):  # first pass: one K/V block, every Q block
        j1 = min(j0 + Bc, sk)
        for i0 in range(0, sq, Br):
            i1 = min(i0 + Br, sq)
            P = _probabilities(Q, K, L, i0, i1, j0, j1, scale, causal, sq, sk)
            dV[j0:j1] += P.T @ dO[i0:i1]
            dS = P * (dO[i0:i1] @ V[j0:j1].T - D[i0:i1, None])
            dK[j0:j1] += (dS.T @ Q[i0:i1]) * scale
    dQ = np.zeros_like(Q)
    for i0 in range(0, sq, Br):  # second pass: one Q block, every K/V block
        i1 = min(i0 + Br, sq)
        for j0 in range(0, sk, Bc):
            j1 = min(j0 + Bc, sk)
            P = _probabilities(Q, K, L, i0, i1, j0, j1, scale, causal, sq, sk)
            dS = P * (dO[i0:i1] @ V[j0:j1].T - D[i0:i1, None])
            dQ[i0:i1] += (dS @ K[j0:j1]) * scale
    return dQ, dK, dV
