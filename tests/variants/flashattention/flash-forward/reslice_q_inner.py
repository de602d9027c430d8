# drill: flashattention/flash-forward
# variant: FA2 order written the natural NumPy way: Q[i0:i1] is sliced again inside the inner loop
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.empty(sq)
    for i0 in range(0, sq, Br):
        i1 = min(i0 + Br, sq)
        m = np.full(i1 - i0, -np.inf)
        l = np.zeros(i1 - i0)
        acc = np.zeros((i1 - i0, V.shape[1]))
        for j0 in range(0, sk, Bc):
            j1 = min(j0 + Bc, sk)
            S = Q[i0:i1] @ K[j0:j1].T * scale  # Q's block sliced afresh: still the block in use
            if causal:
                rows = np.arange(i0, i1)[:, None] + (sk - sq)
                S = np.where(np.arange(j0, j1)[None, :] <= rows, S, -np.inf)
            m_new = np.maximum(m, S.max(axis=1))
            safe = np.where(np.isinf(m_new), 0.0, m_new)
            P = np.exp(S - safe[:, None])
            alpha = np.exp(np.where(np.isinf(m), -np.inf, m - safe))
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ V[j0:j1]
            m = m_new
        seen = l > 0
        O[i0:i1] = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)
        L[i0:i1] = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)
    return O, L
