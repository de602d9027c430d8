# drill: flashattention/flash-forward
# variant: every tile is a full Br×Bc array; the ragged last blocks are zero-padded and their padded scores set to -inf
"""The tiled forward pass over fixed-size, padded tiles (the shape a GPU kernel uses)."""

import math

import numpy as np


def _padded(block, rows):
    """block [n, d] with n <= rows, zero-padded to [rows, d]."""
    if len(block) == rows:
        return block
    out = np.zeros((rows, block.shape[1]))
    out[:len(block)] = block
    return out


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk, dv = K.shape[0], V.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, dv))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, Br):
        Qi = _padded(Q[i:i + Br], Br)  # [Br, d] always
        rows = np.arange(i, i + Br)[:, None]
        m = np.full(Br, -np.inf)
        l = np.zeros(Br)
        acc = np.zeros((Br, dv))
        for j in range(0, sk, Bc):
            Kj, Vj = _padded(K[j:j + Bc], Bc), _padded(V[j:j + Bc], Bc)  # [Bc, d] always
            cols = np.arange(j, j + Bc)[None, :]
            seen = cols < sk  # the padded keys see nothing
            if causal:
                seen = seen & (cols <= rows + (sk - sq))
            S = np.where(seen, (Qi @ Kj.T) * scale, -np.inf)  # [Br, Bc]
            m_new = np.maximum(m, S.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - shift)
            P = np.exp(S - shift[:, None])
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ Vj
            m = m_new
        n = min(Br, sq - i)  # drop the padded query rows
        l_safe = np.where(l > 0, l, 1.0)
        O[i:i + n] = (acc / l_safe[:, None])[:n]
        L[i:i + n] = (m + np.log(l_safe))[:n]
    return O, L
