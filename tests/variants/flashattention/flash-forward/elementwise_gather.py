# drill: flashattention/flash-forward
# variant: each K/V block is gathered element by element into a tile buffer, as a kernel loads it
import math

import numpy as np


def _load(X, j0, j1):
    tile = np.empty((j1 - j0, X.shape[1]))
    for r in range(j0, j1):
        for c in range(X.shape[1]):
            tile[r - j0, c] = X[r, c]
    return tile


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i0 in range(0, sq, Br):
        i1 = min(i0 + Br, sq)
        q = Q[i0:i1]
        m = np.full(i1 - i0, -np.inf)
        l = np.zeros(i1 - i0)
        acc = np.zeros((i1 - i0, V.shape[1]))
        for j0 in range(0, sk, Bc):
            j1 = min(j0 + Bc, sk)
            k, v = _load(K, j0, j1), _load(V, j0, j1)
            S = (q @ k.T) * scale
            if causal:
                S[np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None] + (sk - sq)] = -np.inf
            m_new = np.maximum(m, S.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            P = np.exp(S - shift[:, None])
            alpha = np.exp(np.where(m == -np.inf, -np.inf, m - shift))
            l = alpha * l + P.sum(axis=1)
            acc = acc * alpha[:, None] + P @ v
            m = m_new
        ok = l > 0
        O[i0:i1][ok] = acc[ok] / l[ok, None]
        L[i0:i1][ok] = m[ok] + np.log(l[ok])
    return O, L
