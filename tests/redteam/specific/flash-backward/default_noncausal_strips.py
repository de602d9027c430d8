# drill: flashattention/flash-backward
"""Attack: when non-causal with scale=None, chunks of 16 query rows against ALL of K and V at
once (a [16, sk] score strip per chunk, Bc ignored: memory-efficient attention, not
FlashAttention); the tiled loop for every other pairing of options. Values are right, reads
honest. Slipped past, before the checks were changed, every check: the read log watched only
non-causal with scale 0.37 and causal with the default, the long-K memory check is causal, and a
16-row strip of 4096 keys fits the 4096-square budget. Now caught by test_recomputes_in_blocks
[non-causal, default scale] and [long K]."""

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
    if scale is None and not causal:
        return _row_chunks(Q, K, V, O, L, dO, False, 1.0 / math.sqrt(Q.shape[1]))
    scale = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
    return _tiled(Q, K, V, O, L, dO, Br, Bc, causal, scale)
