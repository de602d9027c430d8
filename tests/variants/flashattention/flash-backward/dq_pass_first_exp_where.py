# drill: flashattention/flash-backward
# variant: two passes in the other order (dQ with Q blocks outside first, then dK/dV with K/V blocks outside); P via np.exp(..., where=visible) into zeros instead of -inf scores
"""Backward in two passes, dQ first: masked entries are never exponentiated."""

import math

import numpy as np


def _block(Q, K, L, i, j, Br, Bc, scale, causal, offset):
    """(Qi, Kj, P) for the block (i, j): P is exactly zero where the key is hidden or the row saw nothing."""
    Qi, Kj = Q[i:i + Br], K[j:j + Bc]
    Li = L[i:i + Br]
    S = (Qi @ Kj.T) * scale
    keep = np.broadcast_to(np.isfinite(Li)[:, None], S.shape)
    if causal:
        rows = np.arange(i, i + Qi.shape[0])[:, None]
        cols = np.arange(j, j + Kj.shape[0])[None, :]
        keep = keep & (cols <= rows + offset)
    S -= np.where(np.isfinite(Li), Li, 0.0)[:, None]
    P = np.zeros(S.shape)
    np.exp(S, out=P, where=keep)
    return Qi, Kj, P


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    offset = sk - sq
    D = (dO * O).sum(axis=-1)

    # Pass 1: one Q block at a time, every K/V block; dQ_i stays local.
    dQ = np.zeros((sq, d))
    for i in range(0, sq, Br):
        dOi = dO[i:i + Br]
        Di = D[i:i + Br, None]
        acc = np.zeros((dOi.shape[0], d))
        for j in range(0, sk, Bc):
            _, Kj, P = _block(Q, K, L, i, j, Br, Bc, scale, causal, offset)
            dS = P * (dOi @ V[j:j + Bc].T - Di)
            acc += dS @ Kj
        dQ[i:i + Br] = acc * scale

    # Pass 2: one K/V block at a time, every Q block; dK_j and dV_j stay local.
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, d))
    for j in range(0, sk, Bc):
        Vj = V[j:j + Bc]
        dKj = np.zeros((Vj.shape[0], d))
        dVj = np.zeros((Vj.shape[0], d))
        for i in range(0, sq, Br):
            Qi, _, P = _block(Q, K, L, i, j, Br, Bc, scale, causal, offset)
            dOi = dO[i:i + Br]
            dVj += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i:i + Br, None])
            dKj += dS.T @ Qi
        dK[j:j + Bc] = dKj * scale
        dV[j:j + Bc] = dVj
    return dQ, dK, dV
