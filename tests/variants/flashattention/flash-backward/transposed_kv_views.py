# drill: flashattention/flash-backward
# variant: K and V transposed once up front (views Kᵀ, Vᵀ of shape [d, sk]); each K/V block is a column slice, S = Q_i Kᵀ_j and dP = dO_i Vᵀ_j with no per-block .T; dead rows via an L stand-in of +inf
"""Backward with K and V kept transposed, K/V blocks outside (FlashAttention-2's order)."""

import math

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    Kt, Vt = K.T, V.T  # views: a key block is a block of columns
    D = np.einsum("ij,ij->i", dO, O)
    L_safe = np.where(np.isneginf(L), np.inf, L)  # exp(S - inf) = 0: a dead row contributes nothing
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    for c0 in range(0, sk, Bc):
        kt, vt = Kt[:, c0:c0 + Bc], Vt[:, c0:c0 + Bc]
        c1 = c0 + kt.shape[1]
        dk = np.zeros((c1 - c0, d))
        dv = np.zeros((c1 - c0, V.shape[1]))
        for r0 in range(0, sq, Br):
            q, do = Q[r0:r0 + Br], dO[r0:r0 + Br]
            r1 = r0 + q.shape[0]
            s = (q @ kt) * scale
            if causal:
                hidden = np.arange(c0, c1)[None, :] > np.arange(r0, r1)[:, None] + (sk - sq)
                s[hidden] = -np.inf
            p = np.exp(s - L_safe[r0:r1, None])
            dv += p.T @ do
            ds = p * (do @ vt - D[r0:r1, None])
            dQ[r0:r1] += (ds @ kt.T) * scale
            dk += (ds.T @ q) * scale
        dK[c0:c1], dV[c0:c1] = dk, dv
    return dQ, dK, dV
