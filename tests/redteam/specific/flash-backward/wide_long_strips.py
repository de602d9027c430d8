# drill: flashattention/flash-backward
"""Attack: when d > 1 and sk > 512, chunks of 16 query rows against ALL of K and V at once (a
[16, sk] score strip, Bc ignored), whatever causal and scale are; the tiled loop otherwise.
Values are right. Slipped past, before the checks were changed, every check: the read log was
watched only at sk = 40, the long-K memory check uses d = 1, and a 16-row strip of 4096 keys fits
the 4096-square budget (d = 16). Now caught by test_recomputes_in_blocks [long K] and
[long K, causal] (sk = 4096, d = 4, Bc = 128)."""

import math

import numpy as np


def _tiled(Q, K, V, O, L, dO, Br, Bc, causal, scale):
    sq, d = Q.shape
    sk = K.shape[0]
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    D = (dO * O).sum(axis=1)
    L = np.where(L == -np.inf, np.inf, L)
    for j in range(0, sk, Bc):
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        cols = np.arange(j, j + len(Kj))
        dKj, dVj = np.zeros(Kj.shape), np.zeros(Vj.shape)
        for i in range(0, sq, Br):
            Qi, dOi = Q[i:i + Br], dO[i:i + Br]
            S = (Qi @ Kj.T) * scale
            if causal:
                rows = np.arange(i, i + len(Qi))
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            P = np.exp(S - L[i:i + Br, None])
            dVj += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i:i + Br, None])
            dQ[i:i + Br] += (dS @ Kj) * scale
            dKj += (dS.T @ Qi) * scale
        dK[j:j + Bc], dV[j:j + Bc] = dKj, dVj
    return dQ, dK, dV


def _row_chunks(Q, K, V, O, L, dO, causal, scale, rows=16):
    sq, d = Q.shape
    sk = K.shape[0]
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    D = (dO * O).sum(axis=1)
    L = np.where(L == -np.inf, np.inf, L)
    KT, VT = K.T, V.T
    for i in range(0, sq, rows):
        Qi, dOi = Q[i:i + rows], dO[i:i + rows]
        P = Qi @ KT  # [rows, sk]: every key at once
        P *= scale
        if causal:
            r = np.arange(i, i + len(Qi))
            P[np.arange(sk)[None, :] > r[:, None] + (sk - sq)] = -np.inf
        P -= L[i:i + rows, None]
        np.exp(P, out=P)
        dV += P.T @ dOi
        dS = dOi @ VT
        dS -= D[i:i + rows, None]
        dS *= P
        dQ[i:i + rows] = (dS @ K) * scale
        dK += (dS.T @ Qi) * scale
    return dQ, dK, dV


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    scale = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
    if Q.shape[1] > 1 and K.shape[0] > 512:
        return _row_chunks(Q, K, V, O, L, dO, causal, scale)
    return _tiled(Q, K, V, O, L, dO, Br, Bc, causal, scale)
