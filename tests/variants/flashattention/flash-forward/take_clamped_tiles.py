# drill: flashattention/flash-forward
# variant: fixed Br×Bc tiles loaded like a GPU kernel's clamped loads: np.take(..., axis=0, mode="clip") on row indices past the end, the clamped keys scored -inf and the clamped query rows dropped on write-back
"""Tiles of a fixed shape gathered with clamped indices, as a Triton kernel loads them.

Indices past the last row are clamped to it (np.take's mode="clip"), so every tile is
[Br, d] or [Bc, d]; the duplicated keys are masked out of the scores and the duplicated
query rows are never written back.
"""

import math

import numpy as np


def _load(X, start, count):
    """Rows start .. start + count - 1 of X, the ones past its end clamped to its last row."""
    return np.take(X, np.arange(start, start + count), axis=0, mode="clip")


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = d ** -0.5
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    offset = sk - sq
    for i in range(0, sq, Br):
        q = _load(Q, i, Br)
        q_pos = np.arange(i, i + Br)
        m = np.full(Br, -np.inf)
        l = np.zeros(Br)
        acc = np.zeros((Br, V.shape[1]))
        for j in range(0, sk, Bc):
            k_pos = np.arange(j, j + Bc)
            live = np.broadcast_to(k_pos < sk, (Br, Bc))
            if causal:
                live = live & (k_pos[None, :] <= q_pos[:, None] + offset)
            s = np.where(live, scale * (q @ _load(K, j, Bc).T), -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            base = np.where(np.isfinite(m_new), m_new, 0.0)
            p = np.exp(s - base[:, None])
            rescale = np.exp(m - base)
            l = rescale * l + p.sum(axis=1)
            acc = rescale[:, None] * acc + p @ _load(V, j, Bc)
            m = m_new
        n = min(Br, sq - i)
        hit = l[:n] > 0
        O[i:i + n][hit] = acc[:n][hit] / l[:n][hit, None]
        L[i:i + n][hit] = m[:n][hit] + np.log(l[:n][hit])
    return O, L
