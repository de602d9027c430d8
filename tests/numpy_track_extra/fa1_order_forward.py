# drill: flashattention/flash-forward
"""A correct forward in the FlashAttention-1 loop order: K/V blocks outside, Q blocks inside.

Not a planted mistake: the checks must accept it (tests/test_numpy_track.py grades it).
The state (m, l, O) lives for the whole sequence and O is kept normalised after every
step, as in the first FlashAttention paper.
"""

import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    m = np.full(sq, -np.inf)
    l = np.zeros(sq)
    for j in range(0, sk, Bc):
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        cols = np.arange(j, j + len(Kj))
        for i in range(0, sq, Br):
            r = slice(i, min(i + Br, sq))
            rows = np.arange(r.start, r.stop)
            S = (Q[r] @ Kj.T) * scale
            if causal:
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            m_blk = S.max(axis=1)
            m_blk_safe = np.where(m_blk == -np.inf, 0.0, m_blk)
            P = np.exp(S - m_blk_safe[:, None])
            l_blk = P.sum(axis=1)
            m_new = np.maximum(m[r], m_blk)
            new_safe = np.where(m_new == -np.inf, 0.0, m_new)
            a = np.exp(m[r] - new_safe)
            b = np.exp(m_blk - new_safe)
            l_new = a * l[r] + b * l_blk
            l_div = np.where(l_new > 0, l_new, 1.0)
            O[r] = ((a * l[r])[:, None] * O[r] + b[:, None] * (P @ Vj)) / l_div[:, None]
            m[r], l[r] = m_new, l_new
    seen = l > 0
    L = np.where(seen, np.where(seen, m, 0.0) + np.log(np.where(seen, l, 1.0)), -np.inf)
    return O, L
