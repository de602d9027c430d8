# drill: flashattention/flash-backward
# planted: memory-efficient, not FlashAttention: chunks of 8 query rows against all of K at once
# (P, dP and dS of [8, sk]); right values, and small enough on a square 4096 input
# expect-fail: Peak memory with 16 query rows against 2^20 keys
# expect-fail: Score blocks are recomputed from Q and K in blocks
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    D = (dO * O).sum(axis=1)
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    for i in range(0, sq, 8):
        S = (Q[i:i + 8] @ K.T) * scale
        if causal:
            S = np.where(np.arange(sk)[None, :] <= np.arange(i, min(i + 8, sq))[:, None] + (sk - sq), S, -np.inf)
        rows = L[i:i + 8]
        P = np.exp(S - np.where(rows == -np.inf, np.inf, rows)[:, None])
        dV += P.T @ dO[i:i + 8]
        dS = P * (dO[i:i + 8] @ V.T - D[i:i + 8, None])
        dQ[i:i + 8] = (dS @ K) * scale
        dK += (dS.T @ Q[i:i + 8]) * scale
    return dQ, dK, dV
