# drill: flashattention/flash-backward
# variant: blocks aligned to the end of each sequence (the ragged block comes first), both loops walked backwards, dQ and the per-block dK/dV accumulated in np.longdouble
"""Backward with recomputation: tiles counted from the end, extended-precision accumulators."""

import math

import numpy as np


def _tiles_from_end(n, block):
    """(lo, hi) of blocks of at most `block` rows, the last ones full: [..., (n-2b, n-b), (n-b, n)], walked backwards."""
    hi = n
    while hi > 0:
        lo = max(0, hi - block)
        yield lo, hi
        hi = lo


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = d ** -0.5
    D = (O * dO).sum(1)
    Lpos = np.where(L == -np.inf, np.inf, L)  # a new array: the caller's L is untouched
    dQ = np.zeros((sq, d), dtype=np.longdouble)
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, d))
    shift = sk - sq
    for klo, khi in _tiles_from_end(sk, Bc):
        Kj = K[klo:khi]
        Vj = V[klo:khi]
        dKj = np.zeros((khi - klo, d), dtype=np.longdouble)
        dVj = np.zeros((khi - klo, d), dtype=np.longdouble)
        keys = np.arange(klo, khi)
        for qlo, qhi in _tiles_from_end(sq, Br):
            if causal and qhi - 1 + shift < klo:
                break  # this and every earlier Q tile lies before the whole K/V tile
            Qi = Q[qlo:qhi]
            dOi = dO[qlo:qhi]
            S = scale * (Qi @ Kj.T)
            if causal:
                S[keys[None, :] > np.arange(qlo, qhi)[:, None] + shift] = -np.inf
            P = np.exp(S - Lpos[qlo:qhi, None])
            dVj += P.T @ dOi
            dS = (dOi @ Vj.T - D[qlo:qhi, None]) * P
            dQ[qlo:qhi] += dS @ Kj
            dKj += dS.T @ Qi
        dK[klo:khi] = dKj * scale
        dV[klo:khi] = dVj
    return (dQ * scale).astype(np.float64), dK, dV
