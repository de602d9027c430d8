# drill: flashattention/flash-forward
# variant: the natural NumPy way: m and l kept as [br, 1] columns (keepdims), causal tile mask from np.triu, loop stops at the first key block past the diagonal
"""FA2 order with every running statistic shaped [br, 1] so it broadcasts without [:, None]; the
causal mask of a tile is np.triu(ones, k), the keys strictly above the shifted diagonal."""
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1 / math.sqrt(d)
    off = sk - sq
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, Br):
        Qi = Q[i:i + Br]
        br = Qi.shape[0]
        m = np.full((br, 1), -np.inf)
        l = np.zeros((br, 1))
        acc = np.zeros((br, V.shape[1]))
        for j in range(0, sk, Bc):
            if causal and j > i + br - 1 + off:
                break  # this key block and every later one are hidden from the whole Q block
            Kj = K[j:j + Bc]
            Vj = V[j:j + Bc]
            S = scale * (Qi @ Kj.T)
            if causal:
                hidden = np.triu(np.ones(S.shape, dtype=bool), k=i + off - j + 1)
                S[hidden] = -np.inf
            m_new = np.maximum(m, S.max(axis=1, keepdims=True))
            ref = np.where(np.isneginf(m_new), 0.0, m_new)
            P = np.exp(S - ref)
            corr = np.exp(m - ref)
            l = corr * l + P.sum(axis=1, keepdims=True)
            acc = corr * acc + P @ Vj
            m = m_new
        has = l[:, 0] > 0
        O[i:i + br][has] = acc[has] / l[has]
        L[i:i + br][has] = (m + np.log(np.where(l > 0, l, 1.0)))[has, 0]
    return O, L
