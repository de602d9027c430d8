# drill: flashattention/flash-backward
# variant: Q blocks outside and K/V blocks inside (FA1's order), Q prescaled, causal blocks past the diagonal skipped
"""Backward with recomputation, the loops in FlashAttention-1's order."""

import numpy as np


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    Qs = Q * scale  # fold the scale into Q once: S = Qs Kᵀ
    dQ = np.zeros_like(Q, dtype=np.float64)
    dK = np.zeros_like(K, dtype=np.float64)
    dV = np.zeros_like(V, dtype=np.float64)
    offset = sk - sq
    for i in range(0, sq, Br):
        q_blk, do_blk = Qs[i:i + Br], dO[i:i + Br]
        n = q_blk.shape[0]
        Li = L[i:i + n]
        Li = np.where(np.isneginf(Li), np.inf, Li)  # rows that see no key: P = 0
        Di = np.einsum("rd,rd->r", do_blk, O[i:i + n])
        rows = np.arange(i, i + n)[:, None]
        for j in range(0, sk, Bc):
            if causal and j > i + n - 1 + offset:
                break  # every later block is in the future of the whole Q block
            k_blk, v_blk = K[j:j + Bc], V[j:j + Bc]
            S = q_blk @ k_blk.T
            if causal:
                keys = np.arange(j, j + k_blk.shape[0])[None, :]
                S = np.where(keys <= rows + offset, S, -np.inf)
            P = np.exp(S - Li[:, None])
            dV[j:j + Bc] += P.T @ do_blk
            dS = P * (do_blk @ v_blk.T - Di[:, None])
            dQ[i:i + n] += dS @ k_blk * scale
            dK[j:j + Bc] += dS.T @ q_blk  # q_blk already carries the scale
    return dQ, dK, dV
