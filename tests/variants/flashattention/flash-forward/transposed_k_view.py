# drill: flashattention/flash-forward
# variant: K transposed once up front (Kt = K.T, a view, as a kernel keeps K laid out [d, sk]) and its key blocks taken as column slices Kt[:, j:j + Bc]; Q block prescaled
"""The tiled forward with K kept transposed: every key block is a column slice of Kᵀ."""

import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    Kt = K.T  # [d, sk], a view: a key block is a block of columns
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, Br):
        q = Q[i:i + Br] * scale
        n = q.shape[0]
        m = np.full(n, -np.inf)
        l = np.zeros(n)
        acc = np.zeros((n, V.shape[1]))
        for j in range(0, sk, Bc):
            s = q @ Kt[:, j:j + Bc]
            if causal:
                keys = np.arange(j, j + s.shape[1])
                s = np.where(keys[None, :] <= np.arange(i, i + n)[:, None] + sk - sq, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            base = np.where(np.isfinite(m_new), m_new, 0.0)
            p = np.exp(s - base[:, None])
            alpha = np.exp(m - base)
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[j:j + Bc]
            m = m_new
        seen = l > 0
        O[i:i + n][seen] = acc[seen] / l[seen, None]
        L[i:i + n][seen] = m[seen] + np.log(l[seen])
    return O, L
