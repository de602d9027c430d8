# drill: flashattention/flash-backward
"""Attack: `scale = scale or 1/sqrt(d)` on the causal path only, so causal=True with scale=0.0
uses the default scale; the statement says any given scale, 0.0 included, is used as given,
causal or not. Slipped past, before the checks were changed, every check: scale=0.0 was tried
only non-causal (test_explicit_scale), the causal calls used 0.37, 0.45, 1.7, -0.8, -0.37, 0.5.
Now caught by test_explicit_scale's grid (scales 0.6, 0.0, -0.45 x causal x sq <, =, > sk)."""

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
    if causal:
        scale = scale or 1.0 / math.sqrt(Q.shape[1])
    scale = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
    return _tiled(Q, K, V, O, L, dO, Br, Bc, causal, scale)
