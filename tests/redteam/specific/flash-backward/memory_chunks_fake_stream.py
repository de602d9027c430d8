# drill: flashattention/flash-backward
# Attack on the traffic check (issue 32): memory-efficient backward, not FlashAttention. Chunks
# of 64 query rows meet all of K at once (P, dP, dS of [64, sk]), computed on np.asarray views
# that log no reads, while a dummy loop reads O and dO once (D) and slices K/V blocks outside,
# Q and dO blocks inside (FA1 order, as the solution) so the read log shows perfect streaming.
# Values are exact and fit the 4096-square budget; only the verified long-K peak-memory check
# (16 rows x 2^20 keys) can reject it.
import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    (dO * O).sum(axis=1)  # what the read log sees: one elementwise pass for D ...
    for j in range(0, sk, Bc):  # ... then K/V blocks outside, Q and dO blocks inside
        K[j:j + Bc]
        V[j:j + Bc]
        for i in range(0, sq, Br):
            Q[i:i + Br]
            dO[i:i + Br]
    Q, K, V, O, dO = (np.asarray(x) for x in (Q, K, V, O, dO))  # plain views: nothing more is logged
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    D = (dO * O).sum(axis=1)
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    for i in range(0, sq, 64):
        S = (Q[i:i + 64] @ K.T) * scale
        if causal:
            S = np.where(np.arange(sk)[None, :] <= np.arange(i, min(i + 64, sq))[:, None] + (sk - sq), S, -np.inf)
        rows = L[i:i + 64]
        P = np.exp(S - np.where(rows == -np.inf, np.inf, rows)[:, None])
        dV += P.T @ dO[i:i + 64]
        dS = P * (dO[i:i + 64] @ V.T - D[i:i + 64, None])
        dQ[i:i + 64] = (dS @ K) * scale
        dK += (dS.T @ Q[i:i + 64]) * scale
    return dQ, dK, dV
