# drill: flashattention/flash-backward
# variant: every tile a full Br×Bc array (GPU-kernel shape): ragged Q/dO blocks zero-padded with L = +inf, ragged K/V blocks zero-padded with their scores masked; only the real rows written back
"""Fixed-size, padded tiles: padded query rows get L = +inf (P = 0), padded keys a -inf score."""
import math

import numpy as np


def _pad(x, n):
    if len(x) == n:
        return x
    out = np.zeros((n,) + x.shape[1:])
    out[:len(x)] = x
    return out


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    D = (dO * O).sum(axis=1)
    Lsafe = np.where(np.isneginf(L), np.inf, L)
    dQ = np.zeros((sq, d))
    dK = np.zeros((sk, d))
    dV = np.zeros((sk, V.shape[1]))
    for j in range(0, sk, Bc):
        Kj, Vj = _pad(K[j:j + Bc], Bc), _pad(V[j:j + Bc], Bc)
        cols = np.arange(j, j + Bc)[None, :]
        dKj = np.zeros((Bc, d))
        dVj = np.zeros((Bc, V.shape[1]))
        for i in range(0, sq, Br):
            n = min(Br, sq - i)
            Qi, dOi = _pad(Q[i:i + Br], Br), _pad(dO[i:i + Br], Br)
            Li = np.full(Br, np.inf)
            Li[:n] = Lsafe[i:i + n]
            Di = np.zeros(Br)
            Di[:n] = D[i:i + n]
            keep = cols < sk
            if causal:
                keep = keep & (cols <= np.arange(i, i + Br)[:, None] + (sk - sq))
            S = np.where(keep, scale * (Qi @ Kj.T), -np.inf)
            P = np.exp(S - Li[:, None])
            dVj += P.T @ dOi
            dS = P * (dOi @ Vj.T - Di[:, None])
            dQ[i:i + n] += (scale * (dS @ Kj))[:n]
            dKj += scale * (dS.T @ Qi)
        m = min(Bc, sk - j)
        dK[j:j + m] = dKj[:m]
        dV[j:j + m] = dVj[:m]
    return dQ, dK, dV
